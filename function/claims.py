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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function import readiness
from function.objects import OBJECT_API_VERSION
from function.outcome import Requirement
from function.upstream import MODEL_HEADER

# The requirement keys under which Crossplane hands us the claimants: by the claim of their spec,
# and by the claim their HTTPRoute still routes after their spec moved on.
REQUIREMENT = "model-claims"
ROUTED_REQUIREMENT = "model-claims-routed"
LABEL = "gatewayreadiness.fn.crossplane.io/model-claim"
ROUTED_LABEL = "gatewayreadiness.fn.crossplane.io/model-claim-routed"
# The label crossplane sets on every composed resource: the XR that composed it.
_COMPOSITE = "crossplane.io/composite"
# What Envoy AI Gateway makes of each AIGatewayRoute, and Envoy Gateway sorts.
HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
HTTPROUTE_KIND = "HTTPRoute"


@dataclass(frozen=True)
class Claimant:
    """This route, as the claims read it."""

    target: tuple[str, str]  # (namespace, AIGatewayRoute), and so of its HTTPRoute
    gateway: tuple[str, str]  # (namespace, InferenceGateway)
    model: str
    # (namespace, Gateway, listener or "" for all) the route attaches to, as its parentRef names it;
    # None while unknown.
    parent: tuple[str, str, str] | None

    @property
    def value(self) -> str:
        return claim(*self.gateway, self.model)


def claim(gateway_namespace: str, gateway_name: str, model: str) -> str:
    """The label value of a model on a gateway: a digest, since model names exceed label limits."""
    parts = "\x00".join((gateway_namespace, gateway_name, model))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


def requirement(value: str, key: str = LABEL) -> Requirement:
    """Every Object, in every namespace, of an AIGatewayRoute claiming the same model on the same
    gateway by `key`: by its spec (LABEL), or by what its HTTPRoute still routes (ROUTED_LABEL)."""
    return Requirement(
        api_version=OBJECT_API_VERSION, kind="Object", name="", namespace="", labels=((key, value),)
    )


