"""Who holds a model name on a gateway: the route whose HTTPRoute Envoy Gateway sorts first.

Nothing upstream refuses two AIGatewayRoutes matching the same model header on
one Gateway. Envoy serves only one of two identical matches, the first
HTTPRoute as Envoy Gateway sorts them (v1.8.3 `internal/gatewayapi/resource/
resource.go`, `Sort`: creation time, then namespace and name), `/v1/models`
lists the name twice, and both routes say Accepted: whoever sorts first gets
the other team's prompts.

Each ModelRoute labels the Object of its AIGatewayRoute with a digest of
(gateway, model), and requires every Object carrying the same label, in every
namespace: one list per call, served from Crossplane's cache. While another
route claims the model, it also requires each claimant's HTTPRoute by name
(Envoy AI Gateway names it after the AIGatewayRoute, in its namespace: v1.1.0
`ai_gateway_route.go`, `syncAIGatewayRoute`), since the HTTPRoutes' ages are
what Envoy Gateway sorts, and they need not follow the AIGatewayRoutes':
Envoy AI Gateway makes an HTTPRoute only once every AIServiceBackend its
AIGatewayRoute names exists (`newHTTPRoute`), and makes it again, younger, when
it is deleted. The route whose HTTPRoute sorts first holds the name; any other
is not serving, and says which route holds it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function import readiness
from function.objects import OBJECT_API_VERSION
from function.outcome import Requirement
from function.upstream import MODEL_HEADER

# The requirement key under which Crossplane hands us the claimants.
REQUIREMENT = "model-claims"
LABEL = "gatewayreadiness.fn.crossplane.io/model-claim"
# The label crossplane sets on every composed resource: the XR that composed it.
_COMPOSITE = "crossplane.io/composite"
# What Envoy AI Gateway makes of each AIGatewayRoute, and Envoy Gateway sorts.
HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
HTTPROUTE_KIND = "HTTPRoute"


@dataclass(frozen=True)
class Claimant:
    """This route, as the claims read it."""

    route: tuple[str, str]  # (namespace, ModelRoute)
    target: tuple[str, str]  # (namespace, AIGatewayRoute), and so of its HTTPRoute
    gateway: tuple[str, str]  # (namespace, InferenceGateway)
    model: str

    @property
    def value(self) -> str:
        return claim(*self.gateway, self.model)


def claim(gateway_namespace: str, gateway_name: str, model: str) -> str:
    """The label value of a model on a gateway: a digest, since model names exceed label limits."""
    parts = "\x00".join((gateway_namespace, gateway_name, model))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


def requirement(value: str) -> Requirement:
    """Every Object, in every namespace, of an AIGatewayRoute claiming the same model on the same gateway."""
    return Requirement(
        api_version=OBJECT_API_VERSION, kind="Object", name="", namespace="", labels=((LABEL, value),)
    )


def _target(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a claimant's AIGatewayRoute, and so of its HTTPRoute: from the Object's
    manifest, never the Object's own name (`llama-b-route-...` sorts before `llama-route-...`, where
    Envoy sorts `llama-...` before `llama-b-...`: found in review)."""
    meta = obj.get("metadata") or {}
    named = readiness.get_path(obj, "spec", "forProvider", "manifest", "metadata")
    if not isinstance(named, Mapping):  # an Object without its manifest: its own names, as before
        named = meta
    # A namespaced Object's manifest lives in the Object's namespace where it names none.
    return str(named.get("namespace") or meta.get("namespace")), str(named.get("name"))


