"""GatewayReady from what the Objects observe, and the status the gateway publishes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from function import readiness, serving_record
from function.api import Listener, ServiceType
from function.conditions import GATEWAY_READY, GatewayReason, Verdict
from function.gateway.plan import (
    ANCHOR,
    CLIENT_TRAFFIC_POLICY,
    ENVOY_SERVICE,
    GATEWAY,
    OBSERVER,
    SECURITY_POLICY,
    SERVING_RECORD,
    GatewayPlan,
)
from function.readiness import RolloutState
from function.upstream import ACCEPTED, PROGRAMMED

# Envoy Gateway writes a status and pushes the xDS that carries it from one
# translation; on the real data plane a keyed request was refused (401) in the
# second after the SecurityPolicy turned Accepted, and a model's request got
# 404 in the second a widened listener turned Programmed.
AUTH_PUSH_BOUND = timedelta(seconds=5)

# Caller auth turned off: the SecurityPolicy is kept this long after
# `removedAt` is first published, so every ModelRoute has published it before
# Envoy stops checking keys. Routes learn it through the serving record, on
# their own reconcile, seconds later (up to 20 s at 100 routes, make scale's
# follow bound); counted from the stamp, which is truncated to the second and
# written before the serving record lands, it leaves them at least 24 s.
# Dropping the policy in the same call let Envoy serve a keyless request while
# a route still told callers a key was needed: the fresh-clone CI of 6b5b602
# counted two such answers 3 s after auth was turned off. Keys stay checked
# meanwhile: a removal is late, never early (security fails closed).
AUTH_REMOVAL_HOLD = timedelta(seconds=25)

# Then, until the SecurityPolicy's deletion reaches Envoy (Crossplane deletes
# its Object, provider-kubernetes the policy, Envoy Gateway translates and
# pushes), Envoy still answers a request without a key 401. So the gateway
# keeps telling callers to send one while the policy's Object is still there
# (provider-kubernetes down, or refused the delete: Crossplane drops the Object
# from the observed resources once it leaves the desired state, so it is
# required by name), and for this long after the call that found it gone (the
# fresh-clone CI of e1479f1 counted 401s 5 s after the policy went, while the
# status said no key was needed). A status with no memory of the Object past
# the hold (written before it was required, or a write refused) counts from
# the call that finds it gone.
AUTH_REMOVAL_BOUND = timedelta(seconds=15)
# While the Object is still there after the hold: asked again this often,
# where Crossplane does not watch what a function requires (before v2.4).
AUTH_REMOVAL_RECHECK = timedelta(seconds=10)
# callerAuth's own memory of the Object's deletion: seen still there past the
# hold, then when a call found it gone. Routes ignore both.
POLICY_DELETING = "policyDeleting"
POLICY_GONE_AT = "policyGoneAt"
# And whether Envoy Gateway refused the policy when it was last seen: a refused
# SecurityPolicy makes Envoy answer every request 500 (v1.8.3 securitypolicy.go
# puts a direct response on each route), until its deletion reaches Envoy.
# Once it leaves the desired state it is no longer observed, so GatewayReady
# reads this from the Object required by name, then from here for
# AUTH_REMOVAL_BOUND after it was found gone (found in review: GatewayReady
# said True from the hold's end while Envoy still answered 500).
POLICY_REFUSED = "policyRefused"
MEMORY = (POLICY_DELETING, POLICY_GONE_AT, POLICY_REFUSED)


def _observer_verdict(  # noqa: PLR0911 - one return per reason, in order
    plan: GatewayPlan, observer: Mapping[str, Any] | None, settled_template: str | None
) -> Verdict:
    namespace, name = plan.deployment
    where = f"Deployment {namespace}/{name}"
    if readiness.target_gone(observer):
        # Whatever manifest and Ready the Object still shows are stale.
        return _not_ready(
            GatewayReason.DEPLOYMENT_NOT_FOUND,
            f"{where} does not exist; check spec.envoy.deploymentNaming, spec.envoy.deployMode "
            "and spec.envoy.envoyGatewayNamespace",
        )
    if readiness.paused(observer):
        return _not_ready(
            GatewayReason.NOT_YET_OBSERVED,
            f"the observer of {where} is paused (crossplane.io/paused): nothing observes the Deployment",
        )
    manifest = readiness.observed_manifest(observer)
    if manifest is None:
        error = readiness.sync_error(observer)
        if error is not None:
            return _not_ready(
                GatewayReason.NOT_YET_OBSERVED, f"provider-kubernetes cannot observe {where}: {error}"
            )
        return _not_ready(GatewayReason.NOT_YET_OBSERVED, f"waiting for the first observation of {where}")
    error = readiness.read_failed(observer)
    if error is not None:
        # Ready and the manifest are an earlier read's: a rollout begun since goes unseen.
        return _not_ready(
            GatewayReason.NOT_YET_OBSERVED,
            f"provider-kubernetes cannot read {where} now, so its last observation is not current: {error}",
        )
    if not readiness.observes(observer, plan.observer_target):
        # Retargeted (deploymentNaming, deployMode or envoyGatewayNamespace changed): until
        # provider-kubernetes reads the new Deployment, Ready and the manifest are the old one's,
        # which Envoy Gateway is deleting (found in review).
        said = "/".join(str(readiness.get_path(manifest, "metadata", key)) for key in ("namespace", "name"))
        return _not_ready(
            GatewayReason.NOT_YET_OBSERVED,
            f"waiting for the first observation of {where}: the observer still reports {said}",
        )
    state = RolloutState.read(manifest, plan.inp.ext_proc_marker_annotation)
    waiting = state.waiting_for(plan.spec.envoy.availability_policy)
    if waiting is None:
        waiting = state.old_pods_may_drain(settled_template)
    if waiting is not None:
        return _not_ready(GatewayReason.ROLLING_OUT, f"{where} is rolling out: {waiting}")
    if not state.marker_present:
        return _not_ready(
            GatewayReason.EXT_PROC_NOT_INJECTED,
            f"{where} has finished rolling out but its pod template lacks "
            f"{plan.inp.ext_proc_marker_annotation}: Envoy AI Gateway has not rolled it "
            "with the ext-proc sidecar yet",
        )
    if not readiness.in_effect(observer):
        # Our reading says done; the provider's CEL evaluation has not caught up.
        return _not_ready(
            GatewayReason.NOT_YET_OBSERVED,
            f"{where} looks rolled out ({state.summary()}); waiting for provider-kubernetes "
            "to report it Ready",
        )
    return Verdict(GATEWAY_READY, True, GatewayReason.AVAILABLE, f"{where}: {state.summary()}")


def _not_ready(reason: GatewayReason, message: str, recheck_in: timedelta | None = None) -> Verdict:
    return Verdict(GATEWAY_READY, False, reason, message, recheck_in)


def _listener_not_programmed(plan: GatewayPlan, gateway: Mapping[str, Any] | None) -> str | None:
    """Why the listener routes attach to is not serving, or None when it is Programmed.

    Envoy Gateway's Gateway Programmed ignores listeners (v1.8.1
    `internal/gatewayapi/status/gateway.go`: an address and one available
    Envoy replica): an HTTPS listener whose certificate Secret is missing is
    Programmed=False (ResolvedRefs=False, InvalidCertificateRef) under a
    Programmed Gateway, and Envoy serves nothing on it. ModelRoutes attach to
    the first listener only (sectionName), so that is the one read; one not
    reported yet counts as not serving.
    """
    listener = plan.spec.listeners[0].name
    found = _reported(readiness.observed_manifest(gateway), listener)
    if found is None:
        return f"has not reported listener {listener} yet"
    programmed = readiness.condition({"status": found}, PROGRAMMED)
    if programmed is None or programmed.get("status") != "True":
        why = "" if programmed is None else f" ({programmed.get('reason')}: {programmed.get('message')})"
        return f"listener {listener} is not Programmed{why}: Envoy serves nothing on it"
    return None


def _reported(gateway: Mapping[str, Any] | None, listener: str) -> Mapping[str, Any] | None:
    """The Gateway's status entry for the listener of that name, or None where it reports none."""
    return next(
        (
            item
            for item in readiness.list_at(gateway, "status", "listeners")
            if isinstance(item, Mapping) and item.get("name") == listener
        ),
        None,
    )


