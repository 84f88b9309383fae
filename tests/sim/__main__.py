"""`make simulate`: every scenario with the real design and each ablation, as a table."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.sim import scale
from tests.sim.control import Ablation, RunFunction
from tests.sim.scenarios import (
    REAL,
    SCENARIOS,
    VARIANTS,
    Metrics,
    Scenario,
    SteadyCost,
    run_scenario,
    steady_cost,
)
from tests.sim.sweep import summary, sweep
from tests.support import served_function


@contextmanager
def grpc_function() -> Iterator[RunFunction]:
    """The function in its own process, called over gRPC as Crossplane calls it."""
    with served_function("--insecure") as address, grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = grpcv1.FunctionRunnerServiceStub(channel)

        def call(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
            rsp: fnv1.RunFunctionResponse = stub.RunFunction(req, timeout=30)
            return rsp

        yield call


def runs() -> list[tuple[Scenario, Ablation]]:
    """Every scenario with the real design; the ablations where watches are on."""
    return [(s, v) for s in SCENARIOS for v in VARIANTS if v is REAL or s.watches]


def run_all(call: RunFunction) -> dict[tuple[str, str], Metrics]:
    return {(s.title, v.name): run_scenario(s, call, v) for s, v in runs()}


def _watches(title: str) -> bool:
    return not title.endswith("(watches off)")


def _median(values: list[int]) -> float:
    return float(statistics.median(values)) if values else 0.0


def report(results: dict[tuple[str, str], Metrics], steady: SteadyCost) -> tuple[str, int, int, int]:
    lines = [
        f"{'scenario':<80} {'variant':<20} {'requests':>8} {'failed':>6} {'lying s':>7} "
        f"{'detect s':>8} {'max lag':>7} {'rollouts':>8} {'converge s':>10}  violated"
    ]
    for (scenario, variant), m in results.items():
        broken = sorted({v.split(" at ")[0].removeprefix("invariant ") for v in m.violations})
        converge = "-" if m.converge_seconds is None else str(m.converge_seconds)
        lines.append(
            f"{scenario:<80} {variant:<20} {m.requests:>8} {m.failed:>6} {m.lying_seconds:>7} "
            f"{m.detection_seconds:>8} {m.worst_lag:>7} {m.rollouts:>8} {converge:>10}  {','.join(broken) or '-'}"
        )
    # The truth bounds are promised with --enable-watches; runs without it measure.
    real_violations = sum(
        len(m.violations) for (t, v), m in results.items() if v == REAL.name and _watches(t)
    )
    ablations = [v.name for v in VARIANTS if v is not REAL]
    caught = sum(any(m.violations for (_, v), m in results.items() if v == name) for name in ablations)
    steps = sum(m.steps for m in results.values())
    lines.append(
        f"scenarios {len(SCENARIOS)}, steps {steps}, invariant violations {real_violations}, "
        f"ablations caught {caught} of {len(ablations)}"
    )
    on = [lag for (t, v), m in results.items() if v == REAL.name and _watches(t) for lag in m.lags]
    worst_on = max(m.worst_lag for (t, v), m in results.items() if v == REAL.name and _watches(t))
    worst_off = max(m.worst_lag for (t, v), m in results.items() if v == REAL.name and not _watches(t))
    lines.append(
        f"truth lag p50 {_median(on):g} s, max {worst_on} s (watches on); max {worst_off} s (watches off); "
        f"steady state: {steady.calls_per_minute:g} function calls and {steady.objects} API objects "
        "per ModelRoute with one backend per minute"
    )
    return "\n".join(lines), real_violations, caught, len(ablations)


def main() -> int:
    with grpc_function() as call:
        results = run_all(call)
        steady = steady_cost(call)
        points = sweep(call)
        at_scale = scale.curve(call)
    text, violations, caught, total = report(results, steady)
    print(text)
    for (scenario, variant), m in results.items():
        if variant == REAL.name and _watches(scenario):
            for v in m.violations[:5]:
                print(f"  real design, {scenario}: {v}")
    print(summary(points))
    for p in points:
        for v in p.real_violations[:3]:
            print(f"  {p.constant}={p.value}: real design: {v}")
        for name, got in p.caught.items():
            if not got:
                print(f"  {p.constant}={p.value}: {name} not caught")
    print(at_scale)
    swept = all(not p.real_violations and all(p.caught.values()) for p in points)
    return 0 if violations == 0 and caught == total and swept else 1


if __name__ == "__main__":
    sys.exit(main())
