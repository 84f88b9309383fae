"""A route whose spec Envoy AI Gateway has not answered yet is judged by the HTTPRoute Envoy routes by:
its AIGatewayRoute's Accepted is of the spec before, for as long as the controller does not run."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import claims
from function.conditions import RoutingReason
from function.route import httproute
from tests.route_support import (
    COMPOSED,
    READY_GW,
    XR,
    gw_required,
    httproute_made_of,
    made_of,
    spec_written,
    translated,
    xr_saying,
)
from tests.support import (
    CLOCK,
    EXAMPLES,
    ROUTE_INPUT,
    applied,
    compose,
    load_yaml,
    said,
    stamp_ago,
    written_at,
)

OUR_HTTPROUTE = claims.httproute_key(
    (
        COMPOSED["route"]["metadata"]["namespace"],
        COMPOSED["route"]["spec"]["forProvider"]["manifest"]["metadata"]["name"],
    )
)


def _spec(**changes: Any) -> dict[str, Any]:
    """The example route with its spec changed: each keyword a spec field, each backend by name a dict of its
    fields (None takes it out)."""
    xr = copy.deepcopy(XR)
    for field, value in changes.items():
        if field in ("vllm", "hosted"):
            backends = xr["spec"]["backends"]
            at = next(i for i, b in enumerate(backends) if b["name"] == field)
            if value is None:
                del backends[at]
            else:
                backends[at] |= value
        else:
            xr["spec"][field] = value
    return xr


def _as_answered(
    xr: dict[str, Any], *, accepted_ago: float | None, written_ago: float | None
) -> dict[str, Any]:
    """The example route's observed Objects with `xr`'s spec applied by provider-kubernetes `written_ago`
    seconds ago (a managedFields entry; None: none), and its AIGatewayRoute stamped Accepted by Envoy AI
    Gateway `accepted_ago` seconds ago (None: no Accepted)."""
    observed = applied(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    manifest = observed["route"]["status"]["atProvider"]["manifest"]
    manifest["status"] = {
        "conditions": []
        if accepted_ago is None
        else [
            {
                "type": "Accepted",
                "status": "True",
                "reason": "ReconciliationSucceeded",
                "lastTransitionTime": stamp_ago(accepted_ago),
            }
        ]
    }
    if written_ago is not None:
        spec_written(observed, "route", written_ago)
    return observed


def _without_annotations(made: dict[str, Any]) -> dict[str, Any]:
    del made["metadata"]["annotations"]
    return made


def _made_of(xr: dict[str, Any]) -> dict[str, Any]:
    """The HTTPRoute Envoy AI Gateway made of `xr`'s spec."""
    return httproute_made_of(compose(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)).resources)


# (the spec now, the spec the HTTPRoute was made of) -> RoutingReady, and words its message has.
# The spec was written 20 s ago, past the configuration bound; Accepted was stamped 60 s ago.
STALE_CASES = [
    pytest.param(
        XR,
        XR,
        RoutingReason.AVAILABLE,
        "",
        id="an HTTPRoute made of the current spec lets the route say True",
    ),
    pytest.param(
        _spec(vllm={"weight": 3}),
        _spec(vllm={"weight": 3}),
        RoutingReason.AVAILABLE,
        "",
        id="an HTTPRoute made of the current spec's weights lets the route say True",
    ),
    pytest.param(
        _spec(vllm={"modelCheck": {}}),
        _spec(vllm={"modelCheck": {}}),
        RoutingReason.MODEL_NOT_LOADED,
        "",
        id="a backend with a model check (provider-http's Request, no manifest) is compared like any other",
    ),
    pytest.param(
        _spec(hosted=None),
        XR,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "its HTTPRoute sends requests to llama-vllm-dca3edf8 (weight 1), llama-hosted-486ab520 (weight 1) where "
        "this spec names llama-vllm-dca3edf8 (weight 1)",
        id="an HTTPRoute still sending requests to a backend taken out holds the route: Envoy goes on sending "
        "it its share",
    ),
    pytest.param(
        XR,
        _spec(hosted=None),
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "where this spec names llama-vllm-dca3edf8 (weight 1), llama-hosted-486ab520 (weight 1)",
        id="an HTTPRoute without a backend added since holds the route",
    ),
    pytest.param(
        _spec(vllm={"weight": 3}),
        XR,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "where this spec names llama-vllm-dca3edf8 (weight 3)",
        id="an HTTPRoute with the weights before holds the route",
    ),
    pytest.param(
        _spec(hosted={"priority": 0}),
        XR,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "orders the backends 0:llama-vllm-dca3edf8:0,0:llama-hosted-486ab520:1 where this spec says "
        "0:llama-vllm-dca3edf8:0,0:llama-hosted-486ab520:0",
        id="an HTTPRoute with the priorities before holds the route: the fallback is not in effect",
    ),
    pytest.param(
        _spec(timeouts={"request": "30s"}),
        XR,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "times requests out after 60s where this spec says 30s",
        id="an HTTPRoute with the request timeout before holds the route",
    ),
    pytest.param(
        _spec(timeouts={}),
        _spec(timeouts={"request": "30s"}),
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "times requests out after 30s where this spec says 60s",
        id="a request timeout taken out is Envoy AI Gateway's 60 s once answered, and held until then",
    ),
]


