"""Whether the HTTPRoute Envoy AI Gateway made of this route is of the route's current spec.

Envoy routes by the HTTPRoute, not by the AIGatewayRoute. Envoy AI Gateway
rewrites the HTTPRoute from the AIGatewayRoute's spec on every reconcile and
then restamps Accepted (v1.1.0 `ai_gateway_route.go`: `syncAIGatewayRoute`,
`newHTTPRoute`; `controller.go`: reconciles on a generation change only). Its
conditions carry no observedGeneration, so while its controller does not run
(down, hung, or never elected), an AIGatewayRoute whose spec changed keeps the
Accepted of the spec before, and only the HTTPRoute tells. A backend taken out
of a route goes on getting its share of the requests, which fail once its
server is shut down (make integration's `backend_removed_while_ai_gateway_stopped`:
while Envoy AI Gateway's extension server hangs, Envoy Gateway's translation
waits on it, and Envoy's configuration stays as it was).

Its spec is compared with the route's only while it can disagree: from a write
of the route's spec until Envoy AI Gateway stamps Accepted in a later second (a
stamp in the write's own second may be of the reconcile before it).

The HTTPRoute is read on every call all the same, for what Envoy Gateway says of
it: while Envoy Gateway's controller is down, Envoy AI Gateway (up) rewrites the
HTTPRoute of a changed route and stamps the AIGatewayRoute Accepted, and
nothing translates the HTTPRoute for Envoy, which routes the spec before (a
model renamed: its requests answered 404 while every status said Accepted).
Envoy Gateway stamps the generation it translated on each parent's conditions
(v1.8.3 `status/route.go`, `SetRouteStatusCondition`), so only an Accepted of
the HTTPRoute's current generation, for the route's Gateway, says Envoy has it
(found in review). Nothing but the HTTPRoute itself can say so, whenever Envoy
Gateway went down: one more object from Crossplane's cache a call, and a watch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from function import claims, readiness
from function.outcome import Requirement
from function.route.plan import ROUTE, SERVICE_BACKEND_PREFIX
from function.upstream import ACCEPTED

# Envoy AI Gateway writes each backend reference's rule index, AIServiceBackend
# name and priority here on every rewrite (v1.0.0 and v1.1.0
# `buildPriorityAnnotation`): the one field of the HTTPRoute that names the
# AIServiceBackends themselves.
PRIORITY_ANNOTATION = "gateway.envoyproxy.io/backend-ref-priority"
# The rule Envoy AI Gateway appends to every HTTPRoute it makes: a 404 for no match.
_NOT_FOUND_RULE = "route-not-found"
# What it writes for a rule without a request timeout (v1.0.0 and v1.1.0 `defaultRequestTimeout`).
_DEFAULT_REQUEST_TIMEOUT = "60s"


def unanswered(route: Mapping[str, Any] | None) -> bool:
    """The route's spec was written, and Envoy AI Gateway has stamped no Accepted in a later second."""
    written = readiness.spec_written_at(route)
    if written is None:
        return False
    stamp = readiness.condition_time(route, ACCEPTED)
    return stamp is None or stamp <= written


