"""What a real-component run reports, and how it reads the objects it judges: pure, no client.

Importable without the kubernetes client, so `make test` checks the
reporting and the prober's judging on a machine that never drives a cluster.
"""

from __future__ import annotations

import datetime
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from tests.real import versions
from tests.real.costs import NAMED, Phase


@dataclass
class Report:
    name: str
    ok: bool = False
    lags: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""
    # A fault scenario's (issue #28): seconds from the component's return to the
    # truth, and composed Objects lost or re-created.
    fault: bool = False
    recovery: float | None = None
    lost: int = 0
    # DELETE requests on Objects the API server served during the fault.
    deletes: int = 0
    # Seconds a request failed while a condition said it serves and its reporter was down.
    stale_down: int = 0
    # A line of its own the run prints after the scenario's (make scale's `scale:` line).
    line: str = ""


# Envoy AI Gateway's finalizer. v1.1.0's handleFinalizer
# (internal/controller/controller.go) runs the deletion callback, then removes
# the finalizer with an Update; on a conflict it logs "Failed to remove
# finalizer from object" and returns without requeueing, so the object stays
# Terminating until some later event reconciles it (envoyproxy/ai-gateway#2565,
# open; PR #2566). Seen here deleting 100 ModelRoutes at once, and removing one backend.
AIGW_FINALIZER = "aigateway.envoyproxy.io/finalizer"
# How long an object may wait for that finalizer before it counts as stuck.
AIGW_STUCK_AFTER_S = 30.0


# What Envoy AI Gateway logs when that Update conflicts, with the object's namespace and name.
AIGW_CONFLICT = re.compile(
    r'Failed to remove finalizer from object\t\{"namespace": "([^"]+)", "name": "([^"]+)"'
)


def conflicted(controller_log: str) -> set[tuple[str, str]]:
    """The (namespace, name) of each object whose finalizer removal Envoy AI Gateway's controller logged as failed."""
    return {(m[1], m[2]) for m in AIGW_CONFLICT.finditer(controller_log)}


def stuck_on_finalizer(
    objects: list[dict[str, Any]], now: float, failed: set[tuple[str, str]]
) -> list[tuple[dict[str, Any], list[str]]]:
    """The objects Terminating for AIGW_STUCK_AFTER_S with Envoy AI Gateway's finalizer after the
    controller logged that removing it failed (failed: conflicted()), each with the finalizers to keep.
    An object stuck for any other reason is left alone: its deletion wait fails and says so."""
    stuck = []
    for o in objects:
        meta = o["metadata"]
        finalizers = meta.get("finalizers") or []
        since = meta.get("deletionTimestamp")
        if (
            since
            and AIGW_FINALIZER in finalizers
            and (meta.get("namespace"), meta.get("name")) in failed
            and now - ts(since) >= AIGW_STUCK_AFTER_S
        ):
            stuck.append((meta, [f for f in finalizers if f != AIGW_FINALIZER]))
    return stuck