@pytest.mark.parametrize(("now", "made_of", "reason", "words"), STALE_CASES)
def test_a_spec_envoy_ai_gateway_has_not_answered_is_judged_by_its_httproute_past_the_bound(
    now: dict[str, Any], made_of: dict[str, Any], reason: RoutingReason, words: str
) -> None:
    """Accepted stamped in the second the spec was written, 20 s ago (past the configuration hold): the
    stamp may be of the reconcile before the write, so the HTTPRoute decides. Before, the route said True
    18 s after the write whatever the HTTPRoute routed."""
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: [_made_of(made_of)]}
    observed = _as_answered(now, accepted_ago=20, written_ago=20)
    got = said(compose(now, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert (got.reason, got.ready) == (reason, reason is RoutingReason.AVAILABLE), got.message
    if reason is RoutingReason.ROUTE_NOT_ACCEPTED:
        assert got.message.startswith(
            "AIGatewayRoute team-a/llama-648adb3a says Accepted of its spec before this one"
        )
        assert words in got.message, got.message


# (the spec the HTTPRoute was made of, seconds since Envoy AI Gateway wrote it or None) -> RoutingReady,
# under an Accepted stamped 60 s ago and a spec written 20 s ago: no stamp since the write.
UNSTAMPED_CASES = [
    pytest.param(
        XR,
        10,
        RoutingReason.CONFIG_LOADING,
        id="an HTTPRoute made 10 s ago and not stamped yet holds the route while its configuration loads: "
        "Envoy AI Gateway writes the ext-proc's between the two (a tenth of a second True on the real stack "
        "before)",
    ),
    pytest.param(
        XR,
        30,
        RoutingReason.AVAILABLE,
        id="an HTTPRoute that agrees and was written before the spec holds nothing: a write Envoy AI Gateway "
        "had nothing to answer for",
    ),
    pytest.param(
        XR,
        None,
        RoutingReason.AVAILABLE,
        id="an HTTPRoute that agrees and says nothing of when it was written holds nothing more than the stamps",
    ),
    pytest.param(
        _spec(hosted=None),
        3,
        RoutingReason.ROUTE_NOT_ACCEPTED,
        id="an HTTPRoute of the spec before holds the route whenever it was written",
    ),
]


@pytest.mark.parametrize(("made_of", "made_ago", "reason"), UNSTAMPED_CASES)
def test_an_httproute_written_since_the_last_accepted_stamp_counts_as_the_configuration_s_write(
    made_of: dict[str, Any], made_ago: float | None, reason: RoutingReason
) -> None:
    made = _made_of(made_of)
    if made_ago is not None:
        made["metadata"]["managedFields"] = [
            {
                "manager": "envoy-ai-gateway-controller",
                "operation": "Update",
                "time": stamp_ago(made_ago),
                "fieldsV1": {"f:spec": {"f:rules": {}}},
            }
        ]
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: [made]}
    observed = _as_answered(XR, accepted_ago=60, written_ago=20)
    outcome = compose(XR, ROUTE_INPUT, observed, required, now=CLOCK)
    got = said(outcome, "RoutingReady")
    assert (got.reason, got.ready) == (reason, reason is RoutingReason.AVAILABLE), got.message
    if reason is RoutingReason.CONFIG_LOADING:
        assert written_at(10) in got.message, got.message
        next_call = outcome.next_call()
        # Called again a second after the bound, counted from the HTTPRoute's write.
        assert next_call is not None
        assert next_call.total_seconds() == 18 - 10 + 1


@pytest.mark.parametrize(
    ("found", "words"),
    [
        pytest.param(
            [],
            "it has no HTTPRoute yet",
            id="no HTTPRoute at all holds the route: Envoy routes nothing to it",
        ),
        pytest.param(
            [_without_annotations(_made_of(XR))],
            "its HTTPRoute orders the backends by nothing where this spec says "
            "0:llama-vllm-dca3edf8:0,0:llama-hosted-486ab520:1",
            id="an HTTPRoute without the priority annotation Envoy AI Gateway writes holds the route",
        ),
    ],
)
def test_an_httproute_that_cannot_be_compared_holds_the_route(found: list[Any], words: str) -> None:
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: found}
    observed = _as_answered(XR, accepted_ago=20, written_ago=20)
    got = said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert not got.ready
    assert (got.reason, got.message.endswith(f"Envoy routes by the HTTPRoute: {words}")) == (
        RoutingReason.ROUTE_NOT_ACCEPTED,
        True,
    ), got.message


