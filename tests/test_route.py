"""The ModelRoute composition: keep composing whatever the gateway's state."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import event, given, settings
from hypothesis import strategies as st

from function import readiness, serving_record
from function.cel import workload_query
from function.conditions import BackendsReason, RoutingReason
from function.naming import unique_name
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    by_resource_name,
    condition,
    controller_reference,
    desired,
    examples,
    gateway_fetched,
    load_yaml,
    make_request,
    reach,
    run,
)

XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
READY_GW = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")[0]
ROLLING_GW = load_yaml(EXAMPLES / "model-route" / "required" / "rolling-out" / "inference-gateway.yaml")[0]
COMPOSED = by_resource_name(load_yaml(EXAMPLES / "model-route" / "observed" / "composed" / "resources.yaml"))
# The gateway observer is composed from the gatewayRef alone, on every call.
OBSERVER_ONLY = {"gateway-observer"}
ALL_NAMES = OBSERVER_ONLY | {
    "route",
    "backend-vllm",
    "service-backend-vllm",
    "backend-hosted",
    "service-backend-hosted",
    "security-policy-hosted",
    "traffic-policy",
}

NOT_FETCHED: dict[str, list[dict[str, Any]]] = {}
# No serving record and no InferenceGateway (the record looked for, then the XR).
ABSENT: dict[str, list[dict[str, Any]]] = {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: []}


def gw_required(gw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return gateway_fetched(gw)


def without_status_gateway(gw: dict[str, Any]) -> dict[str, Any]:
    gw = copy.deepcopy(gw)
    del gw["status"]["gateway"]
    return gw


def unaccepted(observed: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    observed = copy.deepcopy(observed)
    observed[name]["status"]["conditions"][0]["status"] = "False"
    return observed


GATEWAY_STATES = {
    "the gateway is ready": gw_required(READY_GW),
    "the gateway is rolling out": gw_required(ROLLING_GW),
    "the gateway is absent": ABSENT,
    "the gateway was not fetched yet": NOT_FETCHED,
    "the gateway has not published where to attach": gw_required(without_status_gateway(READY_GW)),
}
OBSERVED_STATES = {
    "the route was never composed": {},
    "the route is composed and accepted": COMPOSED,
    "the route is composed but not accepted": unaccepted(COMPOSED, "route"),
    "a backend is not accepted": unaccepted(COMPOSED, "service-backend-vllm"),
}
# (gateway state, observed state) -> (RoutingReady reason, composed names)
EXPECTED = {
    ("the gateway is ready", "the route was never composed"): (
        RoutingReason.ROUTE_NOT_ACCEPTED,
        ALL_NAMES,
    ),
    ("the gateway is ready", "the route is composed and accepted"): (
        RoutingReason.AVAILABLE,
        ALL_NAMES,
    ),
    ("the gateway is ready", "the route is composed but not accepted"): (
        RoutingReason.ROUTE_NOT_ACCEPTED,
        ALL_NAMES,
    ),
    ("the gateway is ready", "a backend is not accepted"): (
        RoutingReason.BACKEND_NOT_ACCEPTED,
        ALL_NAMES,
    ),
    ("the gateway is rolling out", "the route was never composed"): (
        RoutingReason.GATEWAY_NOT_READY,
        ALL_NAMES,
    ),
    ("the gateway is rolling out", "the route is composed and accepted"): (
        RoutingReason.GATEWAY_NOT_READY,
        ALL_NAMES,
    ),
    ("the gateway is rolling out", "the route is composed but not accepted"): (
        RoutingReason.GATEWAY_NOT_READY,
        ALL_NAMES,
    ),
    ("the gateway is rolling out", "a backend is not accepted"): (
        RoutingReason.GATEWAY_NOT_READY,
        ALL_NAMES,
    ),
}
for _gw in (
    "the gateway is absent",
    "the gateway was not fetched yet",
    "the gateway has not published where to attach",
):
    EXPECTED[(_gw, "the route was never composed")] = (RoutingReason.GATEWAY_NOT_FOUND, OBSERVER_ONLY)
    for _obs in (
        "the route is composed and accepted",
        "the route is composed but not accepted",
        "a backend is not accepted",
    ):
        EXPECTED[(_gw, _obs)] = (RoutingReason.GATEWAY_NOT_FOUND, ALL_NAMES)


@dataclass(frozen=True)
class Case:
    name: str
    required: dict[str, list[dict[str, Any]]]
    observed: dict[str, dict[str, Any]]
    reason: RoutingReason
    names: set[str]


CASES = [
    Case(
        f"when {g} and {o}, RoutingReady is {EXPECTED[(g, o)][0]}",
        GATEWAY_STATES[g],
        OBSERVED_STATES[o],
        *EXPECTED[(g, o)],
    )
    for g in GATEWAY_STATES
    for o in OBSERVED_STATES
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_routing_ready_across_gateway_and_observed_states(case: Case) -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, case.observed, case.required))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    got = condition(rsp, "RoutingReady")
    assert got.reason == case.reason
    ready = case.reason is RoutingReason.AVAILABLE
    assert got.status == (fnv1.STATUS_CONDITION_TRUE if ready else fnv1.STATUS_CONDITION_FALSE)
    assert rsp.desired.composite.ready == (fnv1.READY_TRUE if ready else fnv1.READY_FALSE)
    assert set(desired(rsp)) == case.names
    assert set(case.observed) <= set(desired(rsp))
    # The serving record is required on every call, identically; the
    # InferenceGateway only once the record was looked for and not found.
    record = rsp.requirements.resources[SERVING_REQUIREMENT]
    assert (record.kind, record.namespace, record.match_name) == (
        "ConfigMap",
        "platform",
        serving_record.record_name("inference"),
    )
    no_record = case.required.get(SERVING_REQUIREMENT) == []
    assert (GATEWAY_REQUIREMENT in rsp.requirements.resources) == no_record


def test_an_unreadable_gateway_keeps_observed_resources_exactly() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, ABSENT))
    for name, observed in COMPOSED.items():
        kept = desired(rsp)[name]
        assert kept["spec"] == observed["spec"]
        assert kept["metadata"] == {k: observed["metadata"][k] for k in ("name", "namespace")}
        assert "status" not in kept


def test_gateway_not_ready_carries_the_gateways_reason_and_not_its_progress() -> None:
    # A rollout's next step changes the gateway's message; were it quoted, every
    # route of the gateway would write its status again (issue #31).
    later = copy.deepcopy(ROLLING_GW)
    for c in later["status"]["conditions"]:
        if c["type"] == "GatewayReady":
            c["message"] = c["message"].replace("1 of 3", "2 of 3")
    assert later != ROLLING_GW
    first = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW))), "RoutingReady")
    second = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(later))), "RoutingReady")
    assert "RollingOut" in first.message
    assert "1 of 3" not in first.message
    assert first.message == second.message


def test_the_route_matches_exactly_the_model_header_and_weights_backends() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, {}, gw_required(READY_GW)))
    route = desired(rsp)["route"]["spec"]["forProvider"]["manifest"]
    rule = route["spec"]["rules"][0]
    assert rule["matches"] == [
        {
            "headers": [
                {
                    "type": "Exact",
                    "name": "x-ai-eg-model",
                    "value": "meta-llama/Llama-3.1-8B-Instruct",
                }
            ]
        }
    ]
    assert rule["backendRefs"] == [
        {"name": unique_name("llama", "vllm", identity=("backend",)), "weight": 1.0, "priority": 0.0},
        {
            "name": unique_name("llama", "hosted", identity=("backend",)),
            "weight": 1.0,
            "priority": 1.0,
            "modelNameOverride": "llama-3.1-8b-instruct",
        },
    ]
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference",
            "namespace": "platform",
            "sectionName": "http",
        }
    ]


def test_the_model_name_defaults_to_namespace_slash_name() -> None:
    xr = copy.deepcopy(XR)
    del xr["spec"]["model"]
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    header = desired(rsp)["route"]["spec"]["forProvider"]["manifest"]["spec"]["rules"][0]["matches"][0][
        "headers"
    ][0]
    assert header["value"] == "team-a/llama"


def test_status_says_what_to_send_where() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status == {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gateway": {
            "name": "inference",
            "namespace": "platform",
            "address": "172.18.0.200",
            "url": "http://172.18.0.200",
        },
        # The gateway asks callers for no key.
        "callerAuth": {"required": False},
        # RoutingReady as decided, in a field Crossplane never writes back stale.
        "serving": {
            "ready": True,
            "reason": "Available",
            "message": "model meta-llama/Llama-3.1-8B-Instruct is served through gateway platform/inference",
        },
    }


def test_taking_a_backend_out_removes_exactly_its_resources() -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [b for b in xr["spec"]["backends"] if b["name"] != "hosted"]
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert set(desired(rsp)) == OBSERVER_ONLY | {
        "route",
        "backend-vllm",
        "service-backend-vllm",
        "traffic-policy",
    }


def test_an_observed_resource_this_version_does_not_know_is_kept() -> None:
    observed = dict(COMPOSED)
    observed["legacy-thing"] = copy.deepcopy(COMPOSED["route"])
    rsp = run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_GW)))
    assert "legacy-thing" in desired(rsp)


def test_the_incident_route_created_during_the_sidecar_rollout() -> None:
    """The mission's incident, end to end through the composer.

    The last model route went away, so Envoy AI Gateway once rolled the pods
    without the sidecar (here the anchor prevents that, but the gateway may
    still be rolling for an upgrade). A route created now is composed at
    once, and says RoutingReady=False while the gateway rolls; when the
    gateway is ready, it says True, and nothing was recreated on the way.
    """
    first = run(make_request(XR, ROUTE_INPUT, {}, gw_required(ROLLING_GW)))
    assert set(desired(first)) == ALL_NAMES
    assert condition(first, "RoutingReady").status == fnv1.STATUS_CONDITION_FALSE
    assert condition(first, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY

    # Crossplane applied what was desired; the controllers accepted it.
    second = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW)))
    assert condition(second, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY
    assert desired(second) == desired(first)

    third = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert condition(third, "RoutingReady").status == fnv1.STATUS_CONDITION_TRUE
    assert desired(third) == desired(first), "the same resources, unchanged: nothing recreated"


# --- property: never fewer desired than observed ---------------------------------------


def gateway_variant(draw: st.DrawFn) -> dict[str, list[dict[str, Any]]]:
    # Ready half the time, so the RoutingReady=True branch is reached often.
    others = ["not-ready", "no-condition", "no-status", "absent", "not-fetched"]
    kind = draw(st.one_of(st.just("ready"), st.sampled_from(others)))
    if kind == "absent":
        return ABSENT
    if kind == "not-fetched":
        return NOT_FETCHED
    gw = copy.deepcopy(READY_GW)
    if kind == "not-ready":
        gw["status"]["conditions"][0] |= {
            "status": "False",
            "reason": draw(st.sampled_from(["RollingOut", "ExtProcNotInjected", "WaitingForGateway"])),
        }
    elif kind == "no-condition":
        gw["status"]["conditions"] = []
    elif kind == "no-status":
        del gw["status"]
    return gw_required(gw)


IN_EFFECT = {
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    ]
}


def settled_route(
    draw: st.DrawFn,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], set[str]]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=4, unique=True))
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [
        {
            "name": n,
            "endpoint": {"hostname": f"{n}.team-a.svc", "port": draw(st.integers(1, 65535))},
            "weight": draw(st.integers(0, 100)),
        }
        for n in names
    ]
    required = gw_required(READY_GW)
    composed = desired(run(make_request(xr, ROUTE_INPUT, {}, required)))
    observed = {name: {**obj, "status": copy.deepcopy(IN_EFFECT)} for name, obj in composed.items()}
    return xr, observed, required, set()


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], set[str]]:
    # Half the time a settled route: a ready gateway, backends drawn from a
    # pool, and everything the function composes for them observed and in
    # effect (the branch where RoutingReady may be True); otherwise a random
    # gateway and a random subset of the example's resources, each accepted
    # or not, under a spec that may have changed.
    if draw(st.sampled_from(["settled", "random"])) == "settled":
        return settled_route(draw)
    required = gateway_variant(draw)
    observed: dict[str, dict[str, Any]] = {}
    for name in sorted(COMPOSED):
        if draw(st.booleans()):
            obj = copy.deepcopy(COMPOSED[name])
            if not draw(st.booleans()):
                obj["status"]["conditions"][0]["status"] = "False"
            observed[name] = obj
    # Spec change: keep a random non-empty subset of backends, maybe add one.
    xr = copy.deepcopy(XR)
    backends = [b for b in xr["spec"]["backends"] if draw(st.booleans())]
    if not backends or draw(st.booleans()):
        backends.append({"name": "extra", "endpoint": {"ip": "10.0.0.7", "port": 8000}})
    xr["spec"]["backends"] = backends
    removed = {b["name"] for b in XR["spec"]["backends"]} - {b["name"] for b in backends}
    return xr, observed, required, removed


@settings(max_examples=examples(150), deadline=None)
@given(scenarios())
def test_desired_covers_observed_except_removed_backends(
    scenario: tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], set[str]],
) -> None:
    xr, observed, required, removed = scenario
    rsp = run(make_request(xr, ROUTE_INPUT, observed, required))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    names = set(desired(rsp))
    gone = set(observed) - names
    # Only resources of backends taken out of the spec may go.
    assert all(any(name.endswith(f"-{b}") for b in removed) for name in gone), gone
    routing = condition(rsp, "RoutingReady")
    event(f"RoutingReady {routing.reason}")
    if routing.status == fnv1.STATUS_CONDITION_TRUE:
        assert _gateway_said_ready(required)


def _gateway_said_ready(required: dict[str, list[dict[str, Any]]]) -> bool:
    """What the gateway's serving record says, or (without one) its GatewayReady condition."""
    records = required.get(SERVING_REQUIREMENT) or []
    if records:
        return bool(records[0]["data"].get("ready") == "True")
    gw = required.get(GATEWAY_REQUIREMENT) or [{}]
    conditions = gw[0].get("status", {}).get("conditions", [])
    return any(c["type"] == "GatewayReady" and c["status"] == "True" for c in conditions)


