"""`make release`: from a workstation, what the forge's tag workflow does, to any registry.

The Function package with the runtime image `make image` built embedded (this
machine's architecture only; the forge's workflow builds amd64 and arm64 and
pushes one index), and the Configuration, both built and pushed by the real
Crossplane CLI to the registry release.env names, or REGISTRY=... The CLI
reads credentials from the Docker config (`docker login` or `podman login
--authfile ~/.docker/config.json`). make release-check pushes the same way to
a registry on loopback and installs from there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tools import release

ROOT = Path(__file__).resolve().parent.parent
# Where `make image` leaves the Function package with its runtime image embedded.
FUNCTION_XPKG = ROOT / "_output" / "image" / f"{release.FUNCTION}.xpkg"
# The runtime image as `docker save` writes it, which `xpkg build --embed-runtime-image-tarball` reads.
RUNTIME_TARBALL = ROOT / "_output" / "image" / f"{release.FUNCTION}.docker.tar"


def push(cli: Path, registry: str, version: str, workdir: Path) -> list[str]:
    """Both packages pushed under registry; the references pushed."""
    from tests.real.packages import xpkg_build  # noqa: PLC0415
    from tests.real.process import run  # noqa: PLC0415

    if not FUNCTION_XPKG.is_file():
        raise RuntimeError(
            f"{FUNCTION_XPKG} is not there: run make image first (it builds the runtime image)"
        )
    commit = FUNCTION_XPKG.parent / "commit"
    built = commit.read_text().strip() if commit.is_file() else ""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if built != head:
        raise RuntimeError(
            f"{FUNCTION_XPKG} was built from commit {built or 'unknown'}, HEAD is {head}: run make image again"
        )
    packages = {
        f"{registry}/{release.FUNCTION}:{version}": FUNCTION_XPKG,
        f"{registry}/{release.CONFIGURATION}:{version}": xpkg_build(
            cli, ROOT / "examples" / "configuration", workdir / "configuration.xpkg"
        ),
    }
    for ref, xpkg in packages.items():
        run([str(cli), "xpkg", "push", "-f", str(xpkg), ref])
    return list(packages)


def main() -> int:
    from tests.real import toolchain  # noqa: PLC0415
    from tests.real.versions import CROSSPLANE_CLI  # noqa: PLC0415

    this = release.read()
    registry = os.environ.get("REGISTRY") or this.registry
    try:
        cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
        with tempfile.TemporaryDirectory(prefix="fgr-release-") as d:
            pushed = push(cli, registry, this.version, Path(d))
    except Exception as e:  # a clear line, never a traceback, for a failed push or build
        print(f"release: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"release: pushed {', '.join(pushed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
