"""RoutingReady and BackendsServing from the gateway, the composed resources and the workloads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from function import claims, model_check, readiness
from function.api import Backend, ModelCheck, ModelRouteSpec
from function.conditions import BACKENDS_SERVING, ROUTING_READY, BackendsReason, RoutingReason, Verdict
from function.model_check import Probe
from function.route import extproc_config, httproute
from function.route.plan import (
    BACKEND_PREFIX,
    GATEWAY_OBSERVER,
    MODEL_CHECK_PREFIX,
    ROUTE,
    SERVICE_BACKEND_PREFIX,
    TRAFFIC_POLICY,
    WORKLOAD_PREFIX,
    RoutePlan,
)
from function.route.view import GatewayView
from function.upstream import ACCEPTED

# How long after Envoy AI Gateway accepts a route (or a backend) its ext-proc
# may still answer 500 "unknown backend": the controller writes the filter
# configuration Secret and annotates the Envoy pods so the kubelet refreshes
# the volume at once; the ext-proc polls the file every 5 s
# (internal/filterapi/watcher.go). Measured on the real data plane (make
# integration): 500s until 8-9 s after Accepted. Envoy AI Gateway restamps
# Accepted on every reconcile (controller.go newConditions), so the stamp is
# the time of the last configuration write.
# Envoy itself has taken longer: in the fresh-clone CI65 of 5e04baf, a Backend
# created 23 ms after Envoy Gateway first translated its HTTPRoute, Envoy
# answered 503 cluster_not_found until 15.7 s after the write. Why is not
# settled: Envoy Gateway v1.8.3 sends an assignment with every EDS cluster and
# its delta xDS answers at once, so the likeliest cause is Envoy warming the new
# cluster until its default 15 s initial fetch timeout (Envoy Gateway sets
# none). Scenario backend_created_late (the Backend held back 0 or 5 s after the
# translation) did not reproduce it: 500s for 3 s at most. The bound covers the
# 15.7 s, with the stamp's whole second and the push to spare.
CONFIG_LOAD_BOUND = timedelta(seconds=18)


def _gateway_state(gateway_ready: Mapping[str, Any] | None) -> str:
    """GatewayReady's status and reason, never its message: the message follows an Envoy rollout
    replica by replica, and each new one would be a status write on every route of the gateway
    (issue #31), telling them nothing they act on."""
    if gateway_ready is None:
        return "it has no GatewayReady condition yet"
    return (
        f"GatewayReady {gateway_ready.get('status') or 'Unknown'}, {gateway_ready.get('reason') or 'Unknown'}"
    )


def derive_verdict(  # noqa: PLR0911, PLR0912 - one return per reason, in order
    plan: RoutePlan,
    view: GatewayView,
    composed: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    backends: BackendsRead,
    *,
    unresolved: Mapping[str, Sequence[str]],
    required: Mapping[str, Sequence[Mapping[str, Any]]],
    http_route: httproute.Reading,
    written: datetime | None,
    in_effect: Mapping[str, bool],
) -> Verdict:
    """RoutingReady: gateway readable and GatewayReady, the model not held by an older route,
    references readable, route and backends Accepted, configuration loaded, and a backend that
    takes requests serving. `in_effect` says of each composed Object whether it is in effect as
    composed (Outcome.judge_ready): judged once a call, it was half of a call's CPU judged twice."""
    if view.attachment is None:
        return Verdict(ROUTING_READY, False, RoutingReason.GATEWAY_NOT_FOUND, view.missing)
    gateway_ready = view.ready
    where = f"gateway {view.attachment.namespace}/{view.attachment.name}"
    if view.deleting:
        # Its Envoy goes with it; GatewayReady may not have caught up yet.
        return Verdict(ROUTING_READY, False, RoutingReason.GATEWAY_NOT_READY, f"{where} is being deleted")
    if view.paused:
        # A paused InferenceGateway is not reconciled: its GatewayReady is the
        # last one written, whatever has happened since.
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.GATEWAY_NOT_READY,
            f"{where} is paused (crossplane.io/paused): its GatewayReady is not kept up to date",
        )
    if gateway_ready is None or gateway_ready.get("status") != "True":
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.GATEWAY_NOT_READY,
            f"{where} is not ready ({_gateway_state(gateway_ready)}); its InferenceGateway's GatewayReady "
            "message says why",
        )
    if view.attachment.allowed_routes == "Same" and view.attachment.namespace != plan.xr_namespace:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ALLOWED,
            f"the listener {view.attachment.listener} of {where} admits routes from its own namespace only "
            f"(allowedRoutes Same): Envoy Gateway refuses this route (NotAllowedByListeners) and serves "
            "none of its requests, while Envoy AI Gateway still says Accepted",
        )
    me = plan.claimant(view.attachment)
    route = observed.get(ROUTE)
    # Composed on every call that knows where to attach, as this one does.
    current = readiness.applied(route, composed[ROUTE])
    old = claims.still_routed(required, me, claims.Applied.of(route))
    if old is not None:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            f"its HTTPRoute still routes model {old[3]} on Gateway {old[0]}/{old[1]}"
            f"{f' listener {old[2]}' if old[2] else ''} in place of "
            f"{plan.model} on {where}: "
            + (
                "Envoy AI Gateway has not made it of this route's spec yet (the AIGatewayRoute's status "
                "says why, if it failed)"
                if current
                # Found in review: the first seconds of every rename, before the apply.
                else "provider-kubernetes has not applied this route's spec to its AIGatewayRoute yet"
            )
            + ", so Envoy sends this model's requests elsewhere"
            if old != claims.UNREAD
            else f"its model or gateway changed ({plan.model} on {where}) and its HTTPRoute is not read yet",
        )
    attachment = view.attachment
    held_by = claims.holder(
        required,
        me,
        admits=lambda namespace: attachment.allowed_routes != "Same" or namespace == attachment.namespace,
    )
    if held_by is not None:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.MODEL_CLAIMED,
            f"model {plan.model} on {where} is already routed by ModelRoute {held_by}, which is older: "
            "Envoy serves only the route of a model whose HTTPRoute Envoy Gateway sorts first (the oldest), "
            "so this one's backends get none of its requests",
        )
    # Before Accepted: upstream accepts the policies and Backends whatever these say.
    fails_over = in_effect[TRAFFIC_POLICY]
    takers = taking_requests(plan.spec, fails_over=fails_over)
    broken = [f"{b.name}: {why}" for b in takers for why in unresolved.get(b.name, ())]
    if broken:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.REFERENCE_NOT_FOUND,
            f"upstream cannot read what a backend that takes requests names, so its requests fail: "
            f"{'; '.join(broken)}",
        )
    if not (current and readiness.in_effect(route)):
        # Its status may say Accepted, of the spec before this one (a model renamed).
        seen = readiness.observed_manifest(route) is not None
        stale = seen and not current
        unread = readiness.read_failed(route)
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            f"AIGatewayRoute {plan.xr_namespace}/{plan.route_name} is not Accepted yet"
            + (" with its current spec" if stale else "")
            # Most of a route's creation at scale (make scale: provider-kubernetes' backlog).
            + (": provider-kubernetes has not reported it yet" if route is not None and not seen else "")
            + (
                f" (provider-kubernetes cannot read it now, so its last status is not current: {unread})"
                if unread
                else ""
            ),
        )
    # The gateway observer's readiness is the gateway's, judged above from the
    # required resource Crossplane fetched for this call; workloads are judged
    # below, as serving or not.
    waiting = sorted(
        name
        for name in composed
        # The traffic policy decides which backends take requests, not whether any does.
        if name not in (ROUTE, GATEWAY_OBSERVER, TRAFFIC_POLICY)
        and not name.startswith((WORKLOAD_PREFIX, MODEL_CHECK_PREFIX))
        and not in_effect[name]
    )
    if waiting:
        unreadable = [name for name in waiting if readiness.read_failed(observed.get(name))]
        behind = [name for name in waiting if not readiness.accepted_of_its_generation(observed.get(name))]
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.BACKEND_NOT_ACCEPTED,
            f"not Accepted yet: {', '.join(waiting)}"
            + (
                f"; provider-kubernetes cannot read {', '.join(unreadable)} now, "
                "so their last status is not current"
                if unreadable
                else ""
            )
            + (
                f"; the Accepted of {', '.join(behind)} is of an older generation (Envoy Gateway has not "
                "translated the current spec: its controller may be down), so Envoy routes the spec before"
                if behind
                else ""
            ),
        )
    why = http_route.not_in_effect(composed)
    if why is not None:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            f"AIGatewayRoute {plan.xr_namespace}/{plan.route_name} says Accepted of its spec before this "
            "one, and Envoy AI Gateway has not answered this one yet (its controller may be down or not "
            f"elected); Envoy routes by the HTTPRoute: {why}",
        )
    gateway = (view.attachment.namespace, view.attachment.name)
    untranslated = http_route.untranslated(gateway)
    if untranslated is not None:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            f"AIGatewayRoute {plan.xr_namespace}/{plan.route_name} says Accepted, but {untranslated}",
        )
    # `written` is config_written_at's, which the composer reads once for this verdict and the index
    # requirement alike.
    # A stamp further ahead than the bound is a clock that disagrees with ours: config_written_at
    # leaves it out, so it neither holds True back for as long as it is ahead nor ends the others'.
    if written is not None and plan.now - written < CONFIG_LOAD_BOUND:
        # Times, not an age: a message that changes with every call is a status write with every call,
        # and Crossplane calls again for each write to the XR (its watch has no predicate), so the
        # route would be called in a loop for the whole hold (a make scale run with 300 routes).
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.CONFIG_LOADING,
            f"this route's configuration was written at {readiness.stamp(written)}; Envoy and Envoy AI "
            f"Gateway's ext-proc load it within {int(CONFIG_LOAD_BOUND.total_seconds())} s (by "
            f"{readiness.stamp_up(written + CONFIG_LOAD_BOUND)}) and answer 500 or 503 until then",
            # Always more than a second: the verdict holds only while the bound has not passed.
            recheck_in=written + CONFIG_LOAD_BOUND - plan.now + timedelta(seconds=1),
        )
    loading = extproc_config.hold(
        view.extproc_config,
        required,
        written=written,
        rewritten_after=ext_proc_config_written_at(composed, observed, plan.now),
        now=plan.now,
        settle=CONFIG_LOAD_BOUND,
    )
    if loading is not None:
        return Verdict(
            ROUTING_READY, False, RoutingReason.CONFIG_LOADING, loading.message, recheck_in=loading.recheck_in
        )
    serving = backends.serving
    wrong = answered_without_the_model(backends, takers, moves_on(plan.spec, fails_over=fails_over))
    erring = {b.name: code for b in wrong if (code := backends.probes[b.name].server_error) is not None}
    if wrong and len(erring) == len(wrong):
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.BACKEND_NOT_SERVING,
            "requests Envoy sends to "
            + ", ".join(f"{name} are answered {code}" for name, code in erring.items())
            + " (its model check's last answer), a code "
            + (
                "this route neither retries (retry.statusCodes) nor ejects for (outlierDetection off)"
                if fails_over
                else f"nothing moves on: {_NO_FALLBACK}"
            )
            + f"; {backends.details}",
        )
    if wrong:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.MODEL_NOT_LOADED,
            f"requests Envoy sends to {', '.join(b.name for b in wrong)} are answered without the model "
            "(404, or another model's answer), or may be: nothing says the server lists it or is down; "
            f"no retry or ejection moves them to another backend; {backends.details}",
        )
    if (
        takers
        and not any(serving[b.name] for b in takers)
        and all(backends.workloads[b.name] for b in takers)
    ):
        # Up, and serving something else (or nothing): the probes say so.
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.MODEL_NOT_LOADED,
            f"no backend that takes the model's requests lists it as loaded "
            f"({', '.join(b.name for b in takers)}); {backends.details}",
        )
    if not any(serving[b.name] for b in takers):
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.BACKEND_NOT_SERVING,
            f"no backend that takes the model's requests is serving ({', '.join(b.name for b in takers)}); "
            f"{backends.details}"
            + ("" if fails_over or not retries_or_ejection(plan.spec) else f"; {_NO_FALLBACK}")
            if takers
            else "every backend has weight 0: no request is sent to any",
        )
    return Verdict(
        ROUTING_READY,
        True,
        RoutingReason.AVAILABLE,
        f"model {plan.model} is served through {where}",
    )


