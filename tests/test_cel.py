"""The readiness CEL queries under production typing, with both evaluators.

provider-kubernetes (cel-go v0.29) sees every number as a double and treats
an evaluation error as not ready. Each case is a Deployment (or a status)
and the verdict a correct query must give; both evaluators must give it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from function.api import AvailabilityPolicy
from function.cel import (
    condition_true_query,
    deployment_rollout_query,
    node_port_query,
    policy_accepted_query,
    route_accepted_query,
    taken_in_query,
    workload_query,
)
from function.readiness import RolloutState, node_port
from function.upstream import DEFAULT_EXTPROC_MARKER
from tests.cel_eval import eval_celpy, eval_reference, is_statically_bool
from tests.support import as_production_json, examples, reach

AT_LEAST_ONE = AvailabilityPolicy.AT_LEAST_ONE
ALL = AvailabilityPolicy.ALL
MARKER = DEFAULT_EXTPROC_MARKER


def deployment(
    *,
    generation: int | None = 2,
    observed: int | None = 2,
    desired: int | None = 2,
    replicas: int = 2,
    updated: int = 2,
    available: int = 2,
    marker: bool = True,
    status: bool = True,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "envoy-platform-inference",
        "namespace": "envoy-gateway-system",
    }
    if generation is not None:
        metadata["generation"] = generation
    spec: dict[str, Any] = {
        "template": {"metadata": {"annotations": {MARKER: "abc"} if marker else {"other": "x"}}}
    }
    if desired is not None:
        spec["replicas"] = desired
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": spec,
    }
    if status:
        # Kubernetes omits zero-valued status fields.
        s = {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": updated,
            "availableReplicas": available,
        }
        obj["status"] = {k: v for k, v in s.items() if v}
    return obj


@dataclass(frozen=True)
class Case:
    name: str
    obj: dict[str, Any]
    policy: AvailabilityPolicy
    want: bool
    marker: str = MARKER


CASES = [
    Case(
        "a Deployment with no status at all is not ready",
        deployment(status=False),
        AT_LEAST_ONE,
        False,
    ),
    Case("an empty object is not ready", {}, AT_LEAST_ONE, False),
    Case(
        "All: every replica updated but one not available is not ready",
        deployment(replicas=2, updated=2, available=1),
        ALL,
        False,
    ),
    Case(
        "a Deployment without metadata.generation is not ready",
        deployment(generation=None),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "a generation the controller has not observed is not ready",
        deployment(generation=3, observed=2),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "an old-template pod still running beside surged new ones is not ready",
        deployment(replicas=3, updated=1, available=2),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "an old-template pod still running is not ready under All either",
        deployment(replicas=3, updated=2, available=3),
        ALL,
        False,
    ),
    Case(
        "one of two pods available after a drain is ready under AtLeastOne",
        deployment(replicas=1, updated=1, available=1),
        AT_LEAST_ONE,
        True,
    ),
    Case(
        "one of two pods available after a drain is not ready under All",
        deployment(replicas=1, updated=1, available=1),
        ALL,
        False,
    ),
    Case("all pods current and available is ready under AtLeastOne", deployment(), AT_LEAST_ONE, True),
    Case("all pods current and available is ready under All", deployment(), ALL, True),
    Case(
        "zero replicas is not ready: nothing serves",
        deployment(desired=0, replicas=0, updated=0, available=0),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "zero replicas is not ready under All either",
        deployment(desired=0, replicas=0, updated=0, available=0),
        ALL,
        False,
    ),
    Case(
        "current pods none of them available is not ready",
        deployment(available=0),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "a template without the ext-proc marker is not ready",
        deployment(marker=False),
        AT_LEAST_ONE,
        False,
    ),
    Case(
        "a template without the marker is ready when the marker clause is disabled",
        deployment(marker=False),
        AT_LEAST_ONE,
        True,
        marker="",
    ),
    Case(
        "a Deployment without spec.replicas is not ready under All",
        deployment(desired=None),
        ALL,
        False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rollout_query_under_production_typing(case: Case) -> None:
    query = deployment_rollout_query(case.policy, case.marker)
    obj = as_production_json(case.obj)
    assert eval_reference(query, obj) is case.want, "cel-expr-python"
    assert eval_celpy(query, obj) is case.want, "cel-python"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_python_reading_agrees_with_the_query(case: Case) -> None:
    """The message's reading of the numbers says "done" exactly when the query does."""
    state = RolloutState.read(case.obj, case.marker)
    done = state.waiting_for(case.policy) is None and state.marker_present
    assert done is case.want


