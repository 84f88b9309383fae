"""Validate manifests against real CRDs as the API server would, without one.

Two layers, as `kubectl apply --validate=strict` and the API server apply them:

1. the structural schema (types, required, enums, patterns, bounds, and unknown
   fields rejected), turned from OpenAPI v3 into JSON Schema for `jsonschema`;
2. the `x-kubernetes-validations` CEL rules, evaluated on create (`self`, no
   `oldSelf`) after defaulting, with cel-expr-python (Google's C++ CEL, which
   type-checks like the cel-go the API server runs).

A rule that uses a Kubernetes CEL library function the evaluator lacks
(`isURL`, `quantity`, `ip`, ...) is counted and listed as not evaluated; it is
never silently passed. Transition rules (using `oldSelf`) do not apply on create.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_math, ext_optional, ext_strings

from function.api import DNS_SUBDOMAIN

ROOT = Path(__file__).resolve().parent.parent
# The folder shared beside the clone (upstream CRDs, fixtures, docs). SHARED_DIR
# names it where ../shared is not beside the tree the tests run from: mutmut
# runs them from a copy in mutants/.
SHARED = Path(os.environ.get("SHARED_DIR") or ROOT.parent / "shared")


def crd_dir() -> Path | None:
    """CRD_DIR if set, else SHARED/crds if present, else .crds if filled."""
    env = os.environ.get("CRD_DIR")
    candidates = [Path(env)] if env else [SHARED / "crds", ROOT / ".crds"]
    for path in candidates:
        if path.is_dir() and any(path.rglob("*.yaml")):
            return path
    return None


# --- OpenAPI v3 (structural) -> JSON Schema ---------------------------------------------


def to_json_schema(node: dict[str, Any], *, embedded: bool = False) -> dict[str, Any]:
    """Translate one structural-schema node; objects reject unknown fields."""
    out: dict[str, Any] = {}
    for key in (
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "uniqueItems",
    ):
        if key in node:
            out[key] = node[key]
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in node:
            # In structural schemas these only constrain; they carry no types.
            out[combinator] = [to_json_schema(n) for n in node[combinator]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    properties = {k: to_json_schema(v) for k, v in (node.get("properties") or {}).items()}
    is_embedded = embedded or node.get("x-kubernetes-embedded-resource")
    if is_embedded:
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if properties:
        out["properties"] = properties
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    elif (
        node.get("type") == "object"
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and ("properties" in node or is_embedded)
    ):
        # Strict: an unknown field is an error, as `kubectl apply --validate=strict`.
        out["additionalProperties"] = False
    return out


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting, as the API server does before CEL validation."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in list(value):
                if name not in (schema.get("properties") or {}):
                    value[name] = apply_defaults(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


# --- CEL rules ------------------------------------------------------------------------------


@dataclass
class Report:
    manifests: int = 0
    errors: list[str] = field(default_factory=list)
    rules_evaluated: int = 0
    # rule text -> why it could not be evaluated
    not_evaluated: dict[str, str] = field(default_factory=dict)
    not_evaluated_count: int = 0
    crds_used: set[str] = field(default_factory=set)
    # Shipped documents of kinds no CRD here describes.
    unchecked: list[str] = field(default_factory=list)

    def merge(self, other: Report) -> None:
        self.manifests += other.manifests
        self.errors += other.errors
        self.rules_evaluated += other.rules_evaluated
        self.not_evaluated |= other.not_evaluated
        self.not_evaluated_count += other.not_evaluated_count
        self.crds_used |= other.crds_used
        self.unchecked += other.unchecked


@cache
def _cel_env() -> Any:
    # The API server's environment offers the strings, math and optional
    # libraries among others; the rest are Kubernetes' own (not available here).
    return cel.NewEnv(
        variables={"self": cel.Type.DYN},
        extensions=[ext_strings.ExtStrings(), ext_math.ExtMath(), ext_optional.ExtOptional()],
    )


@cache
def _compile(rule: str) -> tuple[Any, str | None]:
    try:
        return _cel_env().compile(rule), None
    except Exception as e:
        return None, str(e).splitlines()[0]


_TRANSITION = re.compile(r"\boldSelf\b")


def _rules(schema: dict[str, Any], value: Any, path: str) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(path, rule, value) for every rule that applies to a present value."""
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, rule, value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield from _rules(sub, item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _rules(schema["items"], item, f"{path}[{i}]")


def check_rules(schema: dict[str, Any], value: Any, report: Report, where: str) -> None:
    for path, rule, node in _rules(schema, value, ""):
        text = rule["rule"]
        if _TRANSITION.search(text):
            continue  # transition rules apply only on update
        program, problem = _compile(text)
        if program is None:
            report.not_evaluated[text] = problem or "does not compile"
            report.not_evaluated_count += 1
            continue
        report.rules_evaluated += 1
        try:
            result = program.eval(data={"self": node})
        except Exception as e:
            report.errors.append(f"{where}{path}: rule {text!r} failed to evaluate: {e}")
            continue
        if result.type() == cel.Type.ERROR:
            # Kubernetes' own library functions reached at run time.
            if "No matching overloads" in str(result.value()) or "undeclared" in str(result.value()):
                report.not_evaluated[text] = str(result.value())
                report.not_evaluated_count += 1
                report.rules_evaluated -= 1
                continue
            report.errors.append(f"{where}{path}: rule {text!r} errored: {result.value()}")
        elif result.value() is not True:
            report.errors.append(f"{where}{path}: {rule.get('message') or 'failed rule: ' + text}")


# --- the registry of CRDs -----------------------------------------------------------------


class Schema:
    """One CRD version's schema, with its JSON Schema validator built once."""

    def __init__(self, crd: str, openapi: dict[str, Any]) -> None:
        self.crd = crd
        self.openapi = openapi
        self.validator = jsonschema.Draft202012Validator(to_json_schema(openapi, embedded=True))


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, without echoing a whole list back."""
    if error.validator in ("maxItems", "minItems") and isinstance(error.instance, list):
        bound = "at most" if error.validator == "maxItems" else "at least"
        return f"has {len(error.instance)} items, {bound} {error.validator_value} allowed"
    return error.message


# libyaml's safe loader where PyYAML has it (its wheels do): the same documents
# as yaml.safe_load_all, over ten times sooner (the upstream CRDs: 12.9 s and
# 0.76 s). Here, not in tests/support.py, because tools/validate.py imports
# this module without pytest.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_docs(text: str) -> list[dict[str, Any]]:
    """The objects of a YAML stream; empty documents are left out."""
    return [d for d in yaml.load_all(text, Loader=_SAFE_LOADER) if isinstance(d, dict)]


class Registry:
    """(apiVersion, kind) -> schema, from every CRD (and XRD) file given."""

    def __init__(self) -> None:
        self.schemas: dict[tuple[str, str], Schema] = {}
        self.crd_names: set[str] = set()

    @classmethod
    def from_dir(cls, path: Path) -> Registry:
        reg = cls()
        for file in sorted(path.rglob("*.yaml")):
            reg.add_file(file)
        return reg

    def add_file(self, file: Path) -> None:
        for doc in yaml_docs(file.read_text()):
            self.add(doc)

    def add(self, doc: dict[str, Any]) -> None:
        kind = doc.get("kind")
        if kind == "CustomResourceDefinition":
            spec = doc["spec"]
            for version in spec["versions"]:
                openapi = (version.get("schema") or {}).get("openAPIV3Schema")
                if openapi:
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    self.schemas[key] = Schema(doc["metadata"]["name"], openapi)
            self.crd_names.add(doc["metadata"]["name"])
        elif kind == "CompositeResourceDefinition":
            spec = doc["spec"]
            for version in spec["versions"]:
                openapi = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                props = openapi.setdefault("properties", {})
                # Crossplane adds its own machinery under spec.crossplane.
                props.setdefault("spec", {"type": "object"}).setdefault("properties", {})["crossplane"] = {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                }
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                self.schemas[key] = Schema(doc["metadata"]["name"], openapi)
            self.crd_names.add(doc["metadata"]["name"])

    def validate(self, manifest: dict[str, Any], where: str = "") -> Report:
        """Validate one manifest; a kind without a CRD is an error (nothing unchecked)."""
        report = Report(manifests=1)
        key = (manifest.get("apiVersion", ""), manifest.get("kind", ""))
        name = (manifest.get("metadata") or {}).get("name", "?")
        label = where or f"{key[1]}/{name}"
        schema = self.schemas.get(key)
        if schema is None:
            report.errors.append(f"{label}: no CRD for {key[0]} {key[1]}")
            return report
        report.crds_used.add(schema.crd)
        for error in sorted(schema.validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            report.errors.append(f"{label}{path}: {_message(error)}")
        defaulted = apply_defaults(schema.openapi, copy.deepcopy(manifest))
        check_rules(schema.openapi, defaulted, report, label)
        return report


# Core kinds are validated by the API server's built-in types, not by CRDs; the
# observers (the Envoy Deployment, a NodePort gateway's Envoy Service) name only
# apiVersion, kind, name and namespace of one.
CORE_KINDS = {("apps/v1", "Deployment"), ("v1", "Service")}


# A ConfigMap key, and a name the API server accepts (a DNS subdomain, as our API declares it).
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)


def validate_configmap(obj: dict[str, Any], where: str) -> Report:
    """A ConfigMap composed directly (the gateway's serving record): core, so checked by its rules here."""
    report = Report(manifests=1)
    extra = set(obj) - {"apiVersion", "kind", "metadata", "data"}
    if extra:
        report.errors.append(f"{where}: fields a ConfigMap does not have: {sorted(extra)}")
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        report.errors.append(f"{where}.metadata.name: {name!r} is not a DNS subdomain")
    data = obj.get("data") or {}
    for key, value in data.items():
        if not _CONFIGMAP_KEY.match(key) or not isinstance(value, str):
            report.errors.append(f"{where}.data.{key}: keys are [-._a-zA-Z0-9]+ and values strings")
    return report


def validate_object(registry: Registry, obj: dict[str, Any], where: str) -> Report:
    """A provider-kubernetes Object and the manifest inside it, or a ConfigMap composed directly."""
    if (obj.get("apiVersion"), obj.get("kind")) == ("v1", "ConfigMap"):
        return validate_configmap(obj, where)
    report = registry.validate(obj, where)
    manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
    if isinstance(manifest, dict):
        key = (manifest.get("apiVersion"), manifest.get("kind"))
        if key in CORE_KINDS:
            extra = set(manifest) - {"apiVersion", "kind", "metadata"}
            meta_extra = set(manifest.get("metadata") or {}) - {"name", "namespace"}
            if extra or meta_extra:
                report.errors.append(
                    f"{where}.spec.forProvider.manifest: observer carries {sorted(extra | meta_extra)}"
                )
            report.manifests += 1
        else:
            report.merge(registry.validate(manifest, f"{where}.spec.forProvider.manifest"))
    return report
