"""provider-kubernetes Objects: the envelope every composed manifest travels in.

A namespaced XR composes only namespaced resources in its own namespace, so
everything is a `kubernetes.m.crossplane.io/v1alpha1` Object; the manifest
inside names its own target namespace (the Gateway's, Envoy Gateway's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from function.api import ProviderConfigRef
from function.readiness import get_path

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"


class Policy(StrEnum):
    """The provider's readiness policies that this function uses."""

    SUCCESSFUL_CREATE = "SuccessfulCreate"
    CEL = "DeriveFromCelQuery"


def wrap(
    *,
    name: str,
    namespace: str,
    manifest: dict[str, Any],
    provider_config: ProviderConfigRef,
    cel_query: str | None = None,
    observe_only: bool = False,
) -> dict[str, Any]:
    """An Object managing (or, observe-only, observing) one manifest.

    An Object whose readiness is derived from its target (a CEL query) is
    watched: its status feeds a condition, and without a watch the provider
    re-reads a Ready Object only every --poll (10 minutes by default), so a
    route that stops being Accepted would stay RoutingReady for that long.
    With --enable-watches the provider re-reads it on every change of the
    target instead (one cluster-wide informer per kind and ProviderConfig).
    Objects with SuccessfulCreate readiness feed no condition and are not
    watched: a watch there would only cost an informer.
    """
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": provider_config.kind, "name": provider_config.name},
    }
    if cel_query is None:
        spec["readiness"] = {"policy": Policy.SUCCESSFUL_CREATE.value}
    else:
        spec["readiness"] = {"policy": Policy.CEL.value, "celQuery": cel_query}
        spec["watch"] = True
    if observe_only:
        # Observe never creates, updates or deletes the target: it belongs to
        # someone else (Envoy Gateway's Deployment, the InferenceGateway).
        spec["managementPolicies"] = ["Observe"]
    return {
        "apiVersion": OBJECT_API_VERSION,
        "kind": "Object",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def plan_basis(
    xr: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]], now: datetime | None
) -> dict[str, Any]:
    """What every composer's plan starts from: the XR's name and namespace, the call's clock, held targets.

    Crossplane always sends the XR's name and namespace (the XRs are
    namespaced); "" stands in for neither ever being missing.
    """
    metadata = xr.get("metadata") or {}
    return {
        "xr_name": str(metadata.get("name", "")),
        "xr_namespace": str(metadata.get("namespace", "")),
        "now": now or datetime.now(UTC),
        "held": held_targets(observed),
    }


def target_ref(api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The identifying part of a manifest."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
    }


def gateway_ref(name: str, *, namespace: str | None = None, section: str | None = None) -> dict[str, Any]:
    """A Gateway API Gateway as a route's parentRef or a policy's targetRef: in `namespace` when it is
    another than the referrer's, on one listener (`section`) or all of them."""
    ref: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    if namespace is not None:
        ref["namespace"] = namespace
    if section is not None:
        ref["sectionName"] = section
    return ref


@dataclass(frozen=True)
class Target:
    """Where an existing Object's manifest points."""

    namespace: str
    name: str


def held_targets(observed: Mapping[str, Mapping[str, Any]]) -> dict[str, Target]:
    """composition-resource-name -> the target each observed, managing Object holds.

    provider-kubernetes applies a manifest whose name (or namespace) changed
    inside an existing Object as a new target and never deletes the old one:
    the old one lives on, unowned, and keeps serving (an older AIGatewayRoute
    wins over a younger one of the same model, so deleting the ModelRoute
    would leave its model routed). So a target, once created, keeps its name
    for the life of its Object: the composers name what they compose from
    this, and only what no Object holds yet gets the name this version
    derives. Observe-only Objects create nothing and follow the desired name.
    """
    held = {}
    for key, obj in observed.items():
        # Whatever shape the field has (a hostile or broken Object), never a crash.
        if get_path(obj, "spec", "managementPolicies") == ["Observe"]:
            continue
        name = get_path(obj, "spec", "forProvider", "manifest", "metadata", "name")
        namespace = get_path(obj, "spec", "forProvider", "manifest", "metadata", "namespace")
        if isinstance(name, str) and name:
            held[key] = Target(namespace=namespace if isinstance(namespace, str) else "", name=name)
    return held


def held_name(held: Mapping[str, Target], key: str, derived: str) -> str:
    """The name the Object `key` already holds, else the one this version derives."""
    target = held.get(key)
    return target.name if target is not None else derived
