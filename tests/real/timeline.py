"""What the XRs said, and when: each one's published decision as a watch delivered it (issues #31, #32).

A scale run asks how late N routes said RoutingReady False after their gateway
said it was not ready. Listing every route twice a second answered late by up
to the poll and the list's own time, and loaded the API server it measured; the
function's own decisions answer early, since a decision is published only once
Crossplane has applied the XR's composed resources and written its status. A
watch delivers every status write as the API server commits it, on one stream
per kind: what a client sees. `Watcher` records what it delivers; `outage`
reads one gateway outage from the record, and is pure (table-tested in
tests/test_real_harness.py).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.real.prober import said

if TYPE_CHECKING:
    from tests.real.kube import Kube


@dataclass(frozen=True)
class Seen:
    """One XR's published word, from when the watch delivered it until its next."""

    at: float
    xr: str  # "<Kind> <namespace>/<name>"
    decided: bool  # what its function last decided (status.serving, as prober.said reads it)
    condition: bool  # whether its main condition says True


@dataclass(frozen=True)
class Outage:
    """The routes over the first outage of their gateway after a moment, by one reading of their word."""

    down: float  # when the gateway's not-ready word arrived
    up: float  # when its ready word arrived again (inf: not yet)
    follow: list[
        float
    ]  # per route, seconds from `down` to its not-ready word (0: it said so first; inf: never)
    route_seconds: float  # seconds each route said ready while its gateway said not ready, summed
    true_again: list[str]  # routes that said ready again after not ready, while the gateway said not ready
    back: float  # seconds from `up` until the last route said ready again (inf: one did not)


def outage(
    seen: Sequence[Seen],
    gateway: str,
    routes: Sequence[str],
    since: float,
    *,
    until: float,
    by: Callable[[Seen], bool],
) -> Outage | None:
    """The gateway's first outage after `since`, read with `by` (decided or condition) until `until`;
    None if the gateway said nothing but ready after `since`."""
    words = sorted(seen, key=lambda s: s.at)
    gw = [s for s in words if s.xr == gateway]
    down = next((s.at for s in gw if s.at >= since and not by(s)), None)
    if down is None:
        return None
    up = next((s.at for s in gw if s.at > down and by(s)), math.inf)
    end = min(up, until)
    follow: list[float] = []
    true_again: list[str] = []
    route_seconds = 0.0
    back = 0.0
    for route in routes:
        said_by = [s for s in words if s.xr == route]
        at = [s.at for s in said_by]
        ready = [by(s) for s in said_by]

        def word(t: float, at: list[float] = at, ready: list[bool] = ready) -> bool | None:
            i = bisect.bisect_right(at, t) - 1
            return ready[i] if i >= 0 else None

        # The route's word at `down`, then each change of it until the gateway's return.
        steps = [(down, word(down))] + [(t, r) for t, r in zip(at, ready, strict=True) if down < t < end]
        first_false = next((t for t, r in steps if r is False), math.inf)
        follow.append(first_false - down)
        if any(r for t, r in steps if t > first_false):
            true_again.append(route)
        for (t, r), nxt in zip(steps, [*(t for t, _ in steps[1:]), end], strict=True):
            if r:
                route_seconds += nxt - t
        if up < math.inf:
            back = max(back, _ready_after(at, ready, up) - up)
    return Outage(down, up, follow, route_seconds, true_again, back if up < math.inf else math.inf)


def _ready_after(at: list[float], ready: list[bool], t: float) -> float:
    """When the route said ready at or after t, to stay so: inf if its last word is not ready."""
    if not ready or not ready[-1]:
        return math.inf
    # The last word that was not ready; the word after it is when it turned ready for good.
    last_not = max((i for i, r in enumerate(ready) if not r), default=-1)
    turned = at[last_not + 1] if last_not >= 0 else -math.inf
    return max(t, turned)


@dataclass
class Watcher:
    """Watches of the gateways' and routes' kinds, recording each XR's word whenever it changes."""

    kube: Kube
    kinds: Sequence[tuple[str, str, str]]  # (apiVersion, kind, namespace)
    seen: list[Seen] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _last: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Watcher:
        for api_version, kind, namespace in self.kinds:
            t = threading.Thread(
                target=self._watch, args=(api_version, kind, namespace), name=f"watch {kind}", daemon=True
            )
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)

    def words(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def knows(self, xrs: Sequence[str]) -> bool:
        """Whether each of the XRs has said something yet (the watch's first delivery is in)."""
        with self._lock:
            return all(x in self._last for x in xrs)

    def _watch(self, api_version: str, kind: str, namespace: str) -> None:
        try:
            self.kube.watch(api_version, kind, namespace, self._stop, self._record)
        except Exception as e:
            self.errors.append(f"watch of {kind}: {type(e).__name__}: {e}")

    def _record(self, event: str, obj: dict[str, Any], at: float) -> None:
        if event == "DELETED":
            return
        kind, meta = obj["kind"], obj["metadata"]
        xr = f"{kind} {meta.get('namespace')}/{meta['name']}"
        word = said(obj, "GatewayReady" if kind == "InferenceGateway" else "RoutingReady")
        with self._lock:
            if self._last.get(xr) != word:
                self._last[xr] = word
                self.seen.append(Seen(at, xr, *word))