def config_written_at(
    composed: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    httproute_written: datetime | None,
    now: datetime,
) -> datetime | None:
    """When configuration for this route was last written: the latest Accepted stamp of the
    AIGatewayRoute, the AIServiceBackends and the Backends composed on this call, or the latest
    write of their specs where that is later.

    A spec written after the stamp has not been answered yet: the stamp, and the Accepted it
    says, are of the spec before (a model renamed on the route), and the new one reaches the
    ext-proc no sooner than the controller's next write. A Backend's Accepted stamp counts too,
    its spec writes not: Envoy Gateway v1.8.3 sets that stamp once, when it first accepts the
    Backend (`status.MergeConditions` keeps it through changes), and a Backend created after its
    route's configuration loaded failed requests for up to 3 s after its creation on the real
    data plane (backend_created_late), 15.7 s in the CI run before the bound was 18 s; one
    created more than the bound after its route held nothing back (found in review). No run
    here has seen a changed Backend fail a request. The route's HTTPRoute counts too
    (`httproute_written`): its last write while the spec is unanswered (httproute.made_at), and
    Envoy Gateway's last write of its status (httproute.translated_at).

    A stamp further ahead of `now` than the bound is of a clock that disagrees with ours: left
    out, so that it cannot stand in for the others and end the hold they make (found in review:
    the max of the stamps, judged as one, let such a stamp switch every hold off).
    """
    stamps = [httproute_written] if httproute_written is not None else []
    stamps += _ai_gateway_stamps(composed, observed)
    stamps += [
        t
        for name in composed
        if name.startswith(BACKEND_PREFIX)
        and (t := readiness.condition_time(observed.get(name), ACCEPTED)) is not None
    ]
    return _latest_judged(stamps, now)


