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

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.real.prober import said
from tests.real.report import condition, ts

if TYPE_CHECKING:
    from tests.real.kube import Kube


@dataclass(frozen=True)
class Seen:
    """One XR's published word, from when the watch delivered it until its next."""

    at: float
    xr: str  # "<Kind> <namespace>/<name>"
    decided: bool  # what its function last decided (status.serving, as prober.said reads it)
    condition: bool  # whether its main condition says True
    since: float | None = None  # its main condition's lastTransitionTime (whole seconds)


@dataclass(frozen=True)
class Outage:
    """The routes over the first outage of their gateway after a moment, by one reading of their word.

    The outage runs from the gateway's first not-ready word to the ready word after its last
    not-ready one: a gateway that flaps back for a moment is still out, and only the seconds
    it says not ready count against a route that says ready.
    """

    down: float  # when the gateway's not-ready word arrived
    up: float  # when its ready word after its last not-ready one arrived (inf: not yet)
    # Per route, seconds from `down` to its not-ready word (0: it said so first; inf: never).
    follow: list[float]
    route_seconds: float  # seconds each route said ready while its gateway said not ready, summed
    true_again: list[str]  # routes that said ready after not ready, while the gateway said not ready
    back: float  # seconds from `up` until the last route said ready for good (inf: one has not)


def outage(
    seen: Sequence[Seen],
    gateway: str,
    routes: Sequence[str],
    since: float,
    *,
    until: float,
    by: Callable[[Seen], bool],
    judge: Sequence[Seen] | None = None,
) -> Outage | None:
    """The gateway's first outage after `since`, read with `by` (decided or condition) from the
    words that arrived until `until`; None if the gateway said nothing but ready meanwhile.

    Routes follow from the gateway's published not-ready word (what a client reads). Whether a
    route said ready while its gateway was not (true again, route-seconds), and when the gateway
    was back, are judged against `judge`, the gateway's own words as its function decided them,
    where given: a route reads the serving record, which Crossplane applies before it writes the
    gateway's status, so a route can rightly say ready a moment before its gateway's status does.
    """
    words = sorted((s for s in seen if s.at <= until), key=lambda s: s.at)
    published = [(s.at, by(s)) for s in words if s.xr == gateway]
    down = next((t for t, ready in published if t >= since and not ready), None)
    if down is None:
        return None
    judged = sorted((s for s in judge if s.at <= until), key=lambda s: s.at) if judge is not None else None
    gw_words = judged if judged is not None else [s for s in words if s.xr == gateway]
    gw = [(s.at, by(s)) for s in gw_words]
    # A judged gateway decided it was not ready before its status said so: from then on.
    start = min(down, next((t for t, ready in gw if t >= since and not ready), down))
    last_down = max((i for i, (_, ready) in enumerate(gw) if not ready), default=None)
    up = gw[last_down + 1][0] if last_down is not None and last_down + 1 < len(gw) else math.inf
    end = min(up, until)
    follow: list[float] = []
    true_again: list[str] = []
    route_seconds = 0.0
    for route in routes:
        # The gateway's and the route's words from `start` to `end`, in order: (when, gateway ready, route ready).
        mine = sorted([*(s for s in gw_words), *(s for s in words if s.xr == route)], key=lambda s: s.at)
        steps: list[tuple[float, bool, bool | None]] = []
        gw_ready = True
        route_ready: bool | None = None
        for s in mine:
            if s.xr == route:
                route_ready = by(s)
            else:
                gw_ready = by(s)
            if s.at >= end:
                break
            if s.at >= start:
                steps.append((s.at, gw_ready, route_ready))
        if not steps or steps[0][0] > start:
            # Nothing said at `start` itself: what each said last before it, from `start` on.
            steps.insert(0, (start, False, _word_before(words, route, start, by)))
        first_false = next((i for i, (_, _, r) in enumerate(steps) if r is False), None)
        follow.append(max(0.0, steps[first_false][0] - down) if first_false is not None else math.inf)
        if first_false is not None and any(r and not g for _, g, r in steps[first_false:]):
            true_again.append(route)
        for (t, g, r), nxt in zip(steps, [*(t for t, _, _ in steps[1:]), end], strict=True):
            if r and not g:
                route_seconds += max(0.0, nxt - t)
    back = (
        max((_ready_after(words, r, up, by) - up for r in routes), default=0.0) if up < math.inf else math.inf
    )
    return Outage(down, up, follow, route_seconds, true_again, back)


