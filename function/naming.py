"""Names: Envoy Gateway's proxy Deployment names, and our own bounded names.

The observer must name the Envoy Deployment exactly as Envoy Gateway does, or
it observes nothing and the gateway never becomes ready. Envoy Gateway v1.8.1
(`internal/utils/misc.go` GetHashedName, `internal/infrastructure/kubernetes/
proxy/resource.go` ExpectedResourceHashedName) names it from the string
`<gatewayNamespace>/<gatewayName>`.
"""

from __future__ import annotations

import hashlib

from function.api import DeploymentNaming

# Envoy Gateway cuts the readable part of a hashed name to this many characters.
_HASHED_NAME_LIMIT = 48
# Kubernetes object names we generate must fit a DNS label.
_DNS_LABEL_LIMIT = 63
# Envoy Gateway's namespace-mode and hashed names carry this prefix.
_ENVOY_PREFIX = "envoy"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hashed_name(name: str, limit: int = _HASHED_NAME_LIMIT) -> str:
    """Envoy Gateway's GetHashedName: readable part, then 8 hex of SHA-256."""
    digest = _sha256(name)
    readable = name.replace("/", "-")
    if len(readable) > limit:
        # Envoy Gateway drops exactly one trailing hyphen after cutting.
        readable = readable[:limit].removesuffix("-")
    return f"{readable}-{digest[:8]}"


def generated_deployment_name(gateway_namespace: str, gateway_name: str) -> str:
    """The Deployment name Envoy Gateway picks when nothing pins it."""
    return f"{_ENVOY_PREFIX}-{hashed_name(f'{gateway_namespace}/{gateway_name}')}"


def bounded_name(*parts: str) -> str:
    """Join parts with '-'; if too long for a DNS label, cut and add a hash.

    The hash covers the full joined name, so two long names that share a
    prefix still differ.
    """
    name = "-".join(parts)
    if len(name) <= _DNS_LABEL_LIMIT:
        return name
    head = name[: _DNS_LABEL_LIMIT - 9].rstrip("-")
    return f"{head}-{_sha256(name)[:8]}"


def pinned_deployment_name(gateway_namespace: str, gateway_name: str) -> str:
    """Our name for the Deployment in Pinned mode: readable, unique per gateway.

    It lives in Envoy Gateway's namespace beside other gateways' Deployments,
    so it carries the gateway's namespace as well as its name.
    """
    return bounded_name(_ENVOY_PREFIX, gateway_namespace, gateway_name)


def deployment_ref(
    naming: DeploymentNaming,
    *,
    gateway_namespace: str,
    gateway_name: str,
    envoy_gateway_namespace: str,
) -> tuple[str, str]:
    """(namespace, name) of the Envoy Deployment for a gateway."""
    if naming is DeploymentNaming.GATEWAY_NAMESPACE:
        return gateway_namespace, gateway_name
    if naming is DeploymentNaming.PINNED:
        return envoy_gateway_namespace, pinned_deployment_name(gateway_namespace, gateway_name)
    return envoy_gateway_namespace, generated_deployment_name(gateway_namespace, gateway_name)
