"""Compose an InferenceGateway: Gateway, EnvoyProxy, anchor route and observer.

Why each piece exists:

- The **EnvoyProxy** carries replicas and the PodDisruptionBudget, and in
  Pinned mode the Deployment's name, so the observer knows what to watch
  without guessing Envoy Gateway's hash.
- The **Gateway** is what model routes attach to.
- The **anchor** AIGatewayRoute keeps one effective route attached for the
  gateway's whole life. Without it, removing the last model route makes Envoy
  AI Gateway roll the Envoy pods to drop the ext-proc sidecar, and the next
  model route is served by sidecar-less pods (HTTP 500) until a second rollout
  finishes. It matches one exact header that is not the model header, so it
  never appears in `/v1/models`, and a value no client sends.
- The **observer** is an observe-only, watched Object on the Envoy Deployment
  whose CEL query says when the rollout is finished with the sidecar in.
- The **ClientTrafficPolicy** raises Envoy's request buffer: its 32 KiB
  default rejects ordinary AI request bodies.

GatewayReady is True only when all of these are in effect. Every composed
resource is emitted on every call, whatever is missing or unready: a missing
resource changes the condition, never the desired state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from function import naming, readiness
from function.api import (
    MODEL_HEADER,
    TOKEN_METADATA_NAMESPACE,
    TOKEN_USAGE_COSTS,
    APIKeyAuth,
    DeploymentNaming,
    InferenceGatewaySpec,
    Input,
    InvalidError,
    Listener,
    ServiceType,
    SpreadPolicy,
)
from function.conditions import GATEWAY_READY, GatewayReason, Verdict
from function.objects import Target, held_name, held_targets, target_ref, wrap
from function.outcome import Outcome, keep_observed
from function.readiness import RolloutState

# composition-resource-names: stable keys Crossplane tracks composed resources by.
ENVOY_PROXY = "envoy-proxy"
GATEWAY = "gateway"
ANCHOR = "anchor-route"
OBSERVER = "envoy-deployment"
CLIENT_TRAFFIC_POLICY = "client-traffic-policy"
SECURITY_POLICY = "security-policy"
# Observed only for serviceType NodePort: the node port clients use.
ENVOY_SERVICE = "envoy-service"

# The condition each controller sets when a resource is in effect.
_PROGRAMMED = "Programmed"
_ACCEPTED = "Accepted"
# The XR kind, in the identity our hashed names carry.
_KIND = "InferenceGateway"
# Envoy Gateway writes a policy's Accepted status and pushes the xDS that
# carries it from one translation; on the real data plane a keyed request
# was refused (401) in the second after the SecurityPolicy turned Accepted.
AUTH_PUSH_BOUND = timedelta(seconds=5)


@dataclass(frozen=True)
class GatewayPlan:
    """Names and places everything for one InferenceGateway; pure, derived from the XR.

    `held` is what existing Objects already point at (objects.held_targets):
    a target keeps its name for its Object's life, and only what nothing
    holds yet gets the name derived here.
    """

    xr_name: str
    xr_namespace: str
    spec: InferenceGatewaySpec
    inp: Input
    # This call's clock: how long ago Envoy Gateway accepted the SecurityPolicy.
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    held: Mapping[str, Target] = field(default_factory=dict)
    # The pinned Envoy Deployment name the existing EnvoyProxy carries: kept,
    # or Envoy Gateway would replace the Deployment when the derivation changes.
    held_deployment: str | None = None

    def _held(self, key: str, derived: str) -> str:
        return held_name(self.held, key, derived)

    @property
    def namespace(self) -> str:
        return self.spec.namespace or self.xr_namespace

    @property
    def gateway_name(self) -> str:
        # In the XR's own namespace the XR's name is unique. Placed elsewhere
        # (spec.namespace), gateways of XRs from different namespaces meet, so
        # the name carries the XR's namespace and a hash.
        if self.namespace == self.xr_namespace:
            derived = self.xr_name
        else:
            derived = naming.unique_name(self.xr_namespace, self.xr_name, identity=("Gateway",))
        return self._held(GATEWAY, derived)

    @property
    def envoy_proxy_name(self) -> str:
        return self._held(ENVOY_PROXY, self.gateway_name)

    @property
    def client_traffic_policy_name(self) -> str:
        return self._held(CLIENT_TRAFFIC_POLICY, self.gateway_name)

    @property
    def security_policy_name(self) -> str:
        return self._held(SECURITY_POLICY, self.gateway_name)

    @property
    def deployment(self) -> tuple[str, str]:
        namespace, name = naming.deployment_ref(
            self.spec.envoy.deployment_naming,
            self.spec.envoy.deploy_mode,
            gateway_namespace=self.namespace,
            gateway_name=self.gateway_name,
            envoy_gateway_namespace=self.spec.envoy.gateway_namespace,
        )
        if self.spec.envoy.deployment_naming is DeploymentNaming.PINNED and self.held_deployment:
            return namespace, self.held_deployment
        return namespace, name

    @property
    def service(self) -> tuple[str, str]:
        """(namespace, name) of the Envoy Service Envoy Gateway creates for the Gateway.

        Always the derived name: the EnvoyProxy pins only the Deployment's,
        and without `envoyService.name` Envoy Gateway names the Service as it
        would an unpinned Deployment (internal/infrastructure/kubernetes/proxy/
        resource_provider.go, Service and Name).
        """
        return naming.deployment_ref(
            DeploymentNaming.GENERATED,
            self.spec.envoy.deploy_mode,
            gateway_namespace=self.namespace,
            gateway_name=self.gateway_name,
            envoy_gateway_namespace=self.spec.envoy.gateway_namespace,
        )

    @property
    def anchor_value(self) -> str:
        # Deterministic per gateway (so the desired state is stable) and
        # meaningless to any client, which would get a 500 if it sent it.
        digest = hashlib.sha256(f"{self.namespace}/{self.gateway_name}".encode()).hexdigest()
        return f"never-sent-{digest[:32]}"

    @property
    def anchor_name(self) -> str:
        return self._held(ANCHOR, naming.unique_name(self.gateway_name, "anchor", identity=("anchor",)))

    def object_name(self, suffix: str) -> str:
        return naming.unique_name(self.xr_name, suffix, identity=(_KIND,))


def moved_from(plan: GatewayPlan) -> Target | None:
    """A target an existing Object holds in another namespace than spec.namespace now says.

    Moving would leave the old Gateway and its policies serving, unowned
    (objects.held_targets): refused, with one fatal naming the field.
    """
    for key in (GATEWAY, ENVOY_PROXY, ANCHOR, CLIENT_TRAFFIC_POLICY, SECURITY_POLICY):
        target = plan.held.get(key)
        if target is not None and target.namespace != plan.namespace:
            return target
    return None


def held_deployment(envoy_proxy: Mapping[str, Any] | None) -> str | None:
    """The pinned Deployment name in an existing EnvoyProxy Object's manifest."""
    name = readiness.get_path(
        envoy_proxy,
        "spec",
        "forProvider",
        "manifest",
        "spec",
        "provider",
        "kubernetes",
        "envoyDeployment",
        "name",
    )
    return name if isinstance(name, str) and name else None


