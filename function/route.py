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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from function import claims, naming, readiness, references
from function.api import (
    API_KEY_POLICY_BY_SCHEMA,
    DEFAULT_KEY_HEADER,
    MODEL_HEADER,
    TOKEN_USAGE_COSTS,
    Backend,
    Input,
    ModelRouteSpec,
    WorkloadRef,
)
from function.conditions import (
    BACKENDS_SERVING,
    GATEWAY_READY,
    ROUTING_READY,
    BackendsReason,
    RoutingReason,
    Verdict,
    as_observed,
)
from function.objects import Target, held_name, held_targets, target_ref, wrap
from function.outcome import Outcome, Requirement, keep_observed
from function.resilience import build_traffic_policy

# The requirement key under which Crossplane hands us the InferenceGateway.
GATEWAY_REQUIREMENT = "inference-gateway"

# composition-resource-names. Per-backend names carry the backend's name, so a
# backend taken out of the spec is recognisable among the observed resources.
ROUTE = "route"
TRAFFIC_POLICY = "traffic-policy"
# Composed by v0.x for routes outside a narrowed caller auth; only ever removed now.
AUTH_EXEMPTION = "auth-exemption"
GATEWAY_OBSERVER = "gateway-observer"
BACKEND_PREFIX = "backend-"
SERVICE_BACKEND_PREFIX = "service-backend-"
SECURITY_POLICY_PREFIX = "security-policy-"
WORKLOAD_PREFIX = "workload-"

_ACCEPTED = "Accepted"
# How long after Envoy AI Gateway accepts a route (or a backend) its ext-proc
# may still answer 500 "unknown backend": the controller writes the filter
# configuration Secret and annotates the Envoy pods so the kubelet refreshes
# the volume at once; the ext-proc polls the file every 5 s
# (internal/filterapi/watcher.go). Measured on the real data plane (make
# integration): 500s until 8-9 s after Accepted. Envoy AI Gateway restamps
# Accepted on every reconcile (controller.go newConditions), so the stamp is
# the time of the last configuration write.
EXTPROC_LOAD_BOUND = timedelta(seconds=15)
_BACKEND_GROUP = "gateway.envoyproxy.io"


@dataclass(frozen=True)
class CallerAuth:
    """The gateway's caller auth, as it publishes it: the header callers send their key in."""

    header: str


@dataclass(frozen=True)
class Attachment:
    """Where the route attaches, as the InferenceGateway publishes it."""

    name: str
    namespace: str
    listener: str | None
    address: str | None
    # Where clients send requests, as the gateway publishes it.
    url: str | None = None
    # None while the gateway asks callers for no key.
    caller_auth: CallerAuth | None = None
    # Which namespaces' routes the listener admits (Gateway API allowedRoutes.namespaces.from).
    allowed_routes: str | None = None


@dataclass(frozen=True)
class GatewayView:
    """What this call knows about the InferenceGateway."""

    attachment: Attachment | None
    # The gateway's GatewayReady condition, if it has one.
    ready: Mapping[str, Any] | None
    # Why attachment is None, in words.
    missing: str = ""
    # The InferenceGateway's reconciliation is paused: its conditions are stale.
    paused: bool = False
    # The InferenceGateway is being deleted: it will not serve, whatever it says.
    deleting: bool = False


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def read_caller_auth(status: Any) -> CallerAuth | None:
    """The gateway's published caller auth: it covers this route whatever else it says.

    A `routeNamespaces` an older version published is not read: the Gateway's
    policy covers every route (issue #23), and an exemption is never composed.
    """
    raw = readiness.get_path(status, "callerAuth")
    if raw is None:
        return None
    return CallerAuth(_str(readiness.get_path(raw, "header")) or DEFAULT_KEY_HEADER)