@dataclass(frozen=True)
class Reading:
    """The route's HTTPRoute as one call knows it, judged once for the requirements, the verdict and
    the configuration's hold."""

    # The AIGatewayRoute (namespace, name), and so its HTTPRoute's.
    target: tuple[str, str]
    # Whether the spec is unanswered: only then is the HTTPRoute compared with it.
    unanswered: bool
    # What Crossplane handed for the requirement: None before it was read, empty where there is none.
    found: Sequence[Mapping[str, Any]] | None

    @classmethod
    def of(
        cls,
        target: tuple[str, str],
        route: Mapping[str, Any] | None,
        required: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> Reading:
        """`route` is the route's observed Object; `required` what Crossplane fetched for this call."""
        return cls(target, unanswered(route), required.get(claims.httproute_key(target)))

    def requirements(self) -> dict[str, Requirement]:
        """The HTTPRoute by name (the claims' own key: one read serves both), on every call."""
        return {claims.httproute_key(self.target): claims.httproute_requirement(self.target)}

    @property
    def read(self) -> bool:
        """Crossplane has fetched the HTTPRoute for this call (found or not)."""
        return self.found is not None

    def untranslated(self, gateway: tuple[str, str]) -> str | None:
        """Why Envoy does not route the HTTPRoute as it is now on the Gateway (namespace, name): no
        HTTPRoute, or Envoy Gateway has not accepted its current generation there; None where it has.

        Judged per parentRef of the HTTPRoute's spec that names the Gateway, by the status entries
        of that very parentRef. Envoy Gateway keeps every entry its new status does not hold
        (v1.8.3 `mergeRouteParentStatus`, whatever the controller): after a listener rename, the
        entry of the old sectionName stays, Accepted of a generation long gone (found in review).
        Of several entries of one parentRef (another controller's too), one Accepted of the
        current generation is enough.
        """
        if not self.found:
            return _missing(self.found)
        made = self.found[0]
        if readiness.being_deleted(made):
            return "its HTTPRoute is being deleted"
        namespace = readiness.get_path(made, "metadata", "namespace")
        where = f"Gateway {gateway[0]}/{gateway[1]}"
        refs = [
            key
            for ref in readiness.list_at(made, "spec", "parentRefs")
            if (key := _parent_key(ref, namespace)) is not None and key[:4] == (*_GATEWAY_KIND, *gateway)
        ]
        if not refs:
            return f"its HTTPRoute names no parent on {where}"
        entries = [
            (_parent_key(p.get("parentRef"), namespace), p)
            for p in readiness.list_at(made, "status", "parents")
            if isinstance(p, Mapping)
        ]
        for ref in refs:
            why = _not_accepted(made, [p for key, p in entries if key == ref], where)
            if why is not None:
                return why
        return None

    def not_in_effect(self, composed: Mapping[str, Mapping[str, Any]]) -> str | None:
        """Why Envoy does not route the spec this call composes yet, while the route is unanswered;
        None where nothing says so."""
        return differences(self.found, composed) if self.unanswered else None

    @property
    def last_written(self) -> datetime | None:
        """The later of `made_at` and `translated_at`: when configuration for the route was last
        written as the HTTPRoute says it."""
        stamps = [t for t in (self.made_at, self.translated_at) if t is not None]
        return max(stamps) if stamps else None

    @property
    def translated_at(self) -> datetime | None:
        """When Envoy Gateway last wrote the HTTPRoute's status: it stores a translation's xDS, then
        writes the statuses, and its xDS server pushes on its own time (v1.8.3 gateway-api
        `runner.go`; a Gateway's listener status, written so, preceded its xDS by a request's 404
        on the real stack), so the route's configuration counts as written then too. It skips a
        write that changes nothing (`isStatusEqual`), so the stamp moves only with a change."""
        return readiness.status_written_at(self.found[0]) if self.found else None

    @property
    def made_at(self) -> datetime | None:
        """When Envoy AI Gateway last wrote the HTTPRoute, where it is read: the route's configuration
        counts as written then too.

        It writes the HTTPRoute, then the ext-proc's configuration, then the Accepted stamp. Under a
        stamp from before the spec's write, an HTTPRoute that agrees may be minutes old (a write Envoy
        AI Gateway never reconciled: no generation change) or a moment old, its configuration not
        loaded: on the real stack the route said True for a tenth of a second there, as Envoy AI
        Gateway resumed from a hang longer than the hold, before this.
        """
        if not self.found or not self.unanswered:
            return None
        return readiness.written_at(self.found[0])


def _not_accepted(made: Mapping[str, Any], entries: Sequence[Mapping[str, Any]], where: str) -> str | None:
    """Why the status entries of one parentRef do not say Envoy Gateway accepted the HTTPRoute's
    current generation there; None where one of them does."""
    said = [readiness.condition({"status": p}, ACCEPTED) for p in entries]
    if not said:
        return f"Envoy Gateway has written no status of its HTTPRoute for {where}"
    accepted = [c for c in said if c is not None and c.get("status") == "True"]
    if any(readiness.judged_current(c, made) for c in accepted):
        return None
    if not accepted:
        c = next((c for c in said if c is not None), None)
        why = f"{c.get('reason')}: {c.get('message')}" if c is not None else "no Accepted"
        return f"Envoy Gateway does not accept its HTTPRoute on {where} ({why})"
    return (
        f"Envoy Gateway's Accepted of its HTTPRoute on {where} is of generation "
        f"{readiness.generation_number(accepted[0].get('observedGeneration'))}, the HTTPRoute's "
        f"is {readiness.generation_number(readiness.get_path(made, 'metadata', 'generation'))}: "
        "Envoy Gateway has not translated it (its controller may be down), so Envoy routes "
        "the spec before"
    )


def _missing(found: Sequence[Mapping[str, Any]] | None) -> str:
    """Why there is no HTTPRoute to judge, in words: not read yet (None), or none found."""
    return "its HTTPRoute is not read yet" if found is None else "it has no HTTPRoute yet"


_GATEWAY_KIND = ("gateway.networking.k8s.io", "Gateway")


def _parent_key(ref: Any, namespace: Any) -> tuple[Any, ...] | None:
    """A parentRef as Envoy Gateway tells two apart (v1.8.3 `IsParentRefEqual`): group, kind,
    namespace, name, sectionName and port, with Gateway API's defaults (a Gateway of the route's
    own namespace)."""
    if not isinstance(ref, Mapping):
        return None
    return (
        ref.get("group") or _GATEWAY_KIND[0],
        ref.get("kind") or _GATEWAY_KIND[1],
        ref.get("namespace") or namespace,
        ref.get("name"),
        ref.get("sectionName"),
        ref.get("port"),
    )


def _desired(composed: Mapping[str, Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], dict[str, str]]:
    """The AIGatewayRoute's rules as this call composes them, and the Backend each AIServiceBackend it
    composes names: built by this call, so every field the builders always write is there (and only
    these Objects: a model check is provider-http's Request, no manifest)."""

    def manifest(name: str) -> Mapping[str, Any]:
        return composed[name]["spec"]["forProvider"]["manifest"]

    backends = {
        manifest(name)["metadata"]["name"]: manifest(name)["spec"]["backendRef"]["name"]
        for name in composed
        if name.startswith(SERVICE_BACKEND_PREFIX)
    }
    return manifest(ROUTE)["spec"]["rules"], backends


def _routed(rule: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(Backend, weight) of each reference of an HTTPRoute rule. The API server defaults a weight to
    1, so one is always there; a number handed through protobuf is a double, equal to the int
    composed."""
    return [(str(ref.get("name")), ref.get("weight")) for ref in rule.get("backendRefs") or ()]


def _words(refs: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(f"{name} (weight {_number(weight)})" for name, weight in refs)


def _number(value: Any) -> Any:
    """A weight as people write it: 1, not the 1.0 protobuf hands over."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def differences(
    found: Sequence[Mapping[str, Any]] | None, composed: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """How the HTTPRoute found differs from what Envoy AI Gateway makes of the AIGatewayRoute this
    call composes (`composed`: every Object of this call, by composition-resource-name), in words;
    None where it agrees. `found` is what Crossplane handed for the HTTPRoute's requirement: None
    before it was read, empty where there is none."""
    if not found:
        return _missing(found)
    rules, backends = _desired(composed)
    made = [
        r
        for r in readiness.list_at(found[0], "spec", "rules")
        if isinstance(r, Mapping) and r.get("name") != _NOT_FOUND_RULE
    ]
    want = [[(backends[ref["name"]], ref["weight"]) for ref in rule["backendRefs"]] for rule in rules]
    have = [_routed(r) for r in made]
    if want != have:
        return (
            f"its HTTPRoute sends requests to {'; '.join(map(_words, have)) or 'no backend'} where this "
            f"spec names {'; '.join(map(_words, want))}"
        )
    priorities = ",".join(
        f"{i}:{ref['name']}:{ref['priority']}" for i, rule in enumerate(rules) for ref in rule["backendRefs"]
    )
    annotations = readiness.get_path(found[0], "metadata", "annotations")
    written = annotations.get(PRIORITY_ANNOTATION) if isinstance(annotations, Mapping) else None
    if written != priorities:
        return (
            f"its HTTPRoute orders the backends {written or 'by nothing'} where this spec says {priorities}"
        )
    timeouts = [readiness.get_path(rule, "timeouts", "request") or _DEFAULT_REQUEST_TIMEOUT for rule in rules]
    made_timeouts = [readiness.get_path(r, "timeouts", "request") for r in made]
    if made_timeouts != timeouts:
        return (
            f"its HTTPRoute times requests out after {', '.join(map(str, made_timeouts))} where this spec "
            f"says {', '.join(timeouts)}"
        )
    return None
