"""Issue #31's cost model: what N routes on one gateway cost, fitted to `make scale` runs.

Each `make scale ROUTES=N` writes its figures to _output/scale/routes-N.json (the
record of tests/real/report.py). This fits each figure to a straight line in N by
least squares over the runs found, prints the measured points beside the fit, and
what the fit says of 1,000 and 10,000 routes. A straight line is the kindest
reading: where the measured points bend upwards (they do, on one machine whose
CPU the API server saturates), the extrapolation is a floor, and the output says
which figures bend.

    python -m tools.cost_model [DIR]      # default _output/scale
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORECAST = (1_000, 10_000)


@dataclass(frozen=True)
class Fit:
    """y = intercept + slope * n, fitted to (n, y) points."""

    intercept: float
    slope: float
    points: tuple[tuple[int, float], ...]

    def at(self, n: float) -> float:
        return self.intercept + self.slope * n

    def bends_up(self) -> bool:
        """Whether the largest run sits above the line through the others: a cost growing faster than N."""
        if len(self.points) < 3:
            return False
        *rest, last = self.points
        expected = fit(rest).at(last[0])
        return expected > 0 and last[1] > expected * 1.1


def fit(points: Sequence[tuple[int, float]]) -> Fit:
    """Least squares over the points; one point (or one N) gives a flat line through its mean."""
    pts = tuple(sorted(points))
    if not pts:
        raise ValueError("no points to fit")
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return Fit(my, 0.0, pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return Fit(my - slope * mx, slope, pts)


def _cpu_ms(phase: str, component: str) -> Callable[[dict[str, Any]], float]:
    """A component's CPU in ms per route in a phase: the record's seconds per 100 routes, times 10."""
    return lambda r: 10 * r[phase]["cpu_per_100"][component]


# The figures the model fits: a name, how to read it from a record, its unit, and whether the
# record gives it per route. A per-route figure includes costs that do not grow with N (the
# gateway's own reconciles, some of the run's own reads) divided by N, so it is fitted as a total,
# a + b * N: b is the marginal cost of a route, and the forecast per route is the total at N over
# N. The run's own reads grow with the phase's length too, so b holds some of them.
FIGURES: tuple[tuple[str, Callable[[dict[str, Any]], float], str, bool], ...] = (
    ("provider-kubernetes Objects per route", lambda r: r["objects_per_route"], "", True),
    ("every route False after its gateway (p99)", lambda r: r["follow_s"]["p99"], "s", False),
    ("every route False after its gateway (max)", lambda r: r["follow_s"]["max"], "s", False),
    # As a client reads it (a watch); records before it was measured lack it.
    (
        "every route False after its gateway, as published (p99)",
        lambda r: r["published_s"]["p99"],
        "s",
        False,
    ),
    ("creation until every route True", lambda r: r["creation"]["seconds"], "s", False),
    ("function calls per route per transition", lambda r: r["rollout"]["calls"], "", True),
    ("API requests per route per transition", lambda r: r["rollout"]["requests"], "", True),
    ("API requests per route at creation", lambda r: r["creation"]["requests"], "", True),
    ("conflicts (409) per route at creation", lambda r: r["creation"]["conflicts"], "", True),
    ("API server CPU per route per transition", _cpu_ms("rollout", "kube-apiserver"), "ms", True),
    ("Crossplane CPU per route per transition", _cpu_ms("rollout", "crossplane"), "ms", True),
    ("function CPU per route per transition", _cpu_ms("rollout", "function"), "ms", True),
    ("API server CPU per route at creation", _cpu_ms("creation", "kube-apiserver"), "ms", True),
    ("function resident memory", lambda r: r["creation"]["memory_mb"]["function"], "MB", False),
    ("Crossplane resident memory", lambda r: r["creation"]["memory_mb"]["crossplane"], "MB", False),
)


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}".rstrip("0").rstrip(".") if x % 1 else f"{x:.0f}"


def _read(read: Callable[[dict[str, Any]], float], record: dict[str, Any]) -> float | None:
    """A figure of a record, or None where the record predates it."""
    try:
        return read(record)
    except KeyError:
        return None


def model(records: Sequence[dict[str, Any]]) -> list[str]:
    """The cost model's lines: per figure the points, the fitted line and the forecasts."""
    if not records:
        return ["cost model: no scale runs found (make scale ROUTES=N writes them)"]
    ns = sorted({r["routes"] for r in records})
    lines = [
        f"cost model: fitted to {len(records)} scale run(s) at N={', '.join(map(str, ns))} on "
        f"{records[0].get('stack', 'an unnamed stack')}; a straight line in N (least squares), "
        "a floor where the points bend upwards; a per-route figure fitted as a total"
    ]
    for name, read, unit, per_route in FIGURES:
        measured = sorted((r["routes"], float(y)) for r in records if (y := _read(read, r)) is not None)
        if not measured:
            lines.append(f"  {name}: not in these records (measured since)")
            continue
        points = ", ".join(f"N={x}: {_num(y)}" for x, y in measured)
        suffix = f" {unit}" if unit else ""
        if per_route:
            f = fit([(n, y * n) for n, y in measured])
            shape = f"as a total {_num(f.intercept)} + {f.slope:.4g} per route (the marginal cost of a route)"
            forecast = "; ".join(f"N={n:,}: {_num(f.at(n) / n)}" for n in FORECAST)
        else:
            f = fit(measured)
            shape = f"fit {_num(f.intercept)} + {f.slope:.4g} per route"
            forecast = "; ".join(f"N={n:,}: {_num(f.at(n))}" for n in FORECAST)
        bend = " (bends upwards: a floor)" if f.bends_up() else ""
        lines.append(f"  {name}{suffix}: measured {points}; {shape}{bend}; forecast {forecast}")
    return lines


def load(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("routes-*.json"))]


def main(argv: Sequence[str]) -> int:
    folder = Path(argv[0]) if argv else Path("_output/scale")
    print("\n".join(model(load(folder))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
