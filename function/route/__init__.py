"""Compose a ModelRoute: per-model AIGatewayRoute and backends, whatever the gateway's state.

The decision this module rests on: **composition never depends on gateway
readiness.** Withholding the route while the gateway is not ready makes
Crossplane garbage-collect it, so one Envoy pod restarting would take every
model offline. The anchor route makes a model route created during a rollout
harmless (the sidecar is never removed), so routes are always composed, and
only the RoutingReady condition follows GatewayReady.

RoutingReady must follow GatewayReady within seconds, both ways. Crossplane
fetches the InferenceGateway as a required resource on every call but does
not watch it, so on its own a route would learn of its gateway's change only
at its next TTL-driven call (60 s). The route therefore also composes an
observe-only, watched Object of its InferenceGateway: provider-kubernetes
re-reads it on every change of the gateway, the Object's status changes, and
Crossplane (realtime compositions) calls the function for the route at once.
The verdict still reads the required resource, which Crossplane fetched for
this very call; the observer exists to wake the route up.

The one input a route cannot do without is where to attach: the Gateway's
name, namespace and listener, which the InferenceGateway publishes in its
status. If that cannot be read, a route composed before is emitted again
exactly as observed (never fewer desired resources than observed, but for
the auth exemption an older version composed, which is always dropped), and
a route never composed stays uncomposed until the gateway can be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from function import cel, claims, model_check, references
from function.api import Backend, Input, ModelCheck, ModelRouteSpec, WorkloadRef
from function.conditions import GATEWAY_READY, as_observed
from function.objects import plan_basis, target_ref, wrap
from function.outcome import Outcome, Requirement, keep_observed
from function.resilience import build_traffic_policy
from function.route import extproc_config, httproute
from function.route.manifests import (
    build_backend,
    build_security_policy,
    build_service_backend,
    security_policy_auth,
)
from function.route.matching import build_route
from function.route.plan import (
    AUTH_EXEMPTION,
    BACKEND_PREFIX,
    GATEWAY_OBSERVER,
    MODEL_CHECK_PREFIX,
    ROUTE,
    SECURITY_POLICY_PREFIX,
    SERVICE_BACKEND_PREFIX,
    TRAFFIC_POLICY,
    WORKLOAD_PREFIX,
    RoutePlan,
)
from function.route.verdict import (
    config_written_at,
    derive_verdict,
    model_checks_expire_in,
    published_status,
    read_backends,
    serving_verdict,
)
from function.route.view import Attachment, gateway_requirements, read_gateway
from function.upstream import ACCEPTED


def build_gateway_observer(plan: RoutePlan, ref: Requirement) -> dict[str, Any]:
    """The observe-only, watched Object on the InferenceGateway: the route's wake-up call.

    Ready while the gateway's GatewayReady is True, so the route XR's own
    Ready follows its gateway too. Composed from the gatewayRef alone, so it
    exists from the first call, before the gateway can be read at all.
    """
    return wrap(
        name=plan.object_name("gateway-observer"),
        namespace=plan.xr_namespace,
        manifest=target_ref(ref.api_version, ref.kind, ref.name, ref.namespace),
        provider_config=plan.spec.provider_config_ref,
        cel_query=cel.condition_true_query(GATEWAY_READY),
        observe_only=True,
    )


def build_objects(
    plan: RoutePlan, attachment: Attachment, claimed: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Every composed resource of the route, keyed by composition-resource-name; `claimed` labels
    the route's Object (claims.labels)."""
    provider = plan.spec.provider_config_ref
    accepted = cel.condition_true_query(ACCEPTED)

    def obj(name: str, manifest: dict[str, Any], cel_query: str = accepted) -> dict[str, Any]:
        return wrap(
            name=name,
            namespace=plan.xr_namespace,
            manifest=manifest,
            provider_config=provider,
            cel_query=cel_query,
        )

    objects = {ROUTE: obj(plan.object_name("route"), build_route(plan, attachment))}
    # What other routes claiming this model on this gateway find it by (function/claims.py).
    objects[ROUTE]["metadata"]["labels"] = dict(claimed)
    # Judged and watched: a policy Envoy Gateway does not accept (Conflicted
    # by an older one on the same HTTPRoute) leaves requests served without
    # retries or ejection, so no fallback; taking_requests reads it.
    objects[TRAFFIC_POLICY] = wrap(
        name=plan.object_name("traffic-policy"),
        namespace=plan.xr_namespace,
        manifest=build_traffic_policy(
            api_version=plan.inp.api_versions.envoy_gateway,
            name=plan.traffic_policy_name,
            namespace=plan.xr_namespace,
            # The HTTPRoute Envoy AI Gateway makes of the AIGatewayRoute has its name.
            http_route=plan.route_name,
            resilience=plan.spec.resilience,
            timeouts=plan.spec.timeouts,
        ),
        provider_config=provider,
        cel_query=cel.policy_accepted_query(),
    )
    for b in plan.spec.backends:
        objects[BACKEND_PREFIX + b.name] = obj(plan.object_name("backend", b.name), build_backend(plan, b))
        objects[SERVICE_BACKEND_PREFIX + b.name] = obj(
            plan.object_name("service-backend", b.name), build_service_backend(plan, b), cel.taken_in_query()
        )
        auth = security_policy_auth(b)
        if auth is not None:
            objects[SECURITY_POLICY_PREFIX + b.name] = obj(
                plan.object_name("security-policy", b.name), build_security_policy(plan, b, auth)
            )
        if b.workload_ref is not None:
            objects[WORKLOAD_PREFIX + b.name] = build_workload_observer(plan, b.name, b.workload_ref)
        if b.model_check is not None:
            objects[MODEL_CHECK_PREFIX + b.name] = build_model_check(plan, b, b.model_check)
    return objects