def _policy_state(policy: Mapping[str, Any] | None) -> str:
    """How an Envoy Gateway policy stands, with the reasons its ancestors give when it is not Accepted."""
    if policy is None:
        return "has not been created yet"
    reasons = sorted(
        {
            f"{c.get('reason')}: {c.get('message')}"
            for a in readiness.list_at(readiness.observed_manifest(policy), "status", "ancestors")
            if isinstance(a, Mapping)
            for c in [readiness.condition({"status": a}, ACCEPTED)]
            if c is not None and c.get("status") != "True"
        }
    )
    return "is not Accepted" + (f" ({'; '.join(reasons)})" if reasons else "")


# The Objects whose status GatewayReady reads, in the order it judges them; the
# observer says its own (_observer_verdict).
_READ_IN_ORDER = (
    (GATEWAY, "Gateway"),
    (ANCHOR, "anchor AIGatewayRoute"),
    (SECURITY_POLICY, "API-key SecurityPolicy"),
    (CLIENT_TRAFFIC_POLICY, "ClientTrafficPolicy"),
)


def derive_verdict(  # noqa: PLR0911 - one return per reason, in order
    plan: GatewayPlan,
    observed: Mapping[str, Mapping[str, Any]],
    composed: Mapping[str, Mapping[str, Any]],
    settled_template: str | None = None,
    told: Mapping[str, Any] | None = None,
    *,
    held: HeldListener | None = None,
) -> Verdict:
    """GatewayReady: Gateway and listeners Programmed, anchor Accepted, rollout done; first failure wins.
    `told`: the callerAuth this call publishes (caller_auth), with its memory of a removed policy."""
    gateway_ref = f"Gateway {plan.namespace}/{plan.gateway_name}"
    for name, what in _READ_IN_ORDER:
        error = readiness.read_failed(observed.get(name))
        if error is not None:
            # Its Ready and status are an earlier read's: what it says now is not known.
            return _not_ready(
                GatewayReason.NOT_YET_OBSERVED,
                f"provider-kubernetes cannot read the {what} of {gateway_ref} now, so its last status "
                f"is not current: {error}",
            )
    gateway = observed.get(GATEWAY)
    if not readiness.in_effect(gateway):
        state = "has not been created yet" if gateway is None else "is not Programmed"
        return _not_ready(GatewayReason.WAITING_FOR_GATEWAY, f"{gateway_ref} {state}")
    listener = _listener_not_programmed(plan, gateway)
    if listener is not None:
        return _not_ready(GatewayReason.LISTENER_NOT_PROGRAMMED, f"{gateway_ref} {listener}")
    if held is not None:
        unapplied = readiness.sync_error(gateway)
        return _not_ready(
            GatewayReason.LISTENER_NOT_PROGRAMMED,
            f"{gateway_ref} listener {plan.spec.listeners[0].name} changed and "
            + (
                (
                    f"Envoy Gateway has programmed generation {held.programmed} only"
                    if held.programmed is not None
                    else "Envoy Gateway has not reported it yet"
                )
                + f" (the Gateway is at {held.generation}, or not yet applied; is its controller down?): "
                if held.until is None
                else f"Envoy Gateway programmed it moments ago; Envoy receives it within "
                f"{int(AUTH_PUSH_BOUND.total_seconds())} s: "
            )
            + f"Envoy serves the listener as it was ({held.before.get('url', 'its URL before')})"
            + (f"; provider-kubernetes cannot apply the Gateway: {unapplied}" if unapplied else ""),
        )
    anchor = observed.get(ANCHOR)
    if not readiness.in_effect(anchor):
        state = "has not been created yet" if anchor is None else "is not Accepted"
        return _not_ready(
            GatewayReason.WAITING_FOR_ANCHOR, f"the anchor AIGatewayRoute of {gateway_ref} {state}"
        )
    policy = observed.get(SECURITY_POLICY)
    # Of its current generation: an Accepted of the keys before (or of a policy of that name not
    # deleted yet) says nothing of these, which Envoy Gateway may refuse, and then answer every
    # request 500 (make faults, CI104 of b0a3102: GatewayReady True through 27 s of 500s, a new
    # policy's Object reading the old one's Accepted while Envoy Gateway was slow to judge it).
    # A spec not applied yet is the configuration's hold below (AuthLoading).
    current = readiness.in_effect(policy) and readiness.accepted_of_its_generation(policy)
    if plan.spec.auth.api_keys is not None and not current:
        state = (
            "has not been created yet"
            if policy is None
            else "is not Accepted (is a key Secret missing?)"
            if not readiness.in_effect(policy)
            else "is Accepted of an older generation only (Envoy Gateway has not judged its current keys)"
        )
        return _not_ready(
            GatewayReason.AUTH_NOT_ACCEPTED,
            f"the API-key SecurityPolicy of {gateway_ref} {state}: "
            "Envoy Gateway answers every request with 500 until it is",
        )
    if plan.spec.auth.api_keys is None and (readiness.policy_refused(policy) or _refused_told(told)):
        # Auth turned off, the policy not deleted yet: one Envoy Gateway refused still makes Envoy
        # answer 500, whatever the spec says now. Read from the policy's own status, not the
        # Object's Ready, which turns False (Deleting) for an accepted policy being deleted too.
        state = (
            "is not Accepted and not deleted yet"
            if readiness.policy_refused(policy)
            else "was not Accepted when last seen and is being deleted"
        )
        return _not_ready(
            GatewayReason.AUTH_NOT_ACCEPTED,
            f"the API-key SecurityPolicy of {gateway_ref} {state} (caller auth was turned off): "
            "Envoy Gateway answers every request with 500 until its deletion reaches Envoy",
        )
    traffic = observed.get(CLIENT_TRAFFIC_POLICY)
    if not readiness.in_effect(traffic):
        return _not_ready(
            GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
            f"the ClientTrafficPolicy of {gateway_ref} {_policy_state(traffic)}: Envoy keeps its 32 KiB "
            "request buffer and refuses larger request bodies (413) until it is",
        )
    auth = plan.spec.auth.api_keys
    # The policy this call composes (built once, by the composer), against the one observed.
    if auth is not None and not readiness.applied(policy, composed[SECURITY_POLICY]):
        # A header or key changed: the status tells callers the new header now, and Envoy checks
        # the policy before until it is applied and pushed (found in review).
        return _not_ready(
            GatewayReason.AUTH_LOADING,
            f"the API-key SecurityPolicy of {gateway_ref} changed (its header or keys) and "
            "provider-kubernetes has not applied it yet: Envoy checks the one before",
        )
    accepted = auth_written_at(policy) if auth is not None else None
    # A stamp further ahead than the bound is a clock that disagrees with ours: not judged.
    if accepted is not None and -AUTH_PUSH_BOUND < plan.now - accepted < AUTH_PUSH_BOUND:
        return _not_ready(
            GatewayReason.AUTH_LOADING,
            # Times, not an age: the message is the same on every call of the hold, so it is written
            # once (one that changed would make each call's status write call again: route/verdict.py).
            f"the API-key SecurityPolicy of {gateway_ref} was accepted or changed at "
            f"{readiness.stamp(accepted)}; Envoy refuses every key until its configuration arrives "
            f"(allowed {int(AUTH_PUSH_BOUND.total_seconds())} s, until "
            f"{readiness.stamp_up(accepted + AUTH_PUSH_BOUND)})",
            # Called again once the bound has passed, to say so, not a poll later. The hold above, for a
            # change provider-kubernetes has not applied, needs none: its apply wakes the gateway.
            accepted + AUTH_PUSH_BOUND - plan.now + timedelta(seconds=1),
        )
    return _observer_verdict(plan, observed.get(OBSERVER), settled_template)


