"""A backend's modelCheck: what its server lists at /v1/models decides whether it serves (issue #30)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from function.conditions import BackendsReason, RoutingReason
from function.model_check import Clock, ProbeState, judge, listed
from function.readiness import stamp
from tests.route_support import COMPOSED as COMPOSED_OBSERVED
from tests.route_support import READY_GW, XR, gw_required
from tests.support import EXAMPLES, ROUTE_INPUT, applied, by_resource_name, compose, load_yaml, refused, said

MODEL = XR["spec"]["model"]
# Where the example route's vLLM backend lists its models.
URL = "http://vllm.team-a.svc.cluster.local:8000/v1/models"


def answered(
    *models: str,
    code: int = 200,
    synced: bool = True,
    error: str | None = None,
    failed: int | None = None,
    body: Any = None,
    synced_message: str = "",
    url: str = URL,
) -> dict[str, Any]:
    """A provider-http Request as observed: its last answer (from `url`), and how the last probe went."""
    status: dict[str, Any] = {
        "requestDetails": {"url": url, "method": "GET"},
        "response": {
            "statusCode": code,
            "body": body
            if body is not None
            else json.dumps({"object": "list", "data": [{"id": m} for m in models]}),
        },
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available"},
            {
                "type": "Synced",
                "status": "True" if synced else "False",
                "reason": "ReconcileSuccess" if synced else "ReconcileError",
                "message": synced_message,
            },
        ],
    }
    if error is not None:
        status["error"] = error
    if failed is not None:
        status["failed"] = failed
    return {"apiVersion": "http.m.crossplane.io/v1alpha2", "kind": "Request", "status": status}


# A 404 after a refused connection: provider-http leaves its error and count as they were and only
# says the Request does not exist.
REFUSED_THEN_404 = answered(
    MODEL,
    synced=False,
    error="connection refused",
    failed=1,
    synced_message="cannot observe external resource: external resource does not exist",
)
NEVER_ANSWERED = {
    "apiVersion": "http.m.crossplane.io/v1alpha2",
    "kind": "Request",
    "status": {
        "conditions": [
            {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": "does not exist"}
        ]
    },
}
CREATED = {"apiVersion": "http.m.crossplane.io/v1alpha2", "kind": "Request", "status": {}}


def refused_from_the_start(failed: int) -> dict[str, Any]:
    """A Request whose every probe so far was refused: no answer kept, the failures counted."""
    return {
        "apiVersion": "http.m.crossplane.io/v1alpha2",
        "kind": "Request",
        "status": {
            "error": "dial tcp 10.0.0.7:8000: connect: connection refused",
            "failed": failed,
            "conditions": [
                {
                    "type": "Synced",
                    "status": "False",
                    "reason": "ReconcileError",
                    "message": "connection refused",
                }
            ],
        },
    }


@dataclass(frozen=True)
class JudgeCase:
    name: str
    request: dict[str, Any] | None
    state: ProbeState
    loaded: bool
    detail: str = ""


JUDGE_CASES = [
    JudgeCase("a Request not observed yet is untried", None, ProbeState.UNTRIED, False),
    JudgeCase("a Request with no answer yet is untried", CREATED, ProbeState.UNTRIED, False),
    JudgeCase("an answer listing the model means loaded", answered("other", MODEL), ProbeState.LOADED, True),
    JudgeCase(
        "an answer from the URL before the endpoint changed says nothing of the new one",
        answered(MODEL, url="http://old-vllm.team-a.svc.cluster.local:8000/v1/models"),
        ProbeState.UNTRIED,
        False,
        f"no answer from {URL} yet",
    ),
    JudgeCase(
        "failures after the endpoint changed keep no answer of the old URL",
        answered(
            MODEL,
            synced=False,
            error="connection refused",
            failed=1,
            url="http://old-vllm.team-a.svc.cluster.local:8000/v1/models",
        ),
        ProbeState.UNTRIED,
        False,
    ),
    JudgeCase(
        "an answer listing only other models means not loaded",
        answered("mistralai/Mistral-7B"),
        ProbeState.NOT_LOADED,
        False,
    ),
    JudgeCase(
        "the id is compared exactly: another case is another model",
        answered(MODEL.lower()),
        ProbeState.NOT_LOADED,
        False,
    ),
    JudgeCase("an empty list is known empty", answered(), ProbeState.KNOWN_EMPTY, False),
    JudgeCase(
        "a body without a data list is a parse error, not an empty list",
        answered(body='{"models": []}'),
        ProbeState.EXPIRED,
        False,
    ),
    JudgeCase("a body that is not JSON is no answer", answered(body="<html>"), ProbeState.EXPIRED, False),
    JudgeCase(
        "a failed probe keeps the last answer that listed the model",
        answered(MODEL, synced=False, error="connection refused", failed=2),
        ProbeState.PROBING_FAILED,
        True,
    ),
    JudgeCase(
        "a failed probe keeps the last answer that did not list it",
        answered("other", synced=False, error="connection refused", failed=1),
        ProbeState.PROBING_FAILED,
        False,
    ),
    JudgeCase(
        "at the failure threshold the last answer expires",
        answered(MODEL, synced=False, error="connection refused", failed=3),
        ProbeState.EXPIRED,
        False,
        "3 failures in a row",
    ),
    JudgeCase(
        "a 404 after an answer (provider-http keeps the old body, its error reset) expires it",
        answered(MODEL, synced=False, error="", failed=0),
        ProbeState.EXPIRED,
        False,
        "no longer answers with a model list",
    ),
    JudgeCase(
        "a 404 after a refused connection (error and count left as they were) expires the answer",
        REFUSED_THEN_404,
        ProbeState.EXPIRED,
        False,
        "no longer answers with a model list",
    ),
    JudgeCase(
        "a failure provider-http has not counted yet is the first",
        answered(MODEL, synced=False, error="i/o timeout"),
        ProbeState.PROBING_FAILED,
        True,
        "0 of 3 times",
    ),
    JudgeCase(
        "a failed probe after a body that was no model list keeps nothing",
        answered(body="<html>", synced=False, error="connection refused", failed=1),
        ProbeState.PROBING_FAILED,
        False,
        "no model list to keep",
    ),
    JudgeCase(
        "a failed probe after a 5xx keeps nothing: the 5xx overwrote the list",
        answered(MODEL, code=500, synced=False, error="connection refused", failed=1),
        ProbeState.PROBING_FAILED,
        False,
        "no model list to keep",
    ),
    JudgeCase(
        "a 3xx answer is no model list, even one that lists the model",
        answered(MODEL, code=300),
        ProbeState.EXPIRED,
        False,
        "answered 300",
    ),
    JudgeCase(
        "a failed probe after a 3xx keeps nothing",
        answered(MODEL, code=300, synced=False, error="connection refused", failed=1),
        ProbeState.PROBING_FAILED,
        False,
        "no model list to keep",
    ),
    JudgeCase(
        "a 5xx answer is no model list", answered(MODEL, code=503), ProbeState.EXPIRED, False, "answered 503"
    ),
    JudgeCase(
        "a status code that is no number is said as it is, never a crash",
        answered(MODEL, code="teapot"),  # type: ignore[arg-type]
        ProbeState.EXPIRED,
        False,
        "answered 'teapot'",
    ),
    JudgeCase(
        "refused from the first probe, under the threshold: probing failed, nothing to keep",
        refused_from_the_start(2),
        ProbeState.PROBING_FAILED,
        False,
        "before any answer",
    ),
    JudgeCase(
        "refused from the first probe up to the threshold: the server is down",
        refused_from_the_start(3),
        ProbeState.EXPIRED,
        False,
        "3 failures in a row",
    ),
    JudgeCase(
        "probing that failed before any answer has nothing to keep",
        NEVER_ANSWERED,
        ProbeState.PROBING_FAILED,
        False,
    ),
]


@pytest.mark.parametrize("case", JUDGE_CASES, ids=lambda c: c.name)
def test_what_a_probe_says_of_the_model(case: JudgeCase) -> None:
    # Numbers as Crossplane hands them over: doubles.
    request = json.loads(json.dumps(case.request), parse_int=float) if case.request is not None else None
    probe = judge(request, MODEL, 3, URL)
    assert (probe.state, probe.loaded) == (case.state, case.loaded)
    assert probe.detail.startswith(str(case.state))
    assert case.detail in probe.detail, probe.detail


def test_a_status_code_is_said_as_the_number_it_is() -> None:
    # Crossplane hands numbers over as doubles: 503.0 is said as 503.
    request = json.loads(json.dumps(answered(MODEL, code=503)), parse_int=float)
    assert judge(request, MODEL, 3, URL).detail == "expired: the probe was answered 503"


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ('{"data": [{"id": "a"}, {"id": "b"}]}', ["a", "b"]),
        ('{"data": []}', []),
        ('{"data": [{"id": 7}, "x", {"id": "a"}]}', ["a"]),
        ('{"object": "list"}', None),
        ('{"data": {"id": "a"}}', None),
        ("[]", None),
        ("not json", None),
        ("[" * 100_000, None),
        (None, None),
    ],
    ids=[
        "every id of the list",
        "an empty list",
        "entries without a string id are skipped",
        "no data field is no list",
        "data that is not a list is no list",
        "a top-level list is no OpenAI answer",
        "a body that is not JSON is no list",
        "a body nested deeper than the parser goes is no list, never a crash",
        "no body is no list",
    ],
)
def test_the_ids_a_model_list_holds(body: Any, want: list[str] | None) -> None:
    assert listed(body) == want


# --- composed and judged in the route -------------------------------------------------------------


def _checked(backend_changes: dict[str, Any] | None = None, *, alone: bool = True) -> dict[str, Any]:
    """The example route with a modelCheck on its vLLM backend; alone, without the hosted fallback."""
    xr = copy.deepcopy(XR)
    backends = xr["spec"]["backends"]
    backends[0]["modelCheck"] = {}
    backends[0] |= backend_changes or {}
    if alone:
        del backends[1]
    return xr


@dataclass(frozen=True)
class Composed:
    name: str
    xr: dict[str, Any]
    url: str


COMPOSED_CASES = [
    Composed(
        "a plain backend is probed over http",
        _checked(),
        "http://vllm.team-a.svc.cluster.local:8000/v1/models",
    ),
    Composed(
        "a backend with TLS is probed over https, at its path",
        _checked({"tls": {}, "modelCheck": {"path": "/openai/v1/models"}}),
        "https://vllm.team-a.svc.cluster.local:8000/openai/v1/models",
    ),
    Composed(
        "a backend by IP is probed at its IP",
        _checked({"endpoint": {"ip": "10.0.0.7", "port": 8080}}),
        "http://10.0.0.7:8080/v1/models",
    ),
]


@pytest.mark.parametrize("case", COMPOSED_CASES, ids=lambda c: c.name)
def test_a_model_check_composes_an_observe_only_request_of_the_model_list(case: Composed) -> None:
    outcome = compose(case.xr, ROUTE_INPUT, {}, gw_required(READY_GW))
    request = outcome.resources["model-check-vllm"]
    assert (request["apiVersion"], request["kind"]) == ("http.m.crossplane.io/v1alpha2", "Request")
    # Named for the route, the probe and the backend, as the route's other objects are.
    assert request["metadata"]["name"].startswith("llama-model-check-vllm-"), request["metadata"]["name"]
    assert request["metadata"]["namespace"] == "team-a"
    spec = request["spec"]
    assert spec["managementPolicies"] == ["Observe"]
    assert spec["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}
    assert spec["forProvider"]["payload"] == {"baseUrl": case.url}
    assert spec["forProvider"]["mappings"] == [
        {"action": "OBSERVE", "method": "GET", "url": ".payload.baseUrl"}
    ]


def _observed(request: dict[str, Any] | None, xr: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The example's observed state with `xr` (by default the route with its vLLM backend alone)
    applied, and the probe's Request as given."""
    observed = {k: v for k, v in COMPOSED_OBSERVED.items() if not k.endswith("-hosted")}
    if request is not None:
        observed["model-check-vllm"] = request
    return applied(xr or _checked(), ROUTE_INPUT, observed, gw_required(READY_GW))


