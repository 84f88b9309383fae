"""Who holds a model name on a gateway: the route whose HTTPRoute Envoy Gateway sorts first; any other
says whose it is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import claims
from function.conditions import RoutingReason
from tests.route_support import READY_GW, XR, gw_required, translated
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    applied,
    by_resource_name,
    compose,
    load_yaml,
    said,
)

COMPOSED = by_resource_name(load_yaml(EXAMPLES / "model-route" / "observed" / "composed" / "resources.yaml"))
# The example route's Object, as its composition names it, and its AIGatewayRoute.
OURS = COMPOSED["route"]["metadata"]["name"]
OUR_TARGET = COMPOSED["route"]["spec"]["forProvider"]["manifest"]["metadata"]["name"]


def claimant(
    namespace: str,
    name: str,
    xr: str,
    created: str,
    *,
    target_created: str | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """An Object of an AIGatewayRoute claiming the model, as Crossplane lists it; the AIGatewayRoute
    (and so the HTTPRoute Envoy AI Gateway makes of it) is named target, else after the XR."""
    obj: dict[str, Any] = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            "labels": {"crossplane.io/composite": xr, claims.LABEL: "x"},
        },
        "spec": {
            "forProvider": {
                "manifest": {
                    "apiVersion": "aigateway.envoyproxy.io/v1beta1",
                    "kind": "AIGatewayRoute",
                    "metadata": {"name": target or f"{xr}-0123abcd", "namespace": namespace},
                }
            }
        },
    }
    if target_created is not None:
        obj["status"] = {"atProvider": {"manifest": {"metadata": {"creationTimestamp": target_created}}}}
    return obj


# Where the example route attaches: the Gateway its AIGatewayRoute names, and so its HTTPRoute.
PARENT = COMPOSED["route"]["spec"]["forProvider"]["manifest"]["spec"]["parentRefs"][0]


def httproute(
    namespace: str,
    name: str,
    created: str,
    model: str = XR["spec"]["model"],
    parent: dict[str, Any] = PARENT,
) -> dict[str, Any]:
    """The HTTPRoute Envoy AI Gateway made of an AIGatewayRoute: its namespace and name, its
    parentRefs, a rule matching the model header as the route's does, and the catch-all it adds
    (v1.1.0 `newHTTPRoute`); translated by Envoy Gateway."""
    root = {"type": "PathPrefix", "value": "/"}
    made = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    "matches": [
                        {
                            "headers": [{"type": "Exact", "name": "x-ai-eg-model", "value": model}],
                            "path": root,
                        }
                    ]
                },
                {"name": "route-not-found", "matches": [{"path": root}]},
            ],
        },
    }
    return translated(made)


def fetched(
    required: dict[str, Any], wanted: dict[str, Any], httproutes: list[dict[str, Any]]
) -> dict[str, Any]:
    """What Crossplane hands the next call: each HTTPRoute the function asked for by name, found
    among `httproutes` or absent (an empty list, as a name not found is handed)."""
    required = dict(required)
    for key, req in wanted.items():
        if req.kind == "HTTPRoute":
            required[key] = [
                h
                for h in httproutes
                if (h["metadata"]["namespace"], h["metadata"]["name"]) == (req.namespace, req.name)
            ]
    return required


def _without_manifest(obj: dict[str, Any]) -> dict[str, Any]:
    del obj["spec"]
    return obj


MINE = claimant("team-a", OURS, "llama", "2026-11-29T12:00:00Z", target=OUR_TARGET)

# Before any HTTPRoute exists (Envoy AI Gateway behind), the AIGatewayRoutes' ages stand for them;
# a route that holds its model says so once its HTTPRoute exists: Envoy routes nothing before.
NO_HTTPROUTE = "it has no HTTPRoute yet"
CASES = [
    pytest.param(
        None, RoutingReason.AVAILABLE, "", id="claimants not fetched yet (a first call) judge nothing"
    ),
    pytest.param(
        [MINE], RoutingReason.ROUTE_NOT_ACCEPTED, NO_HTTPROUTE, id="a route alone with its model holds it"
    ),
    pytest.param(
        [claimant("team-b", "squat-route", "squat", "2026-11-29T11:00:00Z"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "already routed by ModelRoute team-b/squat, which is older",
        id="an older route of the same model on the same gateway holds it, and is named",
    ),
    pytest.param(
        [MINE, claimant("team-b", "late-route", "late", "2026-11-29T13:00:00Z")],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="a younger route of the same model does not take it away",
    ),
    pytest.param(
        [
            claimant("team-b", "late-route", "late", "2026-11-29T13:00:00Z"),
            claimant("team-c", "early-route", "early", "2026-11-29T11:00:00Z"),
            MINE,
        ],
        RoutingReason.MODEL_CLAIMED,
        "team-c/early",
        id="of several claimants the oldest is named, wherever it is listed",
    ),
    pytest.param(
        [claimant("team-b", "other-route", "other", "2026-11-29T13:00:00Z")],
        RoutingReason.MODEL_CLAIMED,
        "team-b/other",
        id="a route whose own Object is not created yet is younger than every claimant",
    ),
    pytest.param(
        [
            claimant("team-b", "b-route", "b", "2026-11-29T11:00:00Z", target_created="2026-11-29T14:00:00Z"),
            claimant(
                "team-a",
                OURS,
                "llama",
                "2026-11-29T12:00:00Z",
                target_created="2026-11-29T12:00:01Z",
                target=OUR_TARGET,
            ),
        ],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="without HTTPRoutes, the AIGatewayRoutes' own creation times decide, not their Objects'",
    ),
    pytest.param(
        [claimant("team-0", "z-route", "zed", "2026-11-29T12:00:00Z"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-0/zed",
        id="of two created in the same second, the first by namespace holds it, as Envoy Gateway sorts",
    ),
    pytest.param(
        [claimant("team-z", "a-route", "ay", "2026-11-29T12:00:00Z"), MINE],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="of two created in the same second, a later namespace does not hold it",
    ),
    pytest.param(
        [claimant("team-a", "a-route", "ay", "2026-11-29T12:00:00Z", target="a-0123abcd"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-a/ay",
        id="of two created in the same second in one namespace, the first by name holds it",
    ),
    pytest.param(
        [claimant("team-a", "zz-route", "zed", "2026-11-29T12:00:00Z", target="zz-0123abcd"), MINE],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="of two created in the same second in one namespace, a later name does not hold it",
    ),
    pytest.param(
        [_without_manifest(claimant("team-z", "a-route", "ay", "2026-11-29T12:00:00Z")), MINE],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="an Object without its manifest is sorted by its own namespace and name",
    ),
    pytest.param(
        [_without_manifest(claimant("team-0", "z-route", "zed", "2026-11-29T12:00:00Z")), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-0/zed",
        id="an Object without its manifest in a namespace sorted first holds the model",
    ),
    pytest.param(
        [claimant("team-a", "a-route", "ay", "2026-11-29T12:00:00Z", target="zz-0123abcd"), MINE],
        RoutingReason.ROUTE_NOT_ACCEPTED,
        NO_HTTPROUTE,
        id="in the same second, the AIGatewayRoutes' names decide, as Envoy sorts their HTTPRoutes, not the Objects'",
    ),
    pytest.param(
        [claimant("team-a", "zz-route", "zed", "2026-11-29T12:00:00Z", target="a-0123abcd"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-a/zed",
        id="in the same second, an AIGatewayRoute named first holds the model whatever its Object is named",
    ),
]


T_OTHER = ("team-b", "other-0123abcd")
OTHER = claimant("team-b", "other-route", "other", "2026-11-29T13:00:00Z")
OLD_OTHER = claimant("team-b", "other-route", "other", "2026-11-29T11:00:00Z")
OUR_HTTPROUTE = ("team-a", OUR_TARGET)

HTTPROUTE_CASES = [
    pytest.param(
        [MINE, OTHER],
        [httproute(*T_OTHER, "2026-11-29T13:00:05Z")],
        RoutingReason.MODEL_CLAIMED,
        "team-b/other, which is older",
        id="an older AIGatewayRoute whose HTTPRoute is not made yet does not hold a model another's HTTPRoute serves",
    ),
    pytest.param(
        [MINE, OTHER],
        [httproute(*OUR_HTTPROUTE, "2026-11-29T14:00:00Z"), httproute(*T_OTHER, "2026-11-29T13:00:05Z")],
        RoutingReason.MODEL_CLAIMED,
        "team-b/other",
        id="an HTTPRoute made again after a younger route's does not hold the model",
    ),
    pytest.param(
        [MINE, OLD_OTHER],
        [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"), httproute(*T_OTHER, "2026-11-29T12:00:02Z")],
        RoutingReason.AVAILABLE,
        "",
        id="an older HTTPRoute holds the model though its AIGatewayRoute is younger",
    ),
    pytest.param(
        [MINE, OLD_OTHER],
        [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z")],
        RoutingReason.AVAILABLE,
        "",
        id="an HTTPRoute holds the model against an older AIGatewayRoute that has none",
    ),
    pytest.param(
        [MINE, claimant("team-0", "z-route", "zed", "2026-11-29T13:00:00Z")],
        [
            httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
            httproute("team-0", "zed-0123abcd", "2026-11-29T12:00:01Z"),
        ],
        RoutingReason.MODEL_CLAIMED,
        "team-0/zed",
        id="of two HTTPRoutes made in the same second, the first by namespace holds the model",
    ),
    pytest.param(
        [MINE, claimant("team-a", "a-route", "ay", "2026-11-29T11:00:00Z", target="zz-0123abcd")],
        [
            httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
            httproute("team-a", "zz-0123abcd", "2026-11-29T12:00:01Z"),
        ],
        RoutingReason.AVAILABLE,
        "",
        id="of two HTTPRoutes made in the same second in one namespace, a later name does not hold the model",
    ),
    pytest.param(
        [OTHER],
        [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"), httproute(*T_OTHER, "2026-11-29T13:00:05Z")],
        RoutingReason.AVAILABLE,
        "",
        id="a route whose Object is not listed yet holds the model by its HTTPRoute",
    ),
    pytest.param(
        [claimant("team-b", "b-route", "b", "2026-11-29T13:00:00Z"), OTHER, MINE],
        [
            httproute("team-b", "b-0123abcd", "2026-11-29T15:00:00Z"),
            httproute(*T_OTHER, "2026-11-29T14:00:00Z"),
        ],
        RoutingReason.MODEL_CLAIMED,
        "team-b/other",
        id="of several claimants the one whose HTTPRoute is oldest is named",
    ),
]


def _compose_as_crossplane(listed: list[dict[str, Any]] | None, httproutes: list[dict[str, Any]]) -> Any:
    """Call, fetch what the call asked for, call again: the calls Crossplane makes in one reconcile."""
    required = gw_required(READY_GW)
    if listed is None:
        return compose(XR, ROUTE_INPUT, COMPOSED, required)
    required = {**required, claims.REQUIREMENT: copy.deepcopy(listed)}
    first = compose(XR, ROUTE_INPUT, COMPOSED, required)
    required = fetched(required, first.requirements, httproutes)
    last = compose(XR, ROUTE_INPUT, COMPOSED, required)
    assert last.requirements == first.requirements, "what it asks for is stable once fetched"
    return last


@pytest.mark.parametrize(("listed", "reason", "words"), CASES)
def test_before_any_httproute_the_oldest_aigatewayroute_holds_a_model(
    listed: list[dict[str, Any]] | None, reason: RoutingReason, words: str
) -> None:
    got = said(_compose_as_crossplane(listed, []), "RoutingReady")
    assert got.reason == reason
    assert got.ready is (reason is RoutingReason.AVAILABLE)
    assert words in got.message


@pytest.mark.parametrize(("listed", "httproutes", "reason", "words"), HTTPROUTE_CASES)
def test_the_route_whose_httproute_envoy_gateway_sorts_first_holds_a_model(
    listed: list[dict[str, Any]], httproutes: list[dict[str, Any]], reason: RoutingReason, words: str
) -> None:
    got = said(_compose_as_crossplane(listed, httproutes), "RoutingReady")
    assert got.reason == reason
    assert got.ready is (reason is RoutingReason.AVAILABLE)
    assert words in got.message


@pytest.mark.parametrize(
    "unread",
    [
        pytest.param(
            ("team-b", "other-0123abcd"), id="another claimant's HTTPRoute not read yet: it holds the model"
        ),
    ],
)
def test_a_claim_judged_before_its_httproutes_are_read_fails_closed(unread: tuple[str, str]) -> None:
    # The younger AIGatewayRoute's HTTPRoute is the older: this route would hold the model, once read.
    listed = [MINE, OTHER]
    routes = [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"), httproute(*T_OTHER, "2026-11-29T13:00:05Z")]
    required = {**gw_required(READY_GW), claims.REQUIREMENT: copy.deepcopy(listed)}
    required = fetched(required, compose(XR, ROUTE_INPUT, COMPOSED, required).requirements, routes)
    assert said(compose(XR, ROUTE_INPUT, COMPOSED, required), "RoutingReady").ready
    del required[f"{claims.REQUIREMENT}/{unread[0]}/{unread[1]}"]
    got = said(compose(XR, ROUTE_INPUT, COMPOSED, required), "RoutingReady")
    assert (got.ready, got.reason) == (False, RoutingReason.MODEL_CLAIMED)
    assert "team-b/other" in got.message


def test_a_contested_model_asks_for_every_claimant_s_httproute_by_name_and_an_uncontested_one_for_its_own() -> (
    None
):
    alone = {**gw_required(READY_GW), claims.REQUIREMENT: [copy.deepcopy(MINE)]}
    assert [
        (r.api_version, r.namespace, r.name, r.labels)
        for r in compose(XR, ROUTE_INPUT, COMPOSED, alone).requirements.values()
        if r.kind == "HTTPRoute"
    ] == [("gateway.networking.k8s.io/v1", "team-a", OUR_TARGET, ())]
    contested = {**alone, claims.REQUIREMENT: [copy.deepcopy(OTHER), copy.deepcopy(MINE)]}
    asked = [
        (r.api_version, r.namespace, r.name, r.labels)
        for r in compose(XR, ROUTE_INPUT, COMPOSED, contested).requirements.values()
        if r.kind == "HTTPRoute"
    ]
    assert sorted(asked) == [
        ("gateway.networking.k8s.io/v1", "team-a", OUR_TARGET, ()),
        ("gateway.networking.k8s.io/v1", "team-b", "other-0123abcd", ()),
    ]


def test_the_claim_is_asked_for_by_label_in_every_namespace_and_carried_by_the_route() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    value = claims.claim("platform", "inference", XR["spec"]["model"])
    for key, label in ((claims.REQUIREMENT, claims.LABEL), (claims.ROUTED_REQUIREMENT, claims.ROUTED_LABEL)):
        selector = rsp.requirements[key]
        assert (selector.api_version, selector.kind) == ("kubernetes.m.crossplane.io/v1alpha1", "Object")
        assert dict(selector.labels) == {label: value}
        assert selector.namespace == "", "every namespace"
    route = rsp.resources["route"]
    assert route["metadata"]["labels"] == {claims.LABEL: value}


@pytest.mark.parametrize(
    ("other", "same"),
    [
        pytest.param(
            ("platform", "inference", "m"), True, id="the same model on the same gateway is one claim"
        ),
        pytest.param(("platform", "other", "m"), False, id="the same model on another gateway is another"),
        pytest.param(
            ("platform2", "inference", "m"), False, id="a gateway of the same name elsewhere is another"
        ),
        pytest.param(("platform", "inference", "m2"), False, id="another model is another"),
        pytest.param(("platform", "inferencem", ""), False, id="the parts are kept apart"),
    ],
)
def test_a_claim_names_the_model_on_its_gateway(other: tuple[str, str, str], same: bool) -> None:
    assert (claims.claim("platform", "inference", "m") == claims.claim(*other)) is same
    assert len(claims.claim(*other)) <= 63


def test_a_claim_s_label_value_does_not_change_between_versions() -> None:
    # Routes find each other by this value across an upgrade: a route
    # composed by the previous version still carries its label until its next
    # reconcile. The value in the expected renders, pinned.
    assert claims.claim("platform", "inference", "meta-llama/Llama-3.1-8B-Instruct") == (
        "996c2a1609a7102151e41e9537e8dda7"
    )


def test_one_reconcile_from_nothing_read_asks_for_the_claimants_then_their_httproutes_then_settles() -> None:
    """The calls Crossplane makes: nothing required yet, then what the first asked for, and so on
    until what a call asks for is what it was handed (crossplane v2.4.0 `required_resources.go`)."""
    listed = [copy.deepcopy(MINE), copy.deepcopy(OTHER)]
    routes = [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"), httproute(*T_OTHER, "2026-11-29T13:00:05Z")]
    required: dict[str, Any] = {}
    asked: list[set[str]] = []
    for _ in range(5):
        outcome = compose(XR, ROUTE_INPUT, COMPOSED, required)
        asked.append(set(outcome.requirements))
        if asked[-1] == set(required):
            break
        required = fetched(
            {**gw_required(READY_GW), claims.REQUIREMENT: listed}, outcome.requirements, routes
        )
        required = {key: required.get(key, []) for key in outcome.requirements}
    assert len(asked) == 3, asked
    # Its own HTTPRoute from the first call on; another claimant's once the claimants are listed.
    httproutes = [sorted(k for k in keys if k.startswith(claims.REQUIREMENT + "/")) for keys in asked]
    own, other = claims.httproute_key(OUR_HTTPROUTE), claims.httproute_key(T_OTHER)
    assert httproutes == [[own], sorted([own, other]), sorted([own, other])], httproutes
    # Its HTTPRoute is the older: it holds the model, and is judged on (the key Secret its backend
    # names is not among what this test hands over, so the next check says so).
    assert said(outcome, "RoutingReady").reason is RoutingReason.REFERENCE_NOT_FOUND


def _renamed_from(model: str) -> dict[str, Any]:
    """The route's observed resources while its Object still carries the claim of `model`."""
    observed = copy.deepcopy(COMPOSED)
    observed["route"]["metadata"].setdefault("labels", {})[claims.LABEL] = claims.claim(
        "platform", "inference", model
    )
    return observed