def _refused_told(told: Mapping[str, Any] | None) -> bool:
    return isinstance(told, Mapping) and told.get(POLICY_REFUSED) is True


def auth_written_at(policy: Mapping[str, Any] | None) -> datetime | None:
    """When the SecurityPolicy Envoy checks last changed: Envoy Gateway's Accepted stamp, or a later
    write of its spec (a header or key changed keeps it Accepted, and its stamp, as they were)."""
    stamps = [t for t in (readiness.policy_accepted_at(policy), readiness.spec_written_at(policy)) if t]
    return max(stamps) if stamps else None


def _policy_header(policy: Mapping[str, Any] | None) -> str | None:
    """The header a SecurityPolicy Object still there makes Envoy check, even one being deleted:
    while it is, callers are told to send a key (so a status that lost callerAuth then is told it
    again), and no status the function writes loses it before the Object is gone."""
    if policy is None or readiness.target_gone(policy):
        return None
    # The target as observed (what Envoy Gateway has), else as the Object asks for it.
    desired = readiness.get_path(policy, "spec", "forProvider", "manifest")
    for manifest in (readiness.observed_manifest(policy), desired):
        for source in readiness.list_at(manifest, "spec", "apiKeyAuth", "extractFrom"):
            for header in readiness.list_at(source, "headers"):
                if isinstance(header, str):
                    return header
    return None