ROUTE_CASES = [
    (
        "a server that lists the model serves it",
        answered(MODEL),
        RoutingReason.AVAILABLE,
        "model meta-llama/Llama-3.1-8B-Instruct loaded (1 listed)",
    ),
    (
        "a server that has loaded another model does not serve this one",
        answered("mistralai/Mistral-7B"),
        RoutingReason.MODEL_NOT_LOADED,
        "model meta-llama/Llama-3.1-8B-Instruct not loaded (1 listed)",
    ),
    (
        "a server not probed yet is not trusted with the model",
        None,
        RoutingReason.MODEL_NOT_LOADED,
        "untried: no answer yet",
    ),
    (
        "a probe that failed once keeps the answer before it",
        answered(MODEL, synced=False, error="i/o timeout", failed=1),
        RoutingReason.AVAILABLE,
        "probing failed 1 of 3 times in a row, the last answer (loaded) kept",
    ),
    (
        "probes failing past the threshold leave nothing to trust",
        answered(MODEL, synced=False, error="i/o timeout", failed=3),
        RoutingReason.MODEL_NOT_LOADED,
        "expired: 3 failures in a row",
    ),
]


@pytest.mark.parametrize(
    ("name", "request_", "reason", "detail"), ROUTE_CASES, ids=[c[0] for c in ROUTE_CASES]
)
def test_routing_ready_follows_what_the_server_lists(
    name: str, request_: dict[str, Any] | None, reason: RoutingReason, detail: str
) -> None:
    outcome = compose(_checked(), ROUTE_INPUT, _observed(request_), gw_required(READY_GW))
    routing = said(outcome, "RoutingReady")
    assert routing.reason == reason, (name, routing.message)
    assert routing.ready is (reason is RoutingReason.AVAILABLE), name
    assert detail in said(outcome, "BackendsServing").message, name
    # Whatever the probe says, the route is composed exactly as the spec says.
    assert (
        outcome.resources
        == compose(_checked(), ROUTE_INPUT, _observed(answered(MODEL)), gw_required(READY_GW)).resources
    )