@pytest.mark.parametrize("policy", list(AvailabilityPolicy))
@pytest.mark.parametrize("marker", [MARKER, ""])
def test_rollout_query_is_statically_boolean(policy: AvailabilityPolicy, marker: str) -> None:
    assert is_statically_bool(deployment_rollout_query(policy, marker))


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param(None, False, id="no status is not in effect"),
        pytest.param([], False, id="no conditions is not in effect"),
        pytest.param(
            [{"type": "Accepted", "status": "False"}],
            False,
            id="a False condition is not in effect",
        ),
        pytest.param([{"type": "Accepted"}], False, id="a condition without status is not in effect"),
        pytest.param([{"status": "True"}], False, id="a condition without type is not in effect"),
        pytest.param(
            [{"type": "Other", "status": "True"}, {"type": "Accepted", "status": "True"}],
            True,
            id="Accepted True among others is in effect",
        ),
    ],
)
def test_condition_query(conditions: list[dict[str, Any]] | None, want: bool) -> None:
    query = condition_true_query("Accepted")
    assert is_statically_bool(query)
    obj: dict[str, Any] = {"metadata": {"name": "x"}}
    if conditions is not None:
        obj["status"] = {"conditions": conditions}
    assert eval_reference(query, as_production_json(obj)) is want
    assert eval_celpy(query, as_production_json(obj)) is want


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


counts = st.integers(min_value=0, max_value=6)


@st.composite
def random_deployments(draw: st.DrawFn) -> dict[str, Any]:
    """Deployments with fields absent at random, as Kubernetes omits zeros."""
    obj: dict[str, Any] = {}
    if draw(st.booleans()):
        meta: dict[str, Any] = {}
        if (g := draw(_maybe(counts))) is not None:
            meta["generation"] = g
        obj["metadata"] = meta
    if draw(st.booleans()):
        spec: dict[str, Any] = {}
        if (r := draw(_maybe(counts))) is not None:
            spec["replicas"] = r
        if draw(st.booleans()):
            spec["template"] = {"metadata": {"annotations": {MARKER: "h"} if draw(st.booleans()) else {}}}
        obj["spec"] = spec
    if draw(st.booleans()):
        status = {}
        for key in ("observedGeneration", "replicas", "updatedReplicas", "availableReplicas"):
            if (v := draw(_maybe(counts))) is not None:
                status[key] = v
        obj["status"] = status
    return obj


@st.composite
def near_ready_deployments(draw: st.DrawFn) -> dict[str, Any]:
    """A settled Deployment (any size, zeros omitted as Kubernetes does), maybe nudged once:
    the boundary where a wrong comparison or a missing guard shows."""
    n = draw(st.integers(min_value=1, max_value=6))
    generation = draw(st.integers(min_value=1, max_value=9))
    obj = deployment(
        generation=generation, observed=generation, desired=n, replicas=n, updated=n, available=n
    )
    nudge = draw(
        st.sampled_from(["none", "observed", "updated", "available", "surge", "marker", "terminating"])
    )
    status = obj["status"]
    if nudge == "observed":
        status["observedGeneration"] = generation - 1
    elif nudge == "updated":
        status["updatedReplicas"] = n - 1
    elif nudge == "available":
        status["availableReplicas"] = n - 1
    elif nudge == "surge":
        status["replicas"] = n + 1
    elif nudge == "marker":
        obj["spec"]["template"]["metadata"]["annotations"] = {}
    elif nudge == "terminating":
        status["terminatingReplicas"] = 1
    obj["status"] = {k: v for k, v in status.items() if v}
    return obj


any_deployments = st.one_of(near_ready_deployments(), random_deployments())


def test_the_random_deployments_reach_both_verdicts_often() -> None:
    query = deployment_rollout_query(AT_LEAST_ONE, MARKER)
    seen = reach(any_deployments, lambda obj: eval_reference(query, as_production_json(obj)))
    total = sum(seen.values())
    assert seen[True] >= total * 0.1, seen
    assert seen[False] >= total * 0.1, seen
    assert set(seen) == {True, False}, f"an evaluation error: {seen}"


