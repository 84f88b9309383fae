"""Build pinned upstream binaries with Go into a cache outside the clone, and reuse them.

CI runs in a fresh clone on the same machine, so the cache lives under the
user's cache folder (`$FGR_CACHE_DIR`, else `$XDG_CACHE_HOME/function-gateway-
readiness`, else `~/.cache/function-gateway-readiness`), one folder per
component and version. A build goes to a temporary name and is renamed into
place, so an interrupted build never leaves a broken binary behind.

`python -m tests.real.toolchain crank` prints the binary's path, building it
first if needed, and how long that took.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tests.real.versions import (
    ACTIONLINT,
    CONTROLLER_TOOLS,
    CROSSPLANE,
    CROSSPLANE_CLI,
    CROSSPLANE_OLDEST,
    ENVOY_AI_GATEWAY,
    ENVOY_GATEWAY,
    ETCD,
    KUBERNETES,
    KWOK,
    PROVIDER_HTTP,
    PROVIDER_KUBERNETES,
    PROVIDER_KUBERNETES_OLDEST,
    REGISTRY,
    Component,
)

MODULES = Path(__file__).resolve().parent / "modules"
ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = {
    c.name: c
    for c in (
        CROSSPLANE,
        CROSSPLANE_CLI,
        CROSSPLANE_OLDEST,
        ETCD,
        KUBERNETES,
        KWOK,
        PROVIDER_KUBERNETES,
        PROVIDER_KUBERNETES_OLDEST,
        PROVIDER_HTTP,
        ENVOY_GATEWAY,
        ENVOY_AI_GATEWAY,
        CONTROLLER_TOOLS,
        REGISTRY,
        ACTIONLINT,
    )
}


class ToolchainError(RuntimeError):
    """A binary could not be had: says which and why."""


def cache_root() -> Path:
    if os.environ.get("FGR_CACHE_DIR"):
        return Path(os.environ["FGR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "function-gateway-readiness"


def binary_path(component: Component, binary: str) -> Path:
    # A stamped build is cached apart from an unstamped one of the same version.
    stamped = "-stamped" if component.stamp else ""
    return cache_root() / f"{component.name}-{component.version}{stamped}" / binary


def cached(component: Component, binary: str) -> bool:
    path = binary_path(component, binary)
    return path.is_file() and os.access(path, os.X_OK)


def shared_dir() -> Path:
    """The folder shared beside the clone; SHARED_DIR names it elsewhere (mutmut's copy)."""
    return Path(os.environ.get("SHARED_DIR") or ROOT.parent / "shared")


def source_dir(component: Component) -> Path:
    """Where `go build` runs: the wrapper module, or the archive's tree extracted into the cache.

    An archive is checked against its .sha256 before anything is extracted, and
    extracted under a temporary name then renamed, so a half-extracted tree is
    never built from.
    """
    if component.archive is None:
        return MODULES / component.name
    tree = cache_root() / "src" / f"{component.name}-{component.version}"
    if (tree / "go.mod").is_file():
        return tree
    archive = shared_dir() / "upstream" / component.archive
    if not archive.is_file():
        raise ToolchainError(f"{component.name} {component.version}: {archive} is not there")
    want = (archive.parent / f"{component.archive}.sha256").read_text().split()[0]
    got = hashlib.sha256(archive.read_bytes()).hexdigest()
    if got != want:
        raise ToolchainError(f"{archive}: sha256 {got}, its .sha256 file says {want}: not built")
    # A name of this process's own: conformance and integration run at once in
    # .ci/run, and on a fresh machine both may extract or build the same thing.
    partial = tree.with_name(f".{tree.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    (top,) = list(partial.iterdir())  # one top folder, as shared/upstream/README.md says
    if tree.exists() and not (tree / "go.mod").is_file():
        shutil.rmtree(tree)  # left half-made by an older layout: a rename is all or nothing
    try:
        top.rename(tree)
    except OSError:
        # Another process renamed its own extraction in first: the same archive, checked.
        if not (tree / "go.mod").is_file():
            raise
        shutil.rmtree(partial, ignore_errors=True)
        return tree
    partial.rmdir()
    return tree


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolchainError("no go on PATH: install Go 1.26 (the Debian or upstream toolchain)")
    return go


def ensure(component: Component, binary: str) -> Path:
    """The cached binary, built now if it is not there yet."""
    path = binary_path(component, binary)
    if cached(component, binary):
        return path
    package = component.binaries[binary]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{binary}.{os.getpid()}.partial")  # as in source_dir
    env = {
        **os.environ,
        # The committed go.sum decides every dependency; no toolchain switch.
        "GOFLAGS": "-mod=readonly",
        "GOWORK": "off",
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local"),
        "CGO_ENABLED": "0",
    }
    started = time.monotonic()
    print(
        f"building {binary} {component.version} from {component.module} (cached in {path.parent})",
        file=sys.stderr,
    )
    out = subprocess.run(
        [
            _go(),
            "build",
            "-trimpath",
            *([f"-ldflags=-X {component.stamp}={component.version}"] if component.stamp else []),
            "-o",
            str(partial),
            package,
        ],
        cwd=source_dir(component),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ToolchainError(f"go build {package}@{component.version} failed:\n{out.stderr[-4000:]}")
    if component.stamp:
        # -X on a variable that is not linked is ignored silently: ask the binary.
        said = subprocess.run([str(partial), "--version"], capture_output=True, text=True, check=False)
        if said.stdout.strip() != component.version:
            partial.unlink(missing_ok=True)
            raise ToolchainError(
                f"{binary} built with {component.stamp}={component.version} says it is "
                f"{said.stdout.strip() or said.stderr.strip()!r}: the stamp did not take"
            )
    partial.rename(path)
    seconds = time.monotonic() - started
    (path.parent / f"{binary}.build-seconds").write_text(f"{seconds:.0f}\n")
    print(f"built {binary} in {seconds:.0f} s", file=sys.stderr)
    return path


def archive_crds(component: Component) -> Path:
    """The CRDs of a component built from an archive, written by controller-gen from its api/.

    The archive carries the Go API types but not upstream's generated
    manifests; controller-gen at upstream's version writes the same CRDs
    (tests/real/envoy.py compares the kinds shared/crds/ holds before using
    them).
    """
    tree = source_dir(component)
    out = tree / "_crds"
    if any(out.glob("*.yaml")):
        return out
    partial = tree / f"._crds.{os.getpid()}.partial"  # as in source_dir
    shutil.rmtree(partial, ignore_errors=True)
    run = subprocess.run(
        [
            str(ensure(CONTROLLER_TOOLS, "controller-gen")),
            "crd",
            "paths=./api/...",
            f"output:crd:dir={partial}",
        ],
        cwd=tree,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOWORK": "off", "GOTOOLCHAIN": "local"},
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        raise ToolchainError(f"controller-gen crd in {tree} failed:\n{run.stderr[-4000:]}")
    try:
        partial.rename(out)
    except OSError:
        if not any(out.glob("*.yaml")):
            raise
        shutil.rmtree(partial, ignore_errors=True)  # another process wrote the same CRDs first
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            f"usage: python -m tests.real.toolchain BINARY  (one of: {', '.join(_all_binaries())})",
            file=sys.stderr,
        )
        return 2
    for component in COMPONENTS.values():
        if argv[0] in component.binaries:
            try:
                print(ensure(component, argv[0]))
            except ToolchainError as e:
                print(e, file=sys.stderr)
                return 1
            return 0
    print(f"unknown binary {argv[0]}", file=sys.stderr)
    return 2


def _all_binaries() -> list[str]:
    return sorted(b for c in COMPONENTS.values() for b in c.binaries)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
