"""The timing sweep: each timing constant of the simulation over its plausible range.

One constant moves at a time, the others stay at their defaults. At every
point the real design must break no invariant in any scenario (with
watches), and each ablation must be caught in the scenario built to
exercise it. The ranges, and where they come from:

- POD_START_SECONDS 5-40: an Envoy pod with its image cached and fast probes
  (5 s) to a cold node pulling both images (40 s); kwok in the real run: 3 s.
- AIGW_LAG_SECONDS 0-5: Envoy AI Gateway's informer and reconcile; the real
  run shows it within a second or two.
- OBSERVE_GENERATION_SECONDS 0-3: the Deployment controller observing a new
  generation (sub-second on an idle control plane).
- DRAIN_SECONDS 5-30: Envoy Gateway's shutdown drain (its default
  drainTimeout is 60 s, min drain 10 s; kwok in the real run: 8 s).
- AFTER_WRITE_SECONDS 1-5: provider-kubernetes' requeue after a write.

The per-hop watch delay stays at one second, the simulation's step: the
truth-lag bound is stated for it (real hops are sub-second; the real
control-plane run measured 0 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from tests.sim import control, world
from tests.sim.control import Ablation, RunFunction
from tests.sim.scenarios import (
    REAL,
    SCENARIOS,
    AcceptanceOnly,
    IgnoreWorkloads,
    Metrics,
    NoAnchor,
    NoModelCheck,
    Scenario,
    TrustFailedReads,
    WithholdRoutes,
    run_scenario,
)

TIMINGS: dict[tuple[ModuleType, str], tuple[int, ...]] = {
    (world, "POD_START_SECONDS"): (5, 10, 40),
    (world, "AIGW_LAG_SECONDS"): (0, 1, 5),
    (world, "OBSERVE_GENERATION_SECONDS"): (0, 3),
    (world, "DRAIN_SECONDS"): (5, 30),
    (control, "AFTER_WRITE_SECONDS"): (1, 5),
}


def _scenario(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name and s.watches)


# Each ablation and the scenario built to exercise what it takes away.
TARGETS: list[tuple[Ablation, str]] = [
    (NoAnchor(), "the last model removed, then a new one added"),
    (AcceptanceOnly(), "first gateway and first model"),
    (WithholdRoutes(), "an Envoy upgrade rollout"),
    (IgnoreWorkloads(), "a model's server scaled to zero and back, then to two"),
    (NoModelCheck(), "a model's server loads another model, then nothing, then the model again"),
    (
        TrustFailedReads(),
        "provider-kubernetes refused reads of Deployments, then a model's server scaled to zero, "
        "then both undone",
    ),
]


@dataclass(frozen=True)
class Point:
    constant: str
    value: int
    real_violations: list[str]
    caught: dict[str, bool]


@contextmanager
def _set(module: ModuleType, name: str, value: int) -> Iterator[None]:
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def sweep(call: RunFunction) -> list[Point]:
    points = []
    for (module, name), values in TIMINGS.items():
        for value in values:
            with _set(module, name, value):
                real: list[Metrics] = [run_scenario(s, call, REAL) for s in SCENARIOS if s.watches]
                caught = {
                    ablation.name: bool(run_scenario(_scenario(target), call, ablation).violations)
                    for ablation, target in TARGETS
                }
            points.append(Point(f"{name}", value, [v for m in real for v in m.violations], caught))
    return points


def summary(points: list[Point]) -> str:
    violations = sum(len(p.real_violations) for p in points)
    ablations = len(TARGETS)
    everywhere = sum(all(p.caught[a.name] for p in points) for a, _ in TARGETS)
    return (
        f"sweep: {len(points)} timing points, real design violations {violations}, "
        f"ablations caught {everywhere} of {ablations} at every point"
    )