@settings(max_examples=examples(300), deadline=None)
@example(  # found by CI: explicit zeros are present to has(), unlike omitted ones
    obj={
        "metadata": {"generation": 0},
        "spec": {"template": {"metadata": {"annotations": {MARKER: "h"}}}},
        "status": {"observedGeneration": 0, "replicas": 0, "updatedReplicas": 0, "availableReplicas": 1},
    },
    policy=AT_LEAST_ONE,
    marker=MARKER,
)
@given(
    obj=any_deployments,
    policy=st.sampled_from(list(AvailabilityPolicy)),
    marker=st.sampled_from([MARKER, ""]),
)
def test_evaluators_and_python_reading_agree_on_random_deployments(
    obj: dict[str, Any], policy: AvailabilityPolicy, marker: str
) -> None:
    query = deployment_rollout_query(policy, marker)
    production = as_production_json(obj)
    reference = eval_reference(query, production)
    event(f"ready={reference}")
    assert eval_celpy(query, production) is reference
    state = RolloutState.read(obj, marker)
    assert (state.waiting_for(policy) is None and state.marker_present) is reference


@st.composite
def random_condition_holders(draw: st.DrawFn) -> dict[str, Any]:
    """Objects whose status.conditions are absent, empty or partly malformed."""
    obj: dict[str, Any] = {"metadata": {"name": "x"}}
    if draw(st.booleans()):
        status: dict[str, Any] = {}
        if draw(st.booleans()):
            conditions = []
            for _ in range(draw(st.integers(min_value=0, max_value=3))):
                c: dict[str, Any] = {}
                if draw(st.booleans()):
                    c["type"] = draw(st.sampled_from(["Accepted", "Programmed", "Other"]))
                if draw(st.booleans()):
                    c["status"] = draw(st.sampled_from(["True", "False", "Unknown"]))
                conditions.append(c)
            status["conditions"] = conditions
        obj["status"] = status
    return obj


@settings(max_examples=examples(300), deadline=None)
@given(obj=random_condition_holders(), typ=st.sampled_from(["Accepted", "Programmed"]))
def test_evaluators_agree_on_condition_queries(obj: dict[str, Any], typ: str) -> None:
    query = condition_true_query(typ)
    production = as_production_json(obj)
    want = any(
        c.get("type") == typ and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )
    assert eval_reference(query, production) is want
    assert eval_celpy(query, production) is want