def test_a_workload_that_does_not_serve_is_backend_not_serving_whatever_the_probe_kept() -> None:
    xr = _checked({"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}})
    outcome = compose(xr, ROUTE_INPUT, _observed(answered("other"), xr), gw_required(READY_GW))
    assert said(outcome, "RoutingReady").reason == RoutingReason.BACKEND_NOT_SERVING


def test_a_serving_workload_answering_without_the_model_fails_its_requests() -> None:
    xr = _checked(
        {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}}, alone=False
    )
    serving = by_resource_name(
        load_yaml(EXAMPLES / "model-route" / "observed" / "workload-serving" / "resources.yaml")
    )
    observed = applied(
        xr, ROUTE_INPUT, serving | {"model-check-vllm": answered("other")}, gw_required(READY_GW)
    )
    routing = said(compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW)), "RoutingReady")
    assert (routing.ready, routing.reason) == (False, RoutingReason.MODEL_NOT_LOADED), routing.message
    assert "requests Envoy sends to vllm are answered without the model" in routing.message


def test_a_first_backend_with_another_model_fails_its_requests_whatever_the_fallback_serves() -> None:
    """It answers 404 at once: Envoy retries connect failures, resets and 5xx and ejects on 5xx, so
    none of its requests reaches the fallback (found in review)."""
    xr = _checked(alone=False)
    observed = applied(
        xr, ROUTE_INPUT, {**COMPOSED_OBSERVED, "model-check-vllm": answered("other")}, gw_required(READY_GW)
    )
    outcome = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW))
    routing = said(outcome, "RoutingReady")
    assert (routing.ready, routing.reason) == (False, RoutingReason.MODEL_NOT_LOADED)
    assert "requests Envoy sends to vllm are answered without the model" in routing.message


