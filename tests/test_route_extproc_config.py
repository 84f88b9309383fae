"""A young route waits on the gateway's ext-proc configuration index (function/route/extproc_config.py):
rewritten since the route's configuration, then left alone for the load bound."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from function import serving_record
from function.conditions import RoutingReason
from function.gateway.plan import SERVING_RECORD
from function.outcome import Requirement
from function.route import extproc_config
from function.route.view import SERVING_REQUIREMENT
from function.upstream import extproc_config_index_name
from tests.route_support import ALL_NAMES, HTTPROUTE_KEY, READY_GW, XR, accepted_ago, gw_required
from tests.support import (
    CLOCK,
    EXAMPLES,
    EXTPROC_CONFIG,
    GATEWAY_INPUT,
    ROUTE_INPUT,
    compose,
    extproc_index,
    load_yaml,
    said,
    stamp_ago,
)


def _without_location(required: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The serving record as a version before the index's location wrote it."""
    (record,) = required[SERVING_REQUIREMENT]
    data = {k: v for k, v in record["data"].items() if k != "extProcConfig"}
    return required | {SERVING_REQUIREMENT: [record | {"data": data}]}


def _fetched(index: dict[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    """What Crossplane hands the route: the index as given, none where it does not exist."""
    return gw_required(READY_GW) | {extproc_config.REQUIREMENT: [] if index is None else [index]}


def _not_fetched() -> dict[str, list[dict[str, Any]]]:
    required = gw_required(READY_GW)
    del required[extproc_config.REQUIREMENT]
    return required


@dataclass(frozen=True)
class Case:
    name: str
    # When the route's configuration was written (its Accepted stamp), seconds before CLOCK.
    written: float
    required: dict[str, list[dict[str, Any]]]
    reason: RoutingReason
    words: str = ""
    # Seconds until Crossplane calls again, where the route is held.
    recheck: float | None = None


CASES = [
    Case(
        "an index rewritten after the route's configuration and left alone for the bound lets it say True",
        30,
        _fetched(extproc_index(18)),
        RoutingReason.AVAILABLE,
    ),
    Case(
        "an index rewritten after the route's configuration 10 s ago holds it until the bound has passed",
        30,
        _fetched(extproc_index(10)),
        RoutingReason.CONFIG_LOADING,
        "is rewriting the gateway's ext-proc configuration",
        9,
    ),
    Case(
        "an index rewritten in the second the route was stamped counts as written after it",
        30,
        _fetched(extproc_index(30)),
        RoutingReason.AVAILABLE,
    ),
    Case(
        "an index not rewritten since the route's configuration holds it and is read again in 5 s",
        30,
        _fetched(extproc_index(31)),
        RoutingReason.CONFIG_LOADING,
        "has not rewritten the gateway's ext-proc configuration",
        5,
    ),
    Case(
        "an index that does not exist holds the route",
        30,
        _fetched(None),
        RoutingReason.CONFIG_LOADING,
        "has not rewritten",
        5,
    ),
    Case(
        "an index no manager is recorded writing holds the route",
        30,
        _fetched(extproc_index(None)),
        RoutingReason.CONFIG_LOADING,
        "has not rewritten",
        5,
    ),
    Case(
        "an index Crossplane has not fetched yet holds the route",
        30,
        _not_fetched(),
        RoutingReason.CONFIG_LOADING,
        "waiting for Crossplane to fetch Secret",
        15,
    ),
    Case(
        "a serving record that does not say where the index is holds the route until 60 s after its write",
        30,
        _without_location(gw_required(READY_GW)),
        RoutingReason.CONFIG_LOADING,
        "does not say where Envoy AI Gateway writes the ext-proc configuration",
        15,
    ),
    Case(
        "an index not fetched 50 s after the route's write is asked for again when the hold ends",
        50,
        _not_fetched(),
        RoutingReason.CONFIG_LOADING,
        "waiting for Crossplane to fetch Secret",
        11,
    ),
    Case(
        "a record that does not say where the index is 50 s after the write is read again when the hold ends",
        50,
        _without_location(gw_required(READY_GW)),
        RoutingReason.CONFIG_LOADING,
        "does not say where",
        11,
    ),
    Case(
        "a hold on a rewritten index ends 60 s after the route's write, before the index has settled",
        55,
        _fetched(extproc_index(5)),
        RoutingReason.CONFIG_LOADING,
        "held at most until",
        6,
    ),
    Case(
        "60 s after its configuration was written a route is taken as loaded whatever the index says",
        60,
        _fetched(extproc_index(1)),
        RoutingReason.AVAILABLE,
    ),
    Case(
        "a route within its load bound is held by that bound first",
        10,
        _fetched(extproc_index(18)),
        RoutingReason.CONFIG_LOADING,
        "ext-proc load it within 18 s",
        9,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_young_route_waits_on_the_ext_proc_configuration_index(case: Case) -> None:
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", case.written), case.required, now=CLOCK)
    got = said(rsp, "RoutingReady")
    assert (got.reason, got.ready) == (case.reason, case.reason is RoutingReason.AVAILABLE), got.message
    assert case.words in got.message
    if case.recheck is not None:
        assert rsp.next_call() == timedelta(seconds=case.recheck), got.message
    # Held or not, the desired state is whole.
    assert set(rsp.resources) == ALL_NAMES


@pytest.mark.parametrize(
    ("written", "wanted"),
    [
        (30, {extproc_config.REQUIREMENT: Requirement("v1", "Secret", EXTPROC_CONFIG[1], EXTPROC_CONFIG[0])}),
        (60, {}),
        (600, {}),
    ],
    ids=[
        "a route written 30 s ago requires the index by name, where its gateway's record says",
        "a route written 60 s ago no longer requires it",
        "a settled route never requires it",
    ],
)
def test_the_index_is_required_only_while_the_route_waits_on_it(
    written: float, wanted: dict[str, Requirement]
) -> None:
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", written), gw_required(READY_GW), now=CLOCK)
    got = {k: v for k, v in rsp.requirements.items() if k == extproc_config.REQUIREMENT}
    assert got == wanted


def test_the_hold_says_the_same_while_the_index_is_rewritten_call_after_call() -> None:
    """A message that changed with each rewrite would be a status write each call, and each write calls
    the route again: a loop for as long as routes are written. Each call here finds the index rewritten
    5 s before it."""
    messages = {
        said(
            compose(
                XR,
                ROUTE_INPUT,
                accepted_ago("route", 30),
                _fetched(extproc_index(5 - s)),
                now=CLOCK + timedelta(seconds=s),
            ),
            "RoutingReady",
        ).message
        for s in (0, 3, 6)
    }
    assert len(messages) == 1, messages
    assert "is rewriting" in messages.pop()


def test_the_gateway_record_says_where_envoy_ai_gateway_writes_the_index() -> None:
    """The name is the one Envoy AI Gateway v1.1.0 wrote on the real data plane for Gateway
    platform/inference (its controller's log, make scale); in ControllerNamespace mode beside Envoy
    Gateway, where the Envoy pods run."""
    gateway = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
    record = compose(gateway, GATEWAY_INPUT, {}).resources[SERVING_RECORD]
    assert serving_record.extproc_config(record) == (
        "envoy-gateway-system",
        "inference-platform-5c764c69a0b7",
    )


def test_in_gateway_namespace_mode_the_index_is_beside_the_gateway() -> None:
    gateway = load_yaml(EXAMPLES / "inference-gateway" / "xr-gatewaynamespace.yaml")[0]
    record = compose(gateway, GATEWAY_INPUT, {}).resources[SERVING_RECORD]
    published = (serving_record.as_gateway(record) or {})["status"]["gateway"]
    assert published["namespace"] == "ai-gateways"
    assert serving_record.extproc_config(record) == (
        "ai-gateways",
        extproc_config_index_name(published["name"], "ai-gateways"),
    )


@pytest.mark.parametrize(
    ("gateway", "namespace", "name"),
    [
        ("inference", "platform", "inference-platform-5c764c69a0b7"),
        ("g" * 250, "ns", "g" * 240 + "-" + "x"),
        ("-edge-", "ns", "edge--ns-" + "x"),
        ("a" * 239 + "-" + "b" * 10, "ns", "a" * 239 + "-x"),
    ],
    ids=[
        "a short name is the gateway, its namespace and the hash",
        "a long one is cut to 253 characters from the front part's end, the hash kept whole",
        "dashes at the front part's ends are trimmed",
        "a dash the cut leaves at the front part's end is trimmed",
    ],
)
def test_the_index_is_named_as_envoy_ai_gateway_names_it(gateway: str, namespace: str, name: str) -> None:
    got = extproc_config_index_name(gateway, namespace)
    digest = got.rsplit("-", 1)[1]
    assert len(digest) == 12
    assert len(got) <= 253
    assert got == (name if not name.endswith("-x") else name[:-1] + digest)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "not json",
        "[]",
        '{"namespace": "a"}',
        '{"namespace": "", "name": "b"}',
        '{"namespace": 1, "name": "b"}',
        '{"whole": "true"}',
    ],
    ids=[
        "absent (a record of an earlier version)",
        "not JSON",
        "not an object",
        "without a name",
        "with an empty namespace",
        "with a namespace that is not a string",
        "saying whole with a string, not true",
    ],
)
def test_a_record_that_cannot_say_where_the_index_is_says_nothing(value: str | None) -> None:
    data = {} if value is None else {"extProcConfig": value}
    assert serving_record.extproc_config({"data": data}) is None


def _index_written_by(*entries: tuple[str, float]) -> dict[str, Any]:
    """The index with one managedFields entry per (field owned, seconds before CLOCK)."""
    index = extproc_index(None)
    index["metadata"]["managedFields"] = [
        {"manager": f"m{i}", "operation": "Update", "time": stamp_ago(ago), "fieldsV1": {field: {}}}
        for i, (field, ago) in enumerate(entries)
    ]
    return index


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (_index_written_by(("f:data", 40), ("f:stringData", 20)), RoutingReason.AVAILABLE),
        (_index_written_by(("f:data", 40), ("f:metadata", 20)), RoutingReason.CONFIG_LOADING),
    ],
    ids=[
        "a write recorded as owning stringData counts as a write of the data",
        "a manager that wrote only the index's metadata rewrote no configuration",
    ],
)
def test_the_index_is_rewritten_when_a_manager_writes_its_data(
    index: dict[str, Any], reason: RoutingReason
) -> None:
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", 30), _fetched(index), now=CLOCK)
    assert said(rsp, "RoutingReady").reason == reason