ALL_OURS = ("team-a", OUR_TARGET)
WANT = XR["spec"]["model"]
ELSEWHERE = {**PARENT, "name": "other-gateway"}


def _claimed(routed: str | None) -> dict[str, str]:
    """The labels of the route's Object: its spec's claim, and the claim of `routed`, a model its
    HTTPRoute still routes on the example gateway."""
    labels = {claims.LABEL: claims.claim("platform", "inference", WANT)}
    if routed is not None:
        labels[claims.ROUTED_LABEL] = claims.claim("platform", "inference", routed)
    return labels


@pytest.mark.parametrize(
    ("carried", "routes", "routed_claim", "reason", "words"),
    [
        pytest.param(
            {claims.LABEL: claims.claim("platform", "inference", "old-model")},
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z", "old-model")],
            claims.claim("platform", "inference", "old-model"),
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "its HTTPRoute still routes model old-model on Gateway platform/inference listener http in place of "
            + WANT,
            id="a renamed route whose HTTPRoute still routes the old model also claims that one and is not ready",
        ),
        pytest.param(
            {claims.LABEL: claims.claim("platform", "inference", "old-model")},
            [
                httproute(
                    *ALL_OURS,
                    "2026-11-29T12:00:01Z",
                    "old-model",
                    parent={k: v for k, v in PARENT.items() if k != "sectionName"},
                )
            ],
            claims.claim("platform", "inference", "old-model"),
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "still routes model old-model on Gateway platform/inference in place of",
            id="a renamed route whose HTTPRoute routes the old model on every listener names no listener",
        ),
        pytest.param(
            {claims.LABEL: claims.claim("platform", "inference", "old-model")},
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z")],
            None,
            RoutingReason.AVAILABLE,
            "",
            id="a renamed route whose HTTPRoute routes the new model claims that one only",
        ),
        pytest.param(
            {claims.LABEL: claims.claim("platform", "inference", "old-model")},
            [],
            None,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            NO_HTTPROUTE,
            id="a renamed route with no HTTPRoute routes nothing, and claims the new model only",
        ),
        pytest.param(
            _claimed("old-model"),
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z", "old-model")],
            claims.claim("platform", "inference", "old-model"),
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "still routes model old-model",
            id="a route still routing its old model keeps that claim on the next reconcile",
        ),
        pytest.param(
            _claimed("old-model"),
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z")],
            None,
            RoutingReason.AVAILABLE,
            "",
            id="a route whose HTTPRoute caught up with its spec drops the old claim",
        ),
        pytest.param(
            {claims.LABEL: claims.claim("platform", "inference", "first-model")},
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z", "second-model")],
            claims.claim("platform", "inference", "second-model"),
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "still routes model second-model",
            id="renamed twice, a route claims the model its HTTPRoute routes, not the one its Object carried",
        ),
        pytest.param(
            {claims.LABEL: claims.claim("platform", "elsewhere", WANT)},
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z", parent=ELSEWHERE)],
            claims.claim("platform", "elsewhere", WANT),  # the claim in force before: of the gateway it left
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "on Gateway platform/other-gateway listener http in place of",
            id="a route moved to another gateway keeps the old gateway's claim while its HTTPRoute is there",
        ),
        pytest.param(
            {
                claims.LABEL: claims.claim("platform", "inference", WANT),
                claims.ROUTED_LABEL: claims.claim("platform", "elsewhere", WANT),
            },
            [httproute(*ALL_OURS, "2026-11-29T12:00:01Z", parent=ELSEWHERE)],
            claims.claim("platform", "elsewhere", WANT),
            RoutingReason.ROUTE_NOT_ACCEPTED,
            "on Gateway platform/other-gateway",
            id="a moved route keeps the old gateway's claim on the next reconcile while its HTTPRoute is there",
        ),
        pytest.param(
            {},
            [],
            None,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            NO_HTTPROUTE,
            id="a route whose Object carries no claim yet claims its model",
        ),
    ],
)
def test_a_route_whose_spec_moved_on_keeps_the_claim_its_httproute_still_routes(
    carried: dict[str, str],
    routes: list[dict[str, Any]],
    routed_claim: str | None,
    reason: RoutingReason,
    words: str,
) -> None:
    observed = copy.deepcopy(COMPOSED)
    observed["route"]["metadata"]["labels"] = {"crossplane.io/composite": "llama", **carried}
    required = {
        **gw_required(READY_GW),
        claims.REQUIREMENT: [copy.deepcopy(MINE)],
        claims.ROUTED_REQUIREMENT: [],
    }
    first = compose(XR, ROUTE_INPUT, observed, required)
    asked = [(r.namespace, r.name) for r in first.requirements.values() if r.kind == "HTTPRoute"]
    assert asked == [ALL_OURS]
    last = compose(XR, ROUTE_INPUT, observed, fetched(required, first.requirements, routes))
    assert last.requirements == first.requirements
    expected = {claims.LABEL: claims.claim("platform", "inference", WANT)}
    if routed_claim is not None:
        expected[claims.ROUTED_LABEL] = routed_claim
    assert last.resources["route"]["metadata"]["labels"] == expected
    got = said(last, "RoutingReady")
    assert (got.reason, got.ready) == (reason, reason is RoutingReason.AVAILABLE)
    assert words in got.message