# --- builders: typed plan in, manifest out ---------------------------------------


# Manifest bodies: pinned by the expected renders and validated against the
# upstream CRDs, both out of process; mutation testing (`make mutation`)
# covers what decides truth, so it skips them.
# pragma: no mutate start
def build_envoy_proxy(plan: GatewayPlan) -> dict[str, Any]:
    envoy = plan.spec.envoy
    deployment: dict[str, Any] = {"replicas": envoy.replicas}
    if envoy.deployment_naming is DeploymentNaming.PINNED:
        deployment["name"] = plan.deployment[1]
    pdb = envoy.pod_disruption_budget
    budget = (
        {"minAvailable": pdb.min_available}
        if pdb.min_available is not None
        else {"maxUnavailable": pdb.max_unavailable}
    )
    manifest = target_ref(
        plan.inp.api_versions.envoy_gateway, "EnvoyProxy", plan.envoy_proxy_name, plan.namespace
    )
    if envoy.spread.policy is not SpreadPolicy.NONE:
        deployment["pod"] = {"topologySpreadConstraints": [_spread(plan)]}
    manifest["spec"] = {
        "provider": {
            "type": "Kubernetes",
            "kubernetes": {
                "envoyDeployment": deployment,
                "envoyPDB": budget,
                "envoyService": {"type": envoy.service_type.value},
            },
        },
        "shutdown": {
            "drainTimeout": envoy.shutdown.drain_timeout,
            "minDrainDuration": envoy.shutdown.min_drain_duration,
        },
    }
    if envoy.access_log.model_and_tokens:
        manifest["spec"]["telemetry"] = {
            "accessLog": {
                "settings": [
                    {
                        "format": {"type": "JSON", "json": dict(ACCESS_LOG_FIELDS)},
                        "sinks": [{"type": "File", "file": {"path": "/dev/stdout"}}],
                    }
                ]
            }
        }
    return manifest