def caller_auth(
    plan: GatewayPlan,
    previous: Any,
    policy: Mapping[str, Any] | None,
    policy_objects: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any] | None:
    """What callers are told to send (status.gateway.callerAuth): the header, while a key is needed,
    and after auth is turned off (`removedAt`, first published then) for AUTH_REMOVAL_HOLD, while the
    SecurityPolicy is kept, then while its Object is still there (`policy_objects`, this gateway's
    Object of that name as Crossplane fetched it for this call; None where it has not), and
    AUTH_REMOVAL_BOUND after the call that found it gone, while its deletion reaches Envoy. A key
    sent where none is needed is still served; one missing where Envoy checks is refused.

    A status that lost what it published (restored without it, written over) while the policy's
    Object is still there (`policy` observed, or being deleted) counts as auth turned off now: read
    from the policy, the header is told and the policy held as if the spec had just changed, not
    dropped at once while Envoy checks."""
    auth = plan.spec.auth.api_keys
    if auth is not None:
        return {"header": auth.header}
    header = previous.get("header") if isinstance(previous, Mapping) else None
    if isinstance(header, str):
        since = readiness.timestamp(previous.get("removedAt"))
    else:
        # Whatever stamp sits beside a header that is gone is not ours to trust: from now.
        found = (_policy_header(p) for p in (policy, *(policy_objects or ())))
        header, since = next((h for h in found if h is not None), None), None
        if header is None:
            return None
    if since is None or since > plan.now:
        since = plan.now
    told: dict[str, Any] = {"header": header, "removedAt": readiness.stamp(since)}
    if _policy_refused(previous, policy, policy_objects):
        told[POLICY_REFUSED] = True
    if plan.now - since < AUTH_REMOVAL_HOLD:
        return told
    # Past the hold the policy has left the desired state: told while its Object is there, or not
    # fetched for this call (a reconcile's first call; Crossplane answers with the last).
    if policy_objects is None or policy_objects:
        return told | {POLICY_DELETING: True}
    gone_at = _policy_gone_at(plan, previous)
    return (
        told | {POLICY_GONE_AT: readiness.stamp_up(gone_at)}
        if plan.now - gone_at < AUTH_REMOVAL_BOUND
        else None
    )


