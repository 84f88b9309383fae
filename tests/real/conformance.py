"""`make conformance`: the real Crossplane CLI against this function and what the project ships.

1. Serves the function as `make run` does (plaintext, on a free loopback
   port) and renders every example with the real `crossplane render`
   through the Development runtime, then with `python -m function render`;
   the two must give the same documents (composed resources, XR status,
   conditions, results). A difference is a bug in one of them.
2. Validates what was rendered (the Objects and the manifests inside them)
   and every shipped manifest with `crossplane beta validate` against the
   upstream CRDs in ../shared/crds, offline: the CLI's cache of Crossplane's
   built-in schemas is seeded from the same Crossplane module it was built
   from, and the CLI runs in a network namespace of its own where one can be
   made, so nothing is ever pulled.
3. Builds the Function and the Configuration package with `crossplane xpkg
   build` and checks what is inside each.

Ends with one line:
`conformance: crossplane CLI vX: E of E examples rendered identically, V manifests validated with 0 errors, 2 of 2 packages built`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_schema import SHARED
from tests.real import packages, toolchain
from tests.real.process import ConformanceError, isolated, run
from tests.real.versions import CROSSPLANE
from tests.support import EXAMPLES, ROOT, served_function, yaml_docs
from tests.test_examples import EXAMPLE_LIST, Example

CRD_DIR = Path(os.environ.get("CRD_DIR") or SHARED / "crds")
# Upstream CRDs the function's output and the install manifests are checked
# against; Crossplane's own come from the CLI's module (the built-in schemas).
UPSTREAM_CRD_FOLDERS = ("envoy-ai-gateway", "envoy-gateway", "gateway-api", "provider-kubernetes")
CONFIGURATION = EXAMPLES / "configuration"
XRDS = sorted(CONFIGURATION.glob("*-xrd.yaml"))
INPUT_CRD_DIR = ROOT / "package" / "input"
# Kinds the CLI has no schema for: Kubernetes built-ins are not CRDs (RBAC in
# the install manifests; the observer's Deployment, which is only a name to
# observe), and package metadata is checked by `xpkg build` itself.
NO_SCHEMA_KINDS = {"ClusterRole", "ClusterRoleBinding", "RoleBinding", "Deployment"}
DEVELOPMENT_TARGET = "render.crossplane.io/runtime-development-target"


# --- 1. render -------------------------------------------------------------------------


def _functions_file(example: Example) -> Path:
    return EXAMPLES / example.composition.split("/")[0] / "functions.yaml"


def real_render(
    crank: Path, example: Example, address: str, *, full_xr: bool = False
) -> list[dict[str, Any]]:
    cmd = [
        str(crank),
        "render",
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
    return yaml_docs(run(cmd))


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


def seed_builtin_schemas(cache: Path) -> str:
    """Crossplane's built-in CRDs where `beta validate` looks for them, so it pulls nothing."""
    image = f"xpkg.crossplane.io/crossplane/crossplane:{CROSSPLANE.version}"
    target = cache / image.replace(":", "@")
    gomodcache = run(["go", "env", "GOMODCACHE"]).strip()
    source = Path(gomodcache) / f"{CROSSPLANE.module}@{CROSSPLANE.version}" / "cluster" / "crds"
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


def validate(crank: Path, docs: list[dict[str, Any]], workdir: Path) -> int:
    resources = workdir / "resources.yaml"
    resources.write_text("".join("---\n" + yaml.safe_dump(d, sort_keys=True) for d in docs))
    cache = workdir / "validate-cache"
    image = seed_builtin_schemas(cache)
    extensions = (
        [str(CRD_DIR / f) for f in UPSTREAM_CRD_FOLDERS] + [str(x) for x in XRDS] + [str(INPUT_CRD_DIR)]
    )
    cmd = [
        str(crank),
        "beta",
        "validate",
        ",".join(extensions),
        str(resources),
        "--cache-dir",
        str(cache),
        "--crossplane-image",
        image,
        "--skip-success-results",
    ]
    out = subprocess.run(isolated(cmd), cwd=ROOT, capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    match = _TOTAL.search(text)
    if match is None:
        raise ConformanceError(
            f"crossplane beta validate printed no summary ({out.returncode}):\n{text[-4000:]}"
        )
    total, missing, _ok, failed = (int(x) for x in match.groups())
    if out.returncode != 0 or failed or missing or "downloading" in text:
        raise ConformanceError(f"crossplane beta validate found problems:\n{text[-6000:]}")
    return total


# --- the run ---------------------------------------------------------------------------


@contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="conformance-") as d:
        yield Path(d)


def main() -> int:
    if not CRD_DIR.is_dir():
        print(f"conformance: NOT RUN: no upstream CRDs at {CRD_DIR} (set CRD_DIR)", file=sys.stderr)
        return 1
    try:
        crank = toolchain.ensure(CROSSPLANE, "crank")
    except toolchain.ToolchainError as e:
        print(f"conformance: NOT RUN: the crossplane CLI could not be built: {e}", file=sys.stderr)
        return 1
    failures: list[str] = []
    rendered: list[dict[str, Any]] = []
    identical = 0
    try:
        with served_function("--insecure") as address, _workdir() as work:
            for example in EXAMPLE_LIST:
                diff = differences(real_render(crank, example, address), our_render(example))
                if diff:
                    failures += [f"{example.name}: {d}" for d in diff]
                else:
                    identical += 1
                full = real_render(crank, example, address, full_xr=True)
                rendered += full + inner_manifests(full)
            docs = [d for d in rendered if d.get("kind") not in NO_SCHEMA_KINDS] + shipped_manifests()
            validated = validate(crank, docs, work)
            problems = packages.build(crank, work)
            failures += [p for found in problems.values() for p in found]
    except ConformanceError as e:
        print(f"conformance: FAILED: {e}", file=sys.stderr)
        return 1
    for f in failures:
        print(f"conformance: {f}", file=sys.stderr)
    built = sum(1 for found in problems.values() if not found)
    print(
        f"conformance: crossplane CLI {CROSSPLANE.version}: {identical} of {len(EXAMPLE_LIST)} examples rendered "
        f"identically, {validated} manifests validated with 0 errors, {built} of {len(problems)} packages built"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
