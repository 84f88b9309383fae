"""tools/cost_model.py: the straight line it fits to scale runs, and what it says of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools import cost_model

FIT_CASES = [
    ("points on a line give that line", [(10, 3.0), (100, 12.0), (300, 32.0)], 2.0, 0.1),
    ("one point gives a flat line through it", [(100, 5.0)], 5.0, 0.0),
    ("two runs at one N give a flat line through their mean", [(100, 4.0), (100, 6.0)], 5.0, 0.0),
]


@pytest.mark.parametrize(("name", "points", "intercept", "slope"), FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_the_fit_is_least_squares(
    name: str, points: list[tuple[int, float]], intercept: float, slope: float
) -> None:
    got = cost_model.fit(points)
    assert got.intercept == pytest.approx(intercept), name
    assert got.slope == pytest.approx(slope), name


BEND_CASES = [
    ("a cost growing with N squared bends upwards", [(10, 1.0), (100, 100.0), (300, 900.0)], True),
    ("a cost growing with N does not", [(10, 1.0), (100, 10.0), (300, 30.0)], False),
    ("two points cannot tell", [(10, 1.0), (300, 900.0)], False),
    ("a falling cost projected below zero is no bend", [(10, 50.0), (100, 20.0), (300, 5.0)], False),
]


@pytest.mark.parametrize(("name", "points", "bends"), BEND_CASES, ids=[c[0] for c in BEND_CASES])
def test_a_bend_upwards_is_named(name: str, points: list[tuple[int, float]], bends: bool) -> None:
    assert cost_model.fit(points).bends_up() is bends, name


def _record(n: int, p99: float) -> dict[str, Any]:
    phase = {
        "seconds": 2.0 * n,
        "transitions": 2,
        "calls": 3.0,
        "requests": 20.0,
        "writes": 18.0,
        "cpu_per_100": {
            "function": 1.0,
            "crossplane": 4.0,
            "provider-kubernetes": 0.2,
            "kube-apiserver": 15.0,
        },
        "memory_mb": {"function": 60.0 + 0.01 * n, "crossplane": 200.0 + 0.5 * n},
        "conflicts": 0.5,
    }
    return {
        "routes": n,
        "stack": "Kubernetes v1",
        "objects_per_route": 4.0,
        "follow_s": {"p50": p99 / 2, "p99": p99, "max": p99},
        "back_s": 1.0,
        "creation": phase,
        "rollout": phase,
    }


def test_the_model_reads_the_runs_written_and_forecasts_from_them(tmp_path: Path) -> None:
    for n, p99 in ((10, 1.0), (100, 4.0)):
        (tmp_path / f"routes-{n}.json").write_text(json.dumps(_record(n, p99)))
    lines = cost_model.model(cost_model.load(tmp_path))
    assert lines[0].startswith("cost model: fitted to 2 scale run(s) at N=10, 100 on Kubernetes v1")
    follow = next(line for line in lines if "(p99) s:" in line)
    assert "measured N=10: 1, N=100: 4" in follow
    assert "N=1,000: 34" in follow  # 0.667 + 0.0333 N
    memory = next(line for line in lines if "Crossplane resident memory" in line)
    assert "N=10,000: 5,200" in memory
    # 3 calls per route at both N: no fixed load, 3 calls a route whatever N.
    calls = next(line for line in lines if line.startswith("  function calls"))
    assert "as a total 0 + 3 per route (the marginal cost of a route)" in calls
    assert "N=10,000: 3" in calls


def test_a_per_route_figure_is_fitted_as_a_fixed_load_and_a_marginal_cost(tmp_path: Path) -> None:
    # 100 requests of the run's own, then 20 a route: 30 per route at N=10, 21 at N=100.
    for n, per_route in ((10, 30.0), (100, 21.0)):
        record = _record(n, 1.0)
        record["rollout"]["requests"] = per_route
        (tmp_path / f"routes-{n}.json").write_text(json.dumps(record))
    line = next(
        x for x in cost_model.model(cost_model.load(tmp_path)) if x.startswith("  API requests per route per")
    )
    assert "as a total 100 + 20 per route (the marginal cost of a route)" in line
    assert "N=1,000: 20.1; N=10,000: 20.01" in line


def test_no_runs_say_how_to_make_them(tmp_path: Path) -> None:
    assert cost_model.model(cost_model.load(tmp_path)) == [
        "cost model: no scale runs found (make scale ROUTES=N writes them)"
    ]
