"""Who holds a model name on a gateway: the oldest route claiming it; a younger one says whose it is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import claims
from function.conditions import RoutingReason
from tests.route_support import READY_GW, XR, gw_required
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
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


def _without_manifest(obj: dict[str, Any]) -> dict[str, Any]:
    del obj["spec"]
    return obj


MINE = claimant("team-a", OURS, "llama", "2026-11-29T12:00:00Z", target=OUR_TARGET)

CASES = [
    pytest.param(
        None, RoutingReason.AVAILABLE, "", id="claimants not fetched yet (a first call) judge nothing"
    ),
    pytest.param([MINE], RoutingReason.AVAILABLE, "", id="a route alone with its model holds it"),
    pytest.param(
        [claimant("team-b", "squat-route", "squat", "2026-11-29T11:00:00Z"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "already routed by ModelRoute team-b/squat, which is older",
        id="an older route of the same model on the same gateway holds it, and is named",
    ),
    pytest.param(
        [MINE, claimant("team-b", "late-route", "late", "2026-11-29T13:00:00Z")],
        RoutingReason.AVAILABLE,
        "",
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
        RoutingReason.AVAILABLE,
        "",
        id="the AIGatewayRoutes' own creation times decide, not their Objects'",
    ),
    pytest.param(
        [claimant("team-0", "z-route", "zed", "2026-11-29T12:00:00Z"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-0/zed",
        id="of two created in the same second, the first by namespace holds it, as Envoy Gateway sorts",
    ),
    pytest.param(
        [claimant("team-z", "a-route", "ay", "2026-11-29T12:00:00Z"), MINE],
        RoutingReason.AVAILABLE,
        "",
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
        RoutingReason.AVAILABLE,
        "",
        id="of two created in the same second in one namespace, a later name does not hold it",
    ),
    pytest.param(
        [_without_manifest(claimant("team-z", "a-route", "ay", "2026-11-29T12:00:00Z")), MINE],
        RoutingReason.AVAILABLE,
        "",
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
        RoutingReason.AVAILABLE,
        "",
        id="in the same second, the AIGatewayRoutes' names decide, as Envoy sorts their HTTPRoutes, not the Objects'",
    ),
    pytest.param(
        [claimant("team-a", "zz-route", "zed", "2026-11-29T12:00:00Z", target="a-0123abcd"), MINE],
        RoutingReason.MODEL_CLAIMED,
        "team-a/zed",
        id="in the same second, an AIGatewayRoute named first holds the model whatever its Object is named",
    ),
]


@pytest.mark.parametrize(("listed", "reason", "words"), CASES)
def test_the_oldest_route_of_a_model_holds_it(
    listed: list[dict[str, Any]] | None, reason: RoutingReason, words: str
) -> None:
    required = gw_required(READY_GW)
    if listed is not None:
        required = {**required, claims.REQUIREMENT: copy.deepcopy(listed)}
    got = said(compose(XR, ROUTE_INPUT, COMPOSED, required), "RoutingReady")
    assert got.reason == reason
    assert got.ready is (reason is RoutingReason.AVAILABLE)
    assert words in got.message


def test_the_claim_is_asked_for_by_label_in_every_namespace_and_carried_by_the_route() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    selector = rsp.requirements[claims.REQUIREMENT]
    value = claims.claim("platform", "inference", XR["spec"]["model"])
    assert (selector.api_version, selector.kind) == ("kubernetes.m.crossplane.io/v1alpha1", "Object")
    assert dict(selector.labels) == {claims.LABEL: value}
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