def test_a_first_backend_that_is_down_hands_its_requests_to_a_fallback_that_serves() -> None:
    """Refused connections are retried on the next level: the fallback serves the model."""
    xr = _checked(alone=False)
    observed = applied(
        xr,
        ROUTE_INPUT,
        {**COMPOSED_OBSERVED, "model-check-vllm": answered(MODEL, synced=False, error="refused", failed=3)},
        gw_required(READY_GW),
    )
    outcome = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW))
    assert said(outcome, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert said(outcome, "BackendsServing").reason == BackendsReason.DEGRADED


FALLBACK_CASES = [
    (
        "a first backend whose probe is not observed yet may answer without the model",
        None,
        RoutingReason.MODEL_NOT_LOADED,
    ),
    ("a first backend not probed yet may answer without the model", CREATED, RoutingReason.MODEL_NOT_LOADED),
    (
        "a server answering 3xx at its model list answers the model's requests too",
        answered(MODEL, code=302),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a code past 599 is no 5xx: the server answers, not with a model list",
        answered(MODEL, code=600),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a 404 after a refused connection: the server answers again, not with a model list",
        REFUSED_THEN_404,
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a first backend whose endpoint changed since its last answer may answer without it",
        answered(MODEL, url="http://old-vllm.team-a.svc.cluster.local:8000/v1/models"),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a failed probe that keeps an answer without the model keeps that answer",
        answered("other", synced=False, error="i/o timeout", failed=1),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "probing that failed before any answer knows nothing of the server",
        NEVER_ANSWERED,
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a server answering 404 at its model list answers the model's requests too",
        answered(MODEL, synced=False, error="", failed=0),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a server answering something that is no model list answers the model's requests too",
        answered(body="<html>"),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a failed probe after an answer that was no model list knows no better",
        answered(body="<html>", synced=False, error="connection refused", failed=1),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a server refusing connections up to the threshold is down: its requests are retried on the fallback",
        answered("other", synced=False, error="connection refused", failed=3),
        RoutingReason.AVAILABLE,
    ),
    (
        "a first backend refused from its first probe, under the threshold, is not known to be down yet",
        refused_from_the_start(2),
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "a first backend refused from its first probe up to the threshold is down: the fallback serves",
        refused_from_the_start(3),
        RoutingReason.AVAILABLE,
    ),
    (
        "a server answering 5xx is retried and ejected: the fallback serves",
        answered(MODEL, code=503),
        RoutingReason.AVAILABLE,
    ),
    (
        "a server that answered 5xx and now refuses connections is retried on the fallback",
        answered(MODEL, code=500, synced=False, error="connection refused", failed=1),
        RoutingReason.AVAILABLE,
    ),
    (
        "a failed probe that keeps an answer listing the model serves it",
        answered(MODEL, synced=False, error="i/o timeout", failed=1),
        RoutingReason.AVAILABLE,
    ),
]


@pytest.mark.parametrize(
    ("request_", "reason"), [c[1:] for c in FALLBACK_CASES], ids=[c[0] for c in FALLBACK_CASES]
)
def test_a_fallback_is_trusted_only_when_the_first_backend_is_known_to_serve_or_to_be_down(
    request_: dict[str, Any] | None, reason: RoutingReason
) -> None:
    """Found in review: an untried or inconclusive probe of the first backend let a serving fallback
    say True, while the first backend, up and answering 404, took every request."""
    xr = _checked(alone=False)
    probe = {} if request_ is None else {"model-check-vllm": request_}
    observed = applied(xr, ROUTE_INPUT, {**COMPOSED_OBSERVED, **probe}, gw_required(READY_GW))
    routing = said(compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW)), "RoutingReady")
    assert routing.reason == reason, routing.message
    if reason == RoutingReason.MODEL_NOT_LOADED:
        assert "requests Envoy sends to vllm are answered without the model" in routing.message