def test_a_renamed_route_whose_httproute_is_not_read_yet_keeps_its_old_claim_and_is_not_ready() -> None:
    observed = copy.deepcopy(COMPOSED)
    observed["route"]["metadata"]["labels"] = {
        claims.LABEL: claims.claim("platform", "inference", "old-model")
    }
    required = {**gw_required(READY_GW), claims.REQUIREMENT: [copy.deepcopy(MINE)]}
    del required[claims.httproute_key(ALL_OURS)]
    got = compose(XR, ROUTE_INPUT, observed, required)
    assert got.resources["route"]["metadata"]["labels"] == _claimed("old-model")
    verdict = said(got, "RoutingReady")
    assert (verdict.reason, verdict.ready) == (RoutingReason.ROUTE_NOT_ACCEPTED, False)
    assert "not read yet" in verdict.message


@pytest.mark.parametrize(
    ("routes_it", "reason"),
    [
        pytest.param(
            WANT,
            RoutingReason.MODEL_CLAIMED,
            id="another route still routing this model holds it by its older HTTPRoute",
        ),
        pytest.param(
            "its-new-model",
            RoutingReason.AVAILABLE,
            id="another route whose HTTPRoute moved to its new model no longer holds this one",
        ),
    ],
)
def test_a_route_found_by_the_model_its_httproute_still_routes(routes_it: str, reason: RoutingReason) -> None:
    # OLD_OTHER renamed its model: it carries this model's claim as the one its HTTPRoute still routes.
    required = {
        **gw_required(READY_GW),
        claims.REQUIREMENT: [copy.deepcopy(MINE)],
        claims.ROUTED_REQUIREMENT: [copy.deepcopy(OLD_OTHER)],
    }
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute(*T_OTHER, "2026-11-29T11:00:00Z", routes_it),
    ]
    first = compose(XR, ROUTE_INPUT, COMPOSED, required)
    got = said(
        compose(XR, ROUTE_INPUT, COMPOSED, fetched(required, first.requirements, routes)), "RoutingReady"
    )
    assert got.reason is reason


