"""The InferenceGateway's manifest bodies: typed plan in, manifest out.

Pinned by the expected renders and validated against the upstream CRDs, both
out of process; mutation testing covers what decides truth, so it skips this
module.
"""

from __future__ import annotations

from typing import Any

from function.api import APIKeyAuth, DeploymentNaming, Listener, SpreadPolicy
from function.gateway.plan import GatewayPlan
from function.objects import gateway_ref, target_ref
from function.upstream import TOKEN_METADATA_NAMESPACE, TOKEN_USAGE_COSTS

# Where Gateway API sends an https redirect that names no port.
HTTPS_PORT = 443


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
        "targetRefs": [gateway_ref(plan.gateway_name)],
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
        "targetRefs": [gateway_ref(plan.gateway_name)],
        "connection": {"bufferLimit": plan.spec.request_buffer_limit},
    }
    if plan.spec.health_check_path is not None:
        manifest["spec"]["healthCheck"] = {"path": plan.spec.health_check_path}
    return manifest


def build_https_redirect(plan: GatewayPlan) -> dict[str, Any]:
    """An HTTPRoute on each redirecting listener: every request answered 301 to the first listener
    (HTTPS, where ModelRoutes attach), same path.

    Envoy answers it itself (a route redirect): Envoy AI Gateway's ext-proc is
    enabled only on the routes it generates (v1.1.0 internal/extensionserver/
    post_translate_modify.go), and no AI route attaches to these listeners
    (the anchor names the others), so its catch-all 404 cannot win here.
    """
    target = plan.spec.listeners[0]
    redirect: dict[str, Any] = {"scheme": "https", "statusCode": 301}
    # An HTTPS listener with a host name takes TLS for that name only: a client that came by
    # address must be sent to the name. A wildcard names no host: the request's is kept.
    if target.hostname is not None and not target.hostname.startswith("*"):
        redirect["hostname"] = target.hostname
    # Gateway API: with the scheme set and no port, the redirect goes to 443.
    if target.port != HTTPS_PORT:
        redirect["port"] = target.port
    manifest = target_ref(
        plan.inp.api_versions.gateway_api, "HTTPRoute", plan.https_redirect_name, plan.namespace
    )
    manifest["spec"] = {
        "parentRefs": [
            gateway_ref(plan.gateway_name, section=listener.name) for listener in plan.spec.redirecting
        ],
        "rules": [{"filters": [{"type": "RequestRedirect", "requestRedirect": redirect}]}],
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