NO_EJECTION = {"consecutiveErrors": 0}
SPARE_URL = "http://spare.team-a.svc.cluster.local:8000/v1/models"
DOWN = {"synced": False, "error": "connection refused", "failed": 3}


def _three_levels(resilience: dict[str, Any]) -> dict[str, Any]:
    """vLLM first, a spare self-hosted server second, the hosted provider third: each its own
    priority level, the route's resilience as given."""
    xr = _checked(alone=False)
    backends = xr["spec"]["backends"]
    backends[1]["priority"] = 2
    backends.insert(
        1,
        {
            "name": "spare",
            "endpoint": {"hostname": "spare.team-a.svc.cluster.local", "port": 8000},
            "priority": 1,
            "modelCheck": {},
        },
    )
    xr["spec"]["resilience"] = resilience
    return xr


# (case, the route's resilience, RoutingReady) with vLLM and the spare both refusing connections and the
# hosted provider (the third level) serving: up to their workloads (none named), and listing no model.
LEVEL_CASES = [
    (
        "with one retry and ejection off a request reaches two levels: two dead ones fail it, the third serves none",
        {"retry": {"attempts": 1}, "outlierDetection": NO_EJECTION},
        RoutingReason.MODEL_NOT_LOADED,
    ),
    (
        "with two retries and ejection off the third level takes what two dead ones fail",
        {"retry": {"attempts": 2}, "outlierDetection": NO_EJECTION},
        RoutingReason.AVAILABLE,
    ),
    (
        "with ejection on the dead levels are ejected and the third serves, one retry or none",
        {"retry": {"attempts": 0}},
        RoutingReason.AVAILABLE,
    ),
]