def _age(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """A claimant with no HTTPRoute yet, as Envoy Gateway will sort it once it has one: by its
    AIGatewayRoute's creation time where the Object observed it, else the Object's (the API server
    always sets it), then namespace and name."""
    target = readiness.get_path(readiness.observed_manifest(obj), "metadata", "creationTimestamp")
    stamp = (
        target if isinstance(target, str) else str(readiness.get_path(obj, "metadata", "creationTimestamp"))
    )
    return (stamp, *_target(obj))


def _route(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, ModelRoute) of a claimant: Crossplane labels every composed resource with its XR."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return str(meta.get("namespace")), str(labels.get(_COMPOSITE))


def _httproute_key(target: tuple[str, str]) -> str:
    # Kubernetes names hold no "/", so the key names one HTTPRoute.
    return f"{REQUIREMENT}/{target[0]}/{target[1]}"


def applied(route_object: Mapping[str, Any] | None) -> Any:
    """The claim a route's observed Object carries now (None before it exists)."""
    return readiness.get_path(route_object, "metadata", "labels", LABEL)


def _served(httproute: Mapping[str, Any]) -> set[str]:
    """The models an HTTPRoute matches: the model header Envoy AI Gateway copies from its
    AIGatewayRoute's rules (v1.1.0 `newHTTPRoute`), as this function writes it. The HTTPRoute CRD's
    schema makes each rule, match and header an object."""
    return {
        str(header.get("value"))
        for rule in readiness.get_path(httproute, "spec", "rules") or ()
        for match in rule.get("matches") or ()
        for header in match.get("headers") or ()
        if header.get("name") == MODEL_HEADER
    }


def _serves(found: Sequence[Mapping[str, Any]], model: str) -> bool:
    return bool(found) and model in _served(found[0])


def still_routed(
    required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, applied: Any
) -> str | None:
    """After this route's model changed: the model its HTTPRoute still routes in its place ("" while
    that HTTPRoute is not read yet), or None once it routes this one, or none at all.

    `applied` is the claim its Object carries now. Until Envoy AI Gateway
    makes the HTTPRoute of the new spec (never, while an AIServiceBackend the
    route names is missing: `newHTTPRoute` fails and the HTTPRoute is left as
    it was), Envoy routes the old model here; found in review.
    """
    if not isinstance(applied, str) or applied == me.value:
        return None
    found = required.get(_httproute_key(me.target))
    if found is None:
        return ""
    served = _served(found[0]) if found else set()
    if not served or me.model in served:
        return None
    return min(served)


def label(required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, applied: Any) -> str:
    """The claim this route's Object carries: of the model its HTTPRoute still routes after a rename,
    so that routes of that model go on finding it until Envoy stops routing it here; else its own."""
    old = still_routed(required, me, applied)
    if old is None:
        return me.value
    return claim(*me.gateway, old) if old else str(applied)


def _contenders(
    required: Mapping[str, Sequence[Mapping[str, Any]]], ours: tuple[str, str]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(the other claimants, this route's own Objects) as Crossplane listed them."""
    listed = required.get(REQUIREMENT, ())
    others = [o for o in listed if _route(o) != ours]
    mine = [o for o in listed if _route(o) == ours]
    return others, mine


def requirements(
    required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, applied: Any
) -> dict[str, Requirement]:
    """The claimants, by label in every namespace; while another route claims the model, each
    claimant's HTTPRoute by name, this route's own included; after this route's model changed, its
    own. Uncontested and unchanged, nothing more is read: no HTTPRoute for a gateway of distinct
    models."""
    wanted = {REQUIREMENT: requirement(me.value)}
    others, _ = _contenders(required, me.route)
    renamed = isinstance(applied, str) and applied != me.value
    for target in [me.target, *map(_target, others)] if others or renamed else []:
        wanted[_httproute_key(target)] = Requirement(
            api_version=HTTPROUTE_API_VERSION, kind=HTTPROUTE_KIND, name=target[1], namespace=target[0]
        )
    return wanted


def holder(required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant) -> str | None:
    """`<namespace>/<ModelRoute>` of a route whose HTTPRoute Envoy Gateway sorts before this
    route's, or None.

    None too when Crossplane has not fetched the claimants yet (the first call
    of a reconcile), so nothing is judged on what was not read. An HTTPRoute
    counts only while it matches the model; a route with none yet sorts after
    every route that has one: Envoy serves it nothing until then. A claimant
    whose HTTPRoute was asked for and not yet read (a call Crossplane repeats
    with it) holds the model: fail closed.
    """
    if REQUIREMENT not in required:
        return None
    others, mine = _contenders(required, me.route)
    if not others:
        return None

    def order(target: tuple[str, str], objects: Sequence[Mapping[str, Any]]) -> tuple[Any, ...] | None:
        found = required.get(_httproute_key(target))
        if found is None:
            return None
        if _serves(found, me.model):
            return (0, str(readiness.get_path(found[0], "metadata", "creationTimestamp")), *target)
        if objects:
            return (1, *_age(objects[0]))
        return (2,)  # no Object either: created after every claimant there is

    ranked = [(rank, o) for o in others if (rank := order(_target(o), [o])) is not None]
    mine_rank = order(me.target, mine)
    if len(ranked) < len(others) or mine_rank is None:  # not all read: the oldest by what was
        return "/".join(_route(min(others, key=_age)))
    _, first = min([*ranked, (mine_rank, None)], key=lambda pair: pair[0])
    return None if first is None else "/".join(_route(first))
