"""Whether the gateway's ext-proc configuration has been left alone long enough to load this route's.

Envoy AI Gateway v1.1.0 writes a Gateway's ext-proc configuration as a bundle:
each part Secret, then an index Secret holding the whole's checksum
(`internal/controller/filter_config_bundle.go`, writeFilterConfigBundle), then
it annotates every Envoy pod so the kubelet refreshes the pod's projected
volume (`gateway.go`, annotateGatewayPods). The ext-proc polls that volume
every 5 s and loads it only when the parts match the index's checksum;
otherwise it logs "bundle checksum mismatch" and keeps the configuration it
had (`internal/filterapi/watcher.go`, bundleConfigWatcher.loadConfig). While
routes are written one after another, each write starts before the last
refresh has read the one before, so a refresh can catch one write's parts
beside the previous write's index, and a pod goes on with an older
configuration until a later refresh finds them matching. Nothing says which
configuration a pod's ext-proc holds (docs/design.md, "ConfigLoading is a
bound, not evidence").

Found on the real data plane (make scale, 100 routes created in a row,
2026-12-07): one pod's ext-proc refused six refreshes over 45 s. A route
whose configuration was written at 07:02:20 said True from 07:02:57 (18 s
after its last Accepted stamp) while that pod answered its requests 500
("unknown backend") until 07:03:04.

So a route's first 60 s after its configuration was written also wait on the
index: it must have been rewritten since the route's configuration (that
write holds it), and then left alone for the load bound, so that the last
refresh read one whole write. After 60 s the route is taken as loaded
whatever the index says, so a route that serves is never held by the writes
of routes created after it; a pod whose refreshes are refused for longer
than that is not seen. The index is read as a required resource: Crossplane
v2.4.0 reads Secrets past its cache (`cmd/crossplane/core/core.go`,
`DisableFor: Secret`), so it is one GET a call while the route waits, no
watch and no informer, and every route of a gateway reads the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from function import readiness
from function.outcome import Requirement
from function.serving_record import WHOLE, ExtProcConfig

# The key Crossplane hands the index Secret under.
REQUIREMENT = "extproc-config-index"
# How long after its configuration was written a route waits on the index at most: the 45 s one pod's
# ext-proc refused refreshes for (above), with room.
FIRST_LOAD_BOUND = timedelta(seconds=60)
# How soon to read the index again while it has not been rewritten since the route's configuration:
# Envoy AI Gateway rewrites it within a reconcile, and nothing wakes the route when it does.
_REREAD = timedelta(seconds=5)
_SECOND = timedelta(seconds=1)


def waits(written: datetime | None, now: datetime) -> bool:
    """Whether the route's configuration, written at `written`, is young enough to wait on the index."""
    return written is not None and now - written < FIRST_LOAD_BOUND


def requirements(
    location: ExtProcConfig | None, written: datetime | None, now: datetime
) -> dict[str, Requirement]:
    """The index Secret, while the route waits on it and its gateway says where it is."""
    if location is None or location == WHOLE or not waits(written, now):
        return {}
    namespace, name = location
    return {REQUIREMENT: Requirement(api_version="v1", kind="Secret", name=name, namespace=namespace)}


@dataclass(frozen=True)
class Hold:
    """Why RoutingReady waits on the index, and when to look again."""

    # Stamps, never ages: a message that changed with every call would be a status write with every
    # call, and each write to the XR calls the function again.
    message: str
    recheck_in: timedelta


def hold(
    location: ExtProcConfig | None,
    required: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    written: datetime | None,
    rewritten_after: datetime | None,
    now: datetime,
    settle: timedelta,
) -> Hold | None:
    """None once the route's configuration is taken as loaded: past FIRST_LOAD_BOUND after
    `written` (the route's whole configuration), or the index rewritten at or after
    `rewritten_after` (the stamps of Envoy AI Gateway's own, which it writes the index after; a stamp
    in the same second cannot be placed before it, and the route's event queues a later write) and
    left alone for `settle`.

    Clocks: the index's write is the API server's time, the stamps Envoy AI Gateway's and `now` the
    function's. A function clock ahead by d shortens the settle by d, as it shortens the 18 s bound."""
    if written is None or not waits(written, now) or location == WHOLE:
        # WHOLE: one Secret, one volume, swapped whole: the load bound alone covers it.
        return None
    cap = written + FIRST_LOAD_BOUND
    at_most = (
        f"; held at most until {readiness.stamp_up(cap)}, {int(FIRST_LOAD_BOUND.total_seconds())} s after "
        f"this route's configuration was written at {readiness.stamp(written)}"
    )
    until_cap = cap - now + _SECOND
    if location is None:
        return Hold(
            "its gateway's serving record does not say where Envoy AI Gateway writes the ext-proc "
            "configuration (a record of an earlier version, until the gateway's next reconcile)" + at_most,
            until_cap,
        )
    namespace, name = location
    index = f"Secret {namespace}/{name}"
    if REQUIREMENT not in required:
        return Hold(
            f"waiting for Crossplane to fetch {index}, the ext-proc configuration's index" + at_most,
            until_cap,
        )
    found = required[REQUIREMENT]
    last = readiness.data_written_at(found[0]) if found else None
    if last is None or last < (rewritten_after or written):
        return Hold(
            f"Envoy AI Gateway has not rewritten the gateway's ext-proc configuration ({index}) since "
            "this route's was written" + at_most,
            min(_REREAD, until_cap),
        )
    if now - last < settle:
        return Hold(
            f"Envoy AI Gateway is rewriting the gateway's ext-proc configuration ({index}); each Envoy "
            f"pod's ext-proc loads it once it is left alone for {int(settle.total_seconds())} s, and "
            "keeps an older one while it reads one half-written (bundle checksum mismatch)" + at_most,
            min(last + settle, cap) - now + _SECOND,
        )
    return None
