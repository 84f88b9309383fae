"""Everything the project emits and ships, validated against the real upstream CRDs.

`python -m tools.validate` (what `make validate` runs) prints one summary line:
`validated N manifests against M CRDs: E errors, R rules evaluated, U not evaluated`,
then the rules not evaluated, and exits non-zero on any error or on a known-bad
manifest the validator fails to reject.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossplane.function import resource

from tests.k8s_schema import ROOT, Registry, Report, crd_dir, validate_object
from tests.support import ROUTE_INPUT, compose, load_yaml, make_request, run

EXAMPLES = ROOT / "examples"
CONFIGURATION = EXAMPLES / "configuration"
XRDS = sorted(CONFIGURATION.glob("*-xrd.yaml"))
INPUT_CRD = ROOT / "package" / "input" / "gatewayreadiness.fn.crossplane.io_inputs.yaml"
COMPOSITIONS = sorted([*EXAMPLES.glob("*/composition.yaml"), *CONFIGURATION.glob("*-composition.yaml")])
INSTALL = sorted((EXAMPLES / "install").glob("*.yaml"))

# Shipped kinds with no CRD among the upstream ones: package metadata is read
# by the crossplane CLI, RBAC is a built-in API, and Crossplane's Provider CRD
# is not in the set we validate against. They are listed, never passed silently;
# tests/test_package.py checks the package metadata on its own.
NO_CRD_HERE = {
    ("meta.pkg.crossplane.io/v1", "Configuration"),
    ("meta.pkg.crossplane.io/v1", "Function"),
    ("pkg.crossplane.io/v1", "Provider"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("policy/v1", "PodDisruptionBudget"),
    # Core kinds, in the examples only as the required resources a route reads
    # (a backend's Secret or CA ConfigMap): built into the API server.
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
}
EXAMPLE_XRS = sorted(EXAMPLES.glob("*/xr*.yaml"))


# Upstream CRDs that ../shared/crds lacks, vendored unchanged with where they came from.
VENDORED_CRDS = sorted((ROOT / "tests" / "crds").rglob("*.yaml"))


def registry(path: Path) -> Registry:
    reg = Registry.from_dir(path)
    for file in [*XRDS, INPUT_CRD, *VENDORED_CRDS]:
        reg.add_file(file)
    return reg


def composed_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Object the function emits: every example render and every composer test case."""
    for file in sorted(EXAMPLES.glob("*/expected/*.yaml")):
        for doc in load_yaml(file):
            # Objects, and the serving record Crossplane composes directly.
            if doc.get("kind") == "Object" or (doc.get("apiVersion"), doc.get("kind")) == ("v1", "ConfigMap"):
                yield f"{file.relative_to(ROOT)}:{doc['metadata']['name']}", doc
    # Imported here: the case tables live with their tests.
    from tests import route_support, test_gateway, test_model_check, test_route  # noqa: PLC0415

    for case in test_gateway.COMPOSE_CASES:
        rsp = run(make_request(case.xr, test_gateway.GATEWAY_INPUT, case.observed))
        # A protobuf map iterates in no fixed order: sorted, so every pytest worker collects alike.
        for name, item in sorted(rsp.desired.resources.items()):
            yield f"gateway case {case.name!r}:{name}", resource.struct_to_dict(item.resource)
    for bcase in test_gateway.BUILDER_CASES:
        plan = test_gateway.plan(bcase.spec)
        for name, obj in test_gateway.gateway.build_objects(plan).items():
            yield f"builder case {bcase.name!r}:{name}", obj
    for rcase in test_route.CASES:
        rsp = run(make_request(route_support.XR, ROUTE_INPUT, rcase.observed, rcase.required))
        for name, item in sorted(rsp.desired.resources.items()):
            yield f"route case {rcase.name!r}:{name}", resource.struct_to_dict(item.resource)
    for mcase in test_model_check.COMPOSED_CASES:
        outcome = compose(mcase.xr, ROUTE_INPUT, {}, route_support.gw_required(route_support.READY_GW))
        for name, obj in sorted(outcome.resources.items()):
            yield f"model check case {mcase.name!r}:{name}", obj


def shipped_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    """XRDs, Compositions (and their step inputs), example XRs and observed states."""
    for file in [*XRDS, *COMPOSITIONS, *EXAMPLE_XRS, *INSTALL, CONFIGURATION / "crossplane.yaml"]:
        for doc in load_yaml(file):
            yield str(file.relative_to(ROOT)), doc
            if doc.get("kind") == "Composition":
                for step in doc["spec"].get("pipeline", []):
                    if "input" in step:
                        yield f"{file.relative_to(ROOT)} step {step['step']} input", step["input"]
    for file in sorted(EXAMPLES.glob("*/observed/**/*.yaml")):
        for doc in load_yaml(file):
            yield f"{file.relative_to(ROOT)}:{doc['metadata']['name']}", doc
    for file in sorted(EXAMPLES.glob("*/required/**/*.yaml")):
        for doc in load_yaml(file):
            yield f"{file.relative_to(ROOT)}", _without_status(doc)


def _without_status(doc: dict[str, Any]) -> dict[str, Any]:
    # Status is written by controllers, not validated on apply.
    return {k: v for k, v in doc.items() if k != "status"}


def validate_everything(reg: Registry) -> Report:
    report = Report()
    for where, obj in composed_objects():
        report.merge(validate_object(reg, obj, where))
    for where, doc in shipped_documents():
        if (doc.get("apiVersion"), doc.get("kind")) in NO_CRD_HERE:
            report.unchecked.append(f"{where} ({doc.get('kind')})")
        elif doc.get("kind") == "Object":
            report.merge(validate_object(reg, _without_status(doc), where))
        else:
            report.merge(reg.validate(doc, where))
    return report


def summary(report: Report, reg: Registry) -> str:
    return (
        f"validated {report.manifests} manifests against {len(reg.crd_names)} CRDs: "
        f"{len(report.errors)} errors, {report.rules_evaluated} rules evaluated, "
        f"{report.not_evaluated_count} not evaluated"
    )


def main() -> int:
    path = crd_dir()
    if path is None:
        print(
            "SCHEMA VALIDATION DID NOT RUN: no CRDs found. Set CRD_DIR, provide ../shared/crds, "
            "or run `make crds` (online) to fill .crds/.",
            file=sys.stderr,
        )
        return 2
    reg = registry(path)
    report = validate_everything(reg)
    for error in report.errors:
        print(f"error: {error}")
    from tests.known_bad import KNOWN_BAD, rejected  # noqa: PLC0415

    missed = [case.name for case in KNOWN_BAD if not rejected(reg, case)]
    for name in missed:
        print(f"error: known-bad manifest not rejected: {name}")
    print(f"known-bad manifests rejected: {len(KNOWN_BAD) - len(missed)} of {len(KNOWN_BAD)}")
    for where in report.unchecked:
        print(f"not schema-checked (no CRD here): {where}")
    for rule, why in sorted(report.not_evaluated.items()):
        print(f"not evaluated: {rule}  ({why})")
    print(summary(report, reg))
    return 1 if report.errors or missed else 0


if __name__ == "__main__":
    sys.exit(main())