class Waiting:
    """Where routes wait while they are created (issue #31: creation is where the time goes).
    Each look at the routes files each one not True yet under what it says, its RoutingReady
    reason or what stands before one; the time until the next look counts as that many
    route-seconds. Read beside the meters, it says which step holds creation."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.seconds: dict[str, float] = {}
        self._states: dict[str, str | None] = {}
        self._at: float | None = None

    def see(self, routes: Sequence[dict[str, Any]], now: float) -> bool:
        """Files the routes listed at `now`; whether every named one says True."""
        if self._at is not None:
            for state in self._states.values():
                if state is not None:
                    self.seconds[state] = self.seconds.get(state, 0.0) + now - self._at
        self._at = now
        listed = {r["metadata"]["name"]: r for r in routes}
        self._states = {n: _waiting_on(listed.get(n)) for n in self.names}
        return all(state is None for state in self._states.values())

    def summary(self) -> str:
        ranked = sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0]))
        return "route-seconds waiting at creation, by what the route said: " + (
            ", ".join(f"{state} {seconds:.0f}" for state, seconds in ranked) or "none"
        )


def _waiting_on(route: dict[str, Any] | None) -> str | None:
    """None once the route says RoutingReady True; else what it waits on."""
    if route is None:
        return "not listed"
    said = condition(route, "RoutingReady")
    if said.get("status") == "True":
        return None
    if not said:
        return "no RoutingReady yet"
    return f"{said.get('reason') or 'no reason'} ({_gist(str(said.get('message') or ''))})"


def _gist(message: str, words: int = 8) -> str:
    """A message's first words with the names and numbers in them left out, so that one step's
    messages of every route file as one: "AIGatewayRoute … is not Accepted yet"."""
    kept = ["…" if "/" in w or any(c.isdigit() for c in w) else w for w in message.split()[:words]]
    return " ".join(kept).rstrip(":;,")


def first_false_stamps(seen: Sequence[Seen], since: float) -> dict[str, float]:
    """Each XR's condition's lastTransitionTime as it first said False at or after `since`."""
    stamps: dict[str, float] = {}
    for s in sorted(seen, key=lambda s: s.at):
        if s.at >= since and not s.condition and s.since is not None:
            stamps.setdefault(s.xr, s.since)
    return stamps


def _word_before(words: Sequence[Seen], xr: str, t: float, by: Callable[[Seen], bool]) -> bool | None:
    """What the XR said last before t (None: nothing yet)."""
    said_before = [by(s) for s in words if s.xr == xr and s.at < t]
    return said_before[-1] if said_before else None


def _ready_after(words: Sequence[Seen], xr: str, t: float, by: Callable[[Seen], bool]) -> float:
    """When the XR said ready, at or after t, for good: inf if its last word is not ready (or none)."""
    said = [(s.at, by(s)) for s in words if s.xr == xr]
    if not said or not said[-1][1]:
        return math.inf
    last_not = max((i for i, (_, ready) in enumerate(said) if not ready), default=None)
    turned = said[last_not + 1][0] if last_not is not None else -math.inf
    return max(t, turned)


@dataclass
class Watcher:
    """Watches of the gateways' and routes' kinds, recording each XR's word whenever it changes."""

    kube: Kube
    kinds: Sequence[tuple[str, str, str]]  # (apiVersion, kind, namespace)
    seen: list[Seen] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # When a watch started afresh (410 Gone): the words between its last delivery and then are lost.
    gaps: list[float] = field(default_factory=list)
    # When the last event of any kind arrived, a word or not: Crossplane's writes that change no word
    # (its managedFields, a condition's stamp) are reconciles still going on.
    last_event: float = 0.0
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

    def check(self) -> None:
        """Raise what stopped a watch: a measure without it would wait out its deadline, or lie."""
        if self.errors:
            raise RuntimeError("; ".join(self.errors))

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
        if event == "GAP":
            with self._lock:
                self.gaps.append(at)
            return
        with self._lock:
            self.last_event = max(self.last_event, at)
        if event == "DELETED":
            return
        kind, meta = obj["kind"], obj["metadata"]
        xr = f"{kind} {meta.get('namespace')}/{meta['name']}"
        typ = "GatewayReady" if kind == "InferenceGateway" else "RoutingReady"
        word = said(obj, typ)
        stamp = condition(obj, typ).get("lastTransitionTime")
        with self._lock:
            if self._last.get(xr) != word:
                self._last[xr] = word
                self.seen.append(Seen(at, xr, *word, since=ts(stamp) if stamp else None))