def _policy_refused(
    previous: Any,
    policy: Mapping[str, Any] | None,
    policy_objects: Sequence[Mapping[str, Any]] | None,
) -> bool:
    """Whether Envoy Gateway refused the removed policy: as its Object says while one is seen
    (observed during the hold, then required by name), else as remembered."""
    seen = [p for p in (policy, *(policy_objects or ())) if p is not None and not readiness.target_gone(p)]
    if seen:
        return any(readiness.policy_refused(p) for p in seen)
    return isinstance(previous, Mapping) and previous.get(POLICY_REFUSED) is True


def for_routes(gateway: Mapping[str, Any]) -> dict[str, Any]:
    """status.gateway as the serving record carries it: without callerAuth's memory of the policy's
    deletion, which routes do not read, so it changes no route's record."""
    told = gateway.get("callerAuth")
    if not isinstance(told, Mapping):
        return dict(gateway)
    return {
        **gateway,
        "callerAuth": {k: v for k, v in told.items() if k not in MEMORY},
    }


def _policy_gone_at(plan: GatewayPlan, previous: Mapping[str, Any]) -> datetime:
    """When a call first found the policy's Object gone past the hold: as published, else this call
    (the one before still saw it, or left no memory of it: its status write refused, or written
    before the Object was required). `previous` is the callerAuth published before (past the hold,
    the header came from it)."""
    gone_at = readiness.timestamp(previous.get(POLICY_GONE_AT))
    if previous.get(POLICY_DELETING) is True or gone_at is None:
        return plan.now
    # A stamp ahead of our clock counts from now: told longer, never shorter.
    return min(gone_at, plan.now)