def read_gateway(required: Mapping[str, Sequence[Mapping[str, Any]]], ref: Requirement) -> GatewayView:
    where = f"{ref.kind} {ref.namespace}/{ref.name}"
    if GATEWAY_REQUIREMENT not in required:
        return GatewayView(None, None, f"waiting for Crossplane to fetch {where}")
    items = required[GATEWAY_REQUIREMENT]
    if not items:
        return GatewayView(None, None, f"{where} not found")
    gw = items[0]
    status = readiness.get_path(gw, "status", "gateway")
    name = _str(readiness.get_path(status, "name"))
    namespace = _str(readiness.get_path(status, "namespace"))
    if name is None or namespace is None:
        return GatewayView(None, None, f"{where} has not published status.gateway (name, namespace) yet")
    attachment = Attachment(
        name=name,
        namespace=namespace,
        listener=_str(readiness.get_path(status, "listener")),
        address=_str(readiness.get_path(status, "address")),
        url=_str(readiness.get_path(status, "url")),
        caller_auth=read_caller_auth(status),
        allowed_routes=_str(readiness.get_path(status, "allowedRoutes")),
    )
    return GatewayView(
        attachment,
        readiness.condition(gw, GATEWAY_READY),
        paused=readiness.paused(gw),
        deleting=readiness.get_path(gw, "metadata", "deletionTimestamp") is not None,
    )


@dataclass(frozen=True)
class RoutePlan:
    xr_name: str
    xr_namespace: str
    spec: ModelRouteSpec
    inp: Input
    # This call's clock: how long ago Envoy AI Gateway wrote the route's configuration.
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    # What existing Objects already point at (objects.held_targets): a target
    # keeps its name for its Object's life; references follow the held names.
    held: Mapping[str, Target] = field(default_factory=dict)

    def _held(self, key: str, derived: str) -> str:
        return held_name(self.held, key, derived)

    @property
    def model(self) -> str:
        return self.spec.model or f"{self.xr_namespace}/{self.xr_name}"

    @property
    def claim(self) -> str:
        """The model on its gateway, as a label value (function/claims.py)."""
        ref = self.spec.gateway_ref
        return claims.claim(ref.namespace or self.xr_namespace, ref.name, self.model)

    @property
    def route_name(self) -> str:
        return self._held(ROUTE, naming.unique_name(self.xr_name, identity=("route",)))

    @property
    def traffic_policy_name(self) -> str:
        return self._held(TRAFFIC_POLICY, self.route_name)

    def _target_name(self, backend: Backend) -> str:
        return naming.unique_name(self.xr_name, backend.name, identity=("backend",))

    def backend_name(self, backend: Backend) -> str:
        return self._held(BACKEND_PREFIX + backend.name, self._target_name(backend))

    def service_backend_name(self, backend: Backend) -> str:
        return self._held(SERVICE_BACKEND_PREFIX + backend.name, self._target_name(backend))

    def security_policy_name(self, backend: Backend) -> str:
        return self._held(SECURITY_POLICY_PREFIX + backend.name, self._target_name(backend))

    def object_name(self, *suffix: str) -> str:
        return naming.unique_name(self.xr_name, *suffix, identity=("ModelRoute",))


# --- builders ----------------------------------------------------------------------