def _prunings(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Every (path, key) of a nested mapping: removing one gives a shape a guard must cover."""
    out: list[tuple[tuple[str, ...], str]] = []
    if isinstance(obj, dict):
        for key in obj:
            out.append((path, key))
            out.extend(_prunings(obj[key], (*path, key)))
    return out


def _without(obj: dict[str, Any], path: tuple[str, ...], key: str) -> dict[str, Any]:
    pruned = copy.deepcopy(obj)
    node = pruned
    for step in path:
        node = node[step]
    del node[key]
    return pruned


FULL_DEPLOYMENT = deployment() | {"status": {**deployment()["status"], "terminatingReplicas": 0}}
EMITTED_QUERIES = [
    *(deployment_rollout_query(policy, marker) for policy in AvailabilityPolicy for marker in (MARKER, "")),
    *(condition_true_query(typ) for typ in ("Accepted", "Programmed", "GatewayReady", "Ready")),
    workload_query("apps/v1", "Deployment"),
    policy_accepted_query(),
    node_port_query(80),
    route_accepted_query(),
    taken_in_query(),
]


def _judged_under_production_typing(query: str, obj: dict[str, Any], want: bool) -> None:
    """Statically boolean, and both evaluators say `want` of obj as provider-kubernetes types it."""
    assert is_statically_bool(query)
    production = as_production_json(obj)
    assert eval_reference(query, production) is want
    assert eval_celpy(query, production) is want


def _workload(replicas: int | None, available: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm"}}
    if replicas is not None:
        obj["spec"] = {"replicas": replicas}
    if available:  # Kubernetes omits zero counts
        obj["status"] = {"availableReplicas": available, "replicas": available}
    return obj


WORKLOAD_CASES = {
    "scaled to zero, nothing left, does not serve": (_workload(0, None), False),
    "scaled to zero while replicas are still going does not serve": (_workload(0, 2), False),
    "one replica available of two serves": (_workload(2, 1), True),
    "no replica available yet does not serve": (_workload(2, None), False),
    "no spec.replicas (defaulted) with one available serves": (_workload(None, 1), True),
    "no status at all does not serve": ({"spec": {"replicas": 1}}, False),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES), ids=str)
def test_the_built_in_workload_query_under_production_typing(case: str) -> None:
    obj, want = WORKLOAD_CASES[case]
    _judged_under_production_typing(workload_query("apps/v1", "StatefulSet"), obj, want)


def test_a_workload_of_any_other_kind_serves_while_ready() -> None:
    assert workload_query("serving.kserve.io/v1beta1", "InferenceService") == condition_true_query("Ready")


@pytest.mark.parametrize("query", EMITTED_QUERIES, ids=lambda q: q[:60])
def test_every_emitted_query_evaluates_without_error_on_every_pruned_shape(query: str) -> None:
    """What has() guards promise, checked by evaluation rather than by reading the text: remove
    any one key anywhere and neither evaluator errors (provider-kubernetes would report the
    error as Unavailable, a different thing from false)."""
    holder = {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
    policy = {"status": {"ancestors": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}}
    service = _service({"port": 80, "protocol": "TCP", "nodePort": 31080})
    taken = {"metadata": {"finalizers": [AIGW_FINALIZER]}, **holder}
    for base in (FULL_DEPLOYMENT, holder, policy, service, taken, {}):
        shapes = [base, *(_without(base, path, key) for path, key in _prunings(base))]
        for shape in shapes:
            production = as_production_json(shape)
            for evaluate in (eval_reference, eval_celpy):
                got = evaluate(query, production)
                assert isinstance(got, bool), (evaluate.__name__, shape, got)


# Written out, not read from function/upstream.py: a test that read it there would agree with any value.
AIGW_FINALIZER = "aigateway.envoyproxy.io/finalizer"


def _backend(*conditions: tuple[str, str], finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "aigateway.envoyproxy.io/v1beta1", "kind": "AIServiceBackend"}
    obj["metadata"] = {"name": "vllm", **({"finalizers": list(finalizers)} if finalizers else {})}
    if conditions:
        obj["status"] = {"conditions": [{"type": t, "status": v} for t, v in conditions]}
    return obj


TAKEN_IN_CASES = {
    "Accepted is taken in": (_backend(("Accepted", "True")), True),
    "Accepted with the finalizer is taken in": (
        _backend(("Accepted", "True"), finalizers=(AIGW_FINALIZER,)),
        True,
    ),
    "no status and no finalizer (not reconciled yet) is not": (_backend(), False),
    "no status with the finalizer (the status write given up on) is taken in": (
        _backend(finalizers=(AIGW_FINALIZER,)),
        True,
    ),
    "an empty condition list with the finalizer is taken in": (
        {**_backend(finalizers=(AIGW_FINALIZER,)), "status": {"conditions": []}},
        True,
    ),
    "NotAccepted written is not, finalizer or not": (
        _backend(("NotAccepted", "True"), finalizers=(AIGW_FINALIZER,)),
        False,
    ),
    "Accepted False written is not, finalizer or not": (
        _backend(("Accepted", "False"), finalizers=(AIGW_FINALIZER,)),
        False,
    ),
    "another controller's finalizer alone is not": (_backend(finalizers=("example.com/other",)), False),
    "the finalizer with no verdict while it is being deleted is not": (
        {
            **_backend(finalizers=(AIGW_FINALIZER,)),
            "metadata": {
                "name": "vllm",
                "finalizers": [AIGW_FINALIZER],
                "deletionTimestamp": "2026-12-05T00:00:00Z",
            },
        },
        False,
    ),
    "the finalizer among others is taken in": (
        _backend(finalizers=("example.com/other", AIGW_FINALIZER)),
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(TAKEN_IN_CASES), ids=str)
def test_the_service_backend_query_under_production_typing(case: str) -> None:
    obj, want = TAKEN_IN_CASES[case]
    _judged_under_production_typing(taken_in_query(), obj, want)


def _ancestor(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "ancestorRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"},
        "conditions": [{"type": t, "status": v} for t, v in conditions],
    }


POLICY_CASES = {
    "no status yet is not in effect": ({}, False),
    "no ancestors yet is not in effect": ({"status": {}}, False),
    "an empty ancestor list is not in effect": ({"status": {"ancestors": []}}, False),
    "Accepted by its one ancestor is in effect": (
        {"status": {"ancestors": [_ancestor(("Accepted", "True"))]}},
        True,
    ),
    "Accepted False (a Secret missing) is not in effect": (
        {"status": {"ancestors": [_ancestor(("Accepted", "False"))]}},
        False,
    ),
    "an ancestor without conditions is not in effect": (
        {"status": {"ancestors": [{"ancestorRef": {}}]}},
        False,
    ),
    "Accepted by one ancestor and not another is not in effect": (
        {"status": {"ancestors": [_ancestor(("Accepted", "True")), _ancestor(("Accepted", "False"))]}},
        False,
    ),
    "Accepted among other conditions is in effect": (
        {"status": {"ancestors": [_ancestor(("ResolvedRefs", "False"), ("Accepted", "True"))]}},
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(POLICY_CASES), ids=str)
def test_the_policy_query_under_production_typing(case: str) -> None:
    obj, want = POLICY_CASES[case]
    _judged_under_production_typing(policy_accepted_query(), obj, want)


def _service(*ports: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "spec": {"type": "NodePort", "ports": list(ports)}}


NODE_PORT_CASES = {
    "a Service with no spec yet has no node port": ({}, False),
    "a Service without ports has no node port": ({"spec": {"type": "NodePort"}}, False),
    "the listener's port with its node port assigned is ready": (
        _service({"name": "http-80", "port": 80, "nodePort": 31080}),
        True,
    ),
    "the listener's port without a node port is not ready": (_service({"port": 80}), False),
    "only another port's node port is not ready": (_service({"port": 8080, "nodePort": 31081}), False),
    "the listener's port among others is ready": (
        _service({"port": 8080, "nodePort": 31081}, {"port": 80, "nodePort": 31080}),
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(NODE_PORT_CASES), ids=str)
def test_the_node_port_query_under_production_typing_agrees_with_the_reading(case: str) -> None:
    """The provider's Ready and the URL the function publishes come from the same port."""
    obj, want = NODE_PORT_CASES[case]
    _judged_under_production_typing(node_port_query(80), obj, want)
    assert (node_port(as_production_json(obj), 80) is not None) is want


def _parent(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"},
        "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
        "conditions": [{"type": t, "status": v} for t, v in conditions],
    }


ROUTE_PARENT_CASES = {
    "no status yet is not in effect": ({}, False),
    "no parents yet is not in effect": ({"status": {}}, False),
    "an empty parent list is not in effect": ({"status": {"parents": []}}, False),
    "a parent without conditions is not in effect": ({"status": {"parents": [{"parentRef": {}}]}}, False),
    "Accepted with its references resolved is in effect": (
        {"status": {"parents": [_parent(("Accepted", "True"), ("ResolvedRefs", "True"))]}},
        True,
    ),
    "Accepted with a reference unresolved (Envoy answers 500) is not in effect": (
        {"status": {"parents": [_parent(("Accepted", "True"), ("ResolvedRefs", "False"))]}},
        False,
    ),
    "refused by the listener (NotAllowedByListeners) is not in effect": (
        {"status": {"parents": [_parent(("Accepted", "False"), ("ResolvedRefs", "True"))]}},
        False,
    ),
    "Accepted by one parent and refused by another is not in effect": (
        {
            "status": {
                "parents": [
                    _parent(("Accepted", "True"), ("ResolvedRefs", "True")),
                    _parent(("Accepted", "False"), ("ResolvedRefs", "True")),
                ]
            }
        },
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(ROUTE_PARENT_CASES), ids=str)
def test_the_route_query_under_production_typing(case: str) -> None:
    obj, want = ROUTE_PARENT_CASES[case]
    _judged_under_production_typing(route_accepted_query(), obj, want)


ROLLOUT_SUMMARY_CASES = [
    (
        "a Deployment that reports nothing says zero of each, not one",
        {"metadata": {"name": "envoy"}},
        "0 updated, 0 available of 0 desired",
    ),
    (
        "a new template with no pod updated yet says so",
        {"spec": {"replicas": 2}, "status": {"updatedReplicas": 0, "availableReplicas": 2}},
        "0 updated, 2 available of 2 desired",
    ),
    (
        "a Deployment scaled to zero with nothing left says zero of zero",
        {"spec": {"replicas": 0}, "status": {"updatedReplicas": 0, "availableReplicas": 0}},
        "0 updated, 0 available of 0 desired",
    ),
    (
        "every count is read from its own field",
        {"spec": {"replicas": 3}, "status": {"updatedReplicas": 2, "availableReplicas": 1}},
        "2 updated, 1 available of 3 desired",
    ),
]


@pytest.mark.parametrize(
    ("name", "obj", "says"), ROLLOUT_SUMMARY_CASES, ids=[c[0] for c in ROLLOUT_SUMMARY_CASES]
)
def test_the_rollout_summary_quotes_the_deployments_counts(name: str, obj: dict[str, Any], says: str) -> None:
    assert RolloutState.read(obj, MARKER).summary() == says, name