def test_the_route_property_reaches_every_verdict_often() -> None:
    """The property above is only as good as the branches it reaches."""
    seen = reach(
        scenarios(),
        lambda s: condition(run(make_request(s[0], ROUTE_INPUT, s[1], s[2])), "RoutingReady").reason,
    )
    total = sum(seen.values())
    assert seen[RoutingReason.AVAILABLE] >= total * 0.1, seen
    for reason in (
        RoutingReason.GATEWAY_NOT_FOUND,
        RoutingReason.GATEWAY_NOT_READY,
        RoutingReason.BACKEND_NOT_ACCEPTED,
    ):
        assert seen[reason] > 0, (reason, seen)


# --- backend credentials follow what the provider accepts (Envoy AI Gateway v1.1.0) --------


def _backend(schema: str, **auth: Any) -> dict[str, Any]:
    return {
        "name": "b",
        "endpoint": {"hostname": "api.example.com", "port": 443},
        # Azure OpenAI needs its api-version; the other schemas take none.
        "schema": {"name": schema} | ({"version": "2025-01-01-preview"} if schema == "AzureOpenAI" else {}),
        **auth,
    }


def _policy_of(backend: dict[str, Any]) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [backend]
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    return desired(rsp)["security-policy-b"]["spec"]["forProvider"]["manifest"]["spec"]


KEY = {"apiKeySecretRef": {"name": "key"}}


@dataclass(frozen=True)
class AuthCase:
    name: str
    backend: dict[str, Any]
    want: dict[str, Any]


