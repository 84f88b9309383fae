"""What a route reads of its gateway: the InferenceGateway Crossplane fetched for this call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function import readiness
from function.conditions import GATEWAY_READY, last_decided
from function.outcome import Requirement
from function.upstream import DEFAULT_KEY_HEADER

# The requirement key under which Crossplane hands us the InferenceGateway.
GATEWAY_REQUIREMENT = "inference-gateway"


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
    # The gateway's GatewayReady as its function last decided it, if it has one.
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
        # As its function last decided it: its GatewayReady condition can be one
        # Crossplane wrote back from a stale cache (conditions.SERVING).
        last_decided(gw, GATEWAY_READY),
        paused=readiness.paused(gw),
        deleting=readiness.get_path(gw, "metadata", "deletionTimestamp") is not None,
    )