def ext_proc_config_written_at(
    composed: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]], now: datetime
) -> datetime | None:
    """The part of config_written_at that Envoy AI Gateway writes the ext-proc configuration after:
    the AIGatewayRoute's and AIServiceBackends' Accepted stamps and spec writes. Envoy Gateway's
    stamps (the HTTPRoute's status, a Backend's Accepted) are followed by no rewrite of it (Envoy AI
    Gateway's controllers reconcile on a generation change, and its gateway controller does not watch
    Backends), so a route held until the configuration was rewritten after one of them would wait out
    the whole bound (found in review)."""
    return _latest_judged(_ai_gateway_stamps(composed, observed), now)


def _ai_gateway_stamps(
    composed: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]]
) -> list[datetime]:
    return [
        t
        for name in composed
        if name == ROUTE or name.startswith(SERVICE_BACKEND_PREFIX)
        for t in (
            readiness.condition_time(observed.get(name), ACCEPTED),
            readiness.spec_written_at(observed.get(name)),
        )
        if t is not None
    ]


def _latest_judged(stamps: list[datetime], now: datetime) -> datetime | None:
    """The latest stamp not further ahead of `now` than the bound (config_written_at)."""
    judged = [t for t in stamps if t - now < CONFIG_LOAD_BOUND]
    return max(judged) if judged else None