AUTH_CASES = [
    AuthCase(
        "an OpenAI key is sent as Authorization Bearer (backendauth/api_key.go)",
        _backend("OpenAI", **KEY),
        {"type": "APIKey", "apiKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "a Cohere key is sent as Authorization Bearer",
        _backend("Cohere", **KEY),
        {"type": "APIKey", "apiKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "an Anthropic key is sent as x-api-key (backendauth/anthropicapikey.go)",
        _backend("Anthropic", **KEY),
        {"type": "AnthropicAPIKey", "anthropicAPIKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "an Azure OpenAI key is sent as Azure's api-key",
        _backend("AzureOpenAI", **KEY),
        {"type": "AzureAPIKey", "azureAPIKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "AWS Bedrock signs with AWS credentials from a Secret",
        _backend(
            "AWSBedrock",
            credentials={
                "aws": {"region": "us-east-1", "credentialsSecretRef": {"name": "aws"}, "profile": "p"}
            },
        ),
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "credentialsFile": {"secretRef": {"name": "aws"}, "profile": "p"},
            },
        },
    ),
    AuthCase(
        "GCP Vertex AI takes GCP credentials from a Secret",
        _backend(
            "GCPVertexAI",
            credentials={
                "gcp": {
                    "projectName": "proj",
                    "region": "us-central1",
                    "credentialsSecretRef": {"name": "gcp"},
                }
            },
        ),
        {
            "type": "GCPCredentials",
            "gcpCredentials": {
                "projectName": "proj",
                "region": "us-central1",
                "credentialsFile": {"secretRef": {"name": "gcp"}},
            },
        },
    ),
    AuthCase(
        "Azure OpenAI can take Entra ID credentials instead of a key",
        _backend(
            "AzureOpenAI",
            credentials={"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "az"}}},
        ),
        {
            "type": "AzureCredentials",
            "azureCredentials": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "az"}},
        },
    ),
]


@pytest.mark.parametrize("case", AUTH_CASES, ids=lambda c: c.name)
def test_the_security_policy_type_follows_the_schema(case: AuthCase) -> None:
    got = _policy_of(case.backend)
    assert {k: v for k, v in got.items() if k != "targetRefs"} == case.want


@pytest.mark.parametrize(
    ("backend", "field", "says"),
    [
        pytest.param(
            _backend("AWSBedrock", **KEY), "apiKeySecretRef", "credentials.aws", id="a key for Bedrock"
        ),
        pytest.param(
            _backend("AWSAnthropic", **KEY),
            "apiKeySecretRef",
            "credentials.aws",
            id="a key for AWS Anthropic",
        ),
        pytest.param(
            _backend("GCPVertexAI", **KEY), "apiKeySecretRef", "credentials.gcp", id="a key for Vertex"
        ),
        pytest.param(
            _backend("OpenAI", credentials={"aws": {"region": "r", "credentialsSecretRef": {"name": "x"}}}),
            "credentials",
            "apiKeySecretRef",
            id="AWS credentials for OpenAI",
        ),
        pytest.param(
            _backend(
                "AWSBedrock",
                credentials={
                    "gcp": {"projectName": "p", "region": "r", "credentialsSecretRef": {"name": "x"}}
                },
            ),
            "credentials",
            "credentials.aws",
            id="GCP credentials for Bedrock",
        ),
        pytest.param(
            _backend(
                "AzureOpenAI",
                **KEY,
                credentials={"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "x"}}},
            ),
            "credentials",
            "not both",
            id="a key and credentials at once",
        ),
        pytest.param(
            {**_backend("AzureOpenAI", **KEY), "schema": {"name": "AzureOpenAI"}},
            "schema",
            "needs version, Azure's api-version",
            id="Azure OpenAI without its api-version",
        ),
    ],
)
def test_credentials_the_provider_would_reject_are_one_fatal_naming_the_field(
    backend: dict[str, Any], field: str, says: str
) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [backend]
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    fatals = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatals) == 1
    assert f"spec.backends[0].{field}" in fatals[0].message
    assert says in fatals[0].message
    assert not rsp.desired.resources, "a fatal result composes nothing: Crossplane leaves resources alone"


# --- objects deleted out of band -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("route", RoutingReason.ROUTE_NOT_ACCEPTED),
        ("service-backend-vllm", RoutingReason.BACKEND_NOT_ACCEPTED),
    ],
)
def test_a_target_deleted_out_of_band_is_not_in_effect_whatever_its_stale_ready_says(
    name: str, reason: RoutingReason
) -> None:
    """provider-kubernetes keeps the last manifest and Ready=True when a target vanishes; only Synced says so."""
    observed = copy.deepcopy(COMPOSED)
    observed[name]["status"]["conditions"].append(
        {
            "type": "Synced",
            "status": "False",
            "reason": "ReconcileError",
            "message": "observe failed: external resource does not exist",
        }
    )
    observed[name]["status"]["conditions"] = [
        c
        for c in observed[name]["status"]["conditions"]
        if not (c["type"] == "Synced" and c["status"] == "True")
    ]
    rsp = run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_GW)))
    assert condition(rsp, "RoutingReady").reason == reason
    assert set(desired(rsp)) == ALL_NAMES


# --- tenancy: a ModelRoute reaches nothing outside its own namespace -------------------------

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
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    fatals = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatals) == 1, escape
    assert "spec.backends[0]" in fatals[0].message


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
        _backend("AWSBedrock", credentials={"aws": {"region": "r", "credentialsSecretRef": {"name": "x"}}})
        | {"tls": {"caConfigMapRef": {"name": "ca"}}}
        | {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}}
    )
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    own = xr["metadata"]["namespace"]
    gateway_ns = READY_GW["status"]["gateway"]["namespace"]
    ref = xr["spec"]["gatewayRef"]
    for name, obj in desired(rsp).items():
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


def _paused(gw: dict[str, Any]) -> dict[str, Any]:
    gw = copy.deepcopy(gw)
    gw["status"]["conditions"] = [c for c in gw["status"]["conditions"] if c["type"] != "Synced"] + [
        {"type": "Synced", "status": "False", "reason": "ReconcilePaused", "message": "paused"}
    ]
    return gw


def test_a_paused_gateway_read_directly_is_not_trusted_whatever_its_stale_gateway_ready_says() -> None:
    """Crossplane keeps a paused XR's conditions as last written (Synced reason ReconcilePaused);
    found on the real stack, where a paused gateway kept GatewayReady True through a rollout.
    Seen only where the route reads the InferenceGateway itself (no serving record yet)."""
    rsp = run(
        make_request(
            XR, ROUTE_INPUT, COMPOSED, {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [_paused(READY_GW)]}
        )
    )
    got = condition(rsp, "RoutingReady")
    assert (got.status, got.reason) == (fnv1.STATUS_CONDITION_FALSE, RoutingReason.GATEWAY_NOT_READY)
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert "paused" in got.message
    assert set(desired(rsp)) == ALL_NAMES


