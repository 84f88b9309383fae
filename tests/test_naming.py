"""Envoy Gateway's proxy Deployment names, against its public vectors (v1.8.1)."""

from __future__ import annotations

import os
import re

import pytest
import yaml
from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st

from function.api import DeploymentNaming, DeployMode, InferenceGatewaySpec, Input, ModelRouteSpec
from function.gateway import build_objects as gateway_objects
from function.gateway.plan import GatewayPlan
from function.naming import (
    deployment_ref,
    generated_deployment_name,
    hashed_name,
    looks_derived,
    pinned_deployment_name,
    unique_name,
)
from function.route import build_objects as route_objects
from function.route.plan import RoutePlan
from function.route.view import Attachment
from tests.k8s_schema import SHARED
from tests.sim.world import envoy_gateway_deployment_name
from tests.support import GATEWAY_INPUT, ROUTE_INPUT, examples

FIXTURES = SHARED / "fixtures" / "envoy-gateway"


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


_DNS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63)


@settings(max_examples=examples(300), deadline=None)
# Exactly 48 readable characters ending in a hyphen: Envoy Gateway cuts only longer names.
@example(namespace="n" * 23, name="m" * 23 + "-")
@given(namespace=_DNS, name=_DNS)
def test_the_function_names_deployments_as_the_simulation_s_envoy_gateway_does(
    namespace: str, name: str
) -> None:
    """Two implementations written apart (the simulation's from Envoy Gateway's Go source) agree."""
    assert generated_deployment_name(namespace, name) == envoy_gateway_deployment_name(namespace, name)


EG = "envoy-gateway-system"


@pytest.mark.parametrize(
    ("naming", "mode", "want"),
    [
        pytest.param(
            DeploymentNaming.PINNED,
            DeployMode.CONTROLLER_NAMESPACE,
            (EG, pinned_deployment_name("team", "gw")),
            id="a pinned name is placed in Envoy Gateway's namespace by default",
        ),
        pytest.param(
            DeploymentNaming.PINNED,
            DeployMode.GATEWAY_NAMESPACE,
            ("team", pinned_deployment_name("team", "gw")),
            id="a pinned name is placed in the Gateway's namespace in GatewayNamespace mode (resource_provider.go GetResourceNamespace)",
        ),
        pytest.param(
            DeploymentNaming.GENERATED,
            DeployMode.CONTROLLER_NAMESPACE,
            (EG, generated_deployment_name("team", "gw")),
            id="a generated name is Envoy Gateway's hash, in its namespace",
        ),
        pytest.param(
            DeploymentNaming.GENERATED,
            DeployMode.GATEWAY_NAMESPACE,
            ("team", "gw"),
            id="a generated name in GatewayNamespace mode is the Gateway's name, in its namespace",
        ),
    ],
)
def test_naming_and_placement_are_two_choices(
    naming: DeploymentNaming, mode: DeployMode, want: tuple[str, str]
) -> None:
    got = deployment_ref(
        naming,
        mode,
        gateway_namespace="team",
        gateway_name="gw",
        envoy_gateway_namespace=EG,
    )
    assert got == want


@pytest.mark.parametrize(
    ("envoy", "want"),
    [
        pytest.param(
            {"serviceType": "NodePort"},
            (EG, envoy_gateway_deployment_name("platform", "inference")),
            id="a pinned Deployment leaves the Service Envoy Gateway's hashed name (envoyService.name is unset)",
        ),
        pytest.param(
            {"serviceType": "NodePort", "deploymentNaming": "Generated"},
            (EG, envoy_gateway_deployment_name("platform", "inference")),
            id="a generated Deployment and its Service share Envoy Gateway's hashed name",
        ),
        pytest.param(
            {"serviceType": "NodePort", "deployMode": "GatewayNamespace"},
            ("platform", "inference"),
            id="in GatewayNamespace mode the Service is named after the Gateway, in its namespace",
        ),
    ],
)
def test_the_service_observer_names_the_service_envoy_gateway_creates(
    envoy: dict[str, str], want: tuple[str, str]
) -> None:
    plan = GatewayPlan(
        xr_name="inference",
        xr_namespace="platform",
        spec=InferenceGatewaySpec.model_validate({"envoy": envoy}),
        inp=Input.model_validate(GATEWAY_INPUT),
    )
    manifest = gateway_objects(plan)["envoy-service"]["spec"]["forProvider"]["manifest"]
    assert (manifest["metadata"]["namespace"], manifest["metadata"]["name"]) == want


def test_pinned_names_of_gateways_whose_parts_join_alike_differ() -> None:
    """Envoy Gateway v1.8 infra_resource.go: two Gateways pinned to one name fight over one Deployment."""
    assert pinned_deployment_name("team-a", "gw") != pinned_deployment_name("team", "a-gw")
    assert pinned_deployment_name("team-a", "gw").startswith("envoy-team-a-gw-")


def test_unique_names_fit_a_dns_label_and_stay_distinct() -> None:
    a = unique_name("x" * 60, "gateway")
    b = unique_name("x" * 60, "anchor")
    assert len(a) <= 63
    assert len(b) <= 63
    assert a != b
    assert unique_name("short", "name").startswith("short-name-")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", a)


