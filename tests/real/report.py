"""What a real-component run reports, and how it reads the objects it judges: pure, no client.

Importable without the kubernetes client, so `make test` checks the
reporting and the prober's judging on a machine that never drives a cluster.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from tests.real import versions


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
    # Seconds a request failed while a condition said it serves and its reporter was down.
    stale_down: int = 0


def condition(obj: dict[str, Any] | None, typ: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return dict(c)
    return {}


def versions_line() -> str:
    v = versions
    return (
        f"Kubernetes {v.KUBERNETES.version}, Crossplane {v.RUNNING_CROSSPLANE.version}, provider-kubernetes "
        f"{v.PROVIDER_KUBERNETES.version}, Envoy Gateway {v.ENVOY_GATEWAY.version}, "
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
        f"composed resources lost {sum(r.lost for r in faults)}; lying seconds {lying}; "
        f"stale while the reporter was down max {max((r.stale_down for r in faults), default=0)} s; {recovery}"
    )
