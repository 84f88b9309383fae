"""Envoy Gateway's proxy Deployment names, against its public vectors (v1.8.1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from function.api import DeploymentNaming
from function.naming import (
    bounded_name,
    deployment_ref,
    generated_deployment_name,
    hashed_name,
)

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "envoy-gateway"


@pytest.mark.parametrize(
    ("source", "want"),
    [
        pytest.param("default/eg", "envoy-default-eg-e41e7b31", id="the documented default/eg vector"),
        pytest.param(
            "merged-eg",
            "envoy-merged-eg-668ac7ae",
            id="a merged GatewayClass is hashed by its name alone",
        ),
        pytest.param("default", "envoy-default-37a8eec1", id="Envoy Gateway's own unit-test Deployment name"),
        pytest.param(
            "a-namespace-that-is-long/and-a-gateway-name-that-is-very-long-too",
            # the first 48 characters, then 8 hex of sha256 of the whole source
            "envoy-a-namespace-that-is-long-and-a-gateway-name-that-61a9aed3",
            id="a name longer than 48 characters is cut to 48",
        ),
    ],
)
def test_hashed_deployment_names_match_envoy_gateway(source: str, want: str) -> None:
    assert f"envoy-{hashed_name(source)}" == want


def test_a_cut_that_ends_in_a_hyphen_drops_that_hyphen() -> None:
    # 20 + 1 + 26 = 47 characters, then '-': the cut at 48 ends in a hyphen.
    source = "n" * 20 + "/" + "g" * 26 + "--tail"
    readable = hashed_name(source).rsplit("-", 1)[0]
    assert readable == "n" * 20 + "-" + "g" * 26


def test_a_cut_that_ends_in_two_hyphens_drops_only_one() -> None:
    source = "n" * 46 + "--" + "tail"
    readable = hashed_name(source).rsplit("-", 1)[0]
    assert readable == "n" * 46 + "-"


def test_generated_name_hashes_namespace_and_name() -> None:
    assert generated_deployment_name("default", "eg") == "envoy-default-eg-e41e7b31"


@pytest.mark.parametrize(
    ("naming", "want"),
    [
        pytest.param(
            DeploymentNaming.PINNED,
            ("envoy-gateway-system", "envoy-team-gw"),
            id="pinned names are readable and live in Envoy Gateway's namespace",
        ),
        pytest.param(
            DeploymentNaming.GENERATED,
            ("envoy-gateway-system", generated_deployment_name("team", "gw")),
            id="generated names are Envoy Gateway's hash",
        ),
        pytest.param(
            DeploymentNaming.GATEWAY_NAMESPACE,
            ("team", "gw"),
            id="gateway-namespace mode names the Deployment after the Gateway, in its namespace",
        ),
    ],
)
def test_deployment_ref_follows_the_naming_mode(naming: DeploymentNaming, want: tuple[str, str]) -> None:
    got = deployment_ref(
        naming,
        gateway_namespace="team",
        gateway_name="gw",
        envoy_gateway_namespace="envoy-gateway-system",
    )
    assert got == want


def test_bounded_names_fit_a_dns_label_and_stay_distinct() -> None:
    a = bounded_name("x" * 60, "gateway")
    b = bounded_name("x" * 60, "anchor")
    assert len(a) <= 63
    assert len(b) <= 63
    assert a != b
    assert bounded_name("short", "name") == "short-name"


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures not present")
@pytest.mark.parametrize(
    ("fixture", "want_name"),
    [
        pytest.param(
            "default.yaml",
            f"envoy-{hashed_name('default')}",
            id="Envoy Gateway's generated Deployment fixture",
        ),
        pytest.param(
            "gateway-namespace-mode.yaml",
            "gateway-1",
            id="Envoy Gateway's gateway-namespace-mode fixture",
        ),
    ],
)
def test_names_agree_with_envoy_gateway_generated_deployments(fixture: str, want_name: str) -> None:
    deployment = yaml.safe_load((FIXTURES / fixture).read_text())
    assert deployment["metadata"]["name"] == want_name
