"""The packages' registry and version: set once in release.env, used everywhere.

Every place that names a package of ours (the Function's metadata has no
reference of its own; the Configuration's `dependsOn`, the install and
render manifests, the real control plane, the kind run) is listed here with
how it spells the reference, so one command retargets them all and a test
keeps them from drifting apart.

    python -m tools.release --registry ghcr.io/acme --version v0.2.0
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTION = "function-gateway-readiness"
CONFIGURATION = "configuration-inference-gateways"
_REGISTRY = r"[a-z0-9.:/_-]+"
_VERSION = r"v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?"


@dataclass(frozen=True)
class Release:
    registry: str
    version: str

    @property
    def function(self) -> str:
        """The Function package, without a tag (as `dependsOn` names it)."""
        return f"{self.registry}/{FUNCTION}"

    @property
    def configuration(self) -> str:
        return f"{self.registry}/{CONFIGURATION}"


@dataclass(frozen=True)
class Place:
    path: str
    # Matches the reference in the file; group 1 is the part that is replaced.
    pattern: str
    render: Callable[[Release], str]


def _tagged(release: Release) -> str:
    return f"{release.function}:{release.version}"


_TAGGED = rf"({_REGISTRY}/{FUNCTION}:{_VERSION})"
PLACES = [
    Place("examples/install/function.yaml", rf"package: {_TAGGED}", _tagged),
    Place("examples/inference-gateway/functions.yaml", rf"package: {_TAGGED}", _tagged),
    Place("examples/model-route/functions.yaml", rf"package: {_TAGGED}", _tagged),
    Place(
        "examples/configuration/crossplane.yaml",
        rf"package: ({_REGISTRY}/{FUNCTION})\n",
        lambda r: r.function,
    ),
    Place(
        "examples/configuration/crossplane.yaml",
        rf"package: {_REGISTRY}/{FUNCTION}\n\s+version: (\">={_VERSION}\")",
        lambda r: f'">={r.version}"',
    ),
]


def read(root: Path = ROOT) -> Release:
    values = dict(
        line.split("=", 1)
        for line in (root / "release.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    return Release(values["REGISTRY"], values["VERSION"])


def found(place: Place, root: Path = ROOT) -> list[str]:
    return re.findall(place.pattern, (root / place.path).read_text())


def drift(root: Path = ROOT) -> list[str]:
    """Every place whose reference is not the one release.env sets."""
    release = read(root)
    out = []
    for place in PLACES:
        got = found(place, root)
        if got != [place.render(release)]:
            out.append(f"{place.path}: {got} (want {place.render(release)})")
    return out


def retarget(release: Release, root: Path = ROOT) -> None:
    """Write release.env and every place for `release`."""
    env = root / "release.env"
    text = re.sub(r"(?m)^REGISTRY=.*$", f"REGISTRY={release.registry}", env.read_text())
    env.write_text(re.sub(r"(?m)^VERSION=.*$", f"VERSION={release.version}", text))
    for place in PLACES:
        path = root / place.path
        text = path.read_text()

        def swap(match: re.Match[str], place: Place = place) -> str:
            whole, start = match.group(0), match.start(1) - match.start(0)
            return whole[:start] + place.render(release) + whole[match.end(1) - match.start(0) :]

        path.write_text(re.sub(place.pattern, swap, text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", required=True, help="e.g. ghcr.io/acme")
    parser.add_argument("--version", required=True, help="a semantic version with a leading v")
    args = parser.parse_args(argv)
    if not re.fullmatch(_REGISTRY, args.registry) or args.registry.endswith("/"):
        parser.error(f"--registry {args.registry!r}: not a registry path like ghcr.io/acme")
    if not re.fullmatch(_VERSION, args.version):
        parser.error(f"--version {args.version!r}: want a semantic version like v0.2.0")
    retarget(Release(args.registry, args.version))
    problems = drift()
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    print(f"packages: {Release(args.registry, args.version).function}:{args.version}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