def workload_serves(
    plan: RoutePlan,
    backend: Backend,
    observed: Mapping[str, Mapping[str, Any]],
    unresolved: Mapping[str, Sequence[str]],
) -> bool:
    """What the backend's policies name is readable, and the workload it names now serves (one
    without a workloadRef counts: an external provider, nothing to observe)."""
    ref = backend.workload_ref
    if backend.name in unresolved:
        return False
    if ref is None:
        return True
    observer = observed.get(WORKLOAD_PREFIX + backend.name)
    # Until the observer is retargeted, it reports the workload the spec named before.
    return readiness.in_effect(observer) and readiness.observes(observer, plan.workload_target(ref))


def model_probe(
    plan: RoutePlan, backend: Backend, check: ModelCheck, observed: Mapping[str, Mapping[str, Any]]
) -> Probe:
    """What the backend's modelCheck probe says of the model."""
    return model_check.judge(
        observed.get(MODEL_CHECK_PREFIX + backend.name),
        plan.checked_model(backend, check),
        check.failure_threshold,
        plan.probe_url(backend, check),
        _probe_clock(plan),
    )


def _probe_clock(plan: RoutePlan) -> model_check.Clock:
    return model_check.Clock(plan.now, timedelta(seconds=plan.inp.model_check_poll_seconds))