def test_the_httproute_is_asked_for_on_every_call_whatever_the_stamps_say() -> None:
    """Before, only while the spec was unanswered (a stamp in a later second answered it): now for
    what Envoy Gateway says of it, on every call."""
    observed = _as_answered(XR, accepted_ago=19, written_ago=20)
    req = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW), now=CLOCK).requirements[OUR_HTTPROUTE]
    assert (req.api_version, req.kind, req.namespace, req.name) == (
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        "team-a",
        "llama-648adb3a",
    )


@pytest.mark.parametrize(
    "before",
    [
        pytest.param(("True", "Available", "served"), id="a route that said True says True"),
        pytest.param(("False", "GatewayNotReady", "rolling"), id="a route that said False says False"),
    ],
)
def test_a_call_before_its_httproute_is_fetched_repeats_what_the_route_says(
    before: tuple[str, str, str],
) -> None:
    """The first call of a reconcile on Crossplane before v2.4 has nothing required: Crossplane
    calls again with it, and that call decides; this one repeats the XR, as for the gateway."""
    required = gw_required(READY_GW)
    del required[OUR_HTTPROUTE]
    got = said(compose(xr_saying(*before), ROUTE_INPUT, COMPOSED, required), "RoutingReady")
    assert (got.status, got.reason, got.message) == before


def test_a_route_stamped_in_the_second_of_its_write_long_ago_reads_an_httproute_that_agrees_and_is_served() -> (
    None
):
    """Created and stamped within one second (often so): unanswered until its next change, every call reads
    its HTTPRoute, which agrees, and nothing is held."""
    observed = _as_answered(XR, accepted_ago=600, written_ago=600)
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: [_made_of(XR)]}
    assert (
        said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady").reason
        is RoutingReason.AVAILABLE
    )


def _translation(
    generation: int = 2,
    judged: Any = 2,
    *,
    accepted: str = "True",
    gateway: str = "inference",
    status_written_ago: float | None = None,
) -> dict[str, Any]:
    """The example route's HTTPRoute at `generation`, as Envoy Gateway last wrote its status: its
    Accepted `accepted` of generation `judged` (None: no observedGeneration), for Gateway
    platform/`gateway`, that status written `status_written_ago` (None: no managedFields)."""
    made = translated(made_of(COMPOSED), generation, judged)
    for parent in made["status"]["parents"]:
        parent["parentRef"]["name"] = gateway
        for c in parent["conditions"]:
            if judged is None:
                del c["observedGeneration"]
            if c["type"] == "Accepted" and accepted != "True":
                c |= {"status": accepted, "reason": "NoMatchingParent", "message": "No listeners match"}
    if status_written_ago is not None:
        made["metadata"]["managedFields"] = [
            {
                "manager": "envoy-gateway",
                "operation": "Update",
                "subresource": "status",
                "time": stamp_ago(status_written_ago),
                "fieldsV1": {"f:status": {"f:parents": {}}},
            }
        ]
    return made