def test_a_gateway_without_any_gateway_ready_condition_is_not_ready() -> None:
    """status.gateway published, but no GatewayReady at all: nothing says the gateway serves."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["conditions"] = [c for c in gw["status"]["conditions"] if c["type"] != "GatewayReady"]
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(gw)))
    got = condition(rsp, "RoutingReady")
    assert got.status == fnv1.STATUS_CONDITION_FALSE
    assert got.reason == RoutingReason.GATEWAY_NOT_READY
    assert "no GatewayReady condition yet" in got.message


def _gateway_written_back(condition_ready: bool, decided: bool) -> dict[str, Any]:
    """A gateway whose GatewayReady Crossplane wrote back from its cache (issue #32) while its
    status.serving holds what its function last decided."""
    gw = copy.deepcopy(READY_GW)
    for c in gw["status"]["conditions"]:
        if c["type"] == "GatewayReady":
            c["status"], c["reason"] = ("True", "Available") if condition_ready else ("False", "RollingOut")
    gw["status"]["serving"] = {
        "ready": decided,
        "reason": "Available" if decided else "RollingOut",
        "message": "as its function decided",
    }
    return gw


def _gateway_with_serving(gw: dict[str, Any], serving: dict[str, Any]) -> dict[str, Any]:
    gw["status"]["serving"] = serving
    return gw


GATEWAY_DECIDED_CASES = [
    (
        "a gateway's stale GatewayReady True does not make a route True while its function said RollingOut",
        _gateway_written_back(condition_ready=True, decided=False),
        RoutingReason.GATEWAY_NOT_READY,
    ),
    (
        "a gateway's stale GatewayReady False does not hold a route back once its function said Available",
        _gateway_written_back(condition_ready=False, decided=True),
        RoutingReason.AVAILABLE,
    ),
    (
        "a gateway an older version composed, without status.serving, is read from its condition",
        READY_GW,
        RoutingReason.AVAILABLE,
    ),
    (
        "a gateway whose status.serving is not a decision is read from its condition",
        _gateway_with_serving(_gateway_written_back(condition_ready=False, decided=True), {"ready": "yes"}),
        RoutingReason.GATEWAY_NOT_READY,
    ),
]


@pytest.mark.parametrize(
    ("name", "gw", "want"), GATEWAY_DECIDED_CASES, ids=[c[0] for c in GATEWAY_DECIDED_CASES]
)
def test_a_route_reads_its_gateway_as_decided_not_as_written_back(
    name: str, gw: dict[str, Any], want: RoutingReason
) -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(gw)))
    got = condition(rsp, "RoutingReady")
    assert got.reason == want, name
    assert (got.status == fnv1.STATUS_CONDITION_TRUE) == (want == RoutingReason.AVAILABLE), name


def test_a_route_whose_condition_was_written_back_logs_no_transition_it_did_not_decide() -> None:
    """Issue #32: Crossplane wrote the route's old True back; the function had decided False
    before, decides False again, and says nothing: nothing changed."""
    xr = _xr_saying("True", "Available", "served")
    xr["status"]["serving"] = {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    gw = _gateway_written_back(condition_ready=False, decided=False)
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, gw_required(gw)))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY
    assert [r.reason for r in rsp.results if r.reason in set(RoutingReason)] == []


def test_a_call_that_cannot_judge_repeats_what_was_decided_not_what_was_written_back() -> None:
    xr = _xr_saying("True", "Available", "served")
    xr["status"]["serving"] = {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED))
    got = condition(rsp, "RoutingReady")
    assert (got.status, got.reason, got.message) == (
        fnv1.STATUS_CONDITION_FALSE,
        RoutingReason.GATEWAY_NOT_READY,
        "rolling",
    )
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["serving"] == {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    assert list(rsp.results) == []


def test_a_gateway_ref_without_a_namespace_means_the_routes_own() -> None:
    xr = copy.deepcopy(XR)
    del xr["spec"]["gatewayRef"]["namespace"]
    rsp = run(make_request(xr, ROUTE_INPUT, {}, {SERVING_REQUIREMENT: []}))
    record = rsp.requirements.resources[SERVING_REQUIREMENT]
    assert record.namespace == xr["metadata"]["namespace"]
    assert record.match_name == serving_record.record_name(xr["spec"]["gatewayRef"]["name"])
    selector = rsp.requirements.resources[GATEWAY_REQUIREMENT]
    assert selector.namespace == xr["metadata"]["namespace"]
    assert selector.match_name == xr["spec"]["gatewayRef"]["name"]


# --- found by mutation testing: branches no other test told apart --------------------------


def test_a_ready_inference_gateway_read_directly_lets_the_route_serve() -> None:
    """No serving record yet (a gateway an older version composed): the InferenceGateway is read as before."""
    required = {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [READY_GW]}
    got = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, required)), "RoutingReady")
    assert (got.status, got.reason) == (fnv1.STATUS_CONDITION_TRUE, RoutingReason.AVAILABLE)


def test_a_paused_gateway_s_routes_keep_what_its_serving_record_last_said() -> None:
    """Crossplane calls no function of a paused XR, so its serving record stays as last decided,
    as its own GatewayReady does; only an InferenceGateway read directly shows the pause."""
    paused = _paused(READY_GW)
    got = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(paused))), "RoutingReady")
    assert (got.status, got.reason) == (fnv1.STATUS_CONDITION_TRUE, RoutingReason.AVAILABLE)


def test_a_gateway_read_directly_and_being_deleted_is_not_ready_whatever_its_condition_says() -> None:
    gw = copy.deepcopy(READY_GW)
    gw["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    required = {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [gw]}
    got = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, required)), "RoutingReady")
    assert (got.status, got.reason) == (fnv1.STATUS_CONDITION_FALSE, RoutingReason.GATEWAY_NOT_READY)
    assert "platform/inference is being deleted" in got.message


@pytest.mark.parametrize("missing", ["name", "namespace"])
def test_a_gateway_that_published_only_half_of_where_to_attach_is_not_found(missing: str) -> None:
    gw = copy.deepcopy(READY_GW)
    del gw["status"]["gateway"][missing]
    rsp = run(make_request(XR, ROUTE_INPUT, {}, gw_required(gw)))
    got = condition(rsp, "RoutingReady")
    assert got.reason == RoutingReason.GATEWAY_NOT_FOUND
    assert set(desired(rsp)) == OBSERVER_ONLY


def _record_saying(**data: str) -> dict[str, Any]:
    """The ready gateway's serving record with some of its keys replaced."""
    record = copy.deepcopy(gw_required(READY_GW)[SERVING_REQUIREMENT][0])
    record["data"] |= data
    return record


def _forged_record(owners: list[dict[str, Any]]) -> dict[str, Any]:
    """A record of the ready gateway's name that sends routes to an open Gateway, saying it serves."""
    record = copy.deepcopy(gw_required(READY_GW)[SERVING_REQUIREMENT][0])
    record["metadata"]["ownerReferences"] = owners
    record["data"]["gateway"] = json.dumps({"name": "open", "namespace": "attacker", "listener": "http"})
    return record


FORGERIES = {
    "a record with no owner": _forged_record([]),
    "a record another InferenceGateway controls": _forged_record(
        [controller_reference(READY_GW) | {"name": "open"}]
    ),
    "a record the gateway owns but does not control": _forged_record(
        [controller_reference(READY_GW) | {"controller": False}]
    ),
}


@pytest.mark.parametrize("forged", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_serving_record_its_gateway_did_not_write_never_decides_where_the_route_attaches(
    forged: dict[str, Any],
) -> None:
    """Security fails closed: anyone who may write ConfigMaps in the gateway's namespace can write
    one of the record's name. It is ignored: the route requires and reads the InferenceGateway."""
    waiting = run(make_request(XR, ROUTE_INPUT, COMPOSED, {SERVING_REQUIREMENT: [forged]}))
    assert GATEWAY_REQUIREMENT in waiting.requirements.resources
    assert "attacker" not in json.dumps(desired(waiting))
    assert set(desired(waiting)) == set(COMPOSED) | OBSERVER_ONLY, (
        "what exists is kept while the gateway is fetched"
    )
    got = condition(waiting, "RoutingReady")
    assert (got.status, got.message) == (
        fnv1.STATUS_CONDITION_FALSE,
        "waiting for Crossplane to fetch InferenceGateway platform/inference",
    )
    read = run(
        make_request(
            XR, ROUTE_INPUT, COMPOSED, {SERVING_REQUIREMENT: [forged], GATEWAY_REQUIREMENT: [READY_GW]}
        )
    )
    assert "attacker" not in json.dumps(desired(read))
    assert desired(read) == desired(run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))))
    got = condition(read, "RoutingReady")
    assert (got.status, got.reason) == (fnv1.STATUS_CONDITION_TRUE, RoutingReason.AVAILABLE)


def test_the_gateway_s_own_record_is_read_without_requiring_the_gateway() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert GATEWAY_REQUIREMENT not in rsp.requirements.resources