# One access-log line per request: what Envoy Gateway's default line says of
# the request, plus the model asked for and the tokens a ModelRoute records,
# each under its metadata key. A value Envoy does not have is logged as null.
ACCESS_LOG_FIELDS = (
    ("start_time", "%START_TIME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("duration_ms", "%DURATION%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("x_request_id", "%REQ(X-REQUEST-ID)%"),
    ("model", "%REQ(X-AI-EG-MODEL)%"),
    *((key, f"%DYNAMIC_METADATA({TOKEN_METADATA_NAMESPACE}:{key})%") for key, _ in TOKEN_USAGE_COSTS),
)


def _spread(plan: GatewayPlan) -> dict[str, Any]:
    """One constraint over this gateway's Envoy pods, selected by the labels Envoy Gateway gives them.

    Envoy Gateway v1.8.1 copies the constraints into the pod spec as they are
    (no selector of its own): the selector must name the pods, and these two
    labels are in its stable Deployment selector.
    """
    spread = plan.spec.envoy.spread
    return {
        "maxSkew": 1,
        "topologyKey": spread.topology_key,
        "whenUnsatisfiable": "DoNotSchedule" if spread.policy is SpreadPolicy.REQUIRED else "ScheduleAnyway",
        "labelSelector": {
            "matchLabels": {
                "gateway.envoyproxy.io/owning-gateway-name": plan.gateway_name,
                "gateway.envoyproxy.io/owning-gateway-namespace": plan.namespace,
            }
        },
    }


def build_security_policy(plan: GatewayPlan, auth: APIKeyAuth) -> dict[str, Any]:
    """API-key auth on the Gateway: every route attached to it, the anchor included.

    Gateway-wide, not per route: it refuses a new route from its first
    request, where a policy per route would leave each route open until its
    policy is accepted. And nothing opens a route again (issue #23): Envoy
    decides auth on the route a request first matches, before Envoy AI
    Gateway's ext-proc picks the model's route from the body.
    """
    manifest = target_ref(
        plan.inp.api_versions.envoy_gateway, "SecurityPolicy", plan.security_policy_name, plan.namespace
    )
    api_key: dict[str, Any] = {
        "credentialRefs": [{"group": "", "kind": "Secret", "name": ref.name} for ref in auth.secret_refs],
        "extractFrom": [{"headers": [auth.header]}],
        # The caller's key never reaches a model provider.
        "sanitize": True,
    }
    if auth.forward_client_id_header is not None:
        api_key["forwardClientIDHeader"] = auth.forward_client_id_header
    manifest["spec"] = {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": plan.gateway_name}],
        "apiKeyAuth": api_key,
    }
    return manifest


def build_client_traffic_policy(plan: GatewayPlan) -> dict[str, Any]:
    manifest = target_ref(
        plan.inp.api_versions.envoy_gateway,
        "ClientTrafficPolicy",
        plan.client_traffic_policy_name,
        plan.namespace,
    )
    manifest["spec"] = {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": plan.gateway_name}],
        "connection": {"bufferLimit": plan.spec.request_buffer_limit},
    }
    return manifest


def _listener(listener: Listener) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": listener.name,
        "protocol": listener.protocol,
        "port": listener.port,
        "allowedRoutes": {"namespaces": {"from": listener.allowed_routes}},
    }
    if listener.hostname is not None:
        out["hostname"] = listener.hostname
    if listener.tls is not None:
        refs = []
        for ref in listener.tls.certificate_refs:
            item: dict[str, Any] = {"group": "", "kind": "Secret", "name": ref.name}
            if ref.namespace is not None:
                item["namespace"] = ref.namespace
            refs.append(item)
        out["tls"] = {"mode": "Terminate", "certificateRefs": refs}
    return out


def build_gateway(plan: GatewayPlan) -> dict[str, Any]:
    manifest = target_ref(plan.inp.api_versions.gateway_api, "Gateway", plan.gateway_name, plan.namespace)
    manifest["spec"] = {
        "gatewayClassName": plan.spec.gateway_class_name,
        "infrastructure": {
            "parametersRef": {
                "group": "gateway.envoyproxy.io",
                "kind": "EnvoyProxy",
                "name": plan.envoy_proxy_name,
            }
        },
        "listeners": [_listener(listener) for listener in plan.spec.listeners],
    }
    return manifest


