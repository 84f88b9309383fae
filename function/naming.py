"""Names: Envoy Gateway's proxy Deployment names, and our own collision-free names.

The observer must name the Envoy Deployment exactly as Envoy Gateway does, or
it observes nothing and the gateway never becomes ready. Envoy Gateway v1.8.1
(`internal/utils/misc.go` GetHashedName, `internal/infrastructure/kubernetes/
proxy/resource.go` ExpectedResourceHashedName) names it from the string
`<gatewayNamespace>/<gatewayName>`; where it is placed is a separate choice
(`resource_provider.go` GetResourceNamespace): Envoy Gateway's own namespace,
or the Gateway's in GatewayNamespace deploy mode.

Our own names join readable parts with `-`, which alone collides across
objects (`team-a` + `gw` and `team` + `a-gw` are one string). Every joined
name therefore ends in a short hash of the parts themselves, kept apart, so
two different part lists give different names unless SHA-256 collides in 32
bits.
"""

from __future__ import annotations

import hashlib
import json

from function.api import DeploymentNaming, DeployMode

# Envoy Gateway cuts the readable part of a hashed name to this many characters.
_HASHED_NAME_LIMIT = 48
# Kubernetes object names we generate must fit a DNS label.
_DNS_LABEL_LIMIT = 63
# Hex characters of SHA-256 in our names: as Envoy Gateway uses, 32 bits.
_HASH_CHARS = 8
# Envoy Gateway's hashed names carry this prefix; our pinned names keep it so
# an operator recognises an Envoy Deployment.
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
    return f"{readable}-{digest[:_HASH_CHARS]}"


def generated_deployment_name(gateway_namespace: str, gateway_name: str) -> str:
    """The Deployment name Envoy Gateway picks in its own namespace when nothing pins it."""
    return f"{_ENVOY_PREFIX}-{hashed_name(f'{gateway_namespace}/{gateway_name}')}"


def unique_name(*parts: str, identity: tuple[str, ...] = ()) -> str:
    """`<parts joined by ->-<hash>`, cut to a DNS label, unique per (identity, parts).

    The hash covers the parts as a list (so `a-b`+`c` and `a`+`b-c` differ)
    and `identity`, which says what kind of thing is named (so a route and an
    anchor of the same readable name differ too).
    """
    digest = _sha256(json.dumps([*identity, *parts]))[:_HASH_CHARS]
    readable = "-".join(parts)[: _DNS_LABEL_LIMIT - _HASH_CHARS - 1].rstrip("-.")
    return f"{readable}-{digest}"


def looks_derived(name: str) -> bool:
    """Whether a name has the shape unique_name gives (`...-<hash>`): the shape no name taken as it
    is may have, or it could be another XR's derived name."""
    head, _, tail = name.rpartition("-")
    return bool(head) and len(tail) == _HASH_CHARS and all(ch in "0123456789abcdef" for ch in tail)


def pinned_deployment_name(gateway_namespace: str, gateway_name: str) -> str:
    """Our name for the Deployment in Pinned mode: readable, unique per Gateway.

    In Envoy Gateway's namespace it stands beside other gateways' Deployments,
    so it carries the Gateway's namespace as well as its name, and a hash so
    that `team-a/gw` and `team/a-gw` do not fight over one Deployment.
    """
    return unique_name(_ENVOY_PREFIX, gateway_namespace, gateway_name, identity=("Deployment",))


def deployment_ref(
    naming: DeploymentNaming,
    mode: DeployMode,
    *,
    gateway_namespace: str,
    gateway_name: str,
    envoy_gateway_namespace: str,
) -> tuple[str, str]:
    """(namespace, name) of the Envoy Deployment Envoy Gateway creates for a Gateway.

    Naming and placement are independent choices upstream: a pinned name is
    placed in the Gateway's namespace in GatewayNamespace mode too.
    """
    in_gateway_namespace = mode is DeployMode.GATEWAY_NAMESPACE
    namespace = gateway_namespace if in_gateway_namespace else envoy_gateway_namespace
    if naming is DeploymentNaming.PINNED:
        return namespace, pinned_deployment_name(gateway_namespace, gateway_name)
    if in_gateway_namespace:
        # GatewayNamespace mode names the Deployment after the Gateway itself.
        return namespace, gateway_name
    return namespace, generated_deployment_name(gateway_namespace, gateway_name)
