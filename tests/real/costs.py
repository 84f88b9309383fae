"""What a phase of a scale run costs (issue #31): CPU seconds per component, API requests by verb
and resource, and function calls per XR kind, read at the phase's start and end.

The parsers are pure (and table-tested in tests/test_real_harness.py); `Meter` reads what they
parse: each component's processes in /proc (a component is the session its Supervisor started),
the API server's `apiserver_request_total` from /metrics, and the function's per-call log lines
(the function runs with --debug in a scale run: one "composed" line per call).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

# One series of the API server's request counter, and its labels.
_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# The verbs that write: what a watch fan-out costs the API server and etcd.
WRITE_VERBS = frozenset({"APPLY", "CREATE", "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION"})
# The components a scale line names, in its order.
NAMED = ("function", "crossplane", "provider-kubernetes", "kube-apiserver")


def request_totals(metrics: str, code: str | None = None) -> Counter[str]:
    """`apiserver_request_total` as "VERB resource[/subresource]" -> requests, summed over codes
    (or of one code), scopes and groups (a resource's name says its group well enough here)."""
    totals: Counter[str] = Counter()
    for labels, value in _REQUEST_TOTAL.findall(metrics):
        got = dict(_LABEL.findall(labels))
        if code is not None and got.get("code") != code:
            continue
        resource = got.get("resource") or "-"
        if got.get("subresource"):
            resource += "/" + got["subresource"]
        totals[f"{got.get('verb', '?')} {resource}"] += int(float(value))
    return totals


def session_cpu(stats: Iterable[str], session: int, ticks_per_s: float) -> float:
    """CPU seconds of every process in a session, from /proc/<pid>/stat texts: its own time and
    what it has reaped of exited children (utime, stime, cutime, cstime)."""
    seconds = 0.0
    for stat in stats:
        # The command name may hold spaces and parentheses: the fields start after the last ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session:
            seconds += sum(int(f) for f in fields[11:15]) / ticks_per_s
    return seconds


def session_rss_mb(stats: Iterable[str], session: int, page_bytes: int) -> float:
    """Resident memory in MB of every process in a session now, from /proc/<pid>/stat texts
    (field 24, rss, in pages)."""
    pages = 0
    for stat in stats:
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session:
            pages += int(fields[21])
    return pages * page_bytes / 1e6


# The SDK's console renderer (what the function writes when its output is not JSON): colour
# codes, then `<RFC 3339 time> [info     ] <message>  condition='<Type>=<Status> (<Reason>)' ...
# xr='<Kind> <namespace>/<name>'`.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CONDITION = re.compile(r"condition='([^']*)'")
# The function's two lines about an XR: a call answered (--debug) and a transition (info).
COMPOSED = "composed"
CONDITION_CHANGED = "condition changed"


@dataclass(frozen=True)
class Call:
    """One line of the function's about one XR: a call it answered, or a transition it logged."""

    at: float
    xr: str  # "<Kind> <namespace>/<name>"
    condition: str  # "<Type>=<True|False> (<Reason>)"

    @property
    def ready(self) -> bool:
        return "=True " in self.condition


def logged(function_log: str, message: str) -> list[Call]:
    """Every line of `message` in the function's log, in the order logged, written as JSON or
    by the console renderer."""
    console = re.compile(rf"^(\S+Z) \[\w+\s*\] {re.escape(message)} .* xr='([^']*)'")
    found = []
    for raw in function_log.splitlines():
        if message not in raw:
            continue
        if raw.startswith("{"):
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a line cut short
            if entry.get("msg") != message and entry.get("event") != message:
                continue
            found.append(Call(float(entry["ts"]), str(entry.get("xr", "")), str(entry.get("condition", ""))))
            continue
        line = _ANSI.sub("", raw)
        m = console.match(line)
        if m is None:
            continue
        condition = _CONDITION.search(line)
        at = datetime.fromisoformat(m[1].replace("Z", "+00:00")).timestamp()
        found.append(Call(at, m[2], condition[1] if condition else ""))
    return found


def answered(function_log: str) -> list[Call]:
    """Every call in the function's log, from its --debug "composed" lines."""
    return logged(function_log, COMPOSED)


def noisy_transitions(
    calls_made: list[Call], transitions: list[Call], kind: str, since: float, until: float
) -> list[Call]:
    """Issue #32: the "condition changed" lines about XRs of `kind` in [since, until) that say no
    change. A line is logged just before its call's "composed" line; it is noise when it repeats
    the XR's line before it (the whole log read, so a window's first line has its predecessor), or
    when the call it was logged for did not decide the condition it names."""
    by_xr: dict[str, list[Call]] = {}
    for c in sorted(calls_made, key=lambda c: c.at):
        by_xr.setdefault(c.xr, []).append(c)
    times = {xr: [c.at for c in calls] for xr, calls in by_xr.items()}
    noisy = []
    last: dict[str, str] = {}
    for line in sorted(transitions, key=lambda t: t.at):
        if not line.xr.startswith(kind + " "):
            continue
        before = last.get(line.xr)
        last[line.xr] = line.condition
        if not since <= line.at < until:
            continue
        calls = by_xr.get(line.xr, [])
        at = bisect.bisect_left(times.get(line.xr, []), line.at)
        own = calls[at] if at < len(calls) else None
        if before == line.condition or own is None or own.condition != line.condition:
            noisy.append(line)
    return noisy


def calls(function_log: str, kind: str, since: float, until: float) -> int:
    """The function's calls for XRs of `kind` in [since, until)."""
    return sum(c.xr.startswith(kind + " ") and since <= c.at < until for c in answered(function_log))


def at_rest(calls_in_window: int, last_write: float, now: float, routes: int, window: float) -> bool:
    """Whether N routes are at rest: no write of theirs for `window` seconds, and the function called
    for them at most once per five routes in it. A settled route is called once per 2-minute TTL
    (N/12 calls in 10 s); a route whose status was just written is called again for each of
    Crossplane's three writes (a reconcile every few seconds, each a server-side apply of its
    Objects), and that queue, not the gateway, is what a rollout begun then would measure."""
    return now - last_write >= window and calls_in_window <= routes / 5


def decided_true_again(calls_made: list[Call], gateway: str, since: float) -> tuple[list[str], float, float]:
    """From the function's own calls: the XRs it decided ready again after it had decided them
    not ready, while it judged `gateway` ("<Kind> <ns>/<name>") not ready after `since`; with
    the outage's start and end as it decided them (inf when it never ended)."""
    down = next((c.at for c in calls_made if c.xr == gateway and c.at >= since and not c.ready), None)
    if down is None:
        return [], float("inf"), float("inf")
    up = next((c.at for c in calls_made if c.xr == gateway and c.at > down and c.ready), float("inf"))
    said_false: set[str] = set()
    again: list[str] = []
    for c in calls_made:
        if c.xr == gateway or not down <= c.at < up:
            continue
        if not c.ready:
            said_false.add(c.xr)
        elif c.xr in said_false and c.xr not in again:
            again.append(c.xr)
    return again, down, up


def follow_times(
    calls_made: list[Call], gateway: str, since: float, stamps: dict[str, float], routes: list[str]
) -> list[float]:
    """Seconds from the function's first not-ready decision about `gateway` after `since` to each
    route ("<Kind> <ns>/<name>") saying RoutingReady=False: the later of the function's first
    not-ready decision about the route after the gateway's and its condition's lastTransitionTime
    (`stamps`, whole seconds, as first seen False). Each is a lower bound of when the route said
    so, and the gateway's decision comes before its own condition is written: no reading of the
    gateway's condition (whose lastTransitionTime moves with its message) can shorten it. inf: the
    route never said False (or the gateway never went not ready)."""
    down = next((c.at for c in calls_made if c.xr == gateway and c.at >= since and not c.ready), None)
    if down is None:
        return [math.inf] * len(routes)
    decided: dict[str, float] = {}
    for c in calls_made:
        if c.at >= down and not c.ready and c.xr != gateway:
            decided.setdefault(c.xr, c.at)
    out = []
    for xr in routes:
        at = max(decided.get(xr, -math.inf), stamps.get(xr, -math.inf))
        out.append(at - down if at > -math.inf else math.inf)
    return out


@dataclass
class Reading:
    """What the meters said at one moment."""

    at: float
    cpu: dict[str, float]
    requests: Counter[str]
    memory_mb: dict[str, float] = field(default_factory=dict)  # resident, per component, at `at`
    # Requests the API server refused as conflicts (409): a write from a stale copy, retried.
    conflicts: Counter[str] = field(default_factory=Counter)
    # etcd's store revision at the reading (0: not read): a phase's window of stored writes.
    revision: int = 0


@dataclass
class Phase:
    """The cost of what happened between two readings, for `routes` XRs."""

    name: str
    seconds: float
    routes: int
    cpu: dict[str, float]
    requests: Counter[str]
    calls: int
    transitions: int = 1  # a rollout is two: the gateway goes not ready, then ready again
    memory_mb: dict[str, float] = field(default_factory=dict)  # resident at the phase's end
    conflicts: Counter[str] = field(default_factory=Counter)
    # etcd's revisions at its start and end: the writes after the one, up to the other, are the phase's.
    revisions: tuple[int, int] = (0, 0)

    def per_route(self, n: float) -> float:
        return n / self.routes / self.transitions

    def writes(self) -> int:
        return sum(n for key, n in self.requests.items() if key.split(" ")[0] in WRITE_VERBS)

    def summary(self) -> str:
        """One clause for a scenario's notes: per route per transition, and CPU per 100 routes."""
        cpu = ", ".join(
            f"{name.removeprefix('kube-')} {100 * self.per_route(self.cpu.get(name, 0.0)):.1f}"
            for name in NAMED
        )
        top = ", ".join(f"{key} {n}" for key, n in self.requests.most_common(4))
        conflicts = ", ".join(f"{key} {n}" for key, n in self.conflicts.most_common(3)) or "none"
        return (
            f"{self.name} ({self.seconds:.0f} s, {self.transitions} transition(s)): per route per transition "
            f"{self.per_route(self.calls):.1f} function calls, {self.per_route(sum(self.requests.values())):.0f} "
            f"API requests ({self.per_route(self.writes()):.0f} writes); cpu s per 100 routes per transition: "
            f"{cpu}; most requests: {top}; conflicts (409): {conflicts}"
        )


def between(
    name: str, before: Reading, after: Reading, routes: int, *, calls_made: int, transitions: int = 1
) -> Phase:
    return Phase(
        name=name,
        seconds=after.at - before.at,
        routes=routes,
        cpu={k: after.cpu.get(k, 0.0) - before.cpu.get(k, 0.0) for k in after.cpu},
        requests=after.requests - before.requests,
        calls=calls_made,
        transitions=transitions,
        memory_mb=dict(after.memory_mb),
        conflicts=after.conflicts - before.conflicts,
        revisions=(before.revision, after.revision),
    )


class Meter:
    """Reads the meters of a running stack: sessions by component, the API server's metrics, the function's log."""

    def __init__(
        self,
        sessions: Callable[[], dict[str, int]],
        metrics: Callable[[], str],
        function_log: Path,
        revision: Callable[[], int] | None = None,
    ) -> None:
        self._sessions = sessions
        self._metrics = metrics
        self._function_log = function_log
        self._revision = revision
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")

    def read(self) -> Reading:
        stats = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                stats.append(Path(f"/proc/{pid}/stat").read_text())
            except OSError:
                continue  # gone since the listing
        sessions = self._sessions()
        cpu = {name: session_cpu(stats, sid, self._ticks) for name, sid in sessions.items()}
        memory = {name: session_rss_mb(stats, sid, self._page_bytes) for name, sid in sessions.items()}
        metrics = self._metrics()
        revision = self._revision() if self._revision is not None else 0
        return Reading(
            time.time(), cpu, request_totals(metrics), memory, request_totals(metrics, "409"), revision
        )

    def calls(self, kind: str, since: float, until: float) -> int:
        return calls(self._function_log.read_text(errors="replace"), kind, since, until)

    def answered(self) -> list[Call]:
        return answered(self._function_log.read_text(errors="replace"))

    def transitions(self) -> list[Call]:
        """The function's "condition changed" lines."""
        return logged(self._function_log.read_text(errors="replace"), CONDITION_CHANGED)
