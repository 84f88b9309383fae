"""`make conformance`: the real Crossplane CLIs against this function and what the project ships.

Twice: with the CLI users install (v2.5: `crossplane composition render`
hands rendering to a core binary, `crossplane internal render` of the core
the integration runs, given with --crossplane-binary so no Docker is needed),
and with the oldest supported (v2.2, whose render runs in-process).

1. Serves the function as `make run` does (plaintext, on a free loopback
   port) and renders every example with the real CLI through the
   Development runtime, then with `python -m function render`; the two must
   give the same documents (composed resources, XR status, conditions,
   results). A difference is a bug in one of them.
2. Validates what was rendered (the Objects and the manifests inside them)
   and every shipped manifest (`crossplane resource validate`, v2.2's `beta
   validate`) against the upstream CRDs in ../shared/crds, offline:
   Crossplane's own CRDs come from the module the CLI renders with, and the
   CLI runs in a network namespace of its own where one can be made, so
   nothing is ever pulled.
3. Builds the Function and the Configuration package with `crossplane xpkg
   build` and checks what is inside each.

Ends with one line:
`conformance: crossplane CLI vX (render in core vY): E of E examples rendered identically, V manifests validated with 0 errors, 2 of 2 packages built; crossplane CLI vZ: ...`.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_schema import SHARED
from tests.real import packages, toolchain
from tests.real.process import ConformanceError, isolated, run
from tests.real.versions import CROSSPLANE, CROSSPLANE_CLI, CROSSPLANE_OLDEST, Component
from tests.support import EXAMPLES, ROOT, served_function, yaml_docs
from tests.test_examples import EXAMPLE_LIST, Example

CRD_DIR = Path(os.environ.get("CRD_DIR") or SHARED / "crds")
# Upstream CRDs the function's output and the install manifests are checked
# against; Crossplane's own come from the CLI's module (the built-in schemas).
UPSTREAM_CRD_FOLDERS = ("envoy-ai-gateway", "envoy-gateway", "gateway-api", "provider-kubernetes")
CONFIGURATION = EXAMPLES / "configuration"
XRDS = sorted(CONFIGURATION.glob("*-xrd.yaml"))
INPUT_CRD_DIR = ROOT / "package" / "input"
VENDORED_CRD_DIR = ROOT / "tests" / "crds"
# Kinds the CLI has no schema for: Kubernetes built-ins are not CRDs (RBAC in
# the install manifests, the function's PodDisruptionBudget; the observer's Deployment, which is only a name to
# observe), and package metadata is checked by `xpkg build` itself.
# Core kinds have no CRD for crossplane validate; the serving record ConfigMap is
# checked by tests/k8s_schema.py (validate_configmap).
NO_SCHEMA_KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "RoleBinding",
    "Deployment",
    "PodDisruptionBudget",
    "ConfigMap",
}
DEVELOPMENT_TARGET = "render.crossplane.io/runtime-development-target"


@dataclass(frozen=True)
class Cli:
    """A Crossplane CLI, and where its render and validate commands differ between lines."""

    component: Component
    binary: str
    # v2.3+: render runs `crossplane internal render` of this core binary
    # (--crossplane-binary; without it the CLI runs the core's image in Docker).
    core: Component | None

    @property
    def version(self) -> str:
        return self.component.version

    def render(self) -> list[str]:
        if self.core is None:
            return [str(toolchain.ensure(self.component, self.binary)), "render"]
        core = toolchain.ensure(self.core, "crossplane")
        cli = toolchain.ensure(self.component, self.binary)
        return [str(cli), "composition", "render", "--crossplane-binary", str(core)]

    def validate(self) -> list[str]:
        cli = str(toolchain.ensure(self.component, self.binary))
        return [cli, "beta", "validate"] if self.core is None else [cli, "resource", "validate"]

    def builtin_crds(self) -> Path:
        """Crossplane's own CRDs (XRDs, Compositions, packages), from the module the CLI renders with."""
        core = self.core or self.component
        gomodcache = run(["go", "env", "GOMODCACHE"]).strip()
        return Path(gomodcache) / f"{core.module}@{core.version}" / "cluster" / "crds"


# The CLI users install, rendering through the core the integration runs; and
# the oldest supported, the last whose render runs in-process.
CLIS = (Cli(CROSSPLANE_CLI, "crossplane-cli", CROSSPLANE), Cli(CROSSPLANE_OLDEST, "crank", None))


# --- 1. render -------------------------------------------------------------------------


def _functions_file(example: Example) -> Path:
    return EXAMPLES / example.composition.split("/")[0] / "functions.yaml"