def _removed_at(plan: GatewayPlan, published: Mapping[str, Any]) -> datetime | None:
    """When caller auth was turned off, as this call publishes it; None while it is on or long gone."""
    if plan.spec.auth.api_keys is not None:
        return None
    return readiness.timestamp(readiness.get_path(published, "callerAuth", "removedAt"))


def auth_policy_held(
    plan: GatewayPlan, published: Mapping[str, Any], policy: Mapping[str, Any] | None
) -> bool:
    """Whether the SecurityPolicy of auth turned off is still kept (AUTH_REMOVAL_HOLD), whether
    Envoy Gateway accepted it or not. A refused one makes Envoy answer 500 meanwhile, which
    GatewayReady says (AuthNotAccepted); dropped at once, it would let Envoy serve keyless
    requests while routes that had not followed yet still said a key was needed."""
    since = _removed_at(plan, published)
    return (
        since is not None
        and plan.now - since < AUTH_REMOVAL_HOLD
        and policy is not None
        and not readiness.target_gone(policy)
    )


def auth_removed_in(plan: GatewayPlan, published: Mapping[str, Any]) -> timedelta | None:
    """After auth is turned off: how soon to drop the kept SecurityPolicy, then to stop telling
    callers to send a key; each on time, not a poll later. While the policy's Object is still there
    after the hold, a recheck (Crossplane before v2.4 does not watch what a function requires)."""
    since = _removed_at(plan, published)
    if since is None:
        return None
    due = since + AUTH_REMOVAL_HOLD
    if plan.now >= due:
        told = published["callerAuth"]
        if told.get(POLICY_DELETING) is True:
            return AUTH_REMOVAL_RECHECK
        due = (readiness.timestamp(told.get(POLICY_GONE_AT)) or due) + AUTH_REMOVAL_BOUND
    # Second precision in the stamp: a second more, so the next call finds the bound passed.
    return due - plan.now + timedelta(seconds=1)


# What routes attach by and clients reach of the first listener, as status.gateway publishes it.
_ATTACH_FIELDS = ("listener", "allowedRoutes", "hostname", "url", "urls")


