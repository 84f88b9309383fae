"""Under `make mutation` only: each mutant's tests stop as soon as one fails.

mutmut reruns the tests that reach a mutated function once per mutant and
stops at the first failure (`-x`). These made a killed mutant cost as much
as a survivor on a 2-core CI machine:
- the tests came in set order, so a mutant a 5 ms case kills waited for a 3 s
  property test first; they now run fastest first, by the durations mutmut
  recorded in its clean stats run;
- a property test that failed went on to shrink its example, which can take
  many times the test's run; under a mutant the failure is all that counts, so
  Hypothesis generates and stops;
- a mutant that raises inside the function is answered with one fatal result,
  and the function logs the exception. mutmut installs rich, and structlog's
  default console renderer then draws the traceback with every frame's locals,
  mutmut's tables of mutant functions included: about 12 s per such mutant,
  for an answer the test had in milliseconds. Under a mutant the traceback is
  plain;
- every mutant's pytest ends with `gc.collect()`, repeated (the
  unraisable-exception plugin), which walked every object mutmut's fork
  server holds since its warm-up: about 0.3 s a mutant. What the warm-up
  left is frozen out of the collector (`pytest_sessionfinish`);
- fastest first still ran a mutant's killing test late where it is one
  specific case of hundreds (a killed mutant of `published_listener` ran 280
  of its 307 tests, 34 s): the tests that killed another mutant of the same
  function run first, most kills first, then the rest fastest first.
Outside mutation nothing here applies. None of it changes which tests run or
what they check.
"""

from __future__ import annotations

import gc
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import Phase, settings

_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _under_mutant() -> bool:
    # mutmut's own runs ("stats", "fail", "list_all_tests", "") keep everything as is.
    return "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")


def pytest_configure() -> None:
    if _under_mutant():
        settings.register_profile("mutant", phases=_NO_SHRINK, database=None, report_multiple_bugs=False)
        settings.load_profile("mutant")
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.dev.ConsoleRenderer(
                    colors=False, exception_formatter=structlog.dev.plain_traceback
                ),
            ]
        )


def pytest_collection_modifyitems(items: list[Any]) -> None:
    if not _under_mutant():
        return
    for item in items:
        # A @settings decorator captured the profile current when its module was
        # imported, which may precede pytest_configure in mutmut's forked workers.
        holder: Any = getattr(item, "obj", None)
        own = getattr(holder, "_hypothesis_internal_use_settings", None)
        if own is not None:
            holder._hypothesis_internal_use_settings = settings(
                own, phases=_NO_SHRINK, database=None, report_multiple_bugs=False
            )
    durations = (_durations if _durations is not None else _recorded_durations()) or {}
    try:
        killers = Counter(_kills().read_text().splitlines())
    except FileNotFoundError:  # no sibling killed yet
        killers = Counter()
    key = run_first(killers, durations)
    items.sort(key=lambda item: key(item.nodeid))


def run_first(killers: Counter[str], durations: dict[str, float]) -> Callable[[str], tuple[int, float]]:
    """The order a mutant's tests run in, as a sort key of a test's node id: the tests that killed
    other mutants of its function first, most kills first; then fastest first, by the durations
    mutmut recorded; a test with none recorded last."""
    return lambda nodeid: (-killers[nodeid], durations.get(nodeid, float("inf")))


def _kills() -> Path:
    """Where this mutant's function's killing tests are written, one a line (inside mutmut's
    mutants/ folder, which `make mutation` removes before each run)."""
    function = os.environ["MUTANT_UNDER_TEST"].rsplit("__mutmut_", 1)[0]
    return Path("mutmut-kills") / f"{function}.txt"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and _under_mutant():
        kills = _kills()
        kills.parent.mkdir(exist_ok=True)
        # One short line with O_APPEND: two workers' lines never interleave.
        with kills.open("a") as f:
            f.write(report.nodeid + "\n")


# mutmut's stats file (9 MB for this suite), read once by its fork server
# rather than once a mutant: about 0.1 s each.
_durations: dict[str, float] | None = None


def _recorded_durations() -> dict[str, float] | None:
    stats = Path("mutmut-stats.json")
    return json.loads(stats.read_text()).get("duration_by_test", {}) if stats.exists() else None


def pytest_sessionfinish() -> None:
    # In any of mutmut's runs (MUTANT_UNDER_TEST is set in all of them), and
    # so in its fork server once its warm-up collection ends: the children it
    # forks then collect only what they made. gc.freeze() moves no object and
    # frees none; it only keeps the collector from walking them again.
    # It reads the recorded durations first, so a mutant's run need not: the
    # fork server's copy, inherited by each child.
    global _durations  # noqa: PLW0603
    if "MUTANT_UNDER_TEST" in os.environ:
        _durations = _recorded_durations()
        gc.freeze()