def ts(text: str | None) -> float:
    """An RFC 3339 time as the API writes it, in seconds since the epoch; 0 for none."""
    if not text:
        return 0.0
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def condition(obj: dict[str, Any] | None, typ: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return dict(c)
    return {}


def versions_line() -> str:
    v = versions
    return (
        f"Kubernetes {v.KUBERNETES.version}, Crossplane {v.RUNNING_CROSSPLANE.version}, provider-kubernetes "
        f"{v.RUNNING_PROVIDER.version}, Envoy Gateway {v.ENVOY_GATEWAY.version}, "
        f"Envoy AI Gateway {v.RUNNING_AI_GATEWAY.version}"
    )


def faults_line(faults: list[Report], wanted: int, lying: int) -> str:
    """Issue #28's one line: what the fault scenarios showed, with the whole run's lying seconds."""
    recovered = sorted(r.recovery for r in faults if r.recovery is not None)
    recovery = (
        f"recovery p50 {statistics.median(recovered):.0f} s, max {recovered[-1]:.0f} s"
        if recovered
        else "recovery not measured"
    )
    return (
        f"faults: {sum(r.ok for r in faults)} of {wanted} faults survived on {versions_line()}; "
        f"composed resources lost {sum(r.lost for r in faults)} "
        f"({sum(r.deletes for r in faults)} DELETE requests on Objects); lying seconds {lying}; "
        f"stale while the reporter was down max {max((r.stale_down for r in faults), default=0)} s; {recovery}"
    )


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _phase_record(phase: Phase) -> dict[str, Any]:
    """A phase's cost per route per transition (CPU per 100 routes), and memory at its end."""
    return {
        "seconds": round(phase.seconds, 1),
        "transitions": phase.transitions,
        "calls": round(phase.per_route(phase.calls), 2),
        "requests": round(phase.per_route(sum(phase.requests.values())), 1),
        "writes": round(phase.per_route(phase.writes()), 1),
        "cpu_per_100": {name: round(100 * phase.per_route(phase.cpu.get(name, 0.0)), 2) for name in NAMED},
        "memory_mb": {name: round(phase.memory_mb.get(name, 0.0), 1) for name in MEMORY_NAMED},
        "conflicts": round(phase.per_route(sum(phase.conflicts.values())), 2),
    }


# The components whose memory the scale line names: ours, and the one that caches every XR.
MEMORY_NAMED = ("function", "crossplane")


def spread(seconds: list[float]) -> dict[str, float]:
    """p50, p99 and max of some seconds."""
    return {"p50": percentile(seconds, 50), "p99": percentile(seconds, 99), "max": max(seconds)}


def scale_record(
    n: int,
    follow: list[float],
    back: float,
    creation: Phase,
    rollout: Phase,
    *,
    published: list[float],
    objects: int,
    right_after_creation: tuple[list[float], list[float]] | None = None,
    stored: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Issue #31's figures of one scale run, as `make scale` writes them for tools/cost_model.py:
    how fast N routes followed their gateway through a rollout, by the issue's measure (`follow`:
    decisions and lastTransitionTime, costs.follow_times) and as a client reads it (`published`:
    each XR's word as a watch delivered it, timeline.outage), and what creation and the rollout
    cost. `follow` and `published` are of a rollout under routes at rest; `right_after_creation`,
    the same two of one begun as soon as every route said True. `stored`: the writes etcd kept of
    the routes' XRs and Objects, by writer, per phase (tests/real/etcd_history.py)."""
    record = {
        "routes": n,
        "stack": versions_line(),
        "objects_per_route": round(objects / n, 2),  # provider-kubernetes Objects the routes composed
        "follow_s": spread(follow),
        "published_s": spread(published),
        "back_s": round(back, 1),
        "creation": _phase_record(creation),
        "rollout": _phase_record(rollout),
    }
    if right_after_creation is not None:
        early, early_published = right_after_creation
        record["right_after_creation"] = {"follow_s": spread(early), "published_s": spread(early_published)}
    if stored is not None:
        record["writes"] = stored
    return record


def _stored(record: dict[str, Any], phase: str) -> str:
    """The clause saying how many of a phase's writes etcd kept, per route (per transition)."""
    kinds = (record.get("writes") or {}).get(phase)
    if kinds is None:
        return ""
    if any("error" in kind for kind in kinds.values()):
        return "; the routes' XRs and Objects: writes stored in etcd not read"
    return (
        f"; the routes' XRs and Objects: {sum(kind['writes'] for kind in kinds.values()):.1f} stored in etcd"
    )


def scale_line(record: dict[str, Any]) -> str:
    """Issue #31's one line, from a scale record."""
    follow, creation, rollout = record["follow_s"], record["creation"], record["rollout"]
    published = record.get("published_s")
    n = record["routes"]
    early = record.get("right_after_creation")
    cpu = ", ".join(f"{name.removeprefix('kube-')} {rollout['cpu_per_100'][name]:.1f}" for name in NAMED)
    memory = ", ".join(f"{name} {creation['memory_mb'][name]:.0f}" for name in MEMORY_NAMED)
    return (
        f"scale: N={n} routes on one gateway: all false within p50 {follow['p50']:.0f} s, "
        f"p99 {follow['p99']:.0f} s, max {follow['max']:.0f} s"
        + (
            f" (published: p50 {published['p50']:.0f} s, p99 {published['p99']:.0f} s, "
            f"max {published['max']:.0f} s)"
            if published
            else ""
        )
        + (
            f" at rest, p99 {early['follow_s']['p99']:.0f} s (published {early['published_s']['p99']:.0f} s) "
            "right after creation"
            if early
            else ""
        )
        + "; all true again within "
        f"{record['back_s']:.0f} s of the gateway; all true after creation in {creation['seconds']:.0f} s "
        f"({100 * creation['seconds'] / n:.0f} s per 100 routes); function calls per route per transition "
        f"{rollout['calls']:.1f}; API requests per route per transition "
        f"{rollout['requests']:.0f} ({rollout['writes']:.0f} writes{_stored(record, 'rollout')}); "
        f"cpu s per 100 routes per transition: {cpu}; resident MB with the routes created: {memory}"
    )


@dataclass
class Installed:
    """What the package manager did, for the `release:` line."""

    packages: dict[str, str]  # kind/name -> the package it installed (spec.package)
    images: dict[str, str]  # kind/name -> status.resolvedPackage (the rewritten reference)
    seconds: float
    pushed: str  # the manifest digest in the registry of the package the Function names
    registry: str = ""  # the registry's host:port
    client_certs: str = ""  # Crossplane's client certificate folder, to call the Function as it does
    # Examples the Crossplane CLI rendered through the installed pod identically, of how many.
    rendered: tuple[int, int] | None = None
    served: str = ""  # the image digest of the container the Function's pod ran (served_by)
    # What release_upgraded found, for the release line.
    upgrade: str = ""
    # provider-kubernetes' own image and the Deployment that names it (install.provider_runtime).
    provider: str = ""


def release_line(installed: Installed | None, passed: int, scenarios: int) -> str:
    """The one line make release-check ends with."""
    if installed is None:
        return "release: FAILED: the packages were not installed (the log above says where it stopped)"
    resolved = ", ".join(f"{key} from {ref}" for key, ref in sorted(installed.images.items()))
    served = (
        f"the function Crossplane called ran {installed.served}, the Function package's digest in the registry"
        if installed.served == installed.pushed
        else f"FAILED: the function's pod ran {installed.served or 'no container'}, "
        f"not the Function package pushed ({installed.pushed})"
    )
    parts = [
        "release: Function, Configuration and provider-kubernetes packages pushed to a local registry "
        f"(go-containerregistry {versions.REGISTRY.version}), installed by Crossplane "
        f"{versions.RUNNING_CROSSPLANE.version}'s package manager with dependencies resolved in "
        f"{installed.seconds:.0f} s ({resolved})",
        f"{served}, run by podman as its pod's container",
        f"{passed} of {scenarios} scenarios passed through it",
    ]
    if installed.rendered:
        parts.append(
            f"{installed.rendered[0]} of {installed.rendered[1]} examples rendered through the installed pod "
            "identically (crossplane render, over its mutual TLS)"
        )
    if installed.upgrade:
        parts.append(installed.upgrade)
    if installed.provider:
        parts.append(installed.provider)
    parts.append("not run here: multi-arch images, the provider's image as its pod's container")
    return "; ".join(parts)


def proven(installed: Installed | None) -> bool:
    """Installed, and the function that answered was the pushed package's image."""
    return installed is not None and bool(installed.served) and installed.served == installed.pushed
