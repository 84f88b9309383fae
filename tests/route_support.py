"""What the ModelRoute tests share: the example route, its gateway in each state, its composed resources."""

from __future__ import annotations

import copy
from typing import Any

from function import claims
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    by_resource_name,
    compose,
    gateway_fetched,
    load_yaml,
    stamp_ago,
)

XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
READY_GW = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")[0]
READY_AUTH_GW = load_yaml(EXAMPLES / "model-route" / "required" / "ready-auth" / "inference-gateway.yaml")[0]
ROLLING_GW = load_yaml(EXAMPLES / "model-route" / "required" / "rolling-out" / "inference-gateway.yaml")[0]
COMPOSED = by_resource_name(load_yaml(EXAMPLES / "model-route" / "observed" / "composed" / "resources.yaml"))
# The gateway observer is composed from the gatewayRef alone, on every call.
OBSERVER_ONLY = {"gateway-observer"}
ALL_NAMES = OBSERVER_ONLY | {
    "route",
    "backend-vllm",
    "service-backend-vllm",
    "backend-hosted",
    "service-backend-hosted",
    "security-policy-hosted",
    "traffic-policy",
}


# The example route's own HTTPRoute as Envoy Gateway translated it, required on every call.
HTTPROUTE = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "httproute.yaml")[0]
HTTPROUTE_KEY = claims.httproute_key((HTTPROUTE["metadata"]["namespace"], HTTPROUTE["metadata"]["name"]))

NOT_FETCHED: dict[str, list[dict[str, Any]]] = {}
# No serving record and no InferenceGateway (the record looked for, then the XR); the route's own
# HTTPRoute, from when it was composed.
ABSENT: dict[str, list[dict[str, Any]]] = {
    SERVING_REQUIREMENT: [],
    GATEWAY_REQUIREMENT: [],
    HTTPROUTE_KEY: [HTTPROUTE],
}


