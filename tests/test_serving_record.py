"""Which serving records a route trusts: only one its gateway's XR controls (function/serving_record.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import readiness
from tests.support import EXAMPLES, controller_reference, load_yaml

GATEWAY = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")[0]
CROSSPLANE_S = controller_reference(GATEWAY)


def _owned_by(*owners: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"ownerReferences": list(owners)}}


def _changed(**changes: Any) -> dict[str, Any]:
    owner = copy.deepcopy(CROSSPLANE_S)
    owner.update(changes)
    return owner


@pytest.mark.parametrize(
    ("record", "trusted"),
    [
        (_owned_by(CROSSPLANE_S), True),
        (_owned_by(_changed(apiVersion="ai.example.org/v0-never-served")), False),
        (_owned_by({"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}, CROSSPLANE_S), True),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inference-serving-7229af9e"}},
            False,
        ),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, False),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "inference"}, False),
        (_owned_by(), False),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"ownerReferences": CROSSPLANE_S}}, False),
        (_owned_by(_changed(controller=False)), False),
        (_owned_by({k: v for k, v in CROSSPLANE_S.items() if k != "controller"}), False),
        (_owned_by(_changed(controller="true")), False),
        (_owned_by(_changed(kind="ModelRoute")), False),
        (_owned_by(_changed(name="another")), False),
        (_owned_by(_changed(apiVersion="evil.example.org/v1alpha1")), False),
        (_owned_by(_changed(apiVersion="v1")), False),
        (_owned_by(_changed(apiVersion=None)), False),
        (_owned_by("InferenceGateway/inference"), False),
    ],
    ids=[
        "the reference Crossplane writes is trusted",
        "a controller at a version of the group the route does not name is not trusted",
        "the controller is found among other owners",
        "a record with no owners is not trusted",
        "a record with no metadata is not trusted",
        "a record whose metadata is not a mapping is not trusted",
        "a record with an empty list of owners is not trusted",
        "owners that are not a list are not trusted",
        "an owner that is not the controller is not trusted",
        "an owner that does not say it is the controller is not trusted",
        "a controller flag that is a string is not trusted",
        "a controller of another kind is not trusted",
        "a controller of another name is not trusted",
        "a controller in another API group is not trusted",
        "a controller in the core group is not trusted",
        "a controller without an apiVersion is not trusted",
        "an owner that is not a mapping is not trusted",
    ],
)
def test_a_record_is_trusted_only_when_its_controller_is_the_named_gateway(
    record: dict[str, Any], trusted: bool
) -> None:
    assert (
        readiness.controlled_by(record, "ai.example.org/v1alpha1", "InferenceGateway", "inference") is trusted
    )