def build_model_check(plan: RoutePlan, backend: Backend, check: ModelCheck) -> dict[str, Any]:
    """provider-http's observe-only Request of the backend's model list, composed directly (a
    namespaced managed resource, in the route's namespace)."""
    return model_check.build_request(
        name=plan.object_name("model-check", backend.name),
        namespace=plan.xr_namespace,
        url=plan.probe_url(backend, check),
        provider_config=plan.inp.model_check_provider_config,
    )


def build_workload_observer(plan: RoutePlan, backend: str, ref: WorkloadRef) -> dict[str, Any]:
    """The observe-only, watched Object on what serves a backend, in the route's namespace."""
    return wrap(
        name=plan.object_name("workload", backend),
        namespace=plan.xr_namespace,
        manifest=plan.workload_target(ref),
        provider_config=plan.spec.provider_config_ref,
        cel_query=ref.readiness_query or cel.workload_query(ref.api_version, ref.kind),
        observe_only=True,
    )


def never_kept(name: str) -> bool:
    """The auth exemption an older version composed: dropped on every call.

    Its SecurityPolicy, with no auth of its own, replaced the Gateway's on
    this route's HTTPRoute; Envoy decides auth on the route a request first
    matches, so it opened covered models to callers without a key (issue
    #23). Dropped even while the gateway cannot be read: security fails closed.
    """
    return name == AUTH_EXEMPTION


def removed_by_spec(name: str) -> bool:
    """True for an observed per-backend resource that the current spec no longer composes.

    Asked only of observed names this call did not compose, and only when
    the gateway could be read. Only these may leave the desired state: a
    backend taken out of the spec, or the security policy of a backend whose
    API key was taken out. Anything else observed (a name this version does
    not know) is kept, except the auth exemption (see never_kept).
    """
    return any(
        name.startswith(p)
        for p in (
            BACKEND_PREFIX,
            SERVICE_BACKEND_PREFIX,
            SECURITY_POLICY_PREFIX,
            WORKLOAD_PREFIX,
            MODEL_CHECK_PREFIX,
        )
    )