# pragma: no mutate end
def build_anchor(plan: GatewayPlan) -> dict[str, Any]:
    header = plan.inp.anchor.header_name
    if header == MODEL_HEADER:  # Input validation forbids it; never list the anchor.
        raise ValueError(f"anchor header must not be {MODEL_HEADER}")
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "AIGatewayRoute",
        plan.anchor_name,
        plan.namespace,
    )
    manifest["spec"] = {
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": plan.gateway_name}],
        # One rule with a header match (a rule without matches would become a
        # catch-all `/` prefix) and no backendRefs: it exists only to keep the
        # Gateway's route count above zero.
        "rules": [
            {"matches": [{"headers": [{"type": "Exact", "name": header, "value": plan.anchor_value}]}]}
        ],
    }
    return manifest


def build_observer_target(plan: GatewayPlan) -> dict[str, Any]:
    namespace, name = plan.deployment
    # Only identity: an observe-only Object must not carry desired fields, and
    # provider watches match on metadata.namespace, so it is always explicit.
    return target_ref("apps/v1", "Deployment", name, namespace)


def build_service_target(plan: GatewayPlan) -> dict[str, Any]:
    namespace, name = plan.service
    return target_ref("v1", "Service", name, namespace)


def build_objects(plan: GatewayPlan) -> dict[str, dict[str, Any]]:
    """Every composed resource of the gateway, keyed by composition-resource-name."""
    provider = plan.spec.provider_config_ref
    ns = plan.xr_namespace
    objects = {
        ENVOY_PROXY: wrap(
            name=plan.object_name("envoyproxy"),
            namespace=ns,
            manifest=build_envoy_proxy(plan),
            provider_config=provider,
        ),
        GATEWAY: wrap(
            name=plan.object_name("gateway"),
            namespace=ns,
            manifest=build_gateway(plan),
            provider_config=provider,
            cel_query=readiness.condition_true_query(_PROGRAMMED),
        ),
        ANCHOR: wrap(
            name=plan.object_name("anchor"),
            namespace=ns,
            manifest=build_anchor(plan),
            provider_config=provider,
            cel_query=readiness.condition_true_query(_ACCEPTED),
        ),
        OBSERVER: wrap(
            name=plan.object_name("envoy-deployment"),
            namespace=ns,
            manifest=build_observer_target(plan),
            provider_config=provider,
            cel_query=readiness.deployment_rollout_query(
                plan.spec.envoy.availability_policy, plan.inp.ext_proc_marker_annotation
            ),
            observe_only=True,
        ),
        # Judged and watched: Conflicted (an older policy on the Gateway) or
        # Invalid, Envoy keeps its 32 KiB buffer and answers 413 to AI bodies.
        CLIENT_TRAFFIC_POLICY: wrap(
            name=plan.object_name("client-traffic-policy"),
            namespace=ns,
            manifest=build_client_traffic_policy(plan),
            provider_config=provider,
            cel_query=readiness.policy_accepted_query(),
        ),
    }
    if plan.spec.envoy.service_type is ServiceType.NODE_PORT:
        # Watched for the node port the API server assigns: the published URL
        # carries it. It judges nothing: requests do not wait for our URL.
        objects[ENVOY_SERVICE] = wrap(
            name=plan.object_name("envoy-service"),
            namespace=ns,
            manifest=build_service_target(plan),
            provider_config=provider,
            cel_query=readiness.node_port_query(plan.spec.listeners[0].port),
            observe_only=True,
        )
    auth = plan.spec.auth.api_keys
    if auth is not None:
        # Judged and watched: while it is not Accepted, every request fails.
        objects[SECURITY_POLICY] = wrap(
            name=plan.object_name("security-policy"),
            namespace=ns,
            manifest=build_security_policy(plan, auth),
            provider_config=provider,
            cel_query=readiness.policy_accepted_query(),
        )
    return objects


def removed_by_spec(name: str) -> bool:
    """True for an observed resource the spec no longer composes.

    The SecurityPolicy of auth turned off, the Service observer of a gateway
    that is no longer NodePort. Asked only of observed names this call did
    not compose, so what the spec still asks for is never dropped.
    """
    return name in (SECURITY_POLICY, ENVOY_SERVICE)


# --- readiness ---------------------------------------------------------------------