def _with_entry(made: dict[str, Any], *, judged: int = 2, **changes: Any) -> dict[str, Any]:
    """`made` with one more status entry: a copy of its first, of generation `judged`, its parentRef
    or its own fields changed."""
    entry = copy.deepcopy(made["status"]["parents"][0])
    for c in entry["conditions"]:
        c["observedGeneration"] = judged
    for field, value in changes.items():
        if field == "sectionName":
            entry["parentRef"][field] = value
        else:
            entry[field] = value
    made["status"]["parents"].append(entry)
    return made


def _second_parent(made: dict[str, Any], *, judged: int | None, conditions: Any = None) -> dict[str, Any]:
    """`made` attached to a second listener of the Gateway too, whose entry is of generation `judged`
    (its conditions `conditions` where given)."""
    ref = {**made["spec"]["parentRefs"][0], "sectionName": "https"}
    made["spec"]["parentRefs"].append(ref)
    entry = copy.deepcopy(made["status"]["parents"][0])
    entry["parentRef"] = dict(ref)
    for c in entry["conditions"]:
        c["observedGeneration"] = judged
    if conditions is not None:
        entry["conditions"] = conditions
    made["status"]["parents"].append(entry)
    return made


def _deleting(made: dict[str, Any]) -> dict[str, Any]:
    made["metadata"]["deletionTimestamp"] = "2026-12-05T11:59:00Z"
    return made


def _defaults_left_out(made: dict[str, Any]) -> dict[str, Any]:
    """`made` whose status entries name their parent with group and kind left out, Gateway API's
    defaults, where its spec spells them out."""
    for parent in made["status"]["parents"]:
        for field in ("group", "kind"):
            parent["parentRef"].pop(field, None)
    return made


def _without_parents(made: dict[str, Any]) -> dict[str, Any]:
    """`made` whose one parentRef is of another kind than Gateway (a Service, as GAMMA's)."""
    made["spec"]["parentRefs"] = [{**made["spec"]["parentRefs"][0], "kind": "Service"}]
    return made