def _gateways_record(data: dict[str, str]) -> dict[str, Any]:
    """A serving record with this data, controlled by the ready gateway as Crossplane makes it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"ownerReferences": [controller_reference(READY_GW)]},
        "data": data,
    }


@pytest.mark.parametrize(
    ("required", "words"),
    [
        (
            NOT_FETCHED,
            "waiting for Crossplane to fetch the serving record of InferenceGateway platform/inference",
        ),
        ({SERVING_REQUIREMENT: []}, "waiting for Crossplane to fetch InferenceGateway platform/inference"),
        (ABSENT, "InferenceGateway platform/inference not found"),
        (
            gw_required(without_status_gateway(READY_GW)),
            "InferenceGateway platform/inference has not published status.gateway",
        ),
        (
            {SERVING_REQUIREMENT: [_gateways_record({"gateway": "{not json"})]},
            "the serving record of InferenceGateway platform/inference (ConfigMap platform/inference-serving-",
        ),
        (
            # Nested deeper than Python's JSON reader goes: unreadable, not a crash.
            {SERVING_REQUIREMENT: [_gateways_record({"gateway": "[" * 100_000})]},
            "the serving record of InferenceGateway platform/inference (ConfigMap platform/inference-serving-",
        ),
        (
            {SERVING_REQUIREMENT: [_gateways_record({"ready": "True"})]},
            "the serving record of InferenceGateway platform/inference (ConfigMap platform/inference-serving-",
        ),
        (
            {SERVING_REQUIREMENT: [_gateways_record({"gateway": "{}"})]},
            "InferenceGateway platform/inference has not published status.gateway",
        ),
        (
            {SERVING_REQUIREMENT: [_record_saying(ready="Maybe", reason="Available")]},
            "gateway platform/inference is not ready (it has no GatewayReady condition yet)",
        ),
    ],
    ids=[
        "not fetched yet",
        "no serving record, the gateway not fetched yet",
        "absent",
        "not published",
        "an unreadable serving record",
        "a serving record nested too deep to read",
        "a serving record without its gateway key",
        "a serving record without where to attach",
        "a serving record whose ready is neither True nor False",
    ],
)
def test_why_the_gateway_cannot_be_read_is_in_the_message(
    required: dict[str, list[dict[str, Any]]], words: str
) -> None:
    got = condition(run(make_request(XR, ROUTE_INPUT, {}, required)), "RoutingReady")
    assert got.message == words or got.message.startswith(words)


def test_composed_resources_are_ready_exactly_when_in_effect() -> None:
    observed = unaccepted(COMPOSED, "backend-vllm")
    rsp = run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_GW)))
    ready = {n for n, r in rsp.desired.resources.items() if r.ready == fnv1.READY_TRUE}
    assert ready == set(COMPOSED) - {"backend-vllm"}


def test_an_event_is_emitted_only_when_a_condition_changes() -> None:
    first = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert [r.reason for r in first.results] == [RoutingReason.AVAILABLE, "AllServing"]
    xr = copy.deepcopy(XR)
    xr["status"] = {
        "conditions": [
            {"type": c.type, "status": "True", "reason": c.reason, "message": c.message}
            for c in first.conditions
        ]
    }
    again = run(make_request(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert list(again.results) == []


# --- backends that can serve: workload references (issue #16) -------------------------------

WORKLOAD_XR = load_yaml(EXAMPLES / "model-route" / "xr-workload.yaml")[0]


def _fatal(xr: dict[str, Any]) -> str:
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    fatals = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatals) == 1, fatals
    return fatals[0]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"namespace": "kube-system"}, "workloadRef.namespace", "own namespace"),
        ({"apiVersion": "v1", "kind": "Secret"}, "workloadRef.kind", "holds data"),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "workloadRef.kind", "holds data"),
        ({"readinessQuery": "object.status.replicas + 1"}, "workloadRef.readinessQuery", "boolean"),
        ({"readinessQuery": "object.status. &&"}, "workloadRef.readinessQuery", "not a valid CEL expression"),
        ({"name": "Not_A_Name"}, "workloadRef.name", ""),
    ],
    ids=[
        "a workload in another namespace",
        "a Secret as a workload",
        "a ConfigMap as a workload",
        "a query that is not boolean",
        "a query that does not parse",
        "a name Kubernetes would refuse",
    ],
)
def test_a_bad_workload_reference_is_one_fatal_naming_the_field(
    change: dict[str, Any], field: str, words: str
) -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["backends"][0]["workloadRef"] |= change
    message = _fatal(xr)
    assert f"spec.backends[0].{field}" in message
    assert words in message


def test_a_workload_is_observed_in_the_routes_own_namespace_watched_with_its_query() -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["backends"][0]["workloadRef"]["readinessQuery"] = "has(object.status)"
    obj = desired(run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW))))["workload-vllm"]
    assert obj["metadata"]["namespace"] == "team-a"
    assert obj["spec"]["managementPolicies"] == ["Observe"]
    assert obj["spec"]["watch"] is True
    assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery", "celQuery": "has(object.status)"}
    assert obj["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm-llama", "namespace": "team-a"},
    }


def _backend_at(name: str, weight: int, priority: int, workload: bool) -> dict[str, Any]:
    b: dict[str, Any] = {
        "name": name,
        "endpoint": {"hostname": f"{name}.team-a.svc", "port": 8000},
        "weight": weight,
        "priority": priority,
    }
    if workload:
        b["workloadRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    return b


def _served(observed: dict[str, dict[str, Any]], name: str, serving: bool) -> None:
    observed[f"workload-{name}"] = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": f"llama-workload-{name}", "namespace": "team-a"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if serving else "False"},
                {"type": "Synced", "status": "True"},
            ]
        },
    }


# (backends as (name, weight, priority, serving or None for no workloadRef)) -> RoutingReady, BackendsServing,
# with retries and ejection off: requests land on the first priority level only
# (FAILOVER_CASES below have them on).
SERVING_CASES = {
    "one backend serving": ([("a", 1, 0, True)], True, "AllServing"),
    "one backend not serving": ([("a", 1, 0, False)], False, "NoneServing"),
    "two equal backends, one dead: the model still serves, degraded": (
        [("a", 1, 0, True), ("b", 1, 0, False)],
        True,
        "Degraded",
    ),
    "the first priority dead, a serving fallback: no failover, not served": (
        [("a", 1, 0, False), ("b", 1, 1, True)],
        False,
        "Degraded",
    ),
    "a dead backend of weight 0 takes nothing": ([("a", 0, 0, False), ("b", 1, 0, True)], True, "Degraded"),
    "an external backend (no workloadRef) counts as serving": (
        [("a", 1, 0, False), ("b", 1, 0, None)],
        True,
        "Degraded",
    ),
    "a serving backend of weight 0 takes nothing: its dead sibling gets every request": (
        [("a", 0, 0, True), ("b", 1, 0, False)],
        False,
        "Degraded",
    ),
    "a weight of 1 takes requests like any other": (
        [("a", 1, 0, True), ("b", 2, 1, False)],
        True,
        "Degraded",
    ),
    "every weight 0: no request goes anywhere, whatever serves": (
        [("a", 0, 0, False), ("b", 0, 1, True)],
        False,
        "Degraded",
    ),
}


@pytest.mark.parametrize("case", sorted(SERVING_CASES), ids=str)
def test_routing_ready_needs_a_serving_backend_where_requests_land(case: str) -> None:
    backends, routing, serving_reason = SERVING_CASES[case]
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [_backend_at(n, w, p, s is not None) for n, w, p, s in backends]
    xr["spec"]["resilience"] = NO_RETRY | NO_EJECTION
    composed = desired(run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW))))
    observed = {
        name: {
            **obj,
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]
            },
        }
        for name, obj in composed.items()
    }
    for n, _, _, s in backends:
        if s is not None:
            _served(observed, n, s)
    rsp = run(make_request(xr, ROUTE_INPUT, observed, gw_required(READY_GW)))
    got = condition(rsp, "RoutingReady")
    assert (got.status == fnv1.STATUS_CONDITION_TRUE) is routing, got.message
    if not routing:
        assert got.reason == RoutingReason.BACKEND_NOT_SERVING
    serving = condition(rsp, "BackendsServing")
    assert serving.reason == serving_reason
    named = [n for n, _, _, s in backends if s is not None]
    for first, second in itertools.pairwise(named):
        assert f"{first}: " in serving.message
        assert f"; {second}: " in serving.message


def test_the_request_timeout_is_the_route_rules_timeout() -> None:
    rule = desired(run(make_request(XR, ROUTE_INPUT, {}, gw_required(READY_GW))))["route"]["spec"][
        "forProvider"
    ]["manifest"]["spec"]["rules"][0]
    assert rule["timeouts"] == {"request": XR["spec"]["timeouts"]["request"]}
    xr = copy.deepcopy(XR)
    del xr["spec"]["timeouts"]
    rule = desired(run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW))))["route"]["spec"][
        "forProvider"
    ]["manifest"]["spec"]["rules"][0]
    assert "timeouts" not in rule


def test_an_event_is_a_warning_when_its_condition_is_false() -> None:
    ready = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)))
    assert [r.severity for r in ready.results] == [fnv1.SEVERITY_NORMAL, fnv1.SEVERITY_NORMAL]
    waiting = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW)))
    assert [r.severity for r in waiting.results] == [fnv1.SEVERITY_WARNING, fnv1.SEVERITY_NORMAL]


# --- what platform teams expect of a model route (issue #15) ---------------------------------


def _route_spec(xr: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = desired(run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW))))["route"][
        "spec"
    ]["forProvider"]["manifest"]["spec"]
    return spec


def test_a_backend_may_be_sent_its_own_name_for_the_model() -> None:
    refs = {r["name"].split("-")[1]: r for r in _route_spec(XR)["rules"][0]["backendRefs"]}
    assert refs["hosted"]["modelNameOverride"] == "llama-3.1-8b-instruct"
    assert "modelNameOverride" not in refs["vllm"]


def test_token_usage_is_recorded_unless_turned_off() -> None:
    assert _route_spec(XR)["llmRequestCosts"] == [
        {"metadataKey": "llm_input_token", "type": "InputToken"},
        {"metadataKey": "llm_output_token", "type": "OutputToken"},
        {"metadataKey": "llm_total_token", "type": "TotalToken"},
    ]
    xr = copy.deepcopy(XR)
    xr["spec"]["recordTokenUsage"] = False
    assert "llmRequestCosts" not in _route_spec(xr)


def test_the_route_publishes_where_to_send_requests() -> None:
    status = resource.struct_to_dict(
        run(make_request(XR, ROUTE_INPUT, {}, gw_required(READY_GW))).desired.composite.resource
    )["status"]
    assert status["model"] == XR["spec"]["model"]
    assert status["gateway"]["url"] == READY_GW["status"]["gateway"]["url"]


@pytest.mark.parametrize(
    ("change", "field"),
    [({"modelNameOverride": ""}, "modelNameOverride"), ({"modelNameOverride": 7}, "modelNameOverride")],
    ids=["an empty model name override", "a model name override that is not a string"],
)
def test_a_bad_model_name_override_is_one_fatal_naming_it(change: dict[str, Any], field: str) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"][1] |= change
    assert f"spec.backends[1].{field}" in _fatal(xr)


def test_a_workload_observer_is_named_for_its_backend_and_judged_by_the_built_in_query() -> None:
    obj = desired(run(make_request(WORKLOAD_XR, ROUTE_INPUT, {}, gw_required(READY_GW))))["workload-vllm"]
    assert obj["metadata"]["name"] == unique_name("llama", "workload", "vllm", identity=("ModelRoute",))
    assert obj["spec"]["readiness"]["celQuery"] == workload_query("apps/v1", "Deployment")
    assert obj["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}


def _workload_object(
    manifest: dict[str, Any] | None, synced: str = "True", message: str = ""
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Synced", "status": synced, "message": message}]}
    if manifest is not None:
        status["atProvider"] = {"manifest": manifest}
    return {"status": status}


WORKLOAD_SUMMARIES = {
    "nothing observed yet": (None, "not observed yet"),
    "an Object without a manifest yet": (_workload_object(None), "not observed yet"),
    "a workload kind provider-kubernetes may not read says Forbidden, not 'not yet'": (
        _workload_object(
            None,
            "False",
            'cannot get object: statefulsets.apps "vllm" is forbidden: User cannot get resource "statefulsets"',
        ),
        'provider-kubernetes cannot observe it: cannot get object: statefulsets.apps "vllm" is forbidden: '
        'User cannot get resource "statefulsets"',
    ),
    "a Synced=False without a message is still not observed yet": (
        _workload_object(None, "False", ""),
        "not observed yet",
    ),
    "a Synced=False with no message field at all is still not observed yet": (
        {"status": {"conditions": [{"type": "Synced", "status": "False"}]}},
        "not observed yet",
    ),
    "a Deployment that is gone": (
        _workload_object({"kind": "Deployment"}, "False", "observe failed: external resource does not exist"),
        "Deployment not found",
    ),
    "two of two available": (
        _workload_object({"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 2}}),
        "2 of 2 replicas available",
    ),
    "rolling: one of two updated": (
        _workload_object({"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 1}}),
        "2 of 2 replicas available, 1 of 2 updated",
    ),
    "scaled to zero, counts omitted": (
        _workload_object({"spec": {"replicas": 0}, "status": {}}),
        "0 of 0 replicas available",
    ),
    "no counts at all": (_workload_object({}), "0 of 0 replicas available"),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_SUMMARIES), ids=str)
def test_how_a_replicated_workload_stands_in_words(case: str) -> None:
    observed, want = WORKLOAD_SUMMARIES[case]
    assert readiness.workload_summary("apps/v1", "Deployment", observed) == want


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        ([{"type": "Ready", "status": "True", "reason": "Ready"}], "Ready=True (Ready)"),
        ([{"type": "Ready", "status": "False"}], "Ready=False (no reason)"),
        ([{"type": "Other", "status": "True"}], "no Ready condition"),
    ],
    ids=["ready with a reason", "not ready without a reason", "no Ready condition"],
)
def test_how_any_other_workload_stands_in_words(conditions: list[dict[str, Any]], want: str) -> None:
    observed = _workload_object({"status": {"conditions": conditions}})
    assert readiness.workload_summary("serving.kserve.io/v1beta1", "InferenceService", observed) == want


def test_backends_serving_says_how_many_and_how_each_stands() -> None:
    example = load_yaml(EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml")
    rsp = run(make_request(WORKLOAD_XR, ROUTE_INPUT, by_resource_name(example), gw_required(READY_GW)))
    assert condition(rsp, "BackendsServing").message == (
        "1 of 2 backends serving (1 without a workloadRef, counted as serving); vllm: 0 of 0 replicas available"
    )
    # Retries and ejection are on by default: the hosted fallback takes vLLM's requests.
    assert condition(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    every = copy.deepcopy(WORKLOAD_XR)
    every["spec"]["backends"] = every["spec"]["backends"][:1]
    rsp = run(make_request(every, ROUTE_INPUT, by_resource_name(example), gw_required(READY_GW)))
    assert (
        condition(rsp, "BackendsServing").message
        == "0 of 1 backends serving; vllm: 0 of 0 replicas available"
    )
    assert condition(rsp, "RoutingReady").message == (
        "no backend that takes the model's requests is serving (vllm); vllm: 0 of 0 replicas available"
    )
    assert condition(
        run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))), "BackendsServing"
    ).message == (
        "2 of 2 backends serving (2 without a workloadRef, counted as serving); no backend names a workload"
    )


def test_azure_openai_is_sent_its_api_version() -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [_backend("AzureOpenAI", **KEY)]
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(READY_GW)))
    schema = desired(rsp)["service-backend-b"]["spec"]["forProvider"]["manifest"]["spec"]["schema"]
    assert schema == {"name": "AzureOpenAI", "version": "2025-01-01-preview"}


# --- failover: which backends take the model's requests ---------------------------------------

NO_RETRY = {"retry": {"attempts": 0}}
NO_EJECTION = {"outlierDetection": {"consecutiveErrors": 0}}


@dataclass(frozen=True)
class FailoverCase:
    name: str
    resilience: dict[str, Any]
    weights: tuple[int, int]  # vllm's, the hosted fallback's
    reason: RoutingReason
    # Whether Envoy Gateway accepted the route's BackendTrafficPolicy (the provider's Ready).
    policy_accepted: bool = True


FAILOVER_CASES = [
    FailoverCase(
        "with retries and ejection on (the default), the fallback takes a dead vLLM's requests",
        {},
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with retries alone, the fallback takes a dead vLLM's requests",
        NO_EJECTION,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with ejection alone, the fallback takes a dead vLLM's requests",
        NO_RETRY,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "a single retry is enough to reach the fallback",
        {"retry": {"attempts": 1}} | NO_EJECTION,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "ejection after a single error is enough to reach the fallback",
        {"outlierDetection": {"consecutiveErrors": 1}} | NO_RETRY,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with both off, a dead first level is never failed over",
        NO_RETRY | NO_EJECTION,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    FailoverCase(
        "a BackendTrafficPolicy Conflicted by an older one configures no retry: the dead first level "
        "is not failed over",
        {},
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "with both off, a policy not accepted changes nothing: the first level alone counts either way",
        NO_RETRY | NO_EJECTION,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "a fallback of weight 0 takes nothing, whatever retries do",
        {},
        (1, 0),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    FailoverCase(
        "with every weight 0 nothing takes requests, retries or not",
        {},
        (0, 0),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
]


@pytest.mark.parametrize("case", FAILOVER_CASES, ids=lambda c: c.name)
def test_which_backends_take_the_models_requests(case: FailoverCase) -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["resilience"] = case.resilience
    for backend, weight in zip(xr["spec"]["backends"], case.weights, strict=True):
        backend["weight"] = weight
    scaled_to_zero = load_yaml(
        EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml"
    )
    observed = by_resource_name(scaled_to_zero)
    if not case.policy_accepted:
        observed["traffic-policy"] = copy.deepcopy(observed["traffic-policy"])
        ready = next(c for c in observed["traffic-policy"]["status"]["conditions"] if c["type"] == "Ready")
        ready["status"] = "False"
    rsp = run(make_request(xr, ROUTE_INPUT, observed, gw_required(READY_GW)))
    got = condition(rsp, "RoutingReady")
    assert got.reason == case.reason
    # Said exactly when the policy would have failed over and is not in effect.
    lost = not case.policy_accepted and case.resilience != NO_RETRY | NO_EJECTION
    assert ("the BackendTrafficPolicy is not Accepted" in got.message) is lost
    assert condition(rsp, "BackendsServing").reason == "Degraded"


def test_the_traffic_policy_targets_the_httproute_named_after_the_route() -> None:
    """Envoy AI Gateway names the HTTPRoute it makes after the AIGatewayRoute; a policy aimed elsewhere does nothing."""
    got = desired(run(make_request(XR, ROUTE_INPUT, {}, gw_required(READY_GW))))
    route = got["route"]["spec"]["forProvider"]["manifest"]["metadata"]
    policy = got["traffic-policy"]["spec"]["forProvider"]["manifest"]
    assert policy["metadata"] == route
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["name"]}
    ]


# --- caller auth: every route on the gateway needs a key -----------------------------

READY_AUTH_GW = load_yaml(EXAMPLES / "model-route" / "required" / "ready-auth" / "inference-gateway.yaml")[0]


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
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, gw_required(_gateway_auth(case.published))))
    # Nothing of the route's own opens it: the Gateway's policy applies.
    assert set(desired(rsp)) == ALL_NAMES
    assert resource.struct_to_dict(rsp.desired.composite.resource)["status"]["callerAuth"] == case.caller_auth


def test_the_published_header_is_the_one_callers_are_told_to_send() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(_gateway_auth({}, header="x-api-key"))))
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["callerAuth"] == {"required": True, "header": "x-api-key"}


def test_caller_auth_published_without_a_header_means_envoy_gateways_default() -> None:
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"]["callerAuth"] = {}
    rsp = run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(gw)))
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["callerAuth"] == {"required": True, "header": "authorization"}


def _with_exemption() -> dict[str, dict[str, Any]]:
    """The composed route plus the exemption Object an older version composed, Ready."""
    return copy.deepcopy(COMPOSED) | {"auth-exemption": copy.deepcopy(COMPOSED["route"])}


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
    rsp = run(make_request(XR, ROUTE_INPUT, _with_exemption(), required))
    # Everything else stays, as ever, whether or not the gateway could be read.
    assert set(desired(rsp)) == ALL_NAMES, name


# --- the first call of a reconcile, before Crossplane fetched the gateway -----------------


def _xr_saying(status: str, reason: str, message: str) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["status"] = {
        "conditions": [
            {
                "type": "RoutingReady",
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-11-29T12:00:00Z",
            },
            # Not what this call would decide (every composed backend serves), so
            # repeating it is seen to come from the XR.
            {"type": "BackendsServing", "status": "True", "reason": "Degraded", "message": "1 of 2 serve"},
        ]
    }
    return xr


FIRST_CALL_CASES = [
    ("a route that says True says True again until the gateway is fetched", "True", "Available"),
    (
        "a route that says GatewayNotReady says it again until the gateway is fetched",
        "False",
        "GatewayNotReady",
    ),
]


@pytest.mark.parametrize(("name", "status", "reason"), FIRST_CALL_CASES, ids=[c[0] for c in FIRST_CALL_CASES])
def test_a_call_that_cannot_judge_changes_no_condition_and_logs_nothing(
    name: str, status: str, reason: str
) -> None:
    """Issue #32: judged on the first call, RoutingReady went to GatewayNotFound on every reconcile."""
    rsp = run(make_request(_xr_saying(status, reason, "as said before"), ROUTE_INPUT, COMPOSED, NOT_FETCHED))
    got = condition(rsp, "RoutingReady")
    assert (got.status == fnv1.STATUS_CONDITION_TRUE, got.reason, got.message) == (
        status == "True",
        reason,
        "as said before",
    ), name
    assert condition(rsp, "BackendsServing").reason == BackendsReason.DEGRADED, name
    assert list(rsp.results) == [], name
    # The desired state is whole, as on every call.
    assert set(desired(rsp)) == ALL_NAMES