_ready = readiness.in_effect


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
    if not _ready(observer):
        # Our reading says done; the provider's CEL evaluation has not caught up.
        return _not_ready(
            GatewayReason.NOT_YET_OBSERVED,
            f"{where} looks rolled out ({state.summary()}); waiting for provider-kubernetes "
            "to report it Ready",
        )
    return Verdict(GATEWAY_READY, True, GatewayReason.AVAILABLE, f"{where}: {state.summary()}")


def _not_ready(reason: GatewayReason, message: str) -> Verdict:
    return Verdict(GATEWAY_READY, False, reason, message)


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
    reported = readiness.get_path(readiness.observed_manifest(gateway), "status", "listeners")
    found = next(
        (
            item
            for item in (reported if isinstance(reported, list) else [])
            if isinstance(item, Mapping) and item.get("name") == listener
        ),
        None,
    )
    if found is None:
        return f"has not reported listener {listener} yet"
    programmed = readiness.condition({"status": found}, _PROGRAMMED)
    if programmed is None or programmed.get("status") != "True":
        why = "" if programmed is None else f" ({programmed.get('reason')}: {programmed.get('message')})"
        return f"listener {listener} is not Programmed{why}: Envoy serves nothing on it"
    return None


def _policy_state(policy: Mapping[str, Any] | None) -> str:
    """How an Envoy Gateway policy stands, with the reasons its ancestors give when it is not Accepted."""
    if policy is None:
        return "has not been created yet"
    ancestors = readiness.get_path(readiness.observed_manifest(policy), "status", "ancestors")
    reasons = sorted(
        {
            f"{c.get('reason')}: {c.get('message')}"
            for a in (ancestors if isinstance(ancestors, list) else [])
            if isinstance(a, Mapping)
            for c in [readiness.condition({"status": a}, _ACCEPTED)]
            if c is not None and c.get("status") != "True"
        }
    )
    return "is not Accepted" + (f" ({'; '.join(reasons)})" if reasons else "")


def derive_verdict(  # noqa: PLR0911 - one return per reason, in order
    plan: GatewayPlan, observed: Mapping[str, Mapping[str, Any]], settled_template: str | None = None
) -> Verdict:
    """GatewayReady: Gateway and listeners Programmed, anchor Accepted, rollout done; first failure wins."""
    gateway_ref = f"Gateway {plan.namespace}/{plan.gateway_name}"
    gateway = observed.get(GATEWAY)
    if not _ready(gateway):
        state = "has not been created yet" if gateway is None else "is not Programmed"
        return _not_ready(GatewayReason.WAITING_FOR_GATEWAY, f"{gateway_ref} {state}")
    listener = _listener_not_programmed(plan, gateway)
    if listener is not None:
        return _not_ready(GatewayReason.LISTENER_NOT_PROGRAMMED, f"{gateway_ref} {listener}")
    anchor = observed.get(ANCHOR)
    if not _ready(anchor):
        state = "has not been created yet" if anchor is None else "is not Accepted"
        return _not_ready(
            GatewayReason.WAITING_FOR_ANCHOR, f"the anchor AIGatewayRoute of {gateway_ref} {state}"
        )
    policy = observed.get(SECURITY_POLICY)
    if plan.spec.auth.api_keys is not None and not _ready(policy):
        state = "has not been created yet" if policy is None else "is not Accepted (is a key Secret missing?)"
        return _not_ready(
            GatewayReason.AUTH_NOT_ACCEPTED,
            f"the API-key SecurityPolicy of {gateway_ref} {state}: "
            "Envoy Gateway answers every request with 500 until it is",
        )
    traffic = observed.get(CLIENT_TRAFFIC_POLICY)
    if not _ready(traffic):
        return _not_ready(
            GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
            f"the ClientTrafficPolicy of {gateway_ref} {_policy_state(traffic)}: Envoy keeps its 32 KiB "
            "request buffer and refuses larger request bodies (413) until it is",
        )
    accepted = readiness.policy_accepted_at(policy) if plan.spec.auth.api_keys is not None else None
    # A stamp further ahead than the bound is a clock that disagrees with ours: not judged.
    if accepted is not None and -AUTH_PUSH_BOUND < plan.now - accepted < AUTH_PUSH_BOUND:
        return _not_ready(
            GatewayReason.AUTH_LOADING,
            f"Envoy Gateway accepted the API-key SecurityPolicy of {gateway_ref} "
            f"{max(0, int((plan.now - accepted).total_seconds()))} s ago; Envoy refuses every key until "
            f"its configuration arrives (allowed {int(AUTH_PUSH_BOUND.total_seconds())} s)",
        )
    return _observer_verdict(plan, observed.get(OBSERVER), settled_template)