def attach_point(plan: GatewayPlan, observed: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The first listener as the spec says it and clients reach it: routes attach to it only
    (sectionName), so only its URL reaches a model."""
    listener = plan.spec.listeners[0]
    point: dict[str, Any] = {
        "listener": listener.name,
        # Routes from other namespaces read it: with Same, Envoy Gateway refuses them.
        "allowedRoutes": listener.allowed_routes,
    }
    addresses = readiness.get_path(readiness.observed_manifest(observed.get(GATEWAY)), "status", "addresses")
    if isinstance(addresses, list):
        values: list[str] = [
            a["value"] for a in addresses if isinstance(a, Mapping) and isinstance(a.get("value"), str)
        ]
        if values:
            point["address"] = values[0]
            url = listener_url(listener, values[0], client_port(plan, observed))
            if url is not None:
                point["url"] = url
                point["urls"] = [url]
    if listener.hostname is not None:
        point["hostname"] = listener.hostname
    return point


def listener_spec(plan: GatewayPlan) -> dict[str, Any]:
    """The first listener's spec as far as routes and clients reach it: what a change of it is."""
    listener = plan.spec.listeners[0]
    return {
        "name": listener.name,
        "protocol": listener.protocol,
        "port": listener.port,
        "hostname": listener.hostname,
        "allowedRoutes": listener.allowed_routes,
    }


@dataclass(frozen=True)
class HeldListener:
    """A change of the first listener Envoy has not been given yet: what was published before."""

    before: dict[str, Any]
    # The first listener's spec `before` was published for, which the record goes on carrying.
    spec: dict[str, Any]
    # While Envoy Gateway has not programmed it: the Gateway's generation the listener is Programmed
    # of (None: not reported), and the Gateway's own.
    programmed: int | None = None
    generation: int | None = None
    # Once Envoy Gateway has programmed it: its status write plus the push bound (None before).
    until: datetime | None = None


def listener_change_held(plan: GatewayPlan, observed: Mapping[str, Mapping[str, Any]]) -> HeldListener | None:
    """The first listener as the serving record published it, while the spec changed it and Envoy
    has not been given the change: the Gateway does not carry it yet (the first calls after the
    change: the record is written before provider-kubernetes applies the Gateway), Envoy Gateway has
    not reported the listener or has programmed an older generation of the Gateway only, or it wrote
    that status less than the push bound ago.

    Envoy Gateway stamps each listener's Programmed with the Gateway's generation it translated
    (v1.8.3 `status/gateway.go`); until it translates the new one (its controller down, or slow),
    Envoy serves the listener as it was, and a new host name, port, protocol or allowedRoutes
    published at once is a URL nothing answers (found in review). The record carries the first
    listener's spec its `gateway` was published for, so it keeps the listener as it was while the
    change waits; a change of another listener (one added), or of the address or node port Envoy
    Gateway assigns, is no change of the first listener's spec and holds nothing.
    """
    record = observed.get(SERVING_RECORD)
    spec = serving_record.published_listener(record)
    seen = serving_record.as_gateway(record) if record is not None else None
    published = readiness.get_path(seen, "status", "gateway")
    # A record of an earlier version says no listener: nothing to tell a change by.
    if spec is None or spec == listener_spec(plan) or not isinstance(published, Mapping):
        return None
    before = {k: published[k] for k in _ATTACH_FIELDS if k in published}
    gateway = readiness.observed_manifest(observed.get(GATEWAY))
    found = _reported(gateway, plan.spec.listeners[0].name)
    # A listener not reported (renamed, Envoy Gateway down) has no condition: held.
    programmed = readiness.condition({"status": found}, PROGRAMMED)
    judged = readiness.generation_number(
        programmed.get("observedGeneration") if programmed is not None else None
    )
    generation = readiness.generation_number(readiness.get_path(gateway, "metadata", "generation"))
    if generation is None or (programmed is not None and judged is None):
        # An Envoy Gateway that stamps no generation: the listener is judged as it is reported.
        return None
    if judged is not None and judged >= generation and _carries(gateway, plan):
        # Programmed: Envoy Gateway writes the status, then pushes the xDS that carries it (on the
        # real stack a request got 404 in the second GatewayReady turned True at its write).
        written = readiness.status_written_at(gateway)
        # A stamp further ahead than the bound is a clock that disagrees with ours: not judged.
        if written is None or not -AUTH_PUSH_BOUND < plan.now - written < AUTH_PUSH_BOUND:
            return None
        return HeldListener(before, spec, until=written + AUTH_PUSH_BOUND)
    return HeldListener(before, spec, judged, generation)


def _carries(gateway: Mapping[str, Any] | None, plan: GatewayPlan) -> bool:
    """The Gateway as observed carries the first listener exactly as the spec says it: a field taken
    out (a host name removed) counts, which `readiness.applied` (the desired as a part of the
    observed) cannot see (found in review)."""
    want = listener_spec(plan)
    for item in readiness.list_at(gateway, "spec", "listeners"):
        if isinstance(item, Mapping) and item.get("name") == want["name"]:
            have = {
                "name": item.get("name"),
                "protocol": item.get("protocol"),
                "port": item.get("port"),
                "hostname": item.get("hostname"),
                "allowedRoutes": readiness.get_path(item, "allowedRoutes", "namespaces", "from"),
            }
            return have == want
    return False


def listener_pushed_in(plan: GatewayPlan, held: HeldListener | None) -> timedelta | None:
    """While Envoy receives a listener's change Envoy Gateway has programmed: how soon to be called
    again to publish it, not a poll later."""
    if held is None or held.until is None:
        return None
    return held.until - plan.now + timedelta(seconds=1)


def listener_url(listener: Listener, address: str, port: int | None) -> str | None:
    """Where clients reach a listener on `port`, or None where no URL would be right.

    `port` is the listener's own, or for a NodePort Service the node port
    (the Gateway's address is then a node's); None while that is unknown. A
    wildcard hostname names no host a client can send (Envoy's virtual host
    for `*.example.com` matches no request to the bare address), so clients
    choose the host under it.
    """
    if port is None:
        return None
    if listener.hostname is not None and listener.hostname.startswith("*"):
        return None
    host = listener.hostname or address
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    scheme = "https" if listener.protocol == "HTTPS" else "http"
    default = 443 if scheme == "https" else 80
    suffix = "" if port == default else f":{port}"
    return f"{scheme}://{host}{suffix}"


def client_port(plan: GatewayPlan, observed: Mapping[str, Mapping[str, Any]]) -> int | None:
    """The port clients reach the first listener on: its own, or the node port once observed.

    Envoy Gateway gives the Service one port per listener port
    (resource_provider.go, Service: `Port: port.ServicePort`), and the API
    server assigns that port its node port.
    """
    listener = plan.spec.listeners[0]
    if plan.spec.envoy.service_type is not ServiceType.NODE_PORT:
        return listener.port
    service = observed.get(ENVOY_SERVICE)
    if readiness.target_gone(service):
        return None
    return readiness.node_port(readiness.observed_manifest(service), listener.port)


def published_status(
    plan: GatewayPlan,
    observed: Mapping[str, Mapping[str, Any]],
    settled_template: str | None,
    told: Mapping[str, Any] | None,
    *,
    held: HeldListener | None = None,
) -> dict[str, Any]:
    """What a ModelRoute needs to attach, what an operator needs to see, what we remember; `told`
    is what callers are told to send (caller_auth); `held`, a change of the first listener Envoy
    Gateway has not programmed yet (listener_change_held)."""
    point = attach_point(plan, observed)
    if held is not None:
        # Envoy serves the first listener as it was: routes attach, and clients go, as before.
        point = {k: v for k, v in point.items() if k not in _ATTACH_FIELDS} | held.before
    gateway: dict[str, Any] = {"name": plan.gateway_name, "namespace": plan.namespace} | point
    # Routes tell their callers that a key is needed, and in which header.
    if told is not None:
        gateway["callerAuth"] = dict(told)
    namespace, name = plan.deployment
    deployment: dict[str, Any] = {"name": name, "namespace": namespace}
    observer = observed.get(OBSERVER)
    manifest = readiness.observed_manifest(observer)
    # A vanished Deployment's last numbers, or those of a read before one that failed, are
    # history, not status.
    if manifest is not None and not readiness.target_gone(observer) and not readiness.read_failed(observer):
        state = RolloutState.read(manifest, plan.inp.ext_proc_marker_annotation)
        deployment |= {
            "replicas": state.desired or 0,
            "updatedReplicas": state.updated or 0,
            "availableReplicas": state.available or 0,
            "extProcInjected": state.marker_present,
        }
    if settled_template is not None:
        deployment["settledTemplate"] = settled_template
    return {"gateway": gateway, "deployment": deployment}


def settle(
    plan: GatewayPlan, verdict: Verdict, observer: Mapping[str, Any] | None, previous: str | None
) -> str | None:
    """The pod template the gateway is settled on after this call.

    Once GatewayReady is True on a template, every old pod has finished
    terminating (or the cluster cannot say, see RolloutState.terminating), so
    pods that terminate later on the same template are drained pods of the
    current template, and the others serve.
    """
    manifest = readiness.observed_manifest(observer)
    if not verdict.ready or manifest is None:
        return previous
    return RolloutState.read(manifest, plan.inp.ext_proc_marker_annotation).template
