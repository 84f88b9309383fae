"""What a route reads of its gateway: its serving record, or the InferenceGateway itself.

The serving record (function/serving_record.py) is what a route requires: it
changes only when what the route decides from changes. A gateway composed by
a version before the record has none until its next reconcile; then, and
only then, the route requires the InferenceGateway too and reads it directly,
so an upgrade never turns a serving route False. So it does when the record
is not controlled by that InferenceGateway: such a record is never trusted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from function import readiness, serving_record
from function.conditions import GATEWAY_READY, last_decided
from function.outcome import Requirement
from function.upstream import DEFAULT_KEY_HEADER

# The requirement keys under which Crossplane hands us the gateway's serving
# record, and the InferenceGateway when there is no record.
SERVING_REQUIREMENT = "gateway-serving-record"
GATEWAY_REQUIREMENT = "inference-gateway"


@dataclass(frozen=True)
class CallerAuth:
    """The gateway's caller auth, as it publishes it: the header callers send their key in, and
    when auth was turned off if it was (a key is still asked for until Envoy drops the check)."""

    header: str
    removed_at: str | None = None


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
    # (namespace, name) of the gateway's ext-proc configuration index, as its serving record says;
    # None where the route read the InferenceGateway itself, or a record of an earlier version.
    extproc_config: serving_record.ExtProcConfig | None = None


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
    return CallerAuth(
        _str(readiness.get_path(raw, "header")) or DEFAULT_KEY_HEADER,
        _str(readiness.get_path(raw, "removedAt")),
    )


def gateway_requirements(
    required: Mapping[str, Sequence[Mapping[str, Any]]], ref: Requirement
) -> dict[str, Requirement]:
    """The serving record always; the InferenceGateway only once the record was looked for and is absent."""
    record = Requirement(
        api_version="v1", kind="ConfigMap", name=serving_record.record_name(ref.name), namespace=ref.namespace
    )
    wanted = {SERVING_REQUIREMENT: record}
    if SERVING_REQUIREMENT in required and _trusted_record(required, ref) is None:
        wanted[GATEWAY_REQUIREMENT] = ref
    return wanted


def _trusted_record(
    required: Mapping[str, Sequence[Mapping[str, Any]]], ref: Requirement
) -> Mapping[str, Any] | None:
    """The fetched serving record if its gateway wrote it; None if absent or another's (fail closed).

    Only once Crossplane has fetched the record (SERVING_REQUIREMENT in required).
    """
    for record in required[SERVING_REQUIREMENT]:
        if readiness.controlled_by(record, ref.api_version, ref.kind, ref.name):
            return record
    return None


def read_gateway(required: Mapping[str, Sequence[Mapping[str, Any]]], ref: Requirement) -> GatewayView:
    where = f"{ref.kind} {ref.namespace}/{ref.name}"
    if SERVING_REQUIREMENT not in required:
        return GatewayView(None, None, f"waiting for Crossplane to fetch the serving record of {where}")
    record = _trusted_record(required, ref)
    if record is not None:
        gw = serving_record.as_gateway(record)
        if gw is None:
            name = serving_record.record_name(ref.name)
            return GatewayView(
                None, None, f"the serving record of {where} (ConfigMap {ref.namespace}/{name}) is unreadable"
            )
        return replace(_view(gw, where), extproc_config=serving_record.extproc_config(record))
    # No record: a gateway an older version composed (until its next
    # reconcile), or no gateway at all; or a record its gateway did not write,
    # never trusted (readiness.controlled_by). Read the InferenceGateway itself.
    if GATEWAY_REQUIREMENT not in required:
        return GatewayView(None, None, f"waiting for Crossplane to fetch {where}")
    items = required[GATEWAY_REQUIREMENT]
    if not items:
        return GatewayView(None, None, f"{where} not found")
    xr = items[0]
    view = _view(xr, where)
    return GatewayView(
        view.attachment,
        view.ready,
        view.missing,
        paused=readiness.paused(xr),
        deleting=readiness.being_deleted(xr),
    )


def _view(gw: Mapping[str, Any], where: str) -> GatewayView:
    """Where to attach and GatewayReady as decided, from an InferenceGateway or its record read as one."""
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
    # As its function last decided it: its GatewayReady condition can be one
    # Crossplane wrote back from a stale cache (conditions.SERVING).
    return GatewayView(attachment, last_decided(gw, GATEWAY_READY))