# Manifest bodies: pinned by the expected renders and validated against the
# upstream CRDs, both out of process; mutation testing (`make mutation`)
# covers what decides truth, so it skips them.
# pragma: no mutate start
def build_backend(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    endpoint = backend.endpoint
    if endpoint.hostname is not None:
        address: dict[str, Any] = {"fqdn": {"hostname": endpoint.hostname, "port": endpoint.port}}
    else:
        address = {"ip": {"address": endpoint.ip, "port": endpoint.port}}
    manifest = target_ref(
        plan.inp.api_versions.envoy_gateway, "Backend", plan.backend_name(backend), plan.xr_namespace
    )
    spec: dict[str, Any] = {"endpoints": [address]}
    if backend.tls is not None:
        tls: dict[str, Any] = {}
        if backend.tls.ca_config_map_ref is not None:
            tls["caCertificateRefs"] = [
                {"group": "", "kind": "ConfigMap", "name": backend.tls.ca_config_map_ref.name}
            ]
        else:
            tls["wellKnownCACertificates"] = "System"
        if backend.tls.sni is not None:
            tls["sni"] = backend.tls.sni
        spec["tls"] = tls
    manifest["spec"] = spec
    return manifest


def build_service_backend(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "AIServiceBackend",
        plan.service_backend_name(backend),
        plan.xr_namespace,
    )
    schema: dict[str, Any] = {"name": backend.schema_.name}
    if backend.schema_.prefix is not None:
        schema["prefix"] = backend.schema_.prefix
    if backend.schema_.version is not None:
        schema["version"] = backend.schema_.version
    manifest["spec"] = {
        "schema": schema,
        "backendRef": {
            "group": _BACKEND_GROUP,
            "kind": "Backend",
            "name": plan.backend_name(backend),
        },
    }
    return manifest


def security_policy_auth(backend: Backend) -> dict[str, Any] | None:
    """The BackendSecurityPolicy type and its field for what the backend's provider accepts.

    The API validated the combination (api.API_KEY_POLICY_BY_SCHEMA and
    CREDENTIALS_BY_SCHEMA); None when the backend takes no credentials.
    """
    if backend.api_key_secret_ref is not None:
        policy, field = API_KEY_POLICY_BY_SCHEMA[backend.schema_.name]
        return {"type": policy, field: {"secretRef": {"name": backend.api_key_secret_ref.name}}}
    creds = backend.credentials
    if creds is None:
        return None
    if creds.aws is not None:
        aws: dict[str, Any] = {"secretRef": {"name": creds.aws.credentials_secret_ref.name}}
        if creds.aws.profile is not None:
            aws["profile"] = creds.aws.profile
        return {
            "type": "AWSCredentials",
            "awsCredentials": {"region": creds.aws.region, "credentialsFile": aws},
        }
    if creds.gcp is not None:
        return {
            "type": "GCPCredentials",
            "gcpCredentials": {
                "projectName": creds.gcp.project_name,
                "region": creds.gcp.region,
                "credentialsFile": {"secretRef": {"name": creds.gcp.credentials_secret_ref.name}},
            },
        }
    azure = creds.azure
    if azure is None:  # Credentials validates that exactly one is set.
        raise ValueError(f"backend {backend.name}: credentials name no cloud")
    return {
        "type": "AzureCredentials",
        "azureCredentials": {
            "tenantID": azure.tenant_id,
            "clientID": azure.client_id,
            "clientSecretRef": {"name": azure.client_secret_ref.name},
        },
    }


def build_security_policy(plan: RoutePlan, backend: Backend, auth: dict[str, Any]) -> dict[str, Any]:
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "BackendSecurityPolicy",
        plan.security_policy_name(backend),
        plan.xr_namespace,
    )
    manifest["spec"] = {
        "targetRefs": [
            {
                "group": "aigateway.envoyproxy.io",
                "kind": "AIServiceBackend",
                "name": plan.service_backend_name(backend),
            }
        ],
        **auth,
    }
    return manifest


# pragma: no mutate end
def build_route(plan: RoutePlan, attachment: Attachment) -> dict[str, Any]:
    parent: dict[str, Any] = {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": attachment.name,
        "namespace": attachment.namespace,
    }
    if attachment.listener is not None:
        parent["sectionName"] = attachment.listener
    rule: dict[str, Any] = {
        # Exactly the model header: this is what `/v1/models` lists.
        "matches": [{"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": plan.model}]}],
        "backendRefs": [backend_ref(plan, b) for b in plan.spec.backends],
    }
    if plan.spec.timeouts.request is not None:
        rule["timeouts"] = {"request": plan.spec.timeouts.request}
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway, "AIGatewayRoute", plan.route_name, plan.xr_namespace
    )
    manifest["spec"] = {"parentRefs": [parent], "rules": [rule]}
    if plan.spec.record_token_usage:
        manifest["spec"]["llmRequestCosts"] = [
            {"metadataKey": key, "type": typ} for key, typ in TOKEN_USAGE_COSTS
        ]
    return manifest


