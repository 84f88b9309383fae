"""Manifests the validator must reject, each with the message it must give.

A validator that never fails proves nothing; these show it catches the
mistakes that matter to this project.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tests.k8s_schema import Registry, validate_object

ROUTE: dict[str, Any] = {
    "apiVersion": "aigateway.envoyproxy.io/v1beta1",
    "kind": "AIGatewayRoute",
    "metadata": {"name": "r", "namespace": "team-a"},
    "spec": {
        "parentRefs": [{"name": "inference", "kind": "Gateway", "group": "gateway.networking.k8s.io"}],
        "rules": [{"matches": [{"headers": [{"type": "Exact", "name": "x-ai-eg-model", "value": "m"}]}]}],
    },
}
BACKEND: dict[str, Any] = {
    "apiVersion": "gateway.envoyproxy.io/v1alpha1",
    "kind": "Backend",
    "metadata": {"name": "b", "namespace": "team-a"},
    "spec": {"endpoints": [{"fqdn": {"hostname": "vllm.example", "port": 8000}}]},
}
OBJECT: dict[str, Any] = {
    "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
    "kind": "Object",
    "metadata": {"name": "o", "namespace": "platform"},
    "spec": {
        "forProvider": {
            "manifest": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d", "namespace": "n"},
            }
        },
        "readiness": {"policy": "DeriveFromCelQuery", "celQuery": "true"},
    },
}


AUTH_GATEWAY: dict[str, Any] = {
    "apiVersion": "ai.example.org/v1alpha1",
    "kind": "InferenceGateway",
    "metadata": {"name": "inference", "namespace": "platform"},
    "spec": {"auth": {"apiKeys": {"secretRefs": [{"name": "client-keys"}]}}},
}


HTTPS_LISTENER = {
    "name": "https",
    "protocol": "HTTPS",
    "port": 443,
    "tls": {"certificateRefs": [{"name": "inference-tls"}]},
}


def changed(base: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


@dataclass(frozen=True)
class Bad:
    name: str
    manifest: dict[str, Any]
    message: str


KNOWN_BAD = [
    Bad(
        "a misspelt field in an AIGatewayRoute",
        changed(ROUTE, ("spec", "rulez"), []),
        "'rulez' was unexpected",
    ),
    Bad(
        "a Backend mixing FQDN and IP endpoints",
        changed(
            BACKEND,
            ("spec", "endpoints"),
            [{"fqdn": {"hostname": "a.example", "port": 80}}, {"ip": {"address": "10.0.0.1", "port": 80}}],
        ),
        "fqdn addresses cannot be mixed with other address types",
    ),
    Bad(
        "an AIGatewayRoute with 16 rules",
        changed(ROUTE, ("spec", "rules"), ROUTE["spec"]["rules"] * 16),
        "has 16 items, at most 15",
    ),
    Bad(
        "an Object with an unknown readiness policy",
        changed(OBJECT, ("spec", "readiness", "policy"), "WhenItFeelsRight"),
        "is not one of",
    ),
    Bad(
        "an Object deriving readiness from an empty CEL query",
        changed(OBJECT, ("spec", "readiness", "celQuery"), ""),
        "celQuery",
    ),
    Bad(
        "an AIGatewayRoute attached to something other than a Gateway",
        changed(ROUTE, ("spec", "parentRefs", 0, "kind"), "Service"),
        "only Gateway is supported",
    ),
    Bad(
        "a Backend port out of range",
        changed(BACKEND, ("spec", "endpoints", 0, "fqdn", "port"), 70000),
        "70000 is greater than the maximum",
    ),
    Bad(
        "an Object manifest of an AI Gateway kind with a bad field",
        changed(
            OBJECT,
            ("spec", "forProvider", "manifest"),
            changed(ROUTE, ("spec", "rules", 0, "timeouts"), {"request": "soon"}),
        ),
        "does not match",
    ),
    *[
        Bad(
            f"listeners the Gateway API CRD would refuse the Gateway for ({name})",
            changed(AUTH_GATEWAY, ("spec", "listeners"), listeners),
            "the combination of port, protocol and hostname must be unique for each listener",
        )
        for name, listeners in (
            ("one port and protocol, no hostnames", [{"name": "a"}, {"name": "b"}]),
            (
                "one port, protocol and hostname",
                [{"name": "a", "hostname": "x.example.com"}, {"name": "b", "hostname": "x.example.com"}],
            ),
        )
    ],
    *[
        Bad(
            f"a redirect to HTTPS the gateway cannot serve ({name})",
            changed(AUTH_GATEWAY, ("spec", "listeners"), listeners),
            message,
        )
        for name, listeners, message in (
            (
                "on the first listener, where ModelRoutes attach",
                [{"name": "http", "httpsRedirect": True}, HTTPS_LISTENER],
                "httpsRedirect sends clients to the first listener",
            ),
            (
                "to an HTTPS listener that is not where the models are",
                [{"name": "a"}, HTTPS_LISTENER, {"name": "b", "port": 8080, "httpsRedirect": True}],
                "httpsRedirect sends clients to the first listener",
            ),
            (
                "from an HTTPS listener",
                [HTTPS_LISTENER, {**HTTPS_LISTENER, "name": "b", "port": 8443, "httpsRedirect": True}],
                "an HTTPS listener cannot redirect to HTTPS",
            ),
        )
    ],
    Bad(
        "a redirect to HTTPS behind a NodePort Service",
        changed(
            changed(
                AUTH_GATEWAY, ("spec", "listeners"), [HTTPS_LISTENER, {"name": "http", "httpsRedirect": True}]
            ),
            ("spec", "envoy"),
            {"serviceType": "NodePort"},
        ),
        "httpsRedirect cannot name the node port NodePort clients use",
    ),
    *[
        Bad(f"a health check path {name}", changed(AUTH_GATEWAY, ("spec", "healthCheckPath"), path), message)
        for name, path, message in (
            ("under the models' paths", "/v1/chat/completions", "under a path Envoy AI Gateway serves"),
            ("equal to a models' path segment", "/anthropic", "under a path Envoy AI Gateway serves"),
            ("with a character outside ASCII", "/a\u00a0b", "does not match"),
        )
    ],
    *[
        Bad(
            f"caller auth that would exempt routes ({name})",
            changed(AUTH_GATEWAY, ("spec", "auth", "apiKeys", "routeNamespaces"), covers),
            "only from All (without names) is accepted",
        )
        for name, covers in (
            ("from Same", {"from": "Same"}),
            ("from Names", {"from": "Names", "names": ["team-a"]}),
            ("from All with names", {"from": "All", "names": ["team-a"]}),
        )
    ],
]


def errors_for(reg: Registry, case: Bad) -> list[str]:
    if case.manifest["kind"] == "Object":
        return validate_object(reg, case.manifest, case.name).errors
    return reg.validate(case.manifest, case.name).errors


def rejected(reg: Registry, case: Bad) -> bool:
    return any(case.message in e for e in errors_for(reg, case))