# (the HTTPRoute as Envoy Gateway's status says it, or none) -> RoutingReady, and words its message has.
# Envoy AI Gateway stamped Accepted 60 s ago, after the spec's write: no hold of its own.
TRANSLATED_CASES = [
    pytest.param(
        [_translation()], RoutingReason.AVAILABLE, "", id="an HTTPRoute Accepted of its generation serves"
    ),
    pytest.param(
        [_translation(2, 1)],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "Envoy Gateway's Accepted of its HTTPRoute on Gateway platform/inference is of generation 1, the "
        "HTTPRoute's is 2: Envoy Gateway has not translated it (its controller may be down), so Envoy routes "
        "the spec before",
        id="an HTTPRoute rewritten while Envoy Gateway is down is not routed: its Accepted is of the generation before",
    ),
    pytest.param(
        [_translation(2, 2.0)],
        RoutingReason.AVAILABLE,
        "",
        id="a generation handed over as a double is the same generation",
    ),
    pytest.param(
        [_translation(2, None)],
        RoutingReason.AVAILABLE,
        "",
        id="an Accepted that says no generation is judged as it says",
    ),
    pytest.param(
        [_translation(2, float("nan"))],
        RoutingReason.AVAILABLE,
        "",
        id="a generation that is no number says no generation",
    ),
    pytest.param(
        [_translation(accepted="False")],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "Envoy Gateway does not accept its HTTPRoute on Gateway platform/inference "
        "(NoMatchingParent: No listeners match)",
        id="an HTTPRoute Envoy Gateway refuses is not routed, and says why",
    ),
    pytest.param(
        [_translation(gateway="other")],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "Envoy Gateway has written no status of its HTTPRoute for Gateway platform/inference",
        id="a status for another Gateway says nothing of this one",
    ),
    pytest.param(
        [{**_translation(), "status": {}}],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "Envoy Gateway has written no status of its HTTPRoute for Gateway platform/inference",
        id="an HTTPRoute Envoy Gateway has not written a status of is not routed",
    ),
    pytest.param(
        [],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "it has no HTTPRoute yet",
        id="no HTTPRoute at all routes nothing",
    ),
    pytest.param(
        [_with_entry(_translation(), sectionName="old-listener", judged=1)],
        RoutingReason.AVAILABLE,
        "",
        id="the entry Envoy Gateway keeps of a renamed listener, of a generation long gone, says nothing",
    ),
    pytest.param(
        [_with_entry(_translation(), controllerName="other.example/controller", conditions=[])],
        RoutingReason.AVAILABLE,
        "",
        id="another controller's entry for the same parent beside Envoy Gateway's Accepted one says nothing",
    ),
    pytest.param(
        [_with_entry(_translation(2, 1), controllerName="other.example/controller", judged=2)],
        RoutingReason.AVAILABLE,
        "",
        id="of two entries for one parent, one Accepted of the current generation is enough",
    ),
    pytest.param(
        [_second_parent(_translation(), judged=1)],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "is of generation 1, the HTTPRoute's is 2",
        id="every parentRef on the Gateway must be Accepted of the current generation",
    ),
    pytest.param(
        [_second_parent(_translation(), judged=None, conditions=[])],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "Envoy Gateway does not accept its HTTPRoute on Gateway platform/inference (no Accepted)",
        id="an entry without an Accepted condition is not accepted",
    ),
    pytest.param(
        [_deleting(_translation())],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "its HTTPRoute is being deleted",
        id="an HTTPRoute being deleted is not counted on",
    ),
    pytest.param(
        [_defaults_left_out(_translation())],
        RoutingReason.AVAILABLE,
        "",
        id="a parent named with Gateway API's defaults left out is the same parent",
    ),
    pytest.param(
        [_without_parents(_translation())],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        "its HTTPRoute names no parent on Gateway platform/inference",
        id="an HTTPRoute that names no parentRef on the Gateway is not routed there",
    ),
    pytest.param(
        [_translation(status_written_ago=3)],
        RoutingReason.CONFIG_LOADING,
        written_at(3),
        id="a status Envoy Gateway wrote 3 s ago holds the route: its xDS follows the write",
    ),
    pytest.param(
        [_translation(status_written_ago=30)],
        RoutingReason.AVAILABLE,
        "",
        id="a status written past the bound holds nothing",
    ),
]


@pytest.mark.parametrize(("found", "reason", "words"), TRANSLATED_CASES)
def test_a_route_serves_once_envoy_gateway_accepted_its_httproute_s_generation(
    found: list[dict[str, Any]], reason: RoutingReason, words: str
) -> None:
    observed = _as_answered(XR, accepted_ago=60, written_ago=120)
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: found}
    got = said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert (got.reason, got.ready) == (reason, reason is RoutingReason.AVAILABLE), got.message
    assert words in got.message


def test_the_example_httproute_is_what_envoy_ai_gateway_makes_of_the_example_route() -> None:
    """examples/model-route/required/*/httproute.yaml, which renders and tests hand the route."""
    made = httproute_made_of(compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)).resources)
    for state in ("ready", "ready-auth", "ready-secret-missing", "rolling-out"):
        assert load_yaml(EXAMPLES / "model-route" / "required" / state / "httproute.yaml") == [made], state


@pytest.mark.parametrize(
    ("status_written_ago", "reason"),
    [
        pytest.param(
            -600, RoutingReason.CONFIG_LOADING, id="a status stamped ten minutes ahead ends no hold"
        ),
        pytest.param(-10, RoutingReason.CONFIG_LOADING, id="a status stamped 10 s ahead holds the route"),
        pytest.param(None, RoutingReason.CONFIG_LOADING, id="without it, the route's own stamp holds"),
    ],
)
def test_a_stamp_ahead_of_our_clock_neither_ends_nor_makes_the_others_hold(
    status_written_ago: float | None, reason: RoutingReason
) -> None:
    """Found in review: the latest stamp was judged alone, so one far ahead of our clock switched
    off the hold of an Accepted stamped 3 s ago (the ext-proc still answering 500)."""
    observed = _as_answered(XR, accepted_ago=3, written_ago=120)
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: [_translation(status_written_ago=status_written_ago)]}
    got = said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert (got.reason, got.ready) == (reason, False), got.message
    said_ago = -10 if status_written_ago == -10 else 3
    assert written_at(said_ago) in got.message, got.message


