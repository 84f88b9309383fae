"""Under `make mutation` only: each mutant's tests stop as soon as one fails.

mutmut reruns the tests that reach a mutated function once per mutant and
stops at the first failure (`-x`). Two things made a killed mutant cost as
much as a survivor on a 2-core CI machine:
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
  plain.
Outside mutation nothing here applies. None of it changes which tests run or
what they check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
    stats = Path("mutmut-stats.json")
    if stats.exists():
        durations = json.loads(stats.read_text()).get("duration_by_test", {})
        items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