def model_checks_expire_in(plan: RoutePlan, observed: Mapping[str, Mapping[str, Any]]) -> timedelta | None:
    """How soon to be called again to find a model check's answer expired, where provider-http, which
    renews it every poll and so wakes the route, may have stopped: a second after the soonest."""
    lefts = [
        left
        for b in plan.spec.backends
        if b.model_check is not None
        and (
            left := _probe_clock(plan).expires_in(
                observed.get(MODEL_CHECK_PREFIX + b.name), b.model_check.failure_threshold
            )
        )
        is not None
        and left > timedelta(0)
    ]
    return min(lefts) + timedelta(seconds=1) if lefts else None


@dataclass(frozen=True)
class BackendsRead:
    """Every backend as one call reads it, once, for RoutingReady and BackendsServing alike."""

    # Backend name -> its workload serves (and what its policies name is readable).
    workloads: Mapping[str, bool]
    # Backend name -> what its modelCheck probe says of the model; only backends with one.
    probes: Mapping[str, Probe]
    # Backend name -> it serves: its workload serves and, with a modelCheck, its server lists the model.
    serving: Mapping[str, bool]
    # `<backend>: <how it stands>`, the end of both conditions' messages.
    details: str


def read_backends(
    plan: RoutePlan, observed: Mapping[str, Mapping[str, Any]], unresolved: Mapping[str, Sequence[str]]
) -> BackendsRead:
    """Each backend's workload and model check judged once: a probe parses the model list its
    server answered, and the verdicts and messages all read it."""
    workloads = {b.name: workload_serves(plan, b, observed, unresolved) for b in plan.spec.backends}
    probes = {
        b.name: model_probe(plan, b, b.model_check, observed)
        for b in plan.spec.backends
        if b.model_check is not None
    }
    return BackendsRead(
        workloads=workloads,
        probes=probes,
        serving={name: up and (name not in probes or probes[name].loaded) for name, up in workloads.items()},
        details=serving_details(plan, observed, unresolved, probes),
    )


def answered_without_the_model(
    backends: BackendsRead, takers: Sequence[Backend], moved_on: Callable[[int], bool]
) -> list[Backend]:
    """The backends taking the model's requests whose servers answer them without it.

    Envoy sends a request to the first priority level with healthy hosts. A
    dead backend's requests are retried and the backend ejected, so the next
    level takes them; a server that answers 404 (or another model's answer)
    at once looks healthy and keeps its share, and so may one whose probe
    has not said yet that it lists the model or is down (untried, or failing
    with an answer kept that did not list it). By level, as Envoy reaches
    them: the first level holding such a backend fails its requests, unless
    a level before it holds a backend that serves. A server answering 5xx
    fails them too where the route neither retries that code nor ejects
    (`moved_on`): a 500 with the default retry codes (502, 503, 504) and
    ejection off is every request's answer (found in review).
    """
    for level in sorted({b.priority for b in takers}):
        here = [b for b in takers if b.priority == level]
        wrong = [
            b
            for b in here
            if b.name in backends.probes
            and backends.workloads[b.name]
            and _fails_here(backends.probes[b.name], moved_on)
        ]
        if wrong:
            return wrong
        if any(backends.serving[b.name] for b in here):
            return []
    return []


def _fails_here(probe: Probe, moved_on: Callable[[int], bool]) -> bool:
    """The server answers the model's requests at once without it, or with a 5xx Envoy keeps."""
    return probe.answers_without_it or (probe.server_error is not None and not moved_on(probe.server_error))


# Why only the first priority level counts while the route's BackendTrafficPolicy is not in effect.
_NO_FALLBACK = (
    "the BackendTrafficPolicy is not Accepted (Conflicted by an older policy on the route?): "
    "no retry or ejection moves requests to a lower priority"
)


def retries_or_ejection(spec: ModelRouteSpec) -> bool:
    """The route's BackendTrafficPolicy asks for a retry policy or passive health checks."""
    resilience = spec.resilience
    return resilience.retry.attempts > 0 or resilience.outlier_detection.consecutive_errors > 0