@pytest.mark.parametrize(
    ("resilience", "reason"), [c[1:] for c in LEVEL_CASES], ids=[c[0] for c in LEVEL_CASES]
)
def test_a_request_reaches_one_more_level_a_retry_unless_dead_levels_are_ejected(
    resilience: dict[str, Any], reason: RoutingReason
) -> None:
    """Envoy Gateway's numAttemptsPerPriority 1 (previous_priorities) sends each retry one level on: found
    in review, every level with weight counted as reached whatever the number of retries."""
    xr = _three_levels(resilience)
    observed = dict(COMPOSED_OBSERVED)
    for kind in ("backend", "service-backend"):
        observed[f"{kind}-spare"] = copy.deepcopy(observed[f"{kind}-vllm"])
    observed["model-check-vllm"] = answered(MODEL, **DOWN)
    observed["model-check-spare"] = answered(MODEL, url=SPARE_URL, **DOWN)
    routing = said(
        compose(
            xr, ROUTE_INPUT, applied(xr, ROUTE_INPUT, observed, gw_required(READY_GW)), gw_required(READY_GW)
        ),
        "RoutingReady",
    )
    assert (routing.ready, routing.reason) == (reason is RoutingReason.AVAILABLE, reason), routing.message


# (case, the route's resilience, the code vLLM answers its probe with, RoutingReady) with the hosted
# fallback serving.
SERVER_ERROR_CASES = [
    (
        "a 500 neither retried (the default codes) nor ejected for is every request's answer",
        {"outlierDetection": NO_EJECTION},
        500,
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    (
        "a 503 is retried by default: the fallback serves with ejection off",
        {"outlierDetection": NO_EJECTION},
        503,
        RoutingReason.AVAILABLE,
    ),
    (
        "a 500 the route retries is moved to the fallback",
        {"retry": {"statusCodes": [500]}, "outlierDetection": NO_EJECTION},
        500,
        RoutingReason.AVAILABLE,
    ),
    (
        "a 500 is ejected for with retries off: the fallback serves",
        {"retry": {"attempts": 0}},
        500,
        RoutingReason.AVAILABLE,
    ),
    (
        "a 503 with retries and ejection off is every request's answer",
        {"retry": {"attempts": 0}, "outlierDetection": NO_EJECTION},
        503,
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    (
        "a 503 in a code list that leaves it out with ejection off is every request's answer",
        {"retry": {"statusCodes": [502]}, "outlierDetection": NO_EJECTION},
        503,
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    (
        "one retry is enough to move a retried 503 to the fallback",
        {"retry": {"attempts": 1}, "outlierDetection": NO_EJECTION},
        503,
        RoutingReason.AVAILABLE,
    ),
    (
        "ejection after a single error is enough to move a 500 on",
        {"retry": {"attempts": 0}, "outlierDetection": {"consecutiveErrors": 1}},
        500,
        RoutingReason.AVAILABLE,
    ),
    (
        "a route whose BackendTrafficPolicy is not accepted neither retries nor ejects: a 503 is every answer",
        {"policy": "not accepted"},
        503,
        RoutingReason.BACKEND_NOT_SERVING,
    ),
]


@pytest.mark.parametrize(
    ("resilience", "code", "reason"),
    [c[1:] for c in SERVER_ERROR_CASES],
    ids=[c[0] for c in SERVER_ERROR_CASES],
)
def test_a_server_answering_5xx_hands_its_requests_on_only_where_the_route_retries_or_ejects(
    resilience: dict[str, Any], code: int, reason: RoutingReason
) -> None:
    """Found in review: every kept 5xx counted as retried and ejected, and the route said True while a
    first backend answered every request 500."""
    xr = _checked(alone=False)
    resilience = dict(resilience)
    accepted = resilience.pop("policy", "accepted") == "accepted"
    xr["spec"]["resilience"] = resilience
    observed = applied(
        xr,
        ROUTE_INPUT,
        {**COMPOSED_OBSERVED, "model-check-vllm": answered(MODEL, code=code)},
        gw_required(READY_GW),
    )
    if not accepted:
        # Conflicted by an older policy on the route: the provider's Ready says its query does not hold.
        observed["traffic-policy"] = copy.deepcopy(observed["traffic-policy"])
        ready = next(c for c in observed["traffic-policy"]["status"]["conditions"] if c["type"] == "Ready")
        ready["status"] = "False"
    routing = said(compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW)), "RoutingReady")
    assert (routing.ready, routing.reason) == (reason is RoutingReason.AVAILABLE, reason), routing.message
    if reason is RoutingReason.BACKEND_NOT_SERVING:
        assert (
            f"requests Envoy sends to vllm are answered {code} (its model check's last answer)"
            in routing.message
        )
        # Why nothing moves it on: the route's policy as written, or the policy not in effect at all.
        assert ("the BackendTrafficPolicy is not Accepted" in routing.message) is not accepted


def test_a_fallback_without_the_model_takes_nothing_while_the_first_serves() -> None:
    xr = _checked(alone=False)
    # The fallback, self-hosted too and probed, has another model loaded.
    xr["spec"]["backends"][1] = {
        "name": "hosted",
        "endpoint": {"hostname": "spare.team-a.svc.cluster.local", "port": 8000},
        "priority": 1,
        "modelCheck": {},
    }
    observed = applied(
        xr,
        ROUTE_INPUT,
        {
            **COMPOSED_OBSERVED,
            "model-check-vllm": answered(MODEL),
            "model-check-hosted": answered(
                "other", url="http://spare.team-a.svc.cluster.local:8000/v1/models"
            ),
        },
        gw_required(READY_GW),
    )
    outcome = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW))
    assert said(outcome, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert said(outcome, "BackendsServing").reason == BackendsReason.DEGRADED


def test_the_probe_asks_for_the_name_sent_to_the_backend_unless_told_otherwise() -> None:
    override = _checked({"modelNameOverride": "llama-8b"})
    assert said(
        compose(override, ROUTE_INPUT, _observed(answered("llama-8b"), override), gw_required(READY_GW)),
        "RoutingReady",
    ).ready
    told = _checked({"modelNameOverride": "llama-8b", "modelCheck": {"model": "llama-8b-q4"}})
    assert said(
        compose(told, ROUTE_INPUT, _observed(answered("llama-8b-q4"), told), gw_required(READY_GW)),
        "RoutingReady",
    ).ready


def test_a_model_check_taken_out_of_the_spec_takes_its_request_with_it() -> None:
    observed = _observed(
        compose(_checked(), ROUTE_INPUT, {}, gw_required(READY_GW)).resources["model-check-vllm"]
    )
    without = copy.deepcopy(_checked())
    del without["spec"]["backends"][0]["modelCheck"]
    assert "model-check-vllm" not in compose(without, ROUTE_INPUT, observed, gw_required(READY_GW)).resources
    # Never by accident: while the gateway cannot be read, it stays.
    assert "model-check-vllm" in compose(without, ROUTE_INPUT, observed, {}).resources


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"apiKeySecretRef": {"name": "k"}}, "cannot be probed (no key is sent)"),
        ({"tls": {"sni": "vllm.example.com"}}, "caConfigMapRef or sni cannot be probed"),
        ({"modelCheck": {"path": "v1/models"}}, "spec.backends[0].modelCheck.path"),
        ({"modelCheck": {"failureThreshold": 0}}, "spec.backends[0].modelCheck.failureThreshold"),
    ],
    ids=[
        "a backend behind a key is refused a probe that sends none",
        "a backend verified by SNI is refused a probe that cannot check it",
        "a path must start with a slash",
        "a failure threshold of zero trusts nothing",
    ],
)
def test_a_model_check_that_could_never_pass_is_refused_naming_the_field(
    changes: dict[str, Any], says: str
) -> None:
    assert says in refused(_checked(changes), ROUTE_INPUT, {}, gw_required(READY_GW))


