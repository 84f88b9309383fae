"""`make mutation`: the score of a mutmut run over the modules that decide truth.

Runs `mutmut run` (its output kept in _output/mutmut.log), reads
`mutmut results --all true`, and prints
`mutation: K of N mutants killed (S%)`, then every survivor that is not in
tests/equivalent_mutants.txt, the checked-in list of mutants argued to be
equivalent (each with its reason), named by function and changed lines so
that mutmut's renumbering does not invalidate it. Exits 1 while any survivor is unexplained
or the score is under the target.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "tests" / "equivalent_mutants.txt"
TARGET = 0.90
LOG = ROOT / "_output" / "mutmut.log"


def run_mutmut() -> int:
    """`mutmut run` on every core, its spinner output to LOG; returns its exit code."""
    LOG.parent.mkdir(exist_ok=True)
    with LOG.open("w") as log:
        return subprocess.call(
            [str(Path(sys.executable).parent / "mutmut"), "run", "--max-children", str(os.cpu_count() or 1)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def log_tail(lines: int = 25) -> str:
    """The end of mutmut's output without its spinner frames, for a run that checked nothing."""
    text = LOG.read_text(errors="replace") if LOG.exists() else ""
    # A spinner frame starts with a Braille pattern character (U+2800..U+28FF).
    kept = [
        line
        for line in text.replace("\r", "\n").splitlines()
        if line.strip() and not "\u2800" <= line.lstrip()[0] <= "\u28ff"
    ]
    return "\n".join(f"  | {line}" for line in kept[-lines:])


def results() -> dict[str, str]:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "mutmut"), "results", "--all", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("function."):
            found[name] = status
    return found


# A mutant is named by its function and the lines it changes, not by mutmut's
# number: numbers shift whenever the function gains or loses a mutable spot,
# and an argued survivor must not need arguing again for an unrelated edit.
Signature = tuple[str, tuple[str, ...]]


def _functions(mutants: Path, module: str) -> dict[str, str]:
    """Every function mutmut wrote into its copy of `module`: name -> source."""
    path = mutants / (module.replace(".", "/") + ".py")
    if not path.exists():  # a package: mutmut names its __init__'s functions after the package
        path = mutants / module.replace(".", "/") / "__init__.py"
    src = path.read_text()
    # Whole lines by the nodes' line numbers: ast.get_source_segment splits
    # the whole source again on every call, and a mutated module holds a
    # copy of a function per mutant (minutes for one module).
    lines = src.splitlines()
    return {
        node.name: "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in ast.walk(ast.parse(src))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in node.name
    }


def signature(name: str, mutants: Path, cache: dict[str, dict[str, str]]) -> Signature:
    """(module.function, the changed lines as `-old` / `+new` with a line of context) of mutant `name`."""
    module, _, mutant = name.rpartition(".")
    function = mutant.rsplit("__mutmut_", 1)[0]
    if module not in cache:
        cache[module] = _functions(mutants, module)
    sources = cache[module]

    def body(fn: str) -> list[str]:
        return [line.strip() for line in sources[fn].splitlines()[1:]]

    # One line of context each side: the same change in two places is two mutants.
    diff = difflib.unified_diff(body(f"{function}__mutmut_orig"), body(mutant), n=1, lineterm="")
    return f"{module}.{function}", tuple(line for line in diff if not line.startswith(("---", "+++", "@@")))


def equivalent() -> dict[Signature, str]:
    """(function, changed lines) -> why it is equivalent, from the checked-in list.

    A line is `<module.function><TAB><changed lines as a JSON list><TAB><why>`.
    """
    argued = {}
    for line in EQUIVALENT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            function, changed, why = line.split("\t")
            argued[function, tuple(json.loads(changed))] = why.strip()
    return argued


def main() -> int:
    # --reuse: judge the mutants/ of the last run again (after editing the list).
    code = 0 if "--reuse" in sys.argv[1:] else run_mutmut()
    found = results()
    counts = Counter(found.values())
    checked = {n: s for n, s in found.items() if s not in ("not checked", "skipped")}
    if not checked:
        print(
            f"!!! mutation: NOT RUN: mutmut exited {code} having checked none of {len(found)} mutants; "
            f"the end of its output ({LOG.relative_to(ROOT)}):\n{log_tail()}",
            file=sys.stderr,
        )
        return 1
    killed = sum(s == "killed" for s in checked.values())
    argued = equivalent()
    survivors = sorted(n for n, s in checked.items() if s != "killed")
    cache: dict[str, dict[str, str]] = {}
    signatures = {n: signature(n, ROOT / "mutants", cache) for n in survivors}
    unexplained = [n for n in survivors if signatures[n] not in argued]
    stale = set(argued) - set(signatures.values())
    score = killed / len(checked) if checked else 0.0
    print(
        f"mutation: {killed} of {len(checked)} mutants killed ({score:.0%}); "
        f"{len(survivors) - len(unexplained)} survivors argued equivalent, {len(unexplained)} unexplained"
        + (f"; not checked {counts['not checked']}" if counts["not checked"] else "")
    )
    for name in unexplained:
        function, changed = signatures[name]
        print(f"  survived: {name} ({found[name]})\n    {function}\t{json.dumps(list(changed))}\t<why>")
    for function, changed in sorted(stale):
        print(f"  argued but no longer surviving (drop it from the list): {function} {list(changed)}")
    return 0 if not unexplained and score >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
