"""The order tests/conftest.py runs a mutant's tests in (`make mutation` only): it changes no verdict,
only how soon a killed mutant stops, so nothing else would show it broken."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import conftest

ORDER_CASES = [
    # (name, kills recorded for the function, durations recorded, tests, the order they run in)
    (
        "with nothing recorded the tests keep their order",
        [],
        {},
        ["a", "b", "c"],
        ["a", "b", "c"],
    ),
    (
        "the fastest recorded test runs first and one never recorded runs last",
        [],
        {"a": 3.0, "b": 0.1},
        ["c", "a", "b"],
        ["b", "a", "c"],
    ),
    (
        "a test that killed another mutant of the function runs before faster ones",
        ["slow"],
        {"fast": 0.01, "slow": 9.0},
        ["fast", "slow"],
        ["slow", "fast"],
    ),
    (
        "of the killers the one with most kills runs first, ties fastest first",
        ["x", "y", "y", "z"],
        {"x": 2.0, "y": 5.0, "z": 1.0, "w": 0.0},
        ["w", "x", "y", "z"],
        ["y", "z", "x", "w"],
    ),
]


@pytest.mark.parametrize(
    ("name", "kills", "durations", "tests", "want"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES]
)
def test_a_mutants_tests_run_in_this_order(
    name: str, kills: list[str], durations: dict[str, float], tests: list[str], want: list[str]
) -> None:
    assert sorted(tests, key=conftest.run_first(Counter(kills), durations)) == want, name


@dataclass
class _Report:
    nodeid: str
    failed: bool


@dataclass
class _Item:
    nodeid: str


def test_a_test_that_killed_one_mutant_runs_first_for_the_next_mutant_of_that_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Read from the stats file below, as a mutant's run reads it where no fork server read it first.
    monkeypatch.setattr(conftest, "_durations", None)
    (tmp_path / "mutmut-stats.json").write_text(
        json.dumps({"duration_by_test": {"fast": 0.01, "killer": 4.0}})
    )
    monkeypatch.setenv("MUTANT_UNDER_TEST", "function.route.verdict.x_derive_verdict__mutmut_7")
    conftest.pytest_runtest_logreport(_Report("passed", failed=False))  # type: ignore[arg-type]
    conftest.pytest_runtest_logreport(_Report("killer", failed=True))  # type: ignore[arg-type]
    # Another mutant of the same function, then one of another function.
    monkeypatch.setenv("MUTANT_UNDER_TEST", "function.route.verdict.x_derive_verdict__mutmut_8")
    items = [_Item("fast"), _Item("killer")]
    conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == ["killer", "fast"]
    monkeypatch.setenv("MUTANT_UNDER_TEST", "function.naming.x_unique_name__mutmut_1")
    conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == ["fast", "killer"]