# Found in review: provider-http stopped (crashed, uninstalled, far behind) leaves each Request's last
# answer as it was, Synced True, so a server that loaded another model since went unseen. Its
# 2xx answers stamp status.cache.lastUpdated: one not renewed for failureThreshold + 1 polls expires.
NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
POLL = timedelta(seconds=60)  # the Input's default modelCheckPollSeconds


def renewed(request: dict[str, Any], seconds_ago: float) -> dict[str, Any]:
    """The Request with its answer last renewed `seconds_ago` (provider-http's RFC 3339 stamp)."""
    stamped = copy.deepcopy(request)
    when = NOW - timedelta(seconds=seconds_ago)
    stamped["status"]["cache"] = {"lastUpdated": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return stamped


@dataclass(frozen=True)
class StaleCase:
    name: str
    request: dict[str, Any]
    state: ProbeState
    # Then: how long the answer may still be trusted, in seconds (None: nothing to judge by).
    left: float | None


STALE_CASES = [
    StaleCase(
        "an answer renewed a poll ago is trusted", renewed(answered(MODEL), 60), ProbeState.LOADED, 180
    ),
    StaleCase(
        "an answer renewed a second short of four polls ago is still trusted",
        renewed(answered(MODEL), 239),
        ProbeState.LOADED,
        1,
    ),
    StaleCase(
        "an answer not renewed for failureThreshold + 1 polls has expired: provider-http has stopped",
        renewed(answered(MODEL), 240),
        ProbeState.EXPIRED,
        0,
    ),
    StaleCase(
        "another model listed, not renewed since: expired too (nothing says what is loaded now)",
        renewed(answered("mistralai/Mistral-7B"), 600),
        ProbeState.EXPIRED,
        -360,
    ),
    StaleCase(
        "an answer kept through a failure that was never retried has expired",
        renewed(answered(MODEL, synced=False, error="i/o timeout", failed=1), 240),
        ProbeState.EXPIRED,
        0,
    ),
    StaleCase(
        "an answer kept through a failure retried within seconds is still kept",
        renewed(answered(MODEL, synced=False, error="i/o timeout", failed=1), 5),
        ProbeState.PROBING_FAILED,
        235,
    ),
    StaleCase(
        "a server down past the threshold is down, however old its last answer (a fallback may serve)",
        renewed(answered(MODEL, synced=False, error="connection refused", failed=3), 600),
        ProbeState.EXPIRED,
        -360,
    ),
    StaleCase("a Request without the stamp is not judged by age", answered(MODEL), ProbeState.LOADED, None),
]


@pytest.mark.parametrize("case", STALE_CASES, ids=[c.name for c in STALE_CASES])
def test_an_answer_provider_http_stopped_renewing_expires(case: StaleCase) -> None:
    clock = Clock(NOW, POLL)
    got = judge(case.request, MODEL, 3, URL, clock)
    assert got.state is case.state, got.detail
    left = clock.expires_in(case.request, 3)
    assert (left.total_seconds() if left is not None else None) == case.left
    if "provider-http" in got.detail:
        # Said with the answer's own stamp (four polls before it expired, however long ago that is),
        # and the same a second later: a message that changed each call would be written each call.
        assert case.left is not None
        renewed = stamp(NOW + timedelta(seconds=case.left) - timedelta(seconds=240))
        assert f"provider-http has renewed no answer since {renewed} (its --poll is 60 s" in got.detail
        later = judge(case.request, MODEL, 3, URL, Clock(NOW + timedelta(seconds=1), POLL))
        assert later.detail == got.detail
        # Nothing says the model is loaded now.
        assert not got.loaded
    if "provider-http has stopped" in case.name:
        # Nothing is known of the server: no fallback is trusted on it.
        assert got.answers_without_it
    if "(a fallback may serve)" in case.name:
        assert not got.answers_without_it, got.detail
    # Without a clock (no --poll known) nothing expires by age.
    if case.state is ProbeState.EXPIRED and "provider-http" in got.detail:
        assert judge(case.request, MODEL, 3, URL).state is not ProbeState.EXPIRED


def test_a_route_whose_probe_provider_http_stopped_renewing_says_so_and_asks_to_be_called_when_it_expires() -> (
    None
):
    """RoutingReady follows the expiry, and while the answer holds the route asks to be called a
    second after it would expire: provider-http, which wakes it every poll, may be what stopped."""
    fresh = compose(
        _checked(), ROUTE_INPUT, _observed(renewed(answered(MODEL), 100)), gw_required(READY_GW), now=NOW
    )
    assert said(fresh, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert fresh.ttl == timedelta(seconds=141)
    stale = compose(
        _checked(), ROUTE_INPUT, _observed(renewed(answered(MODEL), 240)), gw_required(READY_GW), now=NOW
    )
    routing = said(stale, "RoutingReady")
    assert routing.reason == RoutingReason.MODEL_NOT_LOADED, routing.message
    assert (
        f"provider-http has renewed no answer since {stamp(NOW - timedelta(seconds=240))}"
        in said(stale, "BackendsServing").message
    )
    assert stale.ttl is None
    assert stale.resources == fresh.resources
