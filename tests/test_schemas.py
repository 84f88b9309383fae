"""What the function emits and the project ships, against the real upstream CRDs.

The CRDs come from CRD_DIR, ../shared/crds or .crds (see tests/k8s_schema.py).
Without any of them these tests skip loudly and `make validate` fails; CI sets
CRD_DIR and fails if it is missing, so CI never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cel_eval import is_statically_bool
from tests.k8s_schema import Registry, crd_dir, validate_object
from tests.known_bad import KNOWN_BAD, Bad, errors_for
from tools import validate

CRDS = crd_dir()
# In CI (CI=true) a missing ../shared fails the run instead of skipping.
pytestmark = pytest.mark.skipif(
    CRDS is None and not os.environ.get("CI"),
    reason="SCHEMA VALIDATION DID NOT RUN: no CRDs (set CRD_DIR, provide ../shared/crds, or `make crds`)",
)


@pytest.fixture(scope="module")
def reg() -> Registry:
    assert CRDS is not None
    return validate.registry(CRDS)


def _objects() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from validate.composed_objects()


OBJECTS = list(_objects())
# Kinds without a CRD here are checked by tests/test_package.py instead.
SHIPPED = [
    (w, d)
    for w, d in validate.shipped_documents()
    if (d.get("apiVersion"), d.get("kind")) not in validate.NO_CRD_HERE
]


@pytest.mark.parametrize(("where", "obj"), OBJECTS, ids=[w for w, _ in OBJECTS])
def test_every_emitted_object_and_its_manifest_is_valid(
    reg: Registry, where: str, obj: dict[str, Any]
) -> None:
    report = validate_object(reg, obj, where)
    assert report.errors == []
    # An Object and its manifest; a ConfigMap composed directly is one.
    assert report.manifests == (2 if obj["kind"] == "Object" else 1)


@pytest.mark.parametrize(("where", "doc"), SHIPPED, ids=[w for w, _ in SHIPPED])
def test_every_shipped_document_is_valid(reg: Registry, where: str, doc: dict[str, Any]) -> None:
    doc = {k: v for k, v in doc.items() if k != "status"}
    report = validate_object(reg, doc, where) if doc.get("kind") == "Object" else reg.validate(doc, where)
    assert report.errors == []


@pytest.mark.parametrize("case", KNOWN_BAD, ids=lambda c: c.name)
def test_known_bad_manifests_are_rejected_with_the_expected_message(reg: Registry, case: Bad) -> None:
    errors = errors_for(reg, case)
    assert any(case.message in e for e in errors), errors


def test_every_emitted_cel_query_is_statically_boolean() -> None:
    queries = {
        obj["spec"]["readiness"]["celQuery"]
        for _, obj in OBJECTS
        if obj["kind"] == "Object" and obj["spec"].get("readiness", {}).get("policy") == "DeriveFromCelQuery"
    }
    assert len(queries) >= 3  # Programmed, Accepted, and the rollout query
    assert all(is_statically_bool(q) for q in queries)


def test_the_summary_line_has_no_errors(reg: Registry) -> None:
    report = validate.validate_everything(reg)
    line = validate.summary(report, reg)
    assert report.errors == [], report.errors[:5]
    assert line.startswith(f"validated {report.manifests} manifests against ")
    assert report.rules_evaluated > 0


def test_a_rule_using_a_kubernetes_library_function_is_listed_not_passed() -> None:
    from tests.k8s_schema import Report, check_rules  # noqa: PLC0415

    schema = {
        "type": "string",
        "x-kubernetes-validations": [{"rule": "isURL(self)", "message": "must be a URL"}],
    }
    report = Report()
    check_rules(schema, "not a url", report, "x")
    assert report.errors == []
    assert report.rules_evaluated == 0
    assert report.not_evaluated_count == 1
    assert "isURL(self)" in report.not_evaluated
