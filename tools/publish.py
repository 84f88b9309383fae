"""`make release`: from a workstation, what the forge's tag workflow does, to any registry.

The Function package with the runtime image `make image` built embedded (and
the arm64 one `make image-arm64` built, when it was built from the same commit:
both pushed as one multi-platform index, as the forge's workflow pushes them),
and the Configuration, both built and pushed by the real
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

from tools import image, release

ROOT = Path(__file__).resolve().parent.parent
# Where `make image` leaves the Function package with its runtime image embedded.
FUNCTION_XPKG = ROOT / "_output" / "image" / f"{release.FUNCTION}.xpkg"
# The runtime image as `docker save` writes it, which `xpkg build --embed-runtime-image-tarball` reads.
RUNTIME_TARBALL = ROOT / "_output" / "image" / f"{release.FUNCTION}.docker.tar"


def _built_from(commit: Path) -> str:
    return commit.read_text().strip() if commit.is_file() else ""


def function_packages(head: str) -> list[Path]:
    """This machine's Function package, then every other architecture's built from the same commit;
    one built from another commit is left out, and said so."""
    others = []
    for arch in sorted(image.MACHINES):
        if arch == image.host_arch() or not image.package_path(arch).is_file():
            continue
        if _built_from(image.commit_path(arch)) == head:
            others.append(image.package_path(arch))
        else:
            print(
                f"release: the {arch} package is of another commit, not pushed (make image-{arch})",
                file=sys.stderr,
            )
    return [FUNCTION_XPKG, *others]


def push(cli: Path, registry: str, version: str, workdir: Path) -> list[str]:
    """Both packages pushed under registry; the references pushed."""
    from tests.real.packages import xpkg_build  # noqa: PLC0415
    from tests.real.process import run  # noqa: PLC0415

    if not FUNCTION_XPKG.is_file():
        raise RuntimeError(
            f"{FUNCTION_XPKG} is not there: run make image first (it builds the runtime image)"
        )
    built = _built_from(FUNCTION_XPKG.parent / "commit")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if built != head:
        raise RuntimeError(
            f"{FUNCTION_XPKG} was built from commit {built or 'unknown'}, HEAD is {head}: run make image again"
        )
    # Several package files pushed to one reference make one index, a manifest per platform.
    packages = {
        f"{registry}/{release.FUNCTION}:{version}": function_packages(head),
        f"{registry}/{release.CONFIGURATION}:{version}": [
            xpkg_build(cli, ROOT / "examples" / "configuration", workdir / "configuration.xpkg")
        ],
    }
    for ref, files in packages.items():
        run([str(cli), "xpkg", "push", "-f", ",".join(str(f) for f in files), ref])
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
