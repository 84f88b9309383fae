"""Who holds a model name on a gateway: the oldest ModelRoute that routes it.

Nothing upstream refuses two AIGatewayRoutes matching the same model header on
one Gateway. Envoy serves only one of two identical matches, the oldest
HTTPRoute's (Envoy Gateway v1.8.1 sorts routes by creation time, then
namespace and name: `internal/gatewayapi/resource/sort.go`), `/v1/models`
lists the name twice, and both routes say Accepted: whoever is older gets the
other team's prompts.

Each ModelRoute labels the Object of its AIGatewayRoute with a digest of
(gateway, model), and requires every Object carrying the same label, in every
namespace. The route whose AIGatewayRoute is oldest holds the name; any other
is not serving, and says which route holds it. One list per call, served from
Crossplane's cache, whatever the number of routes on the gateway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from function import readiness
from function.objects import OBJECT_API_VERSION
from function.outcome import Requirement

# The requirement key under which Crossplane hands us the claimants.
REQUIREMENT = "model-claims"
LABEL = "gatewayreadiness.fn.crossplane.io/model-claim"
# The label crossplane sets on every composed resource: the XR that composed it.
_COMPOSITE = "crossplane.io/composite"


def claim(gateway_namespace: str, gateway_name: str, model: str) -> str:
    """The label value of a model on a gateway: a digest, since model names exceed label limits."""
    parts = "\x00".join((gateway_namespace, gateway_name, model))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


def requirement(value: str) -> Requirement:
    """Every Object, in every namespace, of an AIGatewayRoute claiming the same model on the same gateway."""
    return Requirement(
        api_version=OBJECT_API_VERSION, kind="Object", name="", namespace="", labels=((LABEL, value),)
    )


def _age(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """How Envoy Gateway orders identical matches: the HTTPRoute's creation time, then its namespace
    and name (v1.8.3 `internal/gatewayapi/resource/resource.go`).

    Envoy AI Gateway names the HTTPRoute after the AIGatewayRoute and writes it
    right after it, so the AIGatewayRoute's own stamp where the Object observed
    it, else the Object's, which the API server always sets; the AIGatewayRoute's
    namespace and name from the Object's manifest, never the Object's own name,
    which sorts differently (`llama-b-route-...` before `llama-route-...`, where
    Envoy sorts `llama-...` before `llama-b-...`: found in review).
    """
    target = readiness.get_path(readiness.observed_manifest(obj), "metadata", "creationTimestamp")
    stamp = (
        target if isinstance(target, str) else str(readiness.get_path(obj, "metadata", "creationTimestamp"))
    )
    named = readiness.get_path(obj, "spec", "forProvider", "manifest", "metadata")
    if not isinstance(named, Mapping):  # an Object without its manifest: its own names, as before
        named = obj.get("metadata") or {}
    return stamp, str(named.get("namespace")), str(named.get("name"))


def _route(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, ModelRoute) of a claimant: Crossplane labels every composed resource with its XR."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return str(meta.get("namespace")), str(labels.get(_COMPOSITE))


def holder(required: Mapping[str, Sequence[Mapping[str, Any]]], namespace: str, xr_name: str) -> str | None:
    """`<namespace>/<ModelRoute>` of an older route holding this route's model, or None.

    None too when Crossplane has not fetched the claimants yet (the first call
    of a reconcile), so nothing is judged on what was not read. A route whose
    own Object does not exist yet is younger than every claimant there is.
    """
    if REQUIREMENT not in required:
        return None
    ours = (namespace, xr_name)
    listed = required[REQUIREMENT]
    others = [o for o in listed if _route(o) != ours]
    if not others:
        return None
    oldest = min(others, key=_age)
    mine = [o for o in listed if _route(o) == ours]
    if mine and _age(mine[0]) < _age(oldest):
        return None
    return "/".join(_route(oldest))