def _translated_later(seconds: float) -> dict[str, list[dict[str, Any]]]:
    """What Crossplane hands, with Envoy Gateway's last write of the route's HTTPRoute status `seconds` ago."""
    required = _fetched(extproc_index(25))
    (route,) = required[HTTPROUTE_KEY]
    route = copy.deepcopy(route)
    route["metadata"]["managedFields"] = [
        {
            "manager": "envoy-gateway",
            "operation": "Update",
            "subresource": "status",
            "time": stamp_ago(seconds),
            "fieldsV1": {"f:status": {}},
        }
    ]
    return required | {HTTPROUTE_KEY: [route]}


def _backend_accepted_later(observed: dict[str, dict[str, Any]], seconds: float) -> dict[str, dict[str, Any]]:
    manifest = observed["backend-vllm"]["status"]["atProvider"]["manifest"]
    manifest.setdefault("status", {})["conditions"] = [
        {"type": "Accepted", "status": "True", "reason": "Accepted", "lastTransitionTime": stamp_ago(seconds)}
    ]
    return observed


def test_envoy_gateways_stamps_after_the_last_rewrite_do_not_hold_the_route() -> None:
    """The route stamped 30 s ago, the index rewritten 25 s ago, and then Envoy Gateway wrote the
    HTTPRoute's status and accepted the Backend 20 s ago: Envoy AI Gateway rewrites nothing after
    those, so waiting for a rewrite after them would hold the route until 60 s (found in review)."""
    observed = _backend_accepted_later(accepted_ago("route", 30), 20)
    rsp = compose(XR, ROUTE_INPUT, observed, _translated_later(20), now=CLOCK)
    got = said(rsp, "RoutingReady")
    assert got.reason == RoutingReason.AVAILABLE, got.message


