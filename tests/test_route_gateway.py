"""How a ModelRoute reads its gateway: the serving record, the InferenceGateway itself, and what it trusts."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from function import serving_record
from function.conditions import RoutingReason
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from tests.route_support import (
    ABSENT,
    ALL_NAMES,
    COMPOSED,
    HTTPROUTE,
    HTTPROUTE_KEY,
    NOT_FETCHED,
    OBSERVER_ONLY,
    READY_GW,
    XR,
    gw_required,
    without_status_gateway,
    xr_saying,
)
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    compose,
    controller_reference,
    gateway_fetched,
    load_yaml,
    said,
)


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
    rsp = compose(
        XR, ROUTE_INPUT, COMPOSED, {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [_paused(READY_GW)]}
    )
    got = said(rsp, "RoutingReady")
    assert (got.status, got.reason) == ("False", RoutingReason.GATEWAY_NOT_READY)
    assert rsp.verdict.ready is False
    assert "paused" in got.message
    assert set(rsp.resources) == ALL_NAMES


def test_a_gateway_without_any_gateway_ready_condition_is_not_ready() -> None:
    """status.gateway published, but no GatewayReady at all: nothing says the gateway serves."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["conditions"] = [c for c in gw["status"]["conditions"] if c["type"] != "GatewayReady"]
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(gw))
    got = said(rsp, "RoutingReady")
    assert got.ready is False
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
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(gw))
    got = said(rsp, "RoutingReady")
    assert got.reason == want, name
    assert (got.ready) == (want == RoutingReason.AVAILABLE), name


def test_a_route_whose_condition_was_written_back_logs_no_transition_it_did_not_decide() -> None:
    """Issue #32: Crossplane wrote the route's old True back; the function had decided False
    before, decides False again, and says nothing: nothing changed."""
    xr = xr_saying("True", "Available", "served")
    xr["status"]["serving"] = {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    gw = _gateway_written_back(condition_ready=False, decided=False)
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(gw))
    assert said(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_READY
    assert [reason for _, reason, _ in rsp.results if reason in set(RoutingReason)] == []


def test_a_call_that_cannot_judge_repeats_what_was_decided_not_what_was_written_back() -> None:
    xr = xr_saying("True", "Available", "served")
    xr["status"]["serving"] = {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED)
    got = said(rsp, "RoutingReady")
    assert (got.status, got.reason, got.message) == (
        "False",
        RoutingReason.GATEWAY_NOT_READY,
        "rolling",
    )
    status = rsp.desired_status()
    assert status["serving"] == {"ready": False, "reason": "GatewayNotReady", "message": "rolling"}
    assert rsp.results == []


def test_a_gateway_ref_without_a_namespace_means_the_routes_own() -> None:
    xr = copy.deepcopy(XR)
    del xr["spec"]["gatewayRef"]["namespace"]
    rsp = compose(xr, ROUTE_INPUT, {}, {SERVING_REQUIREMENT: []})
    record = rsp.requirements[SERVING_REQUIREMENT]
    assert record.namespace == xr["metadata"]["namespace"]
    assert record.name == serving_record.record_name(xr["spec"]["gatewayRef"]["name"])
    selector = rsp.requirements[GATEWAY_REQUIREMENT]
    assert selector.namespace == xr["metadata"]["namespace"]
    assert selector.name == xr["spec"]["gatewayRef"]["name"]


def test_a_ready_inference_gateway_read_directly_lets_the_route_serve() -> None:
    """No serving record yet (a gateway an older version composed): the InferenceGateway is read as before."""
    required = {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [READY_GW], HTTPROUTE_KEY: [HTTPROUTE]}
    got = said(compose(XR, ROUTE_INPUT, COMPOSED, required), "RoutingReady")
    assert (got.status, got.reason) == ("True", RoutingReason.AVAILABLE)


def test_a_paused_gateway_s_routes_keep_what_its_serving_record_last_said() -> None:
    """Crossplane calls no function of a paused XR, so its serving record stays as last decided,
    as its own GatewayReady does; only an InferenceGateway read directly shows the pause."""
    paused = _paused(READY_GW)
    got = said(compose(XR, ROUTE_INPUT, COMPOSED, gw_required(paused)), "RoutingReady")
    assert (got.status, got.reason) == ("True", RoutingReason.AVAILABLE)


def test_a_gateway_read_directly_and_being_deleted_is_not_ready_whatever_its_condition_says() -> None:
    gw = copy.deepcopy(READY_GW)
    gw["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    required = {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [gw]}
    got = said(compose(XR, ROUTE_INPUT, COMPOSED, required), "RoutingReady")
    assert (got.status, got.reason) == ("False", RoutingReason.GATEWAY_NOT_READY)
    assert "platform/inference is being deleted" in got.message


@pytest.mark.parametrize("missing", ["name", "namespace"])
def test_a_gateway_that_published_only_half_of_where_to_attach_is_not_found(missing: str) -> None:
    gw = copy.deepcopy(READY_GW)
    del gw["status"]["gateway"][missing]
    rsp = compose(XR, ROUTE_INPUT, {}, gw_required(gw))
    got = said(rsp, "RoutingReady")
    assert got.reason == RoutingReason.GATEWAY_NOT_FOUND
    assert set(rsp.resources) == OBSERVER_ONLY


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
    waiting = compose(XR, ROUTE_INPUT, COMPOSED, {SERVING_REQUIREMENT: [forged]})
    assert GATEWAY_REQUIREMENT in waiting.requirements
    assert "attacker" not in json.dumps(waiting.resources)
    assert set(waiting.resources) == set(COMPOSED) | OBSERVER_ONLY, (
        "what exists is kept while the gateway is fetched"
    )
    got = said(waiting, "RoutingReady")
    assert (got.status, got.message) == (
        "False",
        "waiting for Crossplane to fetch InferenceGateway platform/inference",
    )
    read = compose(
        XR,
        ROUTE_INPUT,
        COMPOSED,
        {SERVING_REQUIREMENT: [forged], GATEWAY_REQUIREMENT: [READY_GW], HTTPROUTE_KEY: [HTTPROUTE]},
    )
    assert "attacker" not in json.dumps(read.resources)
    assert read.resources == compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)).resources
    got = said(read, "RoutingReady")
    assert (got.status, got.reason) == ("True", RoutingReason.AVAILABLE)


def test_the_gateway_s_own_record_is_read_without_requiring_the_gateway() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert GATEWAY_REQUIREMENT not in rsp.requirements


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
    got = said(compose(XR, ROUTE_INPUT, {}, required), "RoutingReady")
    assert got.message == words or got.message.startswith(words)


@pytest.mark.parametrize("folder", ["ready", "ready-auth", "ready-secret-missing", "rolling-out"])
def test_each_example_serving_record_says_what_its_inference_gateway_publishes(folder: str) -> None:
    """The rendered examples read the record; the hand-written InferenceGateway beside it is the truth."""
    where = EXAMPLES / "model-route" / "required" / folder
    (record,) = load_yaml(where / "serving-record.yaml")
    (gw,) = load_yaml(where / "inference-gateway.yaml")
    assert gateway_fetched(gw)[SERVING_REQUIREMENT] == [record]