def gw_required(gw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What Crossplane hands the example route of this gateway: its serving record (or the XR), and
    its own HTTPRoute, translated."""
    return gateway_fetched(gw) | {HTTPROUTE_KEY: [HTTPROUTE]}


def served_required(xr: dict[str, Any], gw: dict[str, Any] = READY_GW) -> dict[str, list[dict[str, Any]]]:
    """`gw_required`, with the route's HTTPRoute made of `xr`'s spec (its model or backends changed)
    and translated: what Crossplane hands once Envoy routes that spec."""
    resources = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(gw)).resources
    return gw_required(gw) | {HTTPROUTE_KEY: [httproute_made_of(resources)]}


def spec_written(observed: dict[str, dict[str, Any]], name: str, seconds: float, **entry: Any) -> None:
    """provider-kubernetes' apply of `name`'s target spec `seconds` ago (second precision, as the
    API server stamps it): a managedFields entry on the target as observed; `entry` overrides its
    fields."""
    manifest = observed[name]["status"]["atProvider"]["manifest"]
    manifest.setdefault("metadata", {}).setdefault("managedFields", []).append(
        {"manager": "provider-kubernetes/llama-route", "operation": "Apply", "time": stamp_ago(seconds)}
        | {"fieldsV1": {"f:spec": {"f:rules": {}}}}
        | entry
    )


def without_status_gateway(gw: dict[str, Any]) -> dict[str, Any]:
    gw = copy.deepcopy(gw)
    del gw["status"]["gateway"]
    return gw


def unaccepted(observed: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    observed = copy.deepcopy(observed)
    observed[name]["status"]["conditions"][0]["status"] = "False"
    return observed


GATEWAY_STATES = {
    "the gateway is ready": gw_required(READY_GW),
    "the gateway is rolling out": gw_required(ROLLING_GW),
    "the gateway is absent": ABSENT,
    "the gateway was not fetched yet": NOT_FETCHED,
    "the gateway has not published where to attach": gw_required(without_status_gateway(READY_GW)),
}


def xr_saying(status: str, reason: str, message: str) -> dict[str, Any]:
    """The route XR with the RoutingReady a previous call wrote."""
    xr = copy.deepcopy(XR)
    xr["status"] = {
        "conditions": [
            {
                "type": "RoutingReady",
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-11-29T12:00:00Z",
            },
            # Not what this call would decide (every composed backend serves), so
            # repeating it is seen to come from the XR.
            {"type": "BackendsServing", "status": "True", "reason": "Degraded", "message": "1 of 2 serve"},
        ]
    }
    return xr


def backend_of_schema(schema: str, **auth: Any) -> dict[str, Any]:
    """A hosted backend of this API schema, with these auth fields."""
    return {
        "name": "b",
        "endpoint": {"hostname": "api.example.com", "port": 443},
        # Azure OpenAI needs its api-version; the other schemas take none.
        "schema": {"name": schema} | ({"version": "2025-01-01-preview"} if schema == "AzureOpenAI" else {}),
        **auth,
    }


def target_name(obj: dict[str, Any]) -> str:
    """The name of the object an Object manages."""
    return str(obj["spec"]["forProvider"]["manifest"]["metadata"]["name"])


def with_exemption() -> dict[str, dict[str, Any]]:
    """The composed route plus the exemption Object an older version composed, Ready."""
    return copy.deepcopy(COMPOSED) | {"auth-exemption": copy.deepcopy(COMPOSED["route"])}


def httproute_made_of(resources: dict[str, Any], created: str = "2026-11-29T12:00:00Z") -> dict[str, Any]:
    """`made_of`, as Envoy Gateway translated it (`translated`)."""
    return translated(made_of(resources, created))


def made_of(resources: dict[str, Any], created: str = "2026-11-29T12:00:00Z") -> dict[str, Any]:
    """The HTTPRoute Envoy AI Gateway makes of the AIGatewayRoute among `resources` (Objects by
    composition-resource-name), as v1.1.0 `newHTTPRoute` writes it: per rule its matches on the
    root path, the Backend each AIServiceBackend names with the rule's weight, and its timeouts (a
    request timeout of 60 s where none is set); the catch-all 404 rule after them; the
    backend-ref-priority annotation (`buildPriorityAnnotation`: rule index, AIServiceBackend,
    priority); the AIGatewayRoute's parentRefs."""
    # A model check is provider-http's Request: no manifest.
    manifests = [
        o["spec"]["forProvider"]["manifest"]
        for o in resources.values()
        if "manifest" in o["spec"]["forProvider"]
    ]
    backend_of = {
        m["metadata"]["name"]: m["spec"]["backendRef"] for m in manifests if m["kind"] == "AIServiceBackend"
    }
    route = resources["route"]["spec"]["forProvider"]["manifest"]
    root = {"type": "PathPrefix", "value": "/"}
    rules: list[dict[str, Any]] = [
        {
            "matches": [{"headers": m["headers"], "path": root} for m in rule.get("matches", [])],
            "backendRefs": [
                {**backend_of[ref["name"]], "weight": ref["weight"]} for ref in rule.get("backendRefs", [])
            ],
            "timeouts": {"request": "60s"} | rule.get("timeouts", {}),
        }
        for rule in route["spec"]["rules"]
    ]
    rules.append({"name": "route-not-found", "matches": [{"path": root}]})
    priorities = ",".join(
        f"{i}:{ref['name']}:{ref.get('priority', 0)}"
        for i, rule in enumerate(route["spec"]["rules"])
        for ref in rule.get("backendRefs", [])
    )
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": route["metadata"]["name"],
            "namespace": route["metadata"]["namespace"],
            "creationTimestamp": created,
            "annotations": {"gateway.envoyproxy.io/backend-ref-priority": priorities},
        },
        "spec": {"parentRefs": route["spec"]["parentRefs"], "rules": rules},
    }


# What Envoy Gateway v1.8.3 writes of an HTTPRoute it translated for a parent (`status/route.go`:
# each condition stamped with the generation translated), as the controller name it runs under.
EG_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"


def translated(route: dict[str, Any], generation: int = 1, judged: int | None = None) -> dict[str, Any]:
    """`route` (an HTTPRoute) at `generation`, with Envoy Gateway's status for each of its parents:
    Accepted and ResolvedRefs True, of generation `judged` (the current one unless said)."""
    out = copy.deepcopy(route)
    out["metadata"]["generation"] = generation
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": kind,
            "message": "Route is accepted"
            if kind == "Accepted"
            else "Resolved all the Object references for the Route",
            "observedGeneration": generation if judged is None else judged,
            "lastTransitionTime": "2026-11-29T12:00:01Z",
        }
        for kind in ("Accepted", "ResolvedRefs")
    ]
    out["status"] = {
        "parents": [
            {"parentRef": dict(ref), "controllerName": EG_CONTROLLER, "conditions": copy.deepcopy(conditions)}
            for ref in out["spec"]["parentRefs"]
        ]
    }
    return out


def accepted_ago(name: str, seconds: float) -> dict[str, dict[str, Any]]:
    """The composed route with `name`'s target stamped Accepted `seconds` ago by its controller."""
    observed = copy.deepcopy(COMPOSED)
    stamp = stamp_ago(seconds)
    manifest = observed[name]["status"]["atProvider"]["manifest"]
    manifest.setdefault("status", {})["conditions"] = [
        {
            "type": "Accepted",
            "status": "True",
            "reason": "ReconciliationSucceeded",
            "lastTransitionTime": stamp,
        }
    ]
    return observed