def test_a_route_whose_httproute_envoy_gateway_translated_late_still_requires_the_index() -> None:
    """Its configuration counts from Envoy Gateway's last write of its HTTPRoute too (30 s ago, its own
    stamps 90 s ago): required while the verdict waits on it, so the hold never waits for a fetch no
    call asks for."""
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", 90), _translated_later(30), now=CLOCK)
    assert extproc_config.REQUIREMENT in rsp.requirements
    # Rewritten 25 s ago, after the route's own stamps: loaded.
    assert said(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE


def _whole(required: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The serving record of a gateway on Envoy AI Gateway before v1.1.0: one Secret, no index."""
    (record,) = required[SERVING_REQUIREMENT]
    data = record["data"] | {"extProcConfig": '{"whole":true}'}
    return {SERVING_REQUIREMENT: [record | {"data": data}]} | {
        k: v for k, v in required.items() if k not in (SERVING_REQUIREMENT, extproc_config.REQUIREMENT)
    }


def test_before_v1_1_a_gateway_says_its_configuration_is_one_secret() -> None:
    """Envoy AI Gateway v1.0.0 writes no bundle: the Input's marker empty, as documented for it."""
    gateway = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
    record = compose(gateway, GATEWAY_INPUT | {"extProcMarkerAnnotation": ""}, {}).resources[SERVING_RECORD]
    assert serving_record.extproc_config(record) == serving_record.WHOLE


def test_a_route_on_a_configuration_written_whole_waits_only_for_the_load_bound() -> None:
    """No index to require or wait on: True once the 18 s have passed, 30 s after its write."""
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", 30), _whole(gw_required(READY_GW)), now=CLOCK)
    assert extproc_config.REQUIREMENT not in rsp.requirements
    got = said(rsp, "RoutingReady")
    assert got.reason == RoutingReason.AVAILABLE, got.message