def _target(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a claimant's AIGatewayRoute, and so of its HTTPRoute: from the Object's
    manifest, never the Object's own name (`llama-b-route-...` sorts before `llama-route-...`, where
    Envoy sorts `llama-...` before `llama-b-...`: found in review)."""
    meta = obj.get("metadata") or {}
    named = readiness.get_path(obj, "spec", "forProvider", "manifest", "metadata")
    if not isinstance(named, Mapping):  # an Object without its manifest: its own names, as before
        named = meta
    # A namespaced Object's target lives in the Object's namespace: the route composes both there.
    return str(meta.get("namespace")), str(named.get("name"))


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
    """(namespace, ModelRoute) of a claimant, to name it: the XR that controls its Object, else the
    XR its composite label names (which Crossplane writes only where it is empty, so a ModelRoute
    applied from another's YAML carries the other's: found in review)."""
    meta = obj.get("metadata") or {}
    owner = [ref for ref in meta.get("ownerReferences") or () if ref.get("controller")]
    name = owner[0].get("name") if owner else (meta.get("labels") or {}).get(_COMPOSITE)
    return str(meta.get("namespace")), str(name)


def httproute_key(target: tuple[str, str]) -> str:
    """The requirement key of the HTTPRoute of the AIGatewayRoute `target` (Kubernetes names hold
    no "/", so the key names one HTTPRoute)."""
    return f"{REQUIREMENT}/{target[0]}/{target[1]}"


def httproute_requirement(target: tuple[str, str]) -> Requirement:
    """The HTTPRoute Envoy AI Gateway makes of the AIGatewayRoute `target`, by name: its name."""
    return Requirement(
        api_version=HTTPROUTE_API_VERSION, kind=HTTPROUTE_KIND, name=target[1], namespace=target[0]
    )


@dataclass(frozen=True)
class Applied:
    """The claims a route's observed Object carries now: of its spec, and (after its spec moved on)
    of what its HTTPRoute still routes. None where it carries none (before it exists)."""

    claim: Any
    routed: Any

    @classmethod
    def of(cls, route_object: Mapping[str, Any] | None) -> Applied:
        labels = readiness.get_path(route_object, "metadata", "labels")
        labels = labels if isinstance(labels, Mapping) else {}
        return cls(labels.get(LABEL), labels.get(ROUTED_LABEL))

    def moved(self, me: Claimant) -> bool:
        """The spec moved on from the claim applied, or the HTTPRoute had not followed it yet."""
        return (isinstance(self.claim, str) and self.claim != me.value) or isinstance(self.routed, str)

    def previous(self) -> str:
        """The claim in force before the spec moved on."""
        return str(self.routed) if isinstance(self.routed, str) else str(self.claim)


def _routed(httproute: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    """(namespace, Gateway, listener or "" for all, model) of each model an HTTPRoute routes where it
    attaches: Envoy AI Gateway copies the parentRefs and the model header matches of its
    AIGatewayRoute (v1.1.0 `newHTTPRoute`), as this function writes them. The HTTPRoute CRD's schema
    makes each parentRef, rule, match and header an object."""
    namespace = str(readiness.get_path(httproute, "metadata", "namespace"))
    parents = [
        (str(ref.get("namespace") or namespace), str(ref.get("name")), str(ref.get("sectionName") or ""))
        for ref in readiness.get_path(httproute, "spec", "parentRefs") or ()
    ]
    models = {
        str(header.get("value"))
        for rule in readiness.get_path(httproute, "spec", "rules") or ()
        for match in rule.get("matches") or ()
        for header in match.get("headers") or ()
        if header.get("name") == MODEL_HEADER
    }
    return {(*parent, model) for parent in parents for model in models}


def _routes(found: Sequence[Mapping[str, Any]], me: Claimant) -> bool:
    """The HTTPRoute found routes this route's model on a listener it attaches to: a listener of
    another parentRef is another virtual host (Envoy serves both), none names them all."""
    if not found or me.parent is None:
        return False
    namespace, gateway, listener = me.parent
    return any(
        (ns, gw, model) == (namespace, gateway, me.model)
        and (not section or not listener or section == listener)
        for ns, gw, section, model in _routed(found[0])
    )


# still_routed's answer while the route's own HTTPRoute is not read yet.
UNREAD = ("", "", "", "")


def still_routed(
    required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, applied: Applied
) -> tuple[str, str, str, str] | None:
    """(namespace, Gateway, listener, model) this route's HTTPRoute routes in place of its own, where
    it was read (after the route's model or gateway changed, or while the model is contested);
    UNREAD where it changed and its HTTPRoute is not read yet; None where it routes this route's
    own, or nothing at all, or was not read and nothing changed.

    Until Envoy AI Gateway makes the HTTPRoute of the new spec (never, while an
    AIServiceBackend the route names is missing: `newHTTPRoute` fails and the
    HTTPRoute is left as it was), Envoy routes the old model here, and not the
    new one; found in review.
    """
    found = required.get(httproute_key(me.target))
    if found is None:
        return UNREAD if applied.moved(me) else None
    routed = _routed(found[0]) if found else set()
    if not routed or _routes(found, me):
        return None
    return min(routed)


def labels(
    required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, applied: Applied
) -> dict[str, str]:
    """The claims this route's Object carries: its spec's, and while its HTTPRoute still routes
    something else, that one's, so that routes of the old model go on finding it until Envoy stops
    routing that model here (of a Gateway it no longer attaches to, the claim in force before)."""
    carried = {LABEL: me.value}
    old = still_routed(required, me, applied)
    if old is not None:
        same_gateway = me.parent is not None and old[:2] == me.parent[:2]  # never so while UNREAD
        carried[ROUTED_LABEL] = claim(*me.gateway, old[3]) if same_gateway else applied.previous()
    return carried


def _contenders(
    required: Mapping[str, Sequence[Mapping[str, Any]]], target: tuple[str, str]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(the other claimants, this route's own Objects) as Crossplane listed them, by either label:
    its own are those of its AIGatewayRoute, named after it, whatever labels a copy carries."""
    # A route carrying both labels with one value (moved away and back) is listed twice: harmless.
    listed = [*required.get(REQUIREMENT, ()), *required.get(ROUTED_REQUIREMENT, ())]
    others = [o for o in listed if _target(o) != target]
    mine = [o for o in listed if _target(o) == target]
    return others, mine


def requirements(required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant) -> dict[str, Requirement]:
    """The claimants, by either label in every namespace, and while another route claims the model,
    each other claimant's HTTPRoute by name. This route's own is required on every call beside
    them, under the same key (function/route/httproute.py): one read serves both. Uncontested,
    nothing more is read: no other HTTPRoute for a gateway of distinct models."""
    wanted = {
        REQUIREMENT: requirement(me.value),
        ROUTED_REQUIREMENT: requirement(me.value, ROUTED_LABEL),
    }
    others, _ = _contenders(required, me.target)
    for target in map(_target, others):
        wanted[httproute_key(target)] = httproute_requirement(target)
    return wanted


def holder(
    required: Mapping[str, Sequence[Mapping[str, Any]]], me: Claimant, *, admits: Callable[[str], bool]
) -> str | None:
    """`<namespace>/<ModelRoute>` of a route whose HTTPRoute Envoy Gateway sorts before this
    route's, or None. `admits` says whether the listener takes routes from a namespace: Envoy
    Gateway refuses an HTTPRoute from any other (NotAllowedByListeners, v1.8.3
    `processAllowedListenersForParentRefs`), so a claimant there holds nothing, however old
    (found in review: the route in the Gateway's namespace said ModelClaimed while Envoy served
    it alone).

    None too when Crossplane has not fetched the claimants yet (the first call
    of a reconcile), so nothing is judged on what was not read. An HTTPRoute
    counts only while it matches the model; a route with none yet sorts after
    every route that has one: Envoy serves it nothing until then. A claimant
    whose HTTPRoute was asked for and not yet read (a call Crossplane repeats
    with it) holds the model: fail closed.
    """
    if REQUIREMENT not in required:
        return None
    others, mine = _contenders(required, me.target)
    others = [o for o in others if admits(_target(o)[0])]
    if not others:
        return None

    def order(target: tuple[str, str], objects: Sequence[Mapping[str, Any]]) -> tuple[Any, ...] | None:
        found = required.get(httproute_key(target))
        if found is None:
            return None
        if _routes(found, me):
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