def taking_requests(spec: ModelRouteSpec, *, fails_over: bool) -> list[Backend]:
    """The backends a request can land on: those with weight, in the levels Envoy reaches.

    Envoy sends every request to the highest priority (lowest number) that has
    healthy hosts, split by weight. A backend behind a Service whose pods are
    gone still looks healthy to Envoy until something says otherwise. With
    outlier ejection on (the route's BackendTrafficPolicy, on by default), an
    endpoint that keeps failing is ejected, so every level with weight can
    take the model's requests. With ejection off, only retries move a request
    on, one level a retry (`numAttemptsPerPriority: 1`: Envoy Gateway v1.8.3
    `buildRetryPolicy` sets Envoy's previous_priorities), so the first
    `attempts + 1` levels are all a request reaches: with 1 retry and three
    levels, two dead ones fail every request while the third serves (found in
    review). With both off, or while Envoy Gateway has not accepted the policy
    (`fails_over` False: Conflicted by an older policy on the same HTTPRoute,
    so neither is configured), a dead first-level backend is never failed
    over: only the first level counts. A weight of 0 takes nothing; with every
    weight 0, Gateway API answers every request 500.
    """
    weighted = [b for b in spec.backends if b.weight > 0]
    levels = sorted({b.priority for b in weighted})
    resilience = spec.resilience
    if not fails_over:
        reached = levels[:1]
    elif resilience.outlier_detection.consecutive_errors > 0:
        reached = levels
    else:
        reached = levels[: resilience.retry.attempts + 1]
    return [b for b in weighted if b.priority in reached]


def moves_on(spec: ModelRouteSpec, *, fails_over: bool) -> Callable[[int], bool]:
    """Whether Envoy moves requests off a backend that answers them with this 5xx: it retries the
    code (retry.statusCodes, while attempts > 0) or ejects the backend (outlier detection counts
    every 5xx). Neither is configured while the policy is not in effect."""
    resilience = spec.resilience
    retried = set(resilience.retry.status_codes) if resilience.retry.attempts > 0 else set()
    ejects = resilience.outlier_detection.consecutive_errors > 0

    def judged(code: int) -> bool:
        return fails_over and (ejects or code in retried)

    return judged


def serving_details(
    plan: RoutePlan,
    observed: Mapping[str, Mapping[str, Any]],
    unresolved: Mapping[str, Sequence[str]],
    probes: Mapping[str, Probe],
) -> str:
    """`<backend>: <how it stands>` for every backend with a workload, a model check or an
    unreadable reference, in spec order."""
    parts = []
    for b in plan.spec.backends:
        said = list(unresolved.get(b.name, ()))
        if b.workload_ref is not None:
            said.append(
                readiness.workload_summary(
                    b.workload_ref.api_version, b.workload_ref.kind, observed.get(WORKLOAD_PREFIX + b.name)
                )
            )
        if b.model_check is not None:
            said.append(f"model {plan.checked_model(b, b.model_check)} {probes[b.name].detail}")
        if said:
            parts.append(f"{b.name}: {', '.join(said)}")
    return "; ".join(parts) or "no backend names a workload"


def serving_verdict(plan: RoutePlan, backends: BackendsRead) -> Verdict:
    """BackendsServing: how many backends serve, so a degraded model shows while it still serves."""
    serving = backends.serving
    count = sum(serving.values())
    total = len(serving)
    unobserved = sum(
        b.workload_ref is None and b.model_check is None and serving[b.name] for b in plan.spec.backends
    )
    if count == total:
        reason = BackendsReason.ALL_SERVING
    elif count == 0:
        reason = BackendsReason.NONE_SERVING
    else:
        reason = BackendsReason.DEGRADED
    note = f" ({unobserved} without a workloadRef, counted as serving)" if unobserved else ""
    return Verdict(
        BACKENDS_SERVING,
        count == total,
        reason,
        f"{count} of {total} backends serving{note}; {backends.details}",
    )


def published_status(plan: RoutePlan, view: GatewayView) -> dict[str, Any]:
    """What the route publishes: its model, where it attached, and what its callers must send."""
    status: dict[str, Any] = {"model": plan.model}
    if view.attachment is not None:
        gateway: dict[str, Any] = {
            "name": view.attachment.name,
            "namespace": view.attachment.namespace,
        }
        if view.attachment.address is not None:
            gateway["address"] = view.attachment.address
        if view.attachment.url is not None:
            gateway["url"] = view.attachment.url
        status["gateway"] = gateway
        auth = view.attachment.caller_auth
        # What a caller of this model must send, if anything.
        status["callerAuth"] = (
            {"required": True, "header": auth.header} if auth is not None else {"required": False}
        )
        if auth is not None and auth.removed_at is not None:
            # Turned off on the gateway: a key is asked for until Envoy drops the check; a
            # request without one may be refused or served meanwhile.
            status["callerAuth"]["removedAt"] = auth.removed_at
    return status
