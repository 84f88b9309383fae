"""The ModelRoute composition: keep composing whatever the gateway's state."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from function import readiness, serving_record
from function.conditions import BackendsReason, RoutingReason
from function.naming import unique_name
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from tests.route_support import (
    ABSENT,
    ALL_NAMES,
    COMPOSED,
    GATEWAY_STATES,
    NOT_FETCHED,
    OBSERVER_ONLY,
    READY_AUTH_GW,
    READY_GW,
    ROLLING_GW,
    XR,
    gw_required,
    served_required,
    target_name,
    unaccepted,
    with_exemption,
    xr_saying,
)
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    applied,
    by_resource_name,
    compose,
    examples,
    load_yaml,
    reach,
    said,
)

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
    rsp = compose(XR, ROUTE_INPUT, case.observed, case.required)
    got = said(rsp, "RoutingReady")
    assert got.reason == case.reason
    # The XR's Ready follows this condition (outcome.write).
    assert got.ready == (case.reason is RoutingReason.AVAILABLE)
    assert set(rsp.resources) == case.names
    assert set(case.observed) <= set(rsp.resources)
    # The serving record is required on every call, identically; the
    # InferenceGateway only once the record was looked for and not found.
    record = rsp.requirements[SERVING_REQUIREMENT]
    assert (record.kind, record.namespace, record.name) == (
        "ConfigMap",
        "platform",
        serving_record.record_name("inference"),
    )
    no_record = case.required.get(SERVING_REQUIREMENT) == []
    assert (GATEWAY_REQUIREMENT in rsp.requirements) == no_record


def test_an_unreadable_gateway_keeps_observed_resources_exactly() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, ABSENT)
    for name, observed in COMPOSED.items():
        kept = rsp.resources[name]
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
    first = said(compose(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW)), "RoutingReady")
    second = said(compose(XR, ROUTE_INPUT, COMPOSED, gw_required(later)), "RoutingReady")
    assert "RollingOut" in first.message
    assert "1 of 3" not in first.message
    assert first.message == second.message


def test_the_route_matches_exactly_the_model_header_and_weights_backends() -> None:
    rsp = compose(XR, ROUTE_INPUT, {}, gw_required(READY_GW))
    route = rsp.resources["route"]["spec"]["forProvider"]["manifest"]
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
    rsp = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW))
    header = rsp.resources["route"]["spec"]["forProvider"]["manifest"]["spec"]["rules"][0]["matches"][0][
        "headers"
    ][0]
    assert header["value"] == "team-a/llama"


def test_status_says_what_to_send_where() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    status = rsp.desired_status()
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
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert set(rsp.resources) == OBSERVER_ONLY | {
        "route",
        "backend-vllm",
        "service-backend-vllm",
        "traffic-policy",
    }


def test_an_observed_resource_this_version_does_not_know_is_kept() -> None:
    observed = dict(COMPOSED)
    observed["legacy-thing"] = copy.deepcopy(COMPOSED["route"])
    rsp = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW))
    assert "legacy-thing" in rsp.resources


def test_the_incident_route_created_during_the_sidecar_rollout() -> None:
    """The mission's incident, end to end through the composer.

    The last model route went away, so Envoy AI Gateway once rolled the pods
    without the sidecar (here the anchor prevents that, but the gateway may
    still be rolling for an upgrade). A route created now is composed at
    once, and says RoutingReady=False while the gateway rolls; when the
    gateway is ready, it says True, and nothing was recreated on the way.
    """
    first = compose(XR, ROUTE_INPUT, {}, gw_required(ROLLING_GW))
    assert set(first.resources) == ALL_NAMES
    assert said(first, "RoutingReady").ready is False
    assert said(first, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY

    # Crossplane applied what was desired; the controllers accepted it.
    second = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW))
    assert said(second, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY
    assert second.resources == first.resources

    third = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert said(third, "RoutingReady").ready
    assert third.resources == first.resources, "the same resources, unchanged: nothing recreated"


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
    composed = compose(xr, ROUTE_INPUT, {}, required).resources
    observed = {
        name: {
            **obj,
            "status": copy.deepcopy(IN_EFFECT)
            | {"atProvider": {"manifest": obj["spec"]["forProvider"]["manifest"]}},
        }
        for name, obj in composed.items()
    }
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
    rsp = compose(xr, ROUTE_INPUT, observed, required)
    names = set(rsp.resources)
    gone = set(observed) - names
    # Only resources of backends taken out of the spec may go.
    assert all(any(name.endswith(f"-{b}") for b in removed) for name in gone), gone
    routing = said(rsp, "RoutingReady")
    event(f"RoutingReady {routing.reason}")
    if routing.ready:
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
        lambda s: said(compose(s[0], ROUTE_INPUT, s[1], s[2]), "RoutingReady").reason,
    )
    total = sum(seen.values())
    assert seen[RoutingReason.AVAILABLE] >= total * 0.1, seen
    for reason in (
        RoutingReason.GATEWAY_NOT_FOUND,
        RoutingReason.GATEWAY_NOT_READY,
        RoutingReason.BACKEND_NOT_ACCEPTED,
    ):
        assert seen[reason] > 0, (reason, seen)


GONE = "observe failed: external resource does not exist"
# provider-kubernetes v1.2.1 after its GET of the target failed: it keeps the manifest and Ready.
UNREAD = (
    'observe failed: cannot get object: aigatewayroutes.aigateway.envoyproxy.io "llama" is forbidden: '
    'User "system:serviceaccount:crossplane-system:provider-kubernetes" cannot get resource'
)
# (case, Object, Synced's message, RoutingReady's reason, a part of its message)
STALE_READY_CASES = [
    (
        "a route deleted out of band is not Accepted, whatever its stale Ready says",
        "route",
        GONE,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "is not Accepted yet",
    ),
    (
        "a backend deleted out of band is not Accepted, whatever its stale Ready says",
        "service-backend-vllm",
        GONE,
        RoutingReason.BACKEND_NOT_ACCEPTED,
        "service-backend-vllm",
    ),
    (
        "a route the provider cannot read now is not Accepted, whatever its earlier Ready says",
        "route",
        UNREAD,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "cannot read it now, so its last status is not current: " + UNREAD,
    ),
    (
        "a backend the provider cannot read now is not Accepted, whatever its earlier Ready says",
        "service-backend-vllm",
        "connect failed: cannot get provider config",
        RoutingReason.BACKEND_NOT_ACCEPTED,
        "not Accepted yet: service-backend-vllm; provider-kubernetes cannot read service-backend-vllm now",
    ),
    (
        "a failure after a fresh read of the route (it cannot get connection details) leaves that read",
        "route",
        "observe failed: cannot get connection details",
        RoutingReason.AVAILABLE,
        "",
    ),
]


@pytest.mark.parametrize(
    ("case", "name", "message", "reason", "said_part"),
    STALE_READY_CASES,
    ids=[c[0] for c in STALE_READY_CASES],
)
def test_a_ready_the_provider_did_not_read_now_is_not_in_effect(
    case: str, name: str, message: str, reason: RoutingReason, said_part: str
) -> None:
    """provider-kubernetes keeps the last manifest and Ready=True when a target vanishes or a read
    fails; only Synced says so."""
    observed = copy.deepcopy(COMPOSED)
    observed[name]["status"]["conditions"] = [
        c for c in observed[name]["status"]["conditions"] if c["type"] != "Synced"
    ] + [{"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message}]
    rsp = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW))
    got = said(rsp, "RoutingReady")
    assert (got.reason, said_part in got.message) == (reason, True), (case, got.message)
    assert set(rsp.resources) == ALL_NAMES


def test_composed_resources_are_ready_exactly_when_in_effect() -> None:
    observed = unaccepted(COMPOSED, "backend-vllm")
    rsp = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW))
    ready = {n for n, r in rsp.ready.items() if r}
    assert ready == set(COMPOSED) - {"backend-vllm"}


def test_an_event_is_emitted_only_when_a_condition_changes() -> None:
    first = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert [reason for _, reason, _ in first.results] == [RoutingReason.AVAILABLE, "AllServing"]
    xr = copy.deepcopy(XR)
    xr["status"] = {
        "conditions": [
            {"type": c.type, "status": "True", "reason": c.reason, "message": c.message}
            for c in first.conditions
        ]
    }
    again = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert again.results == []


def test_an_event_is_a_warning_when_its_condition_is_false() -> None:
    ready = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert [severity for severity, _, _ in ready.results] == ["Normal", "Normal"]
    waiting = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(ROLLING_GW))
    assert [severity for severity, _, _ in waiting.results] == ["Warning", "Normal"]


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
    rsp = compose(xr_saying(status, reason, "as said before"), ROUTE_INPUT, COMPOSED, NOT_FETCHED)
    got = said(rsp, "RoutingReady")
    assert (got.ready, got.reason, got.message) == (
        status == "True",
        reason,
        "as said before",
    ), name
    assert said(rsp, "BackendsServing").reason == BackendsReason.DEGRADED, name
    assert rsp.results == [], name
    # The desired state is whole, as on every call.
    assert set(rsp.resources) == ALL_NAMES


def test_a_new_route_before_the_gateway_is_fetched_says_gateway_not_found_without_an_event() -> None:
    rsp = compose(XR, ROUTE_INPUT, {}, NOT_FETCHED)
    assert said(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    assert rsp.results == []


def test_a_gateway_fetched_and_absent_is_decided_and_said_once() -> None:
    rsp = compose(xr_saying("True", "Available", "served"), ROUTE_INPUT, COMPOSED, ABSENT)
    assert said(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    # Both conditions are judged on this call, and each change is said once.
    assert [reason for _, reason, _ in rsp.results] == [
        RoutingReason.GATEWAY_NOT_FOUND,
        BackendsReason.ALL_SERVING,
    ]


def test_an_older_exemption_not_accepted_holds_nothing_back() -> None:
    """It is dropped, not waited for: RoutingReady reads only what this call composes."""
    observed = unaccepted(with_exemption(), "auth-exemption")
    rsp = compose(XR, ROUTE_INPUT, observed, gw_required(READY_AUTH_GW))
    assert said(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert "auth-exemption" not in rsp.resources


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
    got = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW)).resources
    assert {key: target_name(got[key]) for key in held} == held
    manifest = {key: got[key]["spec"]["forProvider"]["manifest"] for key in got}
    assert "old-service-backend" in [
        ref["name"] for ref in manifest["route"]["spec"]["rules"][0]["backendRefs"]
    ]
    assert manifest["service-backend-hosted"]["spec"]["backendRef"]["name"] == "old-backend"
    assert manifest["security-policy-hosted"]["spec"]["targetRefs"][0]["name"] == "old-service-backend"
    # The HTTPRoute Envoy AI Gateway makes of the route has the route's (held) name.
    assert manifest["traffic-policy"]["spec"]["targetRefs"][0]["name"] == "old-route"
    # What no Object holds yet gets the name this version derives.
    assert target_name(got["backend-vllm"]) == target_name(COMPOSED["backend-vllm"])


def test_an_observe_only_object_follows_the_desired_name() -> None:
    xr = load_yaml(EXAMPLES / "model-route" / "xr-workload.yaml")[0]
    observed = by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-serving" / "resources.yaml")
    )
    before = target_name(observed["workload-vllm"])
    xr["spec"]["backends"][0]["workloadRef"]["name"] = "vllm-v2"
    got = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW)).resources
    assert (before, target_name(got["workload-vllm"])) == (before, "vllm-v2")
    assert before != "vllm-v2"


NO_OBSERVER_INPUT = {**ROUTE_INPUT, "observeGateway": False}


@pytest.mark.parametrize(("gateway", "required"), sorted(GATEWAY_STATES.items()), ids=str)
def test_with_the_observer_turned_off_a_route_composes_everything_else_and_says_the_same(
    gateway: str, required: dict[str, list[dict[str, Any]]]
) -> None:
    """Crossplane v2.4+ watches the InferenceGateway the function requires; the observer only woke
    the route. Without it, the same resources but the observer, and the same conditions."""
    on = compose(XR, ROUTE_INPUT, COMPOSED, required)
    off = compose(XR, NO_OBSERVER_INPUT, COMPOSED, required)
    assert set(on.resources) - set(off.resources) == OBSERVER_ONLY, gateway
    assert set(off.resources) == set(on.resources) - OBSERVER_ONLY
    assert [(c.type, c.status, c.reason, c.message) for c in off.conditions] == [
        (c.type, c.status, c.reason, c.message) for c in on.conditions
    ]


def test_turning_the_observer_off_removes_exactly_it_from_a_route_that_has_one() -> None:
    """Never by accident: with the default, an observed observer stays whatever the gateway's
    state; only the Input's observeGateway: false takes it out, and nothing else with it."""
    observer = compose(XR, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["gateway-observer"]
    observed = {**COMPOSED, "gateway-observer": observer, "legacy-thing": copy.deepcopy(COMPOSED["route"])}
    for required in (gw_required(READY_GW), ABSENT, NOT_FETCHED):
        assert "gateway-observer" in compose(XR, ROUTE_INPUT, observed, required).resources
        off = compose(XR, NO_OBSERVER_INPUT, observed, required).resources
        assert set(off) == set(observed) - {"gateway-observer"}, required


# --- a status of the spec before says nothing of this one -------------------------------------------


def _renamed(model: str) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["spec"]["model"] = model
    return xr


WORKLOAD_XR = load_yaml(EXAMPLES / "model-route" / "xr-workload.yaml")[0]


def _retargeted(workload: str) -> dict[str, Any]:
    """The workload route with its vLLM backend alone, pointed at another Deployment."""
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["backends"] = xr["spec"]["backends"][:1]
    xr["spec"]["backends"][0]["workloadRef"]["name"] = workload
    return xr


def _observer_not_moved_yet() -> dict[str, dict[str, Any]]:
    """Everything applied for the retargeted route but its workload observer, still on the old one."""
    observed = applied(_retargeted("vllm-next"), ROUTE_INPUT, _serving_workload(), gw_required(READY_GW))
    observed["workload-vllm"] = _serving_workload()["workload-vllm"]
    return observed


def _moved(ip: str) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"][0]["endpoint"] = {"ip": ip, "port": 8000}
    return xr


def _serving_workload() -> dict[str, dict[str, Any]]:
    return by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-serving" / "resources.yaml")
    )