def real_render(cli: Cli, example: Example, address: str, *, full_xr: bool = False) -> list[dict[str, Any]]:
    cmd = [
        *cli.render(),
        str(EXAMPLES / example.xr),
        str(EXAMPLES / example.composition),
        str(_functions_file(example)),
        "-a",
        f"{DEVELOPMENT_TARGET}={address}",
    ]
    cmd += ["--include-full-xr"] if full_xr else ["--include-function-results"]
    if example.observed:
        cmd += ["--observed-resources", str(EXAMPLES / example.observed)]
    if example.required:
        cmd += ["--required-resources", str(EXAMPLES / example.required)]
    docs = yaml_docs(run(cmd))
    return docs if cli.core is None else as_in_process_render(docs)


_STEP_EVENT = re.compile(r'^Pipeline step "([^"]+)": (.*)$', re.DOTALL)
# What a v2.3+ core adds to a render on its own, the same whatever the
# function answers: its Responsive (the watch circuit breaker) and Synced
# conditions, resourceRefs, real owner UIDs, and its events (selecting the
# composition, composed resources not ready yet).
_CORE_CONDITIONS = {"Responsive", "Synced"}


def as_in_process_render(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A v2.3+ core's render in the form of v2.2's in-process one, which `python -m function render` prints.

    Only what the core adds on its own goes (see _CORE_CONDITIONS); the
    function's results, which the core prints as events ('Pipeline step "s":
    message', its severity a word), are written back as results of step s.
    The XR's Ready comes first, as v2.2 lists it, the function's conditions
    after it in the order the core gives them.
    """
    out: list[dict[str, Any]] = []
    for doc in copy.deepcopy(docs):
        if doc.get("kind") == "Result":
            event = _STEP_EVENT.match(str(doc.get("message", "")))
            if event is None:
                continue  # the core's own event
            out.append(
                {
                    "apiVersion": doc["apiVersion"],
                    "kind": "Result",
                    "message": event.group(2),
                    "severity": f"SEVERITY_{str(doc.get('severity', '')).upper()}",
                    "step": event.group(1),
                }
            )
            continue
        crossplane = (doc.get("spec") or {}).get("crossplane")
        if isinstance(crossplane, dict):
            crossplane.pop("resourceRefs", None)
            if not crossplane:
                del doc["spec"]["crossplane"]
            if not doc["spec"]:
                del doc["spec"]
        status = doc.get("status") or {}
        if isinstance(status.get("conditions"), list):
            kept = [c for c in status["conditions"] if c.get("type") not in _CORE_CONDITIONS]
            status["conditions"] = sorted(kept, key=lambda c: c.get("type") != "Ready")
        for owner in (doc.get("metadata") or {}).get("ownerReferences") or []:
            owner["uid"] = ""
        out.append(doc)
    return out


def our_render(example: Example) -> list[dict[str, Any]]:
    return yaml_docs(run(example.command()))


def differences(real: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[str]:
    """Where two render streams disagree, document by document."""

    def key(doc: dict[str, Any]) -> str:
        meta = doc.get("metadata") or {}
        name = (meta.get("annotations") or {}).get("crossplane.io/composition-resource-name")
        return f"{doc.get('kind')} {name or meta.get('name') or doc.get('message', '')}"

    a = {key(d): d for d in real}
    b = {key(d): d for d in ours}
    out = [f"only in crossplane render: {k}" for k in sorted(set(a) - set(b))]
    out += [f"only in python -m function render: {k}" for k in sorted(set(b) - set(a))]
    out += [f"differs: {k}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    if not out and real != ours:
        out.append("the same documents in another order")
    return out


# --- 2. validate -----------------------------------------------------------------------


def seed_builtin_schemas(cli: Cli, cache: Path) -> str:
    """Crossplane's built-in CRDs where `beta validate` (v2.2) looks for them, so it pulls nothing."""
    image = f"xpkg.crossplane.io/crossplane/crossplane:{cli.version}"
    target = cache / image.replace(":", "@")
    source = cli.builtin_crds()
    if not source.is_dir():
        raise ConformanceError(f"Crossplane's CRDs are not in the module cache at {source}")
    target.mkdir(parents=True, exist_ok=True)
    for crd in source.glob("*.yaml"):
        (target / crd.name).write_bytes(crd.read_bytes())
    return image


def inner_manifests(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The desired manifests provider-kubernetes Objects carry (their schema is preserve-unknown-fields).

    An observe-only Object's manifest only names what to observe (an Envoy
    Deployment, an InferenceGateway, a workload): it is never a desired state
    and would fail its kind's required fields as one; the real control-plane
    run shows the provider observing them.
    """
    return [
        d["spec"]["forProvider"]["manifest"]
        for d in docs
        if d.get("kind") == "Object"
        and d["spec"].get("managementPolicies") != ["Observe"]
        and isinstance(((d.get("spec") or {}).get("forProvider") or {}).get("manifest"), dict)
    ]


def shipped_manifests() -> list[dict[str, Any]]:
    files = [
        *XRDS,
        *sorted(CONFIGURATION.glob("*-composition.yaml")),
        *sorted(EXAMPLES.glob("*/composition.yaml")),
        *sorted(EXAMPLES.glob("*/functions.yaml")),
        *sorted(EXAMPLES.glob("*/xr*.yaml")),
        *sorted((EXAMPLES / "install").glob("*.yaml")),
    ]
    docs: list[dict[str, Any]] = []
    for f in files:
        docs += yaml_docs(f.read_text())
    return [d for d in docs if d.get("kind") not in NO_SCHEMA_KINDS]


_TOTAL = re.compile(r"Total (\d+) resources: (\d+) missing schemas, (\d+) success cases, (\d+) failure cases")


def validate(cli: Cli, docs: list[dict[str, Any]], workdir: Path) -> int:
    resources = workdir / "resources.yaml"
    resources.write_text("".join("---\n" + yaml.safe_dump(d, sort_keys=True) for d in docs))
    cache = workdir / f"validate-cache-{cli.version}"
    extensions = (
        [str(CRD_DIR / f) for f in UPSTREAM_CRD_FOLDERS]
        + [str(x) for x in XRDS]
        + [str(INPUT_CRD_DIR)]
        # Upstream CRDs ../shared/crds lacks (provider-http's), vendored unchanged.
        + [str(VENDORED_CRD_DIR)]
    )
    if cli.core is None:
        image = seed_builtin_schemas(cli, cache)
    else:
        # v2.3+ reads Crossplane's CRDs as local files like any other, and an
        # empty image pulls nothing (the CLI would add :stable otherwise).
        extensions.append(str(cli.builtin_crds()))
        image = ""
    cmd = [
        *cli.validate(),
        ",".join(extensions),
        str(resources),
        "--cache-dir",
        str(cache),
        f"--crossplane-image={image}",
        "--skip-success-results",
    ]
    out = subprocess.run(isolated(cmd), cwd=ROOT, capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    match = _TOTAL.search(text)
    if match is None:
        raise ConformanceError(f"crossplane validate printed no summary ({out.returncode}):\n{text[-4000:]}")
    total, missing, _ok, failed = (int(x) for x in match.groups())
    if out.returncode != 0 or failed or missing or "downloading" in text:
        raise ConformanceError(f"crossplane validate found problems:\n{text[-6000:]}")
    return total


# --- the run ---------------------------------------------------------------------------


@contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="conformance-") as d:
        yield Path(d)


def check(cli: Cli) -> tuple[list[str], str]:
    """Render every example with `cli`, compare, validate, build the packages: (failures, summary line)."""
    failures: list[str] = []
    rendered: list[dict[str, Any]] = []
    identical = 0
    with served_function("--insecure") as address, _workdir() as work:
        for example in EXAMPLE_LIST:
            diff = differences(real_render(cli, example, address), our_render(example))
            if diff:
                failures += [f"{example.name}: {d}" for d in diff]
            else:
                identical += 1
            full = real_render(cli, example, address, full_xr=True)
            rendered += full + inner_manifests(full)
        docs = [d for d in rendered if d.get("kind") not in NO_SCHEMA_KINDS] + shipped_manifests()
        validated = validate(cli, docs, work)
        problems = packages.build(toolchain.ensure(cli.component, cli.binary), work)
        failures += [p for found in problems.values() for p in found]
    built = sum(1 for found in problems.values() if not found)
    core = f" (render in core {cli.core.version})" if cli.core is not None else ""
    return failures, (
        f"crossplane CLI {cli.version}{core}: {identical} of {len(EXAMPLE_LIST)} examples rendered "
        f"identically, {validated} manifests validated with 0 errors, {built} of {len(problems)} packages built"
    )


def main() -> int:
    if not CRD_DIR.is_dir():
        print(f"conformance: NOT RUN: no upstream CRDs at {CRD_DIR} (set CRD_DIR)", file=sys.stderr)
        return 1
    failures: list[str] = []
    lines: list[str] = []
    for cli in CLIS:
        try:
            found, line = check(cli)
        except toolchain.ToolchainError as e:
            print(
                f"conformance: NOT RUN: crossplane CLI {cli.version} could not be built: {e}", file=sys.stderr
            )
            return 1
        except ConformanceError as e:
            print(f"conformance: FAILED with crossplane CLI {cli.version}: {e}", file=sys.stderr)
            return 1
        failures += found
        lines.append(line)
    for f in failures:
        print(f"conformance: {f}", file=sys.stderr)
    print(f"conformance: {'; '.join(lines)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
