"""Running the real binaries: errors that say what failed, and no network where we can cut it."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.support import ROOT


class ConformanceError(RuntimeError):
    """A real component failed or disagreed: the message says which and how."""


def isolated(cmd: list[str]) -> list[str]:
    """The command in a network namespace of its own, where this machine lets us make one.

    Proves that nothing is pulled from a registry: a CLI that tried would fail.
    """
    unshare = shutil.which("unshare")
    if (
        unshare
        and subprocess.run([unshare, "--net", "true"], capture_output=True, check=False).returncode == 0
    ):
        return [unshare, "--net", *cmd]
    return cmd


def run(cmd: list[str], *, no_network: bool = False, env: dict[str, str] | None = None) -> str:
    """stdout of the command, run from the project root; ConformanceError with its output if it fails."""
    out = subprocess.run(
        isolated(cmd) if no_network else cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env} if env else None,
    )
    if out.returncode != 0:
        raise ConformanceError(
            f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}{out.stdout}"[-6000:]
        )
    return out.stdout
