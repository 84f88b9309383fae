"""Tenancy and caller auth: what a ModelRoute may reach, and who may reach it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest

from tests.route_support import (
    ABSENT,
    ALL_NAMES,
    COMPOSED,
    NOT_FETCHED,
    READY_AUTH_GW,
    READY_GW,
    XR,
    backend_of_schema,
    gw_required,
    with_exemption,
)
from tests.support import (
    ROUTE_INPUT,
    compose,
    refused,
)

ESCAPES = {
    "a backend Secret in another namespace": {"apiKeySecretRef": {"name": "key", "namespace": "kube-system"}},
    "a CA ConfigMap in another namespace": {
        "tls": {"caConfigMapRef": {"name": "ca", "namespace": "kube-system"}}
    },
    "a backend named like a path": {"name": "../kube-system"},
    "a backend named with a namespace": {"name": "kube-system/b"},
    "a credentials Secret in another namespace": {
        "schema": {"name": "AWSBedrock"},
        "credentials": {
            "aws": {"region": "r", "credentialsSecretRef": {"name": "x", "namespace": "kube-system"}}
        },
    },
}


@pytest.mark.parametrize("escape", sorted(ESCAPES), ids=str)
def test_a_tenant_cannot_point_a_backend_outside_its_namespace(escape: str) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"][0] |= ESCAPES[escape]
    assert "spec.backends[0]" in refused(xr, ROUTE_INPUT, {}, gw_required(READY_GW)), escape


def _namespaces(node: Any) -> list[str]:
    """Every `namespace` value anywhere in a manifest."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "namespace" and isinstance(v, str)] + [
            n for v in node.values() for n in _namespaces(v)
        ]
    if isinstance(node, list):
        return [n for v in node for n in _namespaces(v)]
    return []


def test_everything_a_model_route_composes_or_observes_stays_in_its_namespace() -> None:
    """The gateway it attaches to is the one reference allowed out: parentRefs, and the
    observe-only copy of that InferenceGateway (which tenants may view anyway)."""
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"].append(
        backend_of_schema(
            "AWSBedrock", credentials={"aws": {"region": "r", "credentialsSecretRef": {"name": "x"}}}
        )
        | {"tls": {"caConfigMapRef": {"name": "ca"}}}
        | {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}}
    )
    rsp = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW))
    own = xr["metadata"]["namespace"]
    gateway_ns = READY_GW["status"]["gateway"]["namespace"]
    ref = xr["spec"]["gatewayRef"]
    for name, obj in rsp.resources.items():
        assert obj["metadata"]["namespace"] == own, name
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        if name == "gateway-observer":
            assert obj["spec"]["managementPolicies"] == ["Observe"]
            assert manifest == {
                "apiVersion": "ai.example.org/v1alpha1",
                "kind": "InferenceGateway",
                "metadata": {"name": ref["name"], "namespace": ref.get("namespace", own)},
            }
            continue
        parents = manifest.get("spec", {}).pop("parentRefs", [])
        assert all(p["namespace"] == gateway_ns for p in parents)
        assert set(_namespaces(manifest)) == {own}, name


def _gateway_auth(published: Any, header: str = "authorization") -> dict[str, Any]:
    """The ready gateway publishing caller auth with these extra fields (None: auth off)."""
    gw = copy.deepcopy(READY_GW)
    if published is not None:
        gw["status"]["gateway"]["callerAuth"] = {"header": header, **published}
    return gw


@dataclass(frozen=True)
class CoverageCase:
    name: str
    # What the gateway publishes beside the header; None: no caller auth.
    published: Any
    route_namespace: str
    # The route's status.callerAuth.
    caller_auth: dict[str, Any]


NEEDS_KEY = {"required": True, "header": "authorization"}


NO_KEY = {"required": False}


COVERAGE_CASES = [
    CoverageCase("a gateway without caller auth asks for no key", None, "team-a", NO_KEY),
    CoverageCase("caller auth covers a route in another namespace", {}, "team-a", NEEDS_KEY),
    CoverageCase("caller auth covers a route in the gateway's namespace", {}, "platform", NEEDS_KEY),
    CoverageCase(
        "an older gateway's from Same still covers a route in another namespace",
        {"routeNamespaces": {"from": "Same"}},
        "team-a",
        NEEDS_KEY,
    ),
    CoverageCase(
        "an older gateway's from Names still covers a namespace it does not list",
        {"routeNamespaces": {"from": "Names", "names": ["team-b"]}},
        "team-a",
        NEEDS_KEY,
    ),
    CoverageCase(
        "coverage the route cannot read covers it", {"routeNamespaces": "everyone"}, "team-a", NEEDS_KEY
    ),
]


@pytest.mark.parametrize("case", COVERAGE_CASES, ids=lambda c: c.name)
def test_every_route_on_a_gateway_with_caller_auth_needs_a_key(case: CoverageCase) -> None:
    xr = copy.deepcopy(XR)
    xr["metadata"]["namespace"] = case.route_namespace
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(_gateway_auth(case.published)))
    # Nothing of the route's own opens it: the Gateway's policy applies.
    assert set(rsp.resources) == ALL_NAMES
    assert rsp.desired_status()["callerAuth"] == case.caller_auth


def test_the_published_header_is_the_one_callers_are_told_to_send() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(_gateway_auth({}, header="x-api-key")))
    status = rsp.desired_status()
    assert status["callerAuth"] == {"required": True, "header": "x-api-key"}


def test_caller_auth_published_without_a_header_means_envoy_gateways_default() -> None:
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"]["callerAuth"] = {}
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(gw))
    status = rsp.desired_status()
    assert status["callerAuth"] == {"required": True, "header": "authorization"}


def test_auth_being_turned_off_still_asks_for_a_key_and_says_since_when() -> None:
    """Envoy checks keys until the SecurityPolicy's deletion reaches it: callers keep sending one."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"]["callerAuth"] = {"header": "authorization", "removedAt": "2026-12-04T15:00:00Z"}
    status = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(gw)).desired_status()
    assert status["callerAuth"] == {
        "required": True,
        "header": "authorization",
        "removedAt": "2026-12-04T15:00:00Z",
    }


EXEMPTION_DROPPED_CASES = [
    ("an older exemption is dropped on a gateway with caller auth", gw_required(READY_AUTH_GW)),
    ("an older exemption is dropped on a gateway without caller auth", gw_required(READY_GW)),
    ("an older exemption is dropped while Crossplane has not fetched the gateway", NOT_FETCHED),
    ("an older exemption is dropped while the gateway does not exist", ABSENT),
]


@pytest.mark.parametrize(
    ("name", "required"), EXEMPTION_DROPPED_CASES, ids=[c[0] for c in EXEMPTION_DROPPED_CASES]
)
def test_an_exemption_is_never_kept_it_opened_covered_models(name: str, required: Any) -> None:
    """Kept, its SecurityPolicy would let keyless callers name it in x-ai-eg-model (issue #23)."""
    rsp = compose(XR, ROUTE_INPUT, with_exemption(), required)
    # Everything else stays, as ever, whether or not the gateway could be read.
    assert set(rsp.resources) == ALL_NAMES, name