def backend_ref(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "name": plan.service_backend_name(backend),
        "weight": backend.weight,
        "priority": backend.priority,
    }
    if backend.model_name_override is not None:
        ref["modelNameOverride"] = backend.model_name_override
    return ref


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
        cel_query=readiness.condition_true_query(GATEWAY_READY),
        observe_only=True,
    )


def build_objects(plan: RoutePlan, attachment: Attachment) -> dict[str, dict[str, Any]]:
    """Every composed resource of the route, keyed by composition-resource-name."""
    provider = plan.spec.provider_config_ref
    accepted = readiness.condition_true_query(_ACCEPTED)

    def obj(name: str, manifest: dict[str, Any]) -> dict[str, Any]:
        return wrap(
            name=name,
            namespace=plan.xr_namespace,
            manifest=manifest,
            provider_config=provider,
            cel_query=accepted,
        )

    objects = {ROUTE: obj(plan.object_name("route"), build_route(plan, attachment))}
    # What other routes claiming this model on this gateway find it by (function/claims.py).
    objects[ROUTE]["metadata"]["labels"] = {claims.LABEL: plan.claim}
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
        cel_query=readiness.policy_accepted_query(),
    )
    for b in plan.spec.backends:
        objects[BACKEND_PREFIX + b.name] = obj(plan.object_name("backend", b.name), build_backend(plan, b))
        objects[SERVICE_BACKEND_PREFIX + b.name] = obj(
            plan.object_name("service-backend", b.name), build_service_backend(plan, b)
        )
        auth = security_policy_auth(b)
        if auth is not None:
            objects[SECURITY_POLICY_PREFIX + b.name] = obj(
                plan.object_name("security-policy", b.name), build_security_policy(plan, b, auth)
            )
        if b.workload_ref is not None:
            objects[WORKLOAD_PREFIX + b.name] = build_workload_observer(plan, b.name, b.workload_ref)
    return objects


def build_workload_observer(plan: RoutePlan, backend: str, ref: WorkloadRef) -> dict[str, Any]:
    """The observe-only, watched Object on what serves a backend, in the route's namespace."""
    return wrap(
        name=plan.object_name("workload", backend),
        namespace=plan.xr_namespace,
        manifest=target_ref(ref.api_version, ref.kind, ref.name, plan.xr_namespace),
        provider_config=plan.spec.provider_config_ref,
        cel_query=ref.readiness_query or readiness.workload_query(ref.api_version, ref.kind),
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
        for p in (BACKEND_PREFIX, SERVICE_BACKEND_PREFIX, SECURITY_POLICY_PREFIX, WORKLOAD_PREFIX)
    )


# --- readiness ---------------------------------------------------------------------


_ready = readiness.in_effect


