"""The gateway's serving record: the one object a ModelRoute reads of its gateway.

An InferenceGateway composes a ConfigMap that holds what its routes act on,
and nothing else: where they attach (`status.gateway`) and whether the
gateway serves, as its function last decided (GatewayReady's status and
reason, never its message). Routes require this ConfigMap instead of the
InferenceGateway, because Crossplane v2.4 wakes a route on every write of
what it requires, and the InferenceGateway's status is written at every step
of an Envoy rollout (replica counts, GatewayReady's message): at 100 routes
that was 3 to 4 route reconciles per gateway transition, each one server-side
apply per composed Object (issue #31, `make scale`). The record changes when
what routes decide from changes, and only then.

It is also never written back stale: Crossplane applies it from the
function's desired state, where a condition or `status.serving` can come back
from Crossplane's cache (crossplane/crossplane#7062, issue #32).

It is trusted only when its controller is the InferenceGateway the route
names, at the apiVersion the route's Input names (`readiness.controlled_by`): a record
says which Gateway a route attaches to, and anyone who may write ConfigMaps
in the gateway's namespace can write one of this name (before the gateway
exists, say), pointing routes at a Gateway without caller auth. Crossplane
makes the XR the controller of all it composes, and refuses to apply over an
object another controls, so a record it wrote always passes; any other is
ignored, and the route reads the InferenceGateway itself.

Written and read here only, so the format has one source of truth.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from function import naming

# The record's keys.
_GATEWAY = "gateway"
_READY = "ready"
_REASON = "reason"
# The first listener's spec as the record's `gateway` was published for: the gateway's own memory of
# what Envoy was last told routes attach to (routes do not read it).
_LISTENER = "listener"
# Where Envoy AI Gateway writes the index of the gateway's ext-proc configuration: a young route waits
# until the configuration written after its own has been left alone long enough to load
# (function/route/extproc_config.py).
_EXTPROC_CONFIG = "extProcConfig"
# What the record says where Envoy AI Gateway writes the configuration as one Secret (before v1.1.0,
# which writes no bundle): mounted as one volume and swapped whole, nothing half-written to wait out.
WHOLE: Final = "whole"
# (namespace, name) of a bundle's index, or WHOLE.
ExtProcConfig = tuple[str, str] | Literal["whole"]


def record_name(gateway_xr_name: str) -> str:
    """The record's name, from the InferenceGateway's: routes derive it from their gatewayRef."""
    return naming.unique_name(gateway_xr_name, "serving", identity=("InferenceGateway",))


def build(
    name: str,
    namespace: str,
    gateway: Mapping[str, Any],
    *,
    ready: bool,
    reason: str,
    listener: Mapping[str, Any] | None = None,
    extproc_config: ExtProcConfig | None = None,
) -> dict[str, Any]:
    """The ConfigMap: the published `status.gateway`, GatewayReady as decided, the first listener's
    spec that `gateway` was published for, and where the ext-proc configuration's index is
    (namespace, name)."""
    data = {
        _GATEWAY: _compact(gateway),
        _READY: "True" if ready else "False",
        _REASON: reason,
    }
    if listener is not None:
        data[_LISTENER] = _compact(listener)
    if extproc_config == WHOLE:
        data[_EXTPROC_CONFIG] = _compact({WHOLE: True})
    elif extproc_config is not None:
        at, index = extproc_config
        data[_EXTPROC_CONFIG] = _compact({"namespace": at, "name": index})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def _compact(value: Mapping[str, Any]) -> str:
    # Sorted and compact: one value, one string, call after call.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _read(record: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    """One JSON object the record holds under `key`; None where it holds none or it cannot be read."""
    data = record.get("data") if isinstance(record, Mapping) else None
    raw = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def published_listener(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The first listener's spec the record was published for; None where it says none (a record of
    an earlier version) or cannot be read."""
    return _read(record, _LISTENER)


def extproc_config(record: Mapping[str, Any] | None) -> ExtProcConfig | None:
    """(namespace, name) of the gateway's ext-proc configuration index, or WHOLE; None where the record
    says none (one of an earlier version) or it cannot be read."""
    where = _read(record, _EXTPROC_CONFIG) or {}
    if where.get(WHOLE) is True:
        return WHOLE
    namespace, name = where.get("namespace"), where.get("name")
    if isinstance(namespace, str) and namespace and isinstance(name, str) and name:
        return namespace, name
    return None


def as_gateway(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record read back as the part of an InferenceGateway a route reads, or None if unreadable.

    Shaped as the XR (`status.gateway`, `status.serving`), so one reader
    serves both the record and an InferenceGateway read directly.
    """
    data = record.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get(_GATEWAY), str):
        return None
    try:
        gateway = json.loads(data[_GATEWAY])
    except (ValueError, RecursionError):
        # Anything that is not one JSON object of bounded depth is unreadable:
        # the route says so (False), never a crash that keeps its last conditions.
        return None
    if not isinstance(gateway, dict):
        return None
    status: dict[str, Any] = {_GATEWAY: gateway}
    ready, reason = data.get(_READY), data.get(_REASON)
    if ready in ("True", "False") and isinstance(reason, str) and reason:
        status["serving"] = {"ready": ready == "True", "reason": reason}
    return {"status": status}