def _workload_unread() -> dict[str, dict[str, Any]]:
    """A serving workload's observer after provider-kubernetes' GET of it failed: its Ready and
    manifest as the read before left them (RBAC revoked: the workload may have scaled to zero since)."""
    observed = _serving_workload()
    conditions = observed["workload-vllm"]["status"]["conditions"]
    conditions[:] = [c for c in conditions if c["type"] != "Synced"] + [
        {
            "type": "Synced",
            "status": "False",
            "reason": "ReconcileError",
            "message": 'observe failed: cannot get object: deployments.apps "vllm" is forbidden',
        }
    ]
    return observed


@pytest.mark.parametrize(
    ("observed", "serving"),
    [(_serving_workload, True), (_workload_unread, False)],
    ids=[
        "a workload observer read now says its workload serves",
        "a workload observer whose last read failed says nothing of the workload now",
    ],
)
def test_a_workload_serves_only_as_last_read(observed: Any, serving: bool) -> None:
    got = said(compose(WORKLOAD_XR, ROUTE_INPUT, observed(), gw_required(READY_GW)), "BackendsServing")
    assert (got.ready, "vllm: provider-kubernetes cannot read it now" in got.message) == (
        serving,
        not serving,
    ), got.message


# (case, the spec now, what was observed: composed for the spec before) -> RoutingReady's reason
STALE_CASES = [
    (
        "a route Accepted for the model it had before is not Accepted for the one it has now",
        _renamed("mistralai/Mistral-7B-Instruct-v0.3"),
        lambda: COMPOSED,
        RoutingReason.ROUTE_NOT_ACCEPTED,
    ),
    (
        "a backend Accepted for its old endpoint is not Accepted for its new one",
        _moved("10.0.0.9"),
        lambda: COMPOSED,
        RoutingReason.BACKEND_NOT_ACCEPTED,
    ),
    (
        "a workload observer still on the Deployment named before says nothing of the new one",
        _retargeted("vllm-next"),
        _observer_not_moved_yet,
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    (
        "once applied, the renamed route is judged as any other",
        _renamed("mistralai/Mistral-7B-Instruct-v0.3"),
        lambda: applied(
            _renamed("mistralai/Mistral-7B-Instruct-v0.3"), ROUTE_INPUT, COMPOSED, gw_required(READY_GW)
        ),
        RoutingReason.AVAILABLE,
    ),
]


@pytest.mark.parametrize(("name", "xr", "observed", "reason"), STALE_CASES, ids=[c[0] for c in STALE_CASES])
def test_a_status_of_the_spec_before_says_nothing_of_this_one(
    name: str, xr: dict[str, Any], observed: Any, reason: RoutingReason
) -> None:
    """Until provider-kubernetes applies a changed spec, its Object's Ready is of the spec before:
    a renamed model's requests fail while the route still says Accepted for the old one."""
    # Its HTTPRoute made of the spec now: only the route's own status speaks of the spec before.
    outcome = compose(xr, ROUTE_INPUT, observed(), served_required(xr))
    got = said(outcome, "RoutingReady")
    assert got.reason == reason, (name, got.message)
    if reason is RoutingReason.ROUTE_NOT_ACCEPTED:
        assert got.message.endswith("is not Accepted yet with its current spec"), got.message
    # Crossplane's per-resource readiness says the same.
    stale = [n for n, ready in outcome.ready.items() if not ready]
    assert (reason is RoutingReason.AVAILABLE) is not bool(set(stale) - {"gateway-observer"}), stale


def _object(spec: Any, seen: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the desired Object with `spec`, the observed one whose target has `seen` as its spec)."""
    target = {"apiVersion": "v1", "kind": "K", "metadata": {"name": "t", "namespace": "n"}}
    return (
        {"spec": {"forProvider": {"manifest": {**copy.deepcopy(target), "spec": spec}}}},
        {"status": {"atProvider": {"manifest": {**copy.deepcopy(target), "spec": seen}}}},
    )


APPLIED_CASES = [
    ("fields the API server defaulted are no difference", {"a": 1}, {"a": 1, "b": 2}, True),
    ("a number is the same number as a double", {"a": 1}, {"a": 1.0}, True),
    ("a boolean is no number", {"a": True}, {"a": 1.0}, False),
    ("a changed value is a difference", {"a": "x"}, {"a": "y"}, False),
    ("a list item removed is a difference", {"l": [1, 2]}, {"l": [1, 2, 3]}, False),
    ("list items are compared in order, each as a part", {"l": [{"a": 1}]}, {"l": [{"a": 1, "d": 0}]}, True),
    ("a field missing from the target is a difference", {"a": {"b": 1}}, {}, False),
]


@pytest.mark.parametrize(("name", "spec", "seen", "want"), APPLIED_CASES, ids=[c[0] for c in APPLIED_CASES])
def test_a_target_carries_its_desired_spec_as_a_part(name: str, spec: Any, seen: Any, want: bool) -> None:
    desired, observed = _object(spec, seen)
    assert readiness.applied(observed, desired) is want, name


@pytest.mark.parametrize(
    "path",
    [("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")],
    ids=".".join,
)
def test_a_target_other_than_the_one_named_carries_nothing_desired_of_it(path: tuple[str, ...]) -> None:
    desired, observed = _object({"a": 1}, {"a": 1})
    holder = observed["status"]["atProvider"]["manifest"]
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = "other"
    assert not readiness.applied(observed, desired)


def test_an_object_desiring_no_spec_is_applied_once_observed() -> None:
    desired, _ = _object({"a": 1}, {"a": 1})
    assert not readiness.applied(None, desired)
    # An observe-only Object desires no spec; a ConfigMap composed directly has no manifest.
    assert readiness.applied(_object(None, {})[1], {"spec": {"forProvider": {"manifest": {"kind": "K"}}}})
    assert readiness.applied(None, {"apiVersion": "v1", "kind": "ConfigMap"})


def _unreported() -> dict[str, Any]:
    """The example's observed resources with the route's Object created and nothing reported of its
    target yet (no status.atProvider)."""
    observed = copy.deepcopy(COMPOSED)
    del observed["route"]["status"]
    return observed


@pytest.mark.parametrize(
    ("observed", "message"),
    [
        ({}, "is not Accepted yet"),
        (unaccepted(COMPOSED, "route"), "is not Accepted yet"),
        (COMPOSED, "is not Accepted yet with its current spec"),
        (_unreported(), "is not Accepted yet: provider-kubernetes has not reported it yet"),
    ],
    ids=[
        "a route not observed yet is only not Accepted yet",
        "a route refused with its current spec is only not Accepted yet",
        "a route Accepted for the spec before says so",
        "a route Object whose target provider-kubernetes has not reported says so",
    ],
)
def test_route_not_accepted_says_whether_its_spec_was_applied(
    observed: dict[str, dict[str, Any]], message: str
) -> None:
    xr = _renamed("mistralai/Mistral-7B-Instruct-v0.3") if observed is COMPOSED else XR
    got = said(compose(xr, ROUTE_INPUT, observed, served_required(xr)), "RoutingReady")
    assert got.reason == RoutingReason.ROUTE_NOT_ACCEPTED
    assert got.message == f"AIGatewayRoute team-a/llama-648adb3a {message}"


def test_a_traffic_policy_the_provider_cannot_read_now_fails_nothing_over() -> None:
    """Its retries and ejection may have changed since its last read: no level but the first
    is counted on (the first, scaled to zero, serves nothing)."""
    scaled = by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml")
    )
    assert said(compose(WORKLOAD_XR, ROUTE_INPUT, scaled, gw_required(READY_GW)), "RoutingReady").ready
    conditions = scaled["traffic-policy"]["status"]["conditions"]
    conditions[:] = [c for c in conditions if c["type"] != "Synced"] + [
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": UNREAD}
    ]
    got = said(compose(WORKLOAD_XR, ROUTE_INPUT, scaled, gw_required(READY_GW)), "RoutingReady")
    assert got.reason == RoutingReason.BACKEND_NOT_SERVING, got.message


def test_a_traffic_policy_of_the_spec_before_fails_nothing_over() -> None:
    """Its retries and ejection may not be the ones asked for: until applied, no level but the
    first is counted on (the first, scaled to zero, serves nothing)."""
    scaled = by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml")
    )
    assert said(compose(WORKLOAD_XR, ROUTE_INPUT, scaled, gw_required(READY_GW)), "RoutingReady").ready
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["resilience"] = {"retry": {"attempts": 3}}
    observed = applied(xr, ROUTE_INPUT, scaled, gw_required(READY_GW))
    observed["traffic-policy"] = scaled["traffic-policy"]
    got = said(compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW)), "RoutingReady")
    assert got.reason == RoutingReason.BACKEND_NOT_SERVING, got.message


@pytest.mark.parametrize(
    ("observed", "words"),
    [
        pytest.param(
            lambda _xr: COMPOSED,
            "provider-kubernetes has not applied this route's spec to its AIGatewayRoute yet",
            id="before provider-kubernetes applies a rename, the route says so, not that Envoy AI Gateway lags",
        ),
        pytest.param(
            lambda xr: applied(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)),
            "Envoy AI Gateway has not made it of this route's spec yet",
            id="once applied, an HTTPRoute of the old name is Envoy AI Gateway's to remake",
        ),
    ],
)
def test_a_renamed_route_whose_httproute_routes_the_old_name_says_who_has_not_answered(
    observed: Any, words: str
) -> None:
    xr = _renamed("mistralai/Mistral-7B-Instruct-v0.3")
    # Its HTTPRoute still made of the example's spec: it routes the old name.
    got = said(compose(xr, ROUTE_INPUT, observed(xr), gw_required(READY_GW)), "RoutingReady")
    assert (got.reason, got.ready) == (RoutingReason.ROUTE_NOT_ACCEPTED, False)
    assert "its HTTPRoute still routes model meta-llama/Llama-3.1-8B-Instruct" in got.message, got.message
    assert words in got.message, got.message