def derive_verdict(  # noqa: PLR0911 - one return per reason, in order
    plan: RoutePlan,
    view: GatewayView,
    composed: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    serving: Mapping[str, bool],
    *,
    unresolved: Mapping[str, Sequence[str]],
    required: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Verdict:
    """RoutingReady: gateway readable and GatewayReady, the model not held by an older route,
    references readable, route and backends Accepted, configuration loaded, and a backend that
    takes requests serving."""
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
        reason = str((gateway_ready or {}).get("reason") or "Unknown")
        message = str((gateway_ready or {}).get("message") or "no GatewayReady condition yet")
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.GATEWAY_NOT_READY,
            f"{where} is not ready: {reason}: {message}",
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
    held_by = claims.holder(required, plan.xr_namespace, plan.xr_name)
    if held_by is not None:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.MODEL_CLAIMED,
            f"model {plan.model} on {where} is already routed by ModelRoute {held_by}, which is older: "
            "Envoy serves the oldest route of a model, so this one's backends get none of its requests",
        )
    # Before Accepted: upstream accepts the policies and Backends whatever these say.
    fails_over = _ready(observed.get(TRAFFIC_POLICY))
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
    if not _ready(observed.get(ROUTE)):
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.ROUTE_NOT_ACCEPTED,
            f"AIGatewayRoute {plan.xr_namespace}/{plan.route_name} is not Accepted yet",
        )
    # The gateway observer's readiness is the gateway's, judged above from the
    # required resource Crossplane fetched for this call; workloads are judged
    # below, as serving or not.
    waiting = sorted(
        name
        for name in composed
        # The traffic policy decides which backends take requests, not whether any does.
        if name not in (ROUTE, GATEWAY_OBSERVER, TRAFFIC_POLICY)
        and not name.startswith(WORKLOAD_PREFIX)
        and not _ready(observed.get(name))
    )
    if waiting:
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.BACKEND_NOT_ACCEPTED,
            f"not Accepted yet: {', '.join(waiting)}",
        )
    written = config_written_at(composed, observed)
    # A stamp further ahead than the bound is a clock that disagrees with ours:
    # it cannot be judged, and must not hold True back for as long as it is ahead.
    if written is not None and -EXTPROC_LOAD_BOUND < plan.now - written < EXTPROC_LOAD_BOUND:
        age = max(0, int((plan.now - written).total_seconds()))
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.CONFIG_LOADING,
            f"Envoy AI Gateway accepted this route's configuration {age} s ago; its ext-proc loads it "
            f"within {int(EXTPROC_LOAD_BOUND.total_seconds())} s and answers 500 until then",
        )
    if not any(serving[b.name] for b in takers):
        return Verdict(
            ROUTING_READY,
            False,
            RoutingReason.BACKEND_NOT_SERVING,
            f"no backend that takes the model's requests is serving ({', '.join(b.name for b in takers)}); "
            f"{serving_details(plan, observed, unresolved)}"
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
    composed: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]]
) -> datetime | None:
    """When Envoy AI Gateway last wrote configuration for this route: the latest Accepted stamp
    of the AIGatewayRoute and the AIServiceBackends composed on this call."""
    stamps = [
        t
        for name in composed
        if name == ROUTE or name.startswith(SERVICE_BACKEND_PREFIX)
        if (t := readiness.condition_time(observed.get(name), _ACCEPTED)) is not None
    ]
    return max(stamps) if stamps else None


def config_loaded_in(
    plan: RoutePlan, verdict: Verdict, composed: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]]
) -> timedelta | None:
    """While the configuration loads: how soon to be called again to say True, not a poll later."""
    if verdict.reason != RoutingReason.CONFIG_LOADING:
        return None
    written = config_written_at(composed, observed)
    assert written is not None
    # Always more than a second: the verdict holds only while the bound has not passed.
    return written + EXTPROC_LOAD_BOUND - plan.now + timedelta(seconds=1)


