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


def dns_label(s: str) -> str:
    """Crossplane's xpkg.ToDNSLabel (crossplane-runtime v2.4.0, pkg/xpkg/name.go), character for character.

    The package manager names a dependency it installs after its repository
    (internal/controller/pkg/resolver/reconciler.go, NewPackage): a Function
    the Configuration pulls in from xpkg.crossplane.io/example/... is named
    example-function-gateway-readiness, and a Composition must name it so.
    """
    out = []
    for i, ch in enumerate(s[:63]):
        if "a" <= ch <= "z" or "0" <= ch <= "9":
            out.append(ch)
        if ch in "./:-" and i not in (0, 62, len(s) - 1):
            out.append("-")
    return "".join(out).strip("-")


def installed_name(reference: str) -> str:
    """The name Crossplane gives a package it installs from reference (no tag): its repository as a DNS label.

    The repository is the reference without the registry host (a first part
    with a dot or a colon, or localhost), as go-containerregistry's
    RepositoryStr gives it; the CLI's `xpkg install` names a package the same.
    """
    first, _, rest = reference.partition("/")
    host = rest and ("." in first or ":" in first or first == "localhost")
    repository = rest if host else reference
    # Docker Hub's official images: go-containerregistry puts a one-part repository there under library/.
    if (not host or first in ("docker.io", "index.docker.io")) and "/" not in repository:
        repository = f"library/{repository}"
    return dns_label(repository)


@dataclass(frozen=True)
class Release:
    registry: str
    version: str

    @property
    def function_name(self) -> str:
        """The Function's name once installed: what the package manager names it as a dependency.

        The install manifests name it the same, so a Function installed by
        hand satisfies the Configuration's dependency under the name its
        Compositions call.
        """
        return installed_name(self.function)

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
    # How many times the pattern occurs in the file (each with the same value).
    count: int = 1


def _tagged(release: Release) -> str:
    return f"{release.function}:{release.version}"


_TAGGED = rf"({_REGISTRY}/{FUNCTION}:{_VERSION})"
# The Function's name where it is installed and where Compositions call it.
_NAME = r"([a-z0-9][a-z0-9-]*)"
_FUNCTION_OBJECT = rf"kind: Function\nmetadata:\n  name: {_NAME}\n"
_CALLED = rf"functionRef:\n\s+name: {_NAME}\n"
PLACES = [
    Place("examples/install/function.yaml", rf"package: {_TAGGED}", _tagged),
    Place("examples/install/function.yaml", _FUNCTION_OBJECT, lambda r: r.function_name),
    Place(
        "examples/install/function.yaml",
        rf"pkg\.crossplane\.io/function: {_NAME}\n",
        lambda r: r.function_name,
        count=2,
    ),
    Place("examples/inference-gateway/functions.yaml", _FUNCTION_OBJECT, lambda r: r.function_name),
    Place("examples/model-route/functions.yaml", _FUNCTION_OBJECT, lambda r: r.function_name),
    Place("examples/inference-gateway/composition.yaml", _CALLED, lambda r: r.function_name),
    Place("examples/model-route/composition.yaml", _CALLED, lambda r: r.function_name),
    Place("examples/configuration/inferencegateway-composition.yaml", _CALLED, lambda r: r.function_name),
    Place("examples/configuration/modelroute-composition.yaml", _CALLED, lambda r: r.function_name),
    Place("function/render.py", rf'FUNCTION_NAME = "{_NAME}"\n', lambda r: r.function_name),
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
        if got != [place.render(release)] * place.count:
            out.append(f"{place.path}: {got} (want {place.render(release)} x{place.count})")
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