def auth_loaded_in(
    plan: GatewayPlan, verdict: Verdict, observed: Mapping[str, Mapping[str, Any]]
) -> timedelta | None:
    """While Envoy receives the policy: how soon to be called again to say True, not a poll later."""
    if verdict.reason != GatewayReason.AUTH_LOADING:
        return None
    accepted = readiness.policy_accepted_at(observed.get(SECURITY_POLICY))
    assert accepted is not None
    # Always more than a second: the verdict holds only while the bound has not passed.
    return accepted + AUTH_PUSH_BOUND - plan.now + timedelta(seconds=1)


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


def _status(
    plan: GatewayPlan, observed: Mapping[str, Mapping[str, Any]], settled_template: str | None
) -> dict[str, Any]:
    """What a ModelRoute needs to attach, what an operator needs to see, what we remember."""
    gateway: dict[str, Any] = {
        "name": plan.gateway_name,
        "namespace": plan.namespace,
        "listener": plan.spec.listeners[0].name,
        # Routes from other namespaces read it: with Same, Envoy Gateway refuses them.
        "allowedRoutes": plan.spec.listeners[0].allowed_routes,
    }
    auth = plan.spec.auth.api_keys
    if auth is not None:
        # Routes tell their callers that a key is needed, and in which header.
        gateway["callerAuth"] = {"header": auth.header}
    addresses = readiness.get_path(readiness.observed_manifest(observed.get(GATEWAY)), "status", "addresses")
    if isinstance(addresses, list):
        values: list[str] = [
            a["value"] for a in addresses if isinstance(a, Mapping) and isinstance(a.get("value"), str)
        ]
        if values:
            gateway["address"] = values[0]
            # Routes attach to the first listener only (sectionName), so only
            # its URL reaches a model.
            url = listener_url(plan.spec.listeners[0], values[0], client_port(plan, observed))
            if url is not None:
                gateway["url"] = url
                gateway["urls"] = [url]
    hostname = plan.spec.listeners[0].hostname
    if hostname is not None:
        gateway["hostname"] = hostname
    namespace, name = plan.deployment
    deployment: dict[str, Any] = {"name": name, "namespace": namespace}
    observer = observed.get(OBSERVER)
    manifest = readiness.observed_manifest(observer)
    # A vanished Deployment's last numbers are history, not status.
    if manifest is not None and not readiness.target_gone(observer):
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


def compose(
    xr: Mapping[str, Any],
    spec: InferenceGatewaySpec,
    inp: Input,
    observed: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> Outcome:
    """The whole InferenceGateway composition for one call; `now` is the call's clock."""
    metadata = xr.get("metadata") or {}
    plan = GatewayPlan(
        xr_name=str(metadata.get("name", "")),
        xr_namespace=str(metadata.get("namespace", "")),
        spec=spec,
        inp=inp,
        now=now or datetime.now(UTC),
        held=held_targets(observed),
        held_deployment=held_deployment(observed.get(ENVOY_PROXY)),
    )
    moved = moved_from(plan)
    if moved is not None:
        raise InvalidError(
            f"spec.namespace: this gateway's resources are in namespace {moved.namespace!r} "
            f"({moved.name}); a gateway cannot move: create a new InferenceGateway in {plan.namespace!r} "
            "and delete this one"
        )
    outcome = Outcome(resources=build_objects(plan))
    # Only caller auth, turned off in the spec, may leave; anything else
    # observed and not composed now is kept.
    keep_observed(outcome, observed, removed_by_spec)
    outcome.ready = {name: _ready(observed.get(name)) for name in outcome.resources}
    previous = readiness.get_path(xr, "status", "deployment", "settledTemplate")
    previous = previous if isinstance(previous, str) else None
    verdict = derive_verdict(plan, observed, previous)
    outcome.verdict = verdict
    outcome.ttl = auth_loaded_in(plan, verdict, observed)
    outcome.status = _status(plan, observed, settle(plan, verdict, observed.get(OBSERVER), previous))
    if verdict.changed_from(xr):
        severity = "Normal" if verdict.ready else "Warning"
        outcome.results.append((severity, verdict.reason, f"{GATEWAY_READY}: {verdict.message}"))
    return outcome