def backends_serving(
    plan: RoutePlan, observed: Mapping[str, Mapping[str, Any]], unresolved: Mapping[str, Sequence[str]]
) -> dict[str, bool]:
    """Backend name -> whether it serves: what its policies name is readable, and its workload
    serves (one without a workloadRef counts: an external provider, nothing to observe)."""
    return {
        b.name: b.name not in unresolved
        and (b.workload_ref is None or _ready(observed.get(WORKLOAD_PREFIX + b.name)))
        for b in plan.spec.backends
    }


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
    retries or outlier ejection on (the route's BackendTrafficPolicy, on by
    default), that something exists: a retry moves to the next priority, and
    an endpoint that keeps failing is ejected, so every level with weight can
    take the model's requests. With both off, or while Envoy Gateway has not
    accepted the policy (`fails_over` False: Conflicted by an older policy on
    the same HTTPRoute, so neither is configured), a dead first-level backend
    is never failed over: only the first level counts. A weight of 0 takes
    nothing; with every weight 0, Gateway API answers every request 500.
    """
    weighted = [b for b in spec.backends if b.weight > 0]
    if not weighted or (fails_over and retries_or_ejection(spec)):
        return weighted
    first = min(b.priority for b in weighted)
    return [b for b in weighted if b.priority == first]


def serving_details(
    plan: RoutePlan, observed: Mapping[str, Mapping[str, Any]], unresolved: Mapping[str, Sequence[str]]
) -> str:
    """`<backend>: <how it stands>` for every backend with a workload or an unreadable
    reference, in spec order."""
    parts = []
    for b in plan.spec.backends:
        said = list(unresolved.get(b.name, ()))
        if b.workload_ref is not None:
            said.append(
                readiness.workload_summary(
                    b.workload_ref.api_version, b.workload_ref.kind, observed.get(WORKLOAD_PREFIX + b.name)
                )
            )
        if said:
            parts.append(f"{b.name}: {', '.join(said)}")
    return "; ".join(parts) or "no backend names a workload"


def serving_verdict(
    plan: RoutePlan,
    observed: Mapping[str, Mapping[str, Any]],
    serving: Mapping[str, bool],
    unresolved: Mapping[str, Sequence[str]],
) -> Verdict:
    """BackendsServing: how many backends serve, so a degraded model shows while it still serves."""
    count = sum(serving.values())
    total = len(serving)
    unobserved = sum(b.workload_ref is None and serving[b.name] for b in plan.spec.backends)
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
        f"{count} of {total} backends serving{note}; {serving_details(plan, observed, unresolved)}",
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
    metadata = xr.get("metadata") or {}
    plan = RoutePlan(
        xr_name=str(metadata.get("name", "")),
        xr_namespace=str(metadata.get("namespace", "")),
        spec=spec,
        inp=inp,
        now=now or datetime.now(UTC),
        held=held_targets(observed),
    )
    ref = Requirement(
        api_version=inp.gateway_type.api_version,
        kind=inp.gateway_type.kind,
        name=spec.gateway_ref.name,
        namespace=spec.gateway_ref.namespace or plan.xr_namespace,
    )
    # Declared on every call: Crossplane treats requirements as satisfied only
    # when they are stable from one call to the next.
    outcome = Outcome(
        requirements={GATEWAY_REQUIREMENT: ref, claims.REQUIREMENT: claims.requirement(plan.claim)}
        | references.requirements(spec.backends, plan.xr_namespace)
    )
    view = read_gateway(required, ref)

    composed: dict[str, Any] = {GATEWAY_OBSERVER: build_gateway_observer(plan, ref)}
    if view.attachment is not None:
        composed |= build_objects(plan, view.attachment)
    outcome.resources = dict(composed)
    if view.attachment is None:
        # Where to attach is unknown: everything composed before stays as it
        # was, but for the exemption, which is never kept.
        keep_observed(outcome, observed, never_kept)
    else:
        keep_observed(outcome, observed, lambda name: never_kept(name) or removed_by_spec(name))
    outcome.ready = {name: _ready(observed.get(name)) for name in outcome.resources}

    # Whose workload serves: read once, for RoutingReady and BackendsServing.
    unresolved = references.unresolved(spec.backends, plan.xr_namespace, required)
    serving = backends_serving(plan, observed, unresolved)
    verdict = derive_verdict(
        plan, view, composed, observed, serving, unresolved=unresolved, required=required
    )
    outcome.verdict = verdict
    outcome.ttl = config_loaded_in(plan, verdict, composed, observed)
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
    outcome.status = status
    outcome.extra = [serving_verdict(plan, observed, serving, unresolved)]
    if GATEWAY_REQUIREMENT not in required:
        # The first call of a reconcile: Crossplane has not fetched the gateway
        # yet, and calls again with it; that call decides. Judged now, the
        # conditions would go to GatewayNotFound and back on every reconcile
        # (issue #32): say again what the XR says, and log nothing.
        outcome.verdict = as_observed(xr, verdict)
        outcome.extra = [as_observed(xr, v) for v in outcome.extra]
        return outcome
    for v in (verdict, *outcome.extra):
        if v.changed_from(xr):
            severity = "Normal" if v.ready else "Warning"
            outcome.results.append((severity, v.reason, f"{v.type}: {v.message}"))
    return outcome
