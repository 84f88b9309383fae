"""`make workflows`: the forge's workflows checked by actionlint, which runs shellcheck on their scripts.

Ends with one line: `workflows: N of N workflows pass actionlint vX (shellcheck on their scripts)`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.real import toolchain
from tests.real.versions import ACTIONLINT
from tests.support import ROOT


def main() -> int:
    try:
        actionlint = toolchain.ensure(ACTIONLINT, "actionlint")
    except toolchain.ToolchainError as e:
        print(f"workflows: NOT RUN: actionlint could not be built: {e}", file=sys.stderr)
        return 1
    if shutil.which("shellcheck") is None:
        # actionlint skips the scripts silently without it: never a silent skip here.
        print("workflows: NOT RUN: shellcheck is not on PATH (the venv's, from `.[test]`)", file=sys.stderr)
        return 1
    files = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    failed = []
    for f in files:
        done = subprocess.run(
            [str(actionlint), str(f)], cwd=ROOT, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            failed.append(f.name)
            print(done.stdout + done.stderr, file=sys.stderr)
    print(
        f"workflows: {len(files) - len(failed)} of {len(files)} workflows pass actionlint {ACTIONLINT.version} "
        f"(shellcheck on their scripts){': failed ' + ', '.join(failed) if failed else ''}"
    )
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(main())