def _refs(made: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`made` with every parentRef, in its spec and its status, changed: a field None is left out."""
    for ref in [*made["spec"]["parentRefs"], *(p["parentRef"] for p in made["status"]["parents"])]:
        for field, value in fields.items():
            if value is None:
                ref.pop(field, None)
            else:
                ref[field] = value
    return made


def _status_port(made: dict[str, Any], port: int) -> dict[str, Any]:
    """`made` whose spec names its parent on port 80 and whose status speaks of `port` only."""
    made["spec"]["parentRefs"][0]["port"] = 80
    for parent in made["status"]["parents"]:
        parent["parentRef"]["port"] = port
    return made


PLATFORM = ("platform", "inference")
# (found, the Gateway (namespace, name)) -> why Envoy does not route the HTTPRoute, word for word.
READING_CASES = [
    pytest.param(
        None, PLATFORM, "its HTTPRoute is not read yet", id="before Crossplane fetched it, it says so"
    ),
    pytest.param([], PLATFORM, "it has no HTTPRoute yet", id="none found, it says so"),
    pytest.param(
        [_deleting(_translation())],
        PLATFORM,
        "its HTTPRoute is being deleted",
        id="one being deleted, it says so",
    ),
    pytest.param(
        [_refs(_translation(), namespace=None)],
        ("team-a", "inference"),
        None,
        id="a parentRef without a namespace names a Gateway of the HTTPRoute's own namespace",
    ),
    pytest.param(
        [_refs(_translation(), group="other.example")],
        PLATFORM,
        "its HTTPRoute names no parent on Gateway platform/inference",
        id="a parent of another API group is not the Gateway, whatever its name",
    ),
    pytest.param(
        [_status_port(_translation(), 8080)],
        PLATFORM,
        "Envoy Gateway has written no status of its HTTPRoute for Gateway platform/inference",
        id="a status entry of another port is of another parent",
    ),
    pytest.param(
        [_status_port(_translation(), 80)], PLATFORM, None, id="one of the same port is of this parent"
    ),
]


@pytest.mark.parametrize(("found", "gateway", "want"), READING_CASES)
def test_what_envoy_gateway_says_of_the_httproute_is_read_word_for_word(
    found: list[dict[str, Any]] | None, gateway: tuple[str, str], want: str | None
) -> None:
    reading = httproute.Reading(target=("team-a", "llama-648adb3a"), unanswered=False, found=found)
    assert reading.untranslated(gateway) == want


def test_a_spec_compared_before_its_httproute_is_read_says_so() -> None:
    composed = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)).resources
    assert httproute.differences(None, composed) == "its HTTPRoute is not read yet"


# (Accepted stamped, spec written: seconds ago; None for none) -> whether the HTTPRoute is compared
# with the spec: only while Envoy AI Gateway has not answered it (a stamp in a later second).
COMPARED_CASES = [
    pytest.param(60, 20, True, id="a spec written after the last Accepted stamp is compared"),
    pytest.param(
        20, 20, True, id="a stamp in the write's own second may be of the reconcile before it: compared"
    ),
    pytest.param(19, 20, False, id="a stamp in a later second answered the spec: not compared"),
    pytest.param(60, None, False, id="a target without managedFields tells no write: not compared"),
]


@pytest.mark.parametrize(("accepted_ago", "written_ago", "compared"), COMPARED_CASES)
def test_the_httproute_is_compared_with_the_spec_only_while_it_is_unanswered(
    accepted_ago: float, written_ago: float | None, compared: bool
) -> None:
    observed = _as_answered(XR, accepted_ago=accepted_ago, written_ago=written_ago)
    # Without the priority annotation: compared, it differs from the spec.
    required = gw_required(READY_GW) | {OUR_HTTPROUTE: [_without_annotations(_made_of(XR))]}
    got = said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert ("orders the backends by nothing" in got.message) is compared, got.message
    assert got.ready is not compared, got.message
