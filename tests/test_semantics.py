"""What every example means, stated once as data and checked in process.

The expected renders (tests/test_examples.py) are produced by the code they
check, so they only detect change. This table is written by hand from what
each example is for: the condition, its reason, which resources are
composed, and what the Envoy Deployment observer's CEL query says about the
observed Deployment under cel-expr-python (as cel-go would). Where the CEL
verdict and the condition differ, the row says why: that difference is the
function's judgement, not the provider's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from function import claims
from function.api import AvailabilityPolicy
from function.cel import (
    condition_true_query,
    deployment_rollout_query,
    node_port_query,
    policy_accepted_query,
    route_accepted_query,
    taken_in_query,
)
from function.outcome import Outcome
from function.upstream import DEFAULT_EXTPROC_MARKER
from tests.cel_eval import eval_reference
from tests.route_support import ALL_NAMES
from tests.support import (
    EXAMPLES,
    as_production_json,
    by_resource_name,
    compose,
    load_yaml,
)
from tests.test_examples import EXAMPLE_LIST, Example
from tests.test_gateway import ALL_NAMES as GATEWAY_NAMES

# Everything an InferenceGateway composes (the test of the gateway composer states it).
GATEWAY = GATEWAY_NAMES
# Everything a ModelRoute of the example composes (the test of the route composer states it).
ROUTE = ALL_NAMES
TRUE, FALSE = "True", "False"


@dataclass(frozen=True)
class Meaning:
    condition: str
    status: int
    reason: str
    resources: set[str]
    # The observer's CEL query on the observed Deployment; None: nothing observed.
    cel: bool | None = None
    # BackendsServing (status, reason) for a route whose backends name workloads.
    serving: tuple[int, str] | None = None
    why: str = ""


MEANINGS = {
    "defaults-just-created": Meaning("GatewayReady", FALSE, "WaitingForGateway", GATEWAY),
    "generated-just-created": Meaning("GatewayReady", FALSE, "WaitingForGateway", GATEWAY),
    "gatewaynamespace-just-created": Meaning("GatewayReady", FALSE, "WaitingForGateway", GATEWAY),
    "https-just-created": Meaning("GatewayReady", FALSE, "WaitingForGateway", GATEWAY | {"https-redirect"}),
    "auth-waiting-for-policy": Meaning(
        "GatewayReady",
        FALSE,
        "AuthNotAccepted",
        GATEWAY | {"security-policy"},
        cel=True,
        why="the rollout is finished, but until the SecurityPolicy is Accepted every request is answered 500",
    ),
    "defaults-deployment-not-found": Meaning("GatewayReady", FALSE, "DeploymentNotFound", GATEWAY),
    "defaults-rolling-out": Meaning("GatewayReady", FALSE, "RollingOut", GATEWAY, cel=False),
    "defaults-one-of-two-drained": Meaning(
        "GatewayReady", TRUE, "Available", GATEWAY, cel=True, why="AtLeastOne: one pod serves"
    ),
    "defaults-marker-missing": Meaning("GatewayReady", FALSE, "ExtProcNotInjected", GATEWAY, cel=False),
    "defaults-ready": Meaning("GatewayReady", TRUE, "Available", GATEWAY, cel=True),
    "nodeport-ready": Meaning(
        "GatewayReady",
        TRUE,
        "Available",
        GATEWAY | {"envoy-service"},
        cel=True,
        why="the URL carries the node port; the Service observer judges nothing",
    ),
    "defaults-deployment-gone": Meaning(
        "GatewayReady",
        FALSE,
        "DeploymentNotFound",
        GATEWAY,
        cel=True,
        why="the provider keeps the stale manifest and Ready; Synced=False says the target is gone",
    ),
    "defaults-current-pod-draining": Meaning(
        "GatewayReady",
        FALSE,
        "RollingOut",
        GATEWAY,
        cel=True,
        why="a terminating pod and no settled template: it may be an old one (the safe side)",
    ),
    "settled-old-pods-terminating": Meaning(
        "GatewayReady",
        FALSE,
        "RollingOut",
        GATEWAY,
        cel=True,
        why="the template changed since the settled one: the terminating pods are old",
    ),
    "settled-current-pod-draining": Meaning(
        "GatewayReady", TRUE, "Available", GATEWAY, cel=True, why="a drained pod of the settled template"
    ),
    "gateway-ready-route-never-composed": Meaning("RoutingReady", FALSE, "RouteNotAccepted", ROUTE),
    "gateway-ready-route-composed": Meaning("RoutingReady", TRUE, "Available", ROUTE),
    "gateway-rolling-out-route-never-composed": Meaning("RoutingReady", FALSE, "GatewayNotReady", ROUTE),
    "gateway-rolling-out-route-composed": Meaning("RoutingReady", FALSE, "GatewayNotReady", ROUTE),
    "gateway-absent-route-never-composed": Meaning(
        "RoutingReady", FALSE, "GatewayNotFound", {"gateway-observer"}, why="nowhere to attach yet"
    ),
    "gateway-absent-route-composed": Meaning(
        "RoutingReady", FALSE, "GatewayNotFound", ROUTE, why="what was composed is kept as observed"
    ),
    "gateway-ready-workload-serving": Meaning(
        "RoutingReady", TRUE, "Available", ROUTE | {"workload-vllm"}, serving=(TRUE, "AllServing")
    ),
    "gateway-ready-workload-scaled-to-zero": Meaning(
        "RoutingReady",
        TRUE,
        "Available",
        ROUTE | {"workload-vllm"},
        serving=(FALSE, "Degraded"),
        why="vllm serves none; retries (on by default) send its requests on to the hosted fallback",
    ),
    "gateway-auth-route-composed": Meaning(
        "RoutingReady",
        TRUE,
        "Available",
        ROUTE,
        why="the Gateway's SecurityPolicy covers every route on it: callers send a key, the route opens nothing",
    ),
    "gateway-ready-secret-missing": Meaning(
        "RoutingReady",
        FALSE,
        "ReferenceNotFound",
        ROUTE,
        why="the hosted backend's API-key Secret does not exist: Envoy AI Gateway drops the backend and answers "
        "500 for requests routed to it, while every composed object says Accepted",
    ),
    "defaults-upgraded-from-v0.1.0": Meaning(
        "GatewayReady",
        FALSE,
        "TrafficPolicyNotAccepted",
        GATEWAY,
        cel=True,
        why="the anchor and the pinned Deployment keep the names v0.1.0 gave them; the ClientTrafficPolicy "
        "v0.1.0 did not compose is created, and GatewayReady waits for it",
    ),
    "gateway-ready-route-upgraded-from-v0.1.0": Meaning(
        "RoutingReady",
        FALSE,
        "RouteNotAccepted",
        ROUTE,
        why="every target keeps the name v0.1.0 gave it, so no old AIGatewayRoute is left serving beside a new one; "
        "its status is of the spec v0.1.0 composed, which says nothing of this one until it is applied",
    ),
    "gateway-ready-workload-rolling-out": Meaning(
        "RoutingReady",
        TRUE,
        "Available",
        ROUTE | {"workload-vllm"},
        serving=(TRUE, "AllServing"),
        why="old replicas serve until new ones are available",
    ),
}


def _docs(rel: str | None) -> list[dict[str, Any]]:
    if rel is None:
        return []
    path = EXAMPLES / rel
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [doc for f in files for doc in load_yaml(f)]


def _call(example: Example) -> tuple[Outcome, dict[str, dict[str, Any]]]:
    xr = load_yaml(EXAMPLES / example.xr)[0]
    composition = load_yaml(EXAMPLES / example.composition)[0]
    observed = by_resource_name(_docs(example.observed))
    inp = composition["spec"]["pipeline"][0]["input"]
    required: dict[str, list[dict[str, Any]]] = {}
    if example.required:
        # As Crossplane does: call, then hand over what the call required (an
        # empty list for what does not exist), and call again.
        docs = _docs(example.required)
        asked = compose(xr, inp, observed, {}).requirements
        required = {
            key: [
                d
                for d in docs
                if (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
                == (sel.kind, sel.name, sel.namespace)
            ]
            for key, sel in asked.items()
        }
    return compose(xr, inp, observed, required), observed


def test_every_example_has_its_meaning_stated() -> None:
    assert {e.name for e in EXAMPLE_LIST} == set(MEANINGS)


@pytest.mark.parametrize("example", EXAMPLE_LIST, ids=lambda e: f"{e.name}: {MEANINGS[e.name].reason}")
def test_each_example_means_what_it_is_for(example: Example) -> None:
    meaning = MEANINGS[example.name]
    rsp, observed = _call(example)
    conditions = [c for c in rsp.conditions if c.type == meaning.condition]
    assert len(conditions) == 1
    assert (conditions[0].status, conditions[0].reason) == (meaning.status, meaning.reason)
    # The XR's own Ready follows the condition.
    assert rsp.verdict is not None
    assert rsp.verdict.ready is (meaning.status == TRUE)
    assert set(rsp.resources) == meaning.resources
    manifest = (
        (observed.get("envoy-deployment", {}).get("status") or {}).get("atProvider", {}).get("manifest")
    )
    if meaning.cel is None:
        assert manifest is None
    else:
        query = rsp.resources["envoy-deployment"]["spec"]["readiness"]["celQuery"]
        assert eval_reference(query, as_production_json(manifest)) is meaning.cel


def _target(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj["spec"]["forProvider"]["manifest"]["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


def _managing(obj: dict[str, Any]) -> bool:
    return obj["spec"].get("managementPolicies") != ["Observe"]


@pytest.mark.parametrize("example", [e for e in EXAMPLE_LIST if e.observed], ids=lambda e: e.name)
def test_a_target_an_object_holds_keeps_its_name_and_namespace(example: Example) -> None:
    # provider-kubernetes creates a renamed manifest as a new target and
    # never deletes the old one, which would go on serving, unowned.
    rsp, observed = _call(example)
    held = {
        key: _target(obj) for key, obj in observed.items() if obj.get("kind") == "Object" and _managing(obj)
    }
    assert held, "an example with observed Objects holds targets"
    wanted = {key: _target(obj) for key, obj in rsp.resources.items() if key in held}
    assert wanted == {key: held[key] for key in wanted}


# --- what each composed Object is: its name, how its readiness is judged, whether it only observes ---

CEL_ON = "condition"
# An Envoy Gateway policy: Accepted by every ancestor it reports.
POLICY = "policy"
ROLLOUT = "rollout"
CREATED = "created"

NODE_PORT = "node port"
# A Gateway API route: Accepted, its references resolved, by every parent it reports.
ROUTE_PARENTS = "route parents"
# An AIServiceBackend: Accepted, or carrying Envoy AI Gateway's finalizer with no verdict written.
TAKEN_IN = "taken in"

# What each Object manages or observes: (apiVersion, kind, namespace) of its manifest.
TARGETS = {
    "envoy-proxy": ("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy", "platform"),
    "gateway": ("gateway.networking.k8s.io/v1", "Gateway", "platform"),
    "anchor-route": ("aigateway.envoyproxy.io/v1beta1", "AIGatewayRoute", "platform"),
    "envoy-deployment": ("apps/v1", "Deployment", "envoy-gateway-system"),
    "envoy-service": ("v1", "Service", "envoy-gateway-system"),
    "client-traffic-policy": ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy", "platform"),
    "https-redirect": ("gateway.networking.k8s.io/v1", "HTTPRoute", "platform"),
    "gateway-observer": ("ai.example.org/v1alpha1", "InferenceGateway", "platform"),
    "route": ("aigateway.envoyproxy.io/v1beta1", "AIGatewayRoute", "team-a"),
    "backend-vllm": ("gateway.envoyproxy.io/v1alpha1", "Backend", "team-a"),
    "service-backend-vllm": ("aigateway.envoyproxy.io/v1beta1", "AIServiceBackend", "team-a"),
    "backend-hosted": ("gateway.envoyproxy.io/v1alpha1", "Backend", "team-a"),
    "service-backend-hosted": ("aigateway.envoyproxy.io/v1beta1", "AIServiceBackend", "team-a"),
    "security-policy-hosted": ("aigateway.envoyproxy.io/v1beta1", "BackendSecurityPolicy", "team-a"),
    "traffic-policy": ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", "team-a"),
}

# composition-resource-name -> (Object name, readiness, the condition it reads, observe-only)
OBJECTS = {
    "defaults-ready": {
        "envoy-proxy": ("inference-envoyproxy-1699b98e", CREATED, None, False),
        "gateway": ("inference-gateway-7263f92f", CEL_ON, "Programmed", False),
        "anchor-route": ("inference-anchor-12afe203", CEL_ON, "Accepted", False),
        "envoy-deployment": ("inference-envoy-deployment-37b65925", ROLLOUT, None, True),
        "client-traffic-policy": ("inference-client-traffic-policy-edd2db81", POLICY, None, False),
    },
    "nodeport-ready": {
        "envoy-proxy": ("inference-envoyproxy-1699b98e", CREATED, None, False),
        "gateway": ("inference-gateway-7263f92f", CEL_ON, "Programmed", False),
        "anchor-route": ("inference-anchor-12afe203", CEL_ON, "Accepted", False),
        "envoy-deployment": ("inference-envoy-deployment-37b65925", ROLLOUT, None, True),
        "client-traffic-policy": ("inference-client-traffic-policy-edd2db81", POLICY, None, False),
        "envoy-service": ("inference-envoy-service-c4c569c4", NODE_PORT, None, True),
    },
    "https-just-created": {
        "envoy-proxy": ("inference-envoyproxy-1699b98e", CREATED, None, False),
        "gateway": ("inference-gateway-7263f92f", CEL_ON, "Programmed", False),
        "anchor-route": ("inference-anchor-12afe203", CEL_ON, "Accepted", False),
        "envoy-deployment": ("inference-envoy-deployment-37b65925", ROLLOUT, None, True),
        "client-traffic-policy": ("inference-client-traffic-policy-edd2db81", POLICY, None, False),
        # A redirect refused costs plain-HTTP clients their 301: judged on its Object, watched.
        "https-redirect": ("inference-https-redirect-ec9b6ac0", ROUTE_PARENTS, None, False),
    },
    "gateway-ready-route-composed": {
        "gateway-observer": ("llama-gateway-observer-35870d8b", CEL_ON, "GatewayReady", True),
        "route": ("llama-route-7394ad15", CEL_ON, "Accepted", False),
        "backend-vllm": ("llama-backend-vllm-704b4329", CEL_ON, "Accepted", False),
        "service-backend-vllm": ("llama-service-backend-vllm-7ac9e1c7", TAKEN_IN, None, False),
        "backend-hosted": ("llama-backend-hosted-1cb2c932", CEL_ON, "Accepted", False),
        "service-backend-hosted": ("llama-service-backend-hosted-c8c88440", TAKEN_IN, None, False),
        "security-policy-hosted": ("llama-security-policy-hosted-b3442b55", CEL_ON, "Accepted", False),
        # Retries and ejection only: a rejected policy leaves requests served.
        "traffic-policy": ("llama-traffic-policy-447d7e0d", POLICY, None, False),
    },
}
# Composed resources the example's observed state shows in effect: Crossplane
# is told exactly these are ready.
READY = {
    "https-just-created": set(),
    "defaults-ready": {"envoy-proxy", "gateway", "anchor-route", "envoy-deployment", "client-traffic-policy"},
    "nodeport-ready": {
        "envoy-proxy",
        "gateway",
        "anchor-route",
        "envoy-deployment",
        "client-traffic-policy",
        "envoy-service",
    },
    "gateway-ready-route-composed": set(OBJECTS["gateway-ready-route-composed"]) - {"gateway-observer"},
}


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_each_object_is_named_judged_and_watched_as_its_role_needs(name: str) -> None:
    """A Gateway judged by mere creation would make GatewayReady lie; an unwatched judged
    Object would make it late; a managed observer would fight Envoy Gateway."""
    example = next(e for e in EXAMPLE_LIST if e.name == name)
    rsp, _ = _call(example)
    xr = load_yaml(EXAMPLES / example.xr)[0]
    got = {key: obj for key, obj in rsp.resources.items() if obj["kind"] == "Object"}
    # The one resource that is not an Object: the gateway's serving record, which Crossplane composes.
    direct = {key: (obj["apiVersion"], obj["kind"]) for key, obj in rsp.resources.items() if key not in got}
    assert direct == ({"serving-record": ("v1", "ConfigMap")} if xr["kind"] == "InferenceGateway" else {})
    assert set(got) == set(OBJECTS[name])
    for resource, (object_name, judged, condition, observe_only) in OBJECTS[name].items():
        obj = got[resource]
        labels = obj["metadata"].pop("labels", None)
        assert obj["metadata"] == {"name": object_name, "namespace": xr["metadata"]["namespace"]}, resource
        # Only the route carries a label: the model it claims on its gateway (function/claims.py).
        assert (labels is not None) is (resource == "route"), resource
        if labels is not None:
            assert list(labels) == [claims.LABEL], resource
        manifest = obj["spec"]["forProvider"]["manifest"]
        target = (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["namespace"])
        assert target == TARGETS[resource], resource
        readiness = obj["spec"]["readiness"]
        if judged == CREATED:
            assert readiness == {"policy": "SuccessfulCreate"}, resource
        elif judged == ROLLOUT:
            assert readiness == {
                "policy": "DeriveFromCelQuery",
                "celQuery": deployment_rollout_query(AvailabilityPolicy.AT_LEAST_ONE, DEFAULT_EXTPROC_MARKER),
            }, resource
        elif judged == NODE_PORT:
            assert readiness == {"policy": "DeriveFromCelQuery", "celQuery": node_port_query(80)}, resource
        elif judged == POLICY:
            assert readiness == {"policy": "DeriveFromCelQuery", "celQuery": policy_accepted_query()}, (
                resource
            )
        elif judged == ROUTE_PARENTS:
            assert readiness == {"policy": "DeriveFromCelQuery", "celQuery": route_accepted_query()}, resource
        elif judged == TAKEN_IN:
            assert readiness == {"policy": "DeriveFromCelQuery", "celQuery": taken_in_query()}, resource
        else:
            assert readiness == {
                "policy": "DeriveFromCelQuery",
                "celQuery": condition_true_query(str(condition)),
            }, resource
        # Watched exactly when its status feeds a condition.
        assert obj["spec"].get("watch", False) is (judged != CREATED), resource
        assert ("managementPolicies" in obj["spec"]) is observe_only, resource
        if observe_only:
            assert obj["spec"]["managementPolicies"] == ["Observe"]
        ready = rsp.ready.get(resource, False)
        assert ready is (resource in READY[name]), resource