def test_the_identity_separates_names_of_equal_parts() -> None:
    assert unique_name("gw", identity=("route",)) != unique_name("gw", identity=("anchor",))


LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


def _gateway_targets(xr_ns: str, xr: str, spec_ns: str | None) -> set[tuple[str, str, str]]:
    plan = GatewayPlan(
        xr_name=xr,
        xr_namespace=xr_ns,
        spec=InferenceGatewaySpec.model_validate({"namespace": spec_ns} if spec_ns else {}),
        inp=Input.model_validate(GATEWAY_INPUT),
    )
    out = set()
    for obj in gateway_objects(plan).values():
        out.add((obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]))
        m = obj["spec"]["forProvider"]["manifest"]
        out.add((m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]))
    return out


def _route_targets(xr_ns: str, xr: str, backend: str) -> set[tuple[str, str, str]]:
    plan = RoutePlan(
        xr_name=xr,
        xr_namespace=xr_ns,
        spec=ModelRouteSpec.model_validate(
            {
                "gatewayRef": {"name": "gw"},
                "backends": [
                    {
                        "name": backend,
                        "endpoint": {"hostname": "h", "port": 1},
                        "apiKeySecretRef": {"name": "k"},
                    }
                ],
            }
        ),
        inp=Input.model_validate(ROUTE_INPUT),
    )
    out = set()
    for obj in route_objects(plan, Attachment("gw", xr_ns, None, None), {}).values():
        out.add((obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]))
        m = obj["spec"]["forProvider"]["manifest"]
        out.add((m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(a=LABEL, b=LABEL, c=LABEL, spec_ns=st.sampled_from([None, "shared"]))
def test_no_two_distinct_xrs_produce_one_target_name_in_one_namespace(
    a: str, b: str, c: str, spec_ns: str | None
) -> None:
    """Pairs built to join alike: gateways `a-b/c` vs `a/b-c`, routes (`a-b`, c) vs (`a`, `b-c`), and
    a route named like a gateway's anchor or Objects, all in one namespace."""
    ns = "shared"
    gw1 = _gateway_targets(f"{a}-{b}"[:63], c, spec_ns)
    gw2 = _gateway_targets(a, f"{b}-{c}"[:63], spec_ns)
    if (f"{a}-{b}"[:63], c) != (a, f"{b}-{c}"[:63]):
        assert not gw1 & gw2
    r1 = _route_targets(ns, f"{a}-{b}"[:63], c)
    r2 = _route_targets(ns, a, f"{b}-{c}"[:63])
    if (f"{a}-{b}"[:63], c) != (a, f"{b}-{c}"[:63]):
        assert not r1 & r2
    # A route and a gateway in one namespace never share a name of one kind.
    g = _gateway_targets(ns, a, None)
    r = _route_targets(ns, f"{a}-anchor"[:63], b) | _route_targets(ns, a, "anchor")
    assert not g & r
    event(f"gateway placed {'elsewhere' if spec_ns else 'in its XR namespace'}")
    for _kind, _ns, name in gw1 | r1:
        assert len(name) <= 63


@settings(max_examples=examples(300), deadline=None)
@given(xr_ns=LABEL, xr=LABEL, there=LABEL)
def test_a_gateway_in_its_own_namespace_never_takes_the_names_of_one_placed_there(
    xr_ns: str, xr: str, there: str
) -> None:
    """Found in review: `team/foo` placed in `shared` is named `team-foo-<hash>`, and an XR of that
    name in `shared` took its every target, its SecurityPolicy (the API keys) included."""
    assume(xr_ns != there)
    placed = _gateway_targets(xr_ns, xr, there)
    (derived,) = {name for kind, _, name in placed if kind == "Gateway"}
    assert not placed & _gateway_targets(there, derived, None)


@pytest.mark.parametrize(
    ("name", "derived"),
    [
        ("team-foo-60571ba9", True),
        ("gw-0123abcd", True),
        ("inference", False),
        ("gw-0123abc", False),
        ("gw-0123abcde", False),
        ("gw-0123ABCD", False),
        ("gw-0123abcg", False),
        ("gw-XXXXXXXX", False),
        ("-0123abcd", False),
        ("0123abcd", False),
    ],
    ids=[
        "a name unique_name gave",
        "any name ending in a dash and eight hex digits",
        "a plain name",
        "seven hex digits",
        "nine hex digits",
        "upper-case hex is not unique_name's",
        "a digit that is not hex",
        "letters that are no digits at all",
        "nothing before the dash",
        "no dash",
    ],
)
def test_a_name_looks_derived_only_in_the_shape_unique_name_gives(name: str, derived: bool) -> None:
    assert looks_derived(name) is derived
    assert looks_derived(unique_name(name, "x"))


@pytest.mark.skipif(
    not FIXTURES.is_dir() and not os.environ.get("CI"), reason="../shared/fixtures not present"
)
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


def test_a_joined_name_is_a_full_dns_label_cut_clean_of_trailing_separators() -> None:
    assert len(unique_name("a" * 100)) == 63
    # The cut lands right after a hyphen: the hyphen goes, the hash follows one separator.
    name = unique_name("a" * 53 + "-" + "b" * 20)
    readable, _, digest = name.rpartition("-")
    assert readable == "a" * 53
    assert len(digest) == 8