def test_a_new_route_before_the_gateway_is_fetched_says_gateway_not_found_without_an_event() -> None:
    rsp = run(make_request(XR, ROUTE_INPUT, {}, NOT_FETCHED))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    assert list(rsp.results) == []


def test_a_gateway_fetched_and_absent_is_decided_and_said_once() -> None:
    rsp = run(make_request(_xr_saying("True", "Available", "served"), ROUTE_INPUT, COMPOSED, ABSENT))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    # Both conditions are judged on this call, and each change is said once.
    assert [r.reason for r in rsp.results] == [RoutingReason.GATEWAY_NOT_FOUND, BackendsReason.ALL_SERVING]


def test_an_older_exemption_not_accepted_holds_nothing_back() -> None:
    """It is dropped, not waited for: RoutingReady reads only what this call composes."""
    observed = unaccepted(_with_exemption(), "auth-exemption")
    rsp = run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_AUTH_GW)))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert "auth-exemption" not in desired(rsp)


# --- the ext-proc loads what Envoy AI Gateway accepted, seconds later -----------------------


def _accepted_ago(name: str, seconds: float) -> dict[str, dict[str, Any]]:
    """The composed route with `name`'s target stamped Accepted `seconds` ago by its controller."""
    observed = copy.deepcopy(COMPOSED)
    stamp = (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest = observed[name]["status"]["atProvider"]["manifest"]
    manifest.setdefault("status", {})["conditions"] = [
        {
            "type": "Accepted",
            "status": "True",
            "reason": "ReconciliationSucceeded",
            "lastTransitionTime": stamp,
        }
    ]
    return observed


LOADING_CASES = [
    ("a route accepted 3 s ago is not served yet by the ext-proc", "route", 3, RoutingReason.CONFIG_LOADING),
    (
        "a backend accepted 3 s ago is not served yet by the ext-proc",
        "service-backend-vllm",
        3,
        RoutingReason.CONFIG_LOADING,
    ),
    ("a route accepted 13 s ago is still loading", "route", 13, RoutingReason.CONFIG_LOADING),
    ("a route accepted 17 s ago is served", "route", 17, RoutingReason.AVAILABLE),
    ("a stamp a few seconds ahead of our clock still holds", "route", -10, RoutingReason.CONFIG_LOADING),
    (
        "a Backend (not an AIServiceBackend) accepted 3 s ago holds nothing",
        "backend-vllm",
        3,
        RoutingReason.AVAILABLE,
    ),
]


@pytest.mark.parametrize(
    ("name", "target", "ago", "reason"), LOADING_CASES, ids=[c[0] for c in LOADING_CASES]
)
def test_routing_ready_waits_for_the_ext_proc_to_load_the_route(
    name: str, target: str, ago: float, reason: RoutingReason
) -> None:
    """Measured on the real data plane: 500 "unknown backend" until 8-9 s after Accepted."""
    rsp = run(make_request(XR, ROUTE_INPUT, _accepted_ago(target, ago), gw_required(READY_GW)))
    got = condition(rsp, "RoutingReady")
    assert got.reason == reason, name
    ttl = rsp.meta.ttl.ToTimedelta().total_seconds()
    if reason is RoutingReason.CONFIG_LOADING:
        assert got.status == fnv1.STATUS_CONDITION_FALSE
        # The stamp has whole seconds, so the clock may have passed one more by the call.
        said = {f"accepted this route's configuration {max(0, a)} s ago" for a in (ago, ago + 1)}
        assert any(s in got.message for s in said), (name, got.message)
        assert "its ext-proc loads it within 15 s" in got.message
        # Called again one second after the bound has passed, not a poll later.
        # The stamp has whole seconds; the clock has moved on by a fraction since.
        want = min(15, 15 - ago + 1)
        assert want - 2 < ttl <= want, (name, ttl)
    else:
        assert ttl == 120  # settled: the usual TTL
    # The desired state is whole either way.
    assert set(desired(rsp)) == ALL_NAMES


def test_a_stamp_far_in_the_future_holds_nothing_back() -> None:
    """A controller clock ten minutes ahead cannot hold RoutingReady back for ten minutes."""
    rsp = run(make_request(XR, ROUTE_INPUT, _accepted_ago("route", -600), gw_required(READY_GW)))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE


def test_a_first_call_cannot_keep_a_condition_it_cannot_read() -> None:
    """A condition without a reason is not kept: the call decides (GatewayNotFound), silently."""
    xr = _xr_saying("True", "", "m")
    rsp = run(make_request(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    assert list(rsp.results) == []


def test_a_first_call_keeps_a_condition_without_a_message_as_it_is() -> None:
    xr = _xr_saying("True", "Available", "")
    del xr["status"]["conditions"][0]["message"]
    got = condition(run(make_request(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED)), "RoutingReady")
    assert (got.reason, got.message) == ("Available", "")


def test_a_traffic_policy_not_accepted_holds_nothing_back_while_the_first_level_serves() -> None:
    """Without the policy requests are still served by the first priority level: not a BackendNotAccepted."""
    observed = copy.deepcopy(COMPOSED)
    ready = next(c for c in observed["traffic-policy"]["status"]["conditions"] if c["type"] == "Ready")
    ready["status"] = "False"
    rsp = run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_GW)))
    assert condition(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert rsp.desired.resources["traffic-policy"].ready != fnv1.READY_TRUE


ALLOWED_CASES = [
    pytest.param(
        "Same", "platform", RoutingReason.ROUTE_NOT_ALLOWED, id="Same refuses a route from another namespace"
    ),
    pytest.param(
        "Same", "team-a", RoutingReason.AVAILABLE, id="Same admits a route in the gateway's own namespace"
    ),
    pytest.param("All", "platform", RoutingReason.AVAILABLE, id="All admits a route from any namespace"),
    pytest.param(
        None, "platform", RoutingReason.AVAILABLE, id="a gateway that publishes nothing is not second-guessed"
    ),
]


@pytest.mark.parametrize(("allowed", "gateway_namespace", "reason"), ALLOWED_CASES)
def test_a_route_the_listener_refuses_says_so(
    allowed: str | None, gateway_namespace: str, reason: RoutingReason
) -> None:
    """Envoy AI Gateway says Accepted once it wrote the HTTPRoute; Envoy Gateway refuses it by allowedRoutes."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"]["namespace"] = gateway_namespace
    if allowed is None:
        gw["status"]["gateway"].pop("allowedRoutes", None)
    else:
        gw["status"]["gateway"]["allowedRoutes"] = allowed
    got = condition(run(make_request(XR, ROUTE_INPUT, COMPOSED, gw_required(gw))), "RoutingReady")
    assert got.reason == reason
    assert (got.status == fnv1.STATUS_CONDITION_TRUE) is (reason is RoutingReason.AVAILABLE)
    if reason is RoutingReason.ROUTE_NOT_ALLOWED:
        assert "allowedRoutes Same" in got.message


def _target_name(obj: dict[str, Any]) -> str:
    return str(obj["spec"]["forProvider"]["manifest"]["metadata"]["name"])


def test_every_reference_follows_the_names_existing_objects_hold() -> None:
    observed = copy.deepcopy(COMPOSED)
    held = {
        "route": "old-route",
        "backend-hosted": "old-backend",
        "service-backend-hosted": "old-service-backend",
        "security-policy-hosted": "old-policy",
        "traffic-policy": "old-traffic-policy",
    }
    for key, name in held.items():
        observed[key]["spec"]["forProvider"]["manifest"]["metadata"]["name"] = name
    got = desired(run(make_request(XR, ROUTE_INPUT, observed, gw_required(READY_GW))))
    assert {key: _target_name(got[key]) for key in held} == held
    manifest = {key: got[key]["spec"]["forProvider"]["manifest"] for key in got}
    assert "old-service-backend" in [
        ref["name"] for ref in manifest["route"]["spec"]["rules"][0]["backendRefs"]
    ]
    assert manifest["service-backend-hosted"]["spec"]["backendRef"]["name"] == "old-backend"
    assert manifest["security-policy-hosted"]["spec"]["targetRefs"][0]["name"] == "old-service-backend"
    # The HTTPRoute Envoy AI Gateway makes of the route has the route's (held) name.
    assert manifest["traffic-policy"]["spec"]["targetRefs"][0]["name"] == "old-route"
    # What no Object holds yet gets the name this version derives.
    assert _target_name(got["backend-vllm"]) == _target_name(COMPOSED["backend-vllm"])


def test_an_observe_only_object_follows_the_desired_name() -> None:
    xr = load_yaml(EXAMPLES / "model-route" / "xr-workload.yaml")[0]
    observed = by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-serving" / "resources.yaml")
    )
    before = _target_name(observed["workload-vllm"])
    xr["spec"]["backends"][0]["workloadRef"]["name"] = "vllm-v2"
    got = desired(run(make_request(xr, ROUTE_INPUT, observed, gw_required(READY_GW))))
    assert (before, _target_name(got["workload-vllm"])) == (before, "vllm-v2")
    assert before != "vllm-v2"


# --- the gateway observer, where Crossplane watches required resources (issue #27) -----------

NO_OBSERVER_INPUT = {**ROUTE_INPUT, "observeGateway": False}


@pytest.mark.parametrize(("gateway", "required"), sorted(GATEWAY_STATES.items()), ids=str)
def test_with_the_observer_turned_off_a_route_composes_everything_else_and_says_the_same(
    gateway: str, required: dict[str, list[dict[str, Any]]]
) -> None:
    """Crossplane v2.4+ watches the InferenceGateway the function requires; the observer only woke
    the route. Without it, the same resources but the observer, and the same conditions."""
    on = run(make_request(XR, ROUTE_INPUT, COMPOSED, required))
    off = run(make_request(XR, NO_OBSERVER_INPUT, COMPOSED, required))
    assert set(desired(on)) - set(desired(off)) == OBSERVER_ONLY, gateway
    assert set(desired(off)) == set(desired(on)) - OBSERVER_ONLY
    assert [(c.type, c.status, c.reason, c.message) for c in off.conditions] == [
        (c.type, c.status, c.reason, c.message) for c in on.conditions
    ]


def test_turning_the_observer_off_removes_exactly_it_from_a_route_that_has_one() -> None:
    """Never by accident: with the default, an observed observer stays whatever the gateway's
    state; only the Input's observeGateway: false takes it out, and nothing else with it."""
    observer = desired(run(make_request(XR, ROUTE_INPUT, {}, gw_required(READY_GW))))["gateway-observer"]
    observed = {**COMPOSED, "gateway-observer": observer, "legacy-thing": copy.deepcopy(COMPOSED["route"])}
    for required in (gw_required(READY_GW), ABSENT, NOT_FETCHED):
        assert "gateway-observer" in desired(run(make_request(XR, ROUTE_INPUT, observed, required)))
        off = desired(run(make_request(XR, NO_OBSERVER_INPUT, observed, required)))
        assert set(off) == set(observed) - {"gateway-observer"}, required


@pytest.mark.parametrize("folder", ["ready", "ready-auth", "ready-secret-missing", "rolling-out"])
def test_each_example_serving_record_says_what_its_inference_gateway_publishes(folder: str) -> None:
    """The rendered examples read the record; the hand-written InferenceGateway beside it is the truth."""
    where = EXAMPLES / "model-route" / "required" / folder
    (record,) = load_yaml(where / "serving-record.yaml")
    (gw,) = load_yaml(where / "inference-gateway.yaml")
    assert gateway_fetched(gw) == {SERVING_REQUIREMENT: [record]}