def test_an_httproute_on_another_gateway_does_not_hold_the_model_here() -> None:
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute(*T_OTHER, "2026-11-29T11:00:00Z", parent=ELSEWHERE),
    ]
    got = said(_compose_as_crossplane([MINE, OLD_OTHER], routes), "RoutingReady")
    assert (got.reason, got.ready) == (RoutingReason.AVAILABLE, True)


@pytest.mark.parametrize(
    ("allowed", "other", "reason"),
    [
        pytest.param(
            "Same",
            "team-b",
            RoutingReason.AVAILABLE,
            id="with allowedRoutes Same an older claimant in another namespace is refused and holds nothing",
        ),
        pytest.param(
            "All",
            "team-b",
            RoutingReason.MODEL_CLAIMED,
            id="with allowedRoutes All the older claimant holds the model",
        ),
        pytest.param(
            "Same",
            "team-a",
            RoutingReason.MODEL_CLAIMED,
            id="with allowedRoutes Same an older claimant in the gateway's namespace holds the model",
        ),
    ],
)
def test_a_claimant_the_listener_refuses_holds_nothing(
    allowed: str, other: str, reason: RoutingReason
) -> None:
    """Found in review: Envoy Gateway refuses an HTTPRoute from another namespace than a listener with
    allowedRoutes Same admits, and the route in the Gateway's namespace said ModelClaimed while Envoy
    served it alone."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"] |= {"namespace": "team-a", "allowedRoutes": allowed}
    parent = {**PARENT, "namespace": "team-a"}
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z", parent=parent),
        httproute(other, T_OTHER[1], "2026-11-29T11:00:00Z", parent=parent),
    ]
    older = claimant(other, "other-route", "other", "2026-11-29T11:00:00Z")
    required = {**gw_required(gw), claims.REQUIREMENT: [copy.deepcopy(MINE), older]}
    observed = applied(XR, ROUTE_INPUT, COMPOSED, required)
    first = compose(XR, ROUTE_INPUT, observed, required)
    got = said(
        compose(XR, ROUTE_INPUT, observed, fetched(required, first.requirements, routes)), "RoutingReady"
    )
    assert (got.reason, got.ready) == (reason, reason is RoutingReason.AVAILABLE), got.message


def test_an_httproute_that_no_longer_matches_the_model_does_not_hold_it() -> None:
    # The other route's HTTPRoute is the older, but routes another model now: Envoy serves this one.
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute(*T_OTHER, "2026-11-29T11:00:00Z", "another-model"),
    ]
    got = said(_compose_as_crossplane([MINE, OLD_OTHER], routes), "RoutingReady")
    assert (got.reason, got.ready) == (RoutingReason.AVAILABLE, True)
    routes[1] = httproute(*T_OTHER, "2026-11-29T11:00:00Z")
    assert (
        said(_compose_as_crossplane([MINE, OLD_OTHER], routes), "RoutingReady").reason
        is RoutingReason.MODEL_CLAIMED
    )


@pytest.mark.parametrize(
    ("parent", "reason"),
    [
        pytest.param(
            {k: v for k, v in PARENT.items() if k != "namespace"},
            RoutingReason.MODEL_CLAIMED,
            id="a parentRef without a namespace names a Gateway in its HTTPRoute's namespace",
        ),
        pytest.param(
            {**PARENT, "namespace": "team-x"},
            RoutingReason.AVAILABLE,
            id="a parentRef naming another namespace names another Gateway",
        ),
    ],
)
def test_an_httproute_in_the_gateway_s_namespace_routes_through_it(
    parent: dict[str, Any], reason: RoutingReason
) -> None:
    # A route in the gateway's own namespace, older, whose HTTPRoute names its Gateway without a namespace.
    local = claimant("platform", "local-route", "local", "2026-11-29T11:00:00Z")
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute("platform", "local-0123abcd", "2026-11-29T11:00:00Z", parent=parent),
    ]
    assert said(_compose_as_crossplane([MINE, local], routes), "RoutingReady").reason is reason


def test_a_route_applied_from_another_s_yaml_is_told_apart_by_its_aigatewayroute() -> None:
    """Crossplane writes the composite label only where it is empty: a ModelRoute applied from
    llama's YAML under another name carries `crossplane.io/composite: llama` onto its Object. Its
    Object is still another route's (its AIGatewayRoute is named after its own XR), named by the XR
    that controls it."""
    copy_ = claimant("team-a", "copy-route", "llama", "2026-11-29T13:00:00Z", target="copy-0123abcd")
    copy_["metadata"]["ownerReferences"] = [
        {"apiVersion": "ai.example.org/v1alpha1", "kind": "ModelRoute", "name": "copy", "controller": True}
    ]
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute("team-a", "copy-0123abcd", "2026-11-29T11:00:00Z"),
    ]
    got = said(_compose_as_crossplane([MINE, copy_], routes), "RoutingReady")
    assert (got.reason, got.ready) == (RoutingReason.MODEL_CLAIMED, False)
    assert "ModelRoute team-a/copy," in got.message


@pytest.mark.parametrize(
    ("theirs", "reason"),
    [
        pytest.param(
            {**PARENT, "sectionName": "https"},
            RoutingReason.AVAILABLE,
            id="an older HTTPRoute on another listener of the gateway is another virtual host and does not hold it",
        ),
        pytest.param(
            {k: v for k, v in PARENT.items() if k != "sectionName"},
            RoutingReason.MODEL_CLAIMED,
            id="an older HTTPRoute on every listener of the gateway holds it on this one",
        ),
    ],
)
def test_an_httproute_holds_a_model_on_the_listeners_it_attaches_to(
    theirs: dict[str, Any], reason: RoutingReason
) -> None:
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"),
        httproute(*T_OTHER, "2026-11-29T11:00:00Z", parent=theirs),
    ]
    assert said(_compose_as_crossplane([MINE, OLD_OTHER], routes), "RoutingReady").reason is reason


def test_a_contested_route_whose_httproute_is_on_another_listener_is_not_ready() -> None:
    """Its gateway's listener changed, and Envoy AI Gateway has not moved its HTTPRoute yet: Envoy
    routes its model on the listener the gateway no longer publishes."""
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T11:00:00Z", parent={**PARENT, "sectionName": "https"}),
        httproute(*T_OTHER, "2026-11-29T13:00:05Z"),
    ]
    got = said(_compose_as_crossplane([MINE, OTHER], routes), "RoutingReady")
    assert (got.reason, got.ready) == (RoutingReason.ROUTE_NOT_ACCEPTED, False)
    assert "listener https" in got.message


def test_a_route_on_every_listener_is_held_by_an_older_httproute_on_any_one_of_them() -> None:
    """A gateway that publishes no listener: the route attaches to all of them, and on the one the
    older HTTPRoute names, Envoy serves that one (fail closed)."""
    gateway = copy.deepcopy(READY_GW)
    del gateway["status"]["gateway"]["listener"]
    everywhere = {k: v for k, v in PARENT.items() if k != "sectionName"}
    routes = [
        httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z", parent=everywhere),
        httproute(*T_OTHER, "2026-11-29T11:00:00Z", parent={**PARENT, "sectionName": "https"}),
    ]
    required = {**gw_required(gateway), claims.REQUIREMENT: [copy.deepcopy(MINE), copy.deepcopy(OLD_OTHER)]}
    first = compose(XR, ROUTE_INPUT, COMPOSED, required)
    got = said(
        compose(XR, ROUTE_INPUT, COMPOSED, fetched(required, first.requirements, routes)), "RoutingReady"
    )
    assert (got.reason, got.ready) == (RoutingReason.MODEL_CLAIMED, False), got.message


def test_a_claim_judged_before_this_route_s_own_httproute_is_read_fails_closed() -> None:
    """The route's own HTTPRoute is required on every call, so compose judges no claim without it
    (the call repeats what the XR says: tests/test_route_httproute.py); claims.holder, asked
    without it, still lets the other claimant hold the model."""
    me = claims.Claimant(
        target=OUR_HTTPROUTE, gateway=("platform", "inference"), model=XR["spec"]["model"], parent=None
    )
    routes = [httproute(*OUR_HTTPROUTE, "2026-11-29T12:00:01Z"), httproute(*T_OTHER, "2026-11-29T13:00:05Z")]
    required: dict[str, Any] = {claims.REQUIREMENT: [copy.deepcopy(MINE), copy.deepcopy(OTHER)]}
    required |= {
        claims.httproute_key(("team-a", OUR_TARGET)): [routes[0]],
        claims.httproute_key(T_OTHER): [routes[1]],
    }
    assert claims.holder(required, me, admits=lambda _ns: True) is None, "read, this route's is the older"
    del required[claims.httproute_key(("team-a", OUR_TARGET))]
    assert claims.holder(required, me, admits=lambda _ns: True) == "team-b/other"


def test_uncontested_the_claims_ask_for_no_httproute_and_contested_for_the_others_only() -> None:
    """This route's own HTTPRoute is asked for by function/route/httproute.py on every call."""
    me = claims.Claimant(
        target=OUR_HTTPROUTE, gateway=("platform", "inference"), model=XR["spec"]["model"], parent=None
    )
    alone = claims.requirements({claims.REQUIREMENT: [copy.deepcopy(MINE)]}, me)
    assert set(alone) == {claims.REQUIREMENT, claims.ROUTED_REQUIREMENT}
    contested = claims.requirements({claims.REQUIREMENT: [copy.deepcopy(MINE), copy.deepcopy(OTHER)]}, me)
    assert set(contested) == {claims.REQUIREMENT, claims.ROUTED_REQUIREMENT, claims.httproute_key(T_OTHER)}


def test_an_unmoved_route_whose_httproute_is_not_read_yet_carries_its_own_claim_only() -> None:
    """Not read yet, its HTTPRoute is not taken to route anything else unless the spec moved on."""
    required = {**gw_required(READY_GW), claims.REQUIREMENT: [copy.deepcopy(MINE)]}
    del required[claims.httproute_key(OUR_HTTPROUTE)]
    observed = copy.deepcopy(COMPOSED)
    observed["route"]["metadata"]["labels"] = _claimed(None)
    got = compose(XR, ROUTE_INPUT, observed, required)
    assert got.resources["route"]["metadata"]["labels"] == _claimed(None)