def compose(
    xr: Mapping[str, Any],
    spec: ModelRouteSpec,
    inp: Input,
    observed: Mapping[str, Mapping[str, Any]],
    required: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    now: datetime | None = None,
) -> Outcome:
    """The whole ModelRoute composition for one call; `now` is the call's clock (tests fix it)."""
    plan = RoutePlan(
        **plan_basis(xr, observed, now),
        spec=spec,
        inp=inp,
    )
    ref = Requirement(
        api_version=inp.gateway_type.api_version,
        kind=inp.gateway_type.kind,
        name=spec.gateway_ref.name,
        namespace=spec.gateway_ref.namespace or plan.xr_namespace,
    )
    # Declared on every call: Crossplane treats requirements as satisfied only
    # when they are stable from one call to the next.
    gateway_wanted = gateway_requirements(required, ref)
    applied = claims.Applied.of(observed.get(ROUTE))
    unattached = plan.claimant(None)
    http_route = httproute.Reading.of(unattached.target, observed.get(ROUTE), required)
    outcome = Outcome(
        requirements=gateway_wanted
        | claims.requirements(required, unattached)
        | http_route.requirements()
        | references.requirements(spec.backends, plan.xr_namespace)
    )
    view = read_gateway(required, ref)

    composed: dict[str, Any] = {}
    if inp.observe_gateway:
        composed[GATEWAY_OBSERVER] = build_gateway_observer(plan, ref)
    if view.attachment is not None:
        me = plan.claimant(view.attachment)
        claimed = claims.labels(required, me, applied)
        composed |= build_objects(plan, view.attachment, claimed)
    outcome.resources = dict(composed)

    def unobserved(name: str) -> bool:
        # The observer leaves only when the Input turns it off, never by accident.
        return name == GATEWAY_OBSERVER and not inp.observe_gateway

    if view.attachment is None:
        # Where to attach is unknown: everything composed before stays as it
        # was, but for the exemption, which is never kept.
        keep_observed(outcome, observed, lambda name: never_kept(name) or unobserved(name))
    else:
        keep_observed(
            outcome, observed, lambda name: never_kept(name) or removed_by_spec(name) or unobserved(name)
        )
    outcome.judge_ready(observed)
    # While the route's configuration is young, the gateway's ext-proc configuration index too: read
    # where the verdict reads it (extproc_config.py).
    written = config_written_at(composed, observed, http_route.last_written, plan.now)
    config_wanted = extproc_config.requirements(view.extproc_config, written, plan.now)
    outcome.requirements |= config_wanted

    # Whose workload serves: read once, for RoutingReady and BackendsServing.
    unresolved = references.unresolved(spec.backends, plan.xr_namespace, required)
    backends = read_backends(plan, observed, unresolved)
    verdict = derive_verdict(
        plan,
        view,
        composed,
        observed,
        backends,
        unresolved=unresolved,
        required=required,
        http_route=http_route,
        written=written,
        in_effect=outcome.ready,
    )
    outcome.verdict = verdict
    outcome.ttl = min(
        (
            t
            for t in (
                verdict.recheck_in,
                model_checks_expire_in(plan, observed),
            )
            if t
        ),
        default=None,
    )
    outcome.status = published_status(plan, view)
    outcome.extra = [serving_verdict(plan, backends)]
    if not (http_route.read and all(key in required for key in gateway_wanted | config_wanted)):
        # A call before Crossplane has fetched what this one requires (the
        # first of every reconcile; the second when the gateway has no serving
        # record yet): it calls again with them, and that call decides. Judged
        # now, the conditions would go to GatewayNotFound and back on every
        # reconcile (issue #32): say again what the XR says, and log nothing.
        outcome.verdict = as_observed(xr, verdict)
        outcome.extra = [as_observed(xr, v) for v in outcome.extra]
        return outcome
    outcome.announce(xr)
    return outcome
