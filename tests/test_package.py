"""What users install: the Function package, the Configuration, the image."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from function import api, claims
from function.api import Input
from tests import route_support, test_gateway
from tests.real import versions
from tests.support import ROOT, ROUTE_INPUT, load_yaml, make_request, run
from tools import release, schemas

PACKAGE = ROOT / "package"
EXAMPLES = ROOT / "examples"
CONFIGURATION = EXAMPLES / "configuration"
INPUT_CRD = load_yaml(PACKAGE / "input" / "gatewayreadiness.fn.crossplane.io_inputs.yaml")[0]


def test_the_function_package_carries_the_usual_annotations() -> None:
    meta = load_yaml(PACKAGE / "crossplane.yaml")[0]
    assert (meta["apiVersion"], meta["kind"]) == ("meta.pkg.crossplane.io/v1", "Function")
    annotations = meta["metadata"]["annotations"]
    for key in ("source", "license", "description", "readme", "maintainer"):
        assert annotations.get(f"meta.crossplane.io/{key}"), key


def test_the_package_holds_only_the_package_and_the_input_crd() -> None:
    files = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.is_file())
    assert files == ["crossplane.yaml", "input/gatewayreadiness.fn.crossplane.io_inputs.yaml"]


# --- the Input CRD says what the pydantic Input accepts --------------------------------


def _crd_properties() -> dict[str, Any]:
    version = INPUT_CRD["spec"]["versions"][0]
    assert INPUT_CRD["spec"]["group"] + "/" + version["name"] == "gatewayreadiness.fn.crossplane.io/v1alpha1"
    props: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]
    return props


def _model_fields(model: type[Any]) -> dict[str, Any]:
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _compare(crd: dict[str, Any], model: type[Any], path: str) -> None:
    fields = _model_fields(model)
    assert set(crd) == set(fields), f"{path}: CRD {sorted(crd)} vs model {sorted(fields)}"
    for name, prop in crd.items():
        field = fields[name]
        annotation = field.annotation
        sub = getattr(annotation, "model_fields", None)
        if prop.get("type") == "object" and sub is not None and "properties" in prop:
            _compare(prop["properties"], annotation, f"{path}.{name}")
            continue
        if "enum" in prop:
            values = set(getattr(annotation, "__args__", ())) or {m.value for m in annotation}
            assert set(prop["enum"]) == values, f"{path}.{name}"
        if "default" in prop:
            default = field.get_default(call_default_factory=True)
            assert prop["default"] == getattr(default, "value", default), f"{path}.{name}"


def test_the_input_crd_matches_the_input_model() -> None:
    _compare(_crd_properties(), Input, "input")


def test_the_input_crd_requires_what_the_model_requires() -> None:
    schema = INPUT_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    required = {(f.alias or n) for n, f in Input.model_fields.items() if f.is_required()}
    # apiVersion and kind are required by Kubernetes itself.
    assert set(schema["required"]) == required - {"apiVersion", "kind"}


# --- the Configuration ------------------------------------------------------------


def test_the_configuration_depends_on_this_function_and_provider_kubernetes() -> None:
    meta = load_yaml(CONFIGURATION / "crossplane.yaml")[0]
    deps = {d["package"]: d for d in meta["spec"]["dependsOn"]}
    assert deps[release.read().function]["kind"] == "Function"
    assert deps["xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"]["kind"] == "Provider"
    assert all(re.match(r"^[<>=~^]", d["version"]) for d in deps.values()), "version constraints, not pins"


def test_the_configuration_claims_no_crossplane_older_than_the_one_that_runs() -> None:
    # The floor is the minor release of the oldest stack the real control plane
    # runs (versions.env, FGR_STACK=oldest): an older one has never run, and a
    # newer floor would refuse what does.
    meta = load_yaml(ROOT / "examples" / "configuration" / "crossplane.yaml")[0]
    floor = re.fullmatch(r">=v(\d+)\.(\d+)\.0", meta["spec"]["crossplane"]["version"])
    assert floor is not None, meta["spec"]["crossplane"]["version"]
    runs = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", versions.PINS["CROSSPLANE_OLDEST_VERSION"])
    assert runs is not None
    assert floor.groups() == runs.groups()


@pytest.mark.parametrize("kind", ["inference-gateway", "model-route"])
def test_the_configuration_ships_the_compositions_the_examples_render(kind: str) -> None:
    shipped = CONFIGURATION / f"{kind.replace('-', '')}-composition.yaml"
    assert load_yaml(shipped) == load_yaml(ROOT / "examples" / kind / "composition.yaml")


def test_provider_kubernetes_runs_with_watches() -> None:
    docs = {d["kind"]: d for d in load_yaml(EXAMPLES / "install" / "provider-kubernetes.yaml")}
    runtime = docs["DeploymentRuntimeConfig"]
    containers = runtime["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    assert "--enable-watches" in containers[0]["args"]
    assert docs["Provider"]["spec"]["runtimeConfigRef"]["name"] == runtime["metadata"]["name"]


@pytest.mark.parametrize(
    ("manifest", "pin"),
    [
        ("provider-kubernetes.yaml", "PROVIDER_KUBERNETES_VERSION"),
        ("provider-http.yaml", "PROVIDER_HTTP_VERSION"),
    ],
    ids=["provider-kubernetes", "provider-http"],
)
def test_the_install_manifest_installs_the_provider_version_that_ran(manifest: str, pin: str) -> None:
    docs = {d["kind"]: d for d in load_yaml(EXAMPLES / "install" / manifest)}
    assert docs["Provider"]["spec"]["package"].endswith(f":{versions.PINS[pin]}")


def test_the_model_checks_provider_config_sends_no_key_under_the_inputs_default_name() -> None:
    docs = {d["kind"]: d for d in load_yaml(EXAMPLES / "install" / "provider-http.yaml")}
    config = docs["ClusterProviderConfig"]
    assert config["spec"]["credentials"] == {"source": "None"}
    assert config["metadata"]["name"] == Input.model_validate(ROUTE_INPUT).model_check_provider_config


def test_the_function_runs_two_replicas_a_drain_cannot_take_both_of() -> None:
    docs = {d["kind"]: d for d in load_yaml(EXAMPLES / "install" / "function.yaml")}
    runtime, budget, function = docs["DeploymentRuntimeConfig"], docs["PodDisruptionBudget"], docs["Function"]
    assert runtime["spec"]["deploymentTemplate"]["spec"]["replicas"] == 2
    assert function["spec"]["runtimeConfigRef"]["name"] == runtime["metadata"]["name"]
    # The label Crossplane's package manager gives a function's pods, whatever the revision.
    assert budget["spec"]["selector"]["matchLabels"] == {
        "pkg.crossplane.io/function": function["metadata"]["name"]
    }
    assert budget["spec"]["minAvailable"] == 1
    assert budget["metadata"]["namespace"] == "crossplane-system"


def _emitted_targets() -> set[tuple[str, str, str, bool]]:
    """(API group, kind, namespace, observe-only) of every manifest the function's Objects carry."""
    targets = set()
    requests = [
        make_request(c.xr, test_gateway.GATEWAY_INPUT, c.observed) for c in test_gateway.COMPOSE_CASES
    ]
    requests += [
        make_request(route_support.XR, ROUTE_INPUT, {}, route_support.gw_required(route_support.READY_GW))
    ]
    composed = [dict(item.resource) for req in requests for item in run(req).desired.resources.values()]
    # And what every example's expected render manages: a feature shown there (an HTTPS redirect) is
    # what users apply. (Where an observer may dry-run depends on the namespaces a platform binds,
    # which docs/operations.md leaves to them outside the default ones.)
    rendered = [doc for path in sorted(EXAMPLES.glob("*/expected/*.yaml")) for doc in load_yaml(path)]
    composed += [
        doc for doc in rendered if doc["kind"] == "Object" and "managementPolicies" not in doc["spec"]
    ]
    for resource in composed:
        if resource["kind"] != "Object":
            continue  # composed by Crossplane itself (the serving record): not the provider's
        manifest = resource["spec"]["forProvider"]["manifest"]
        group = manifest["apiVersion"].rpartition("/")[0]
        spec = resource["spec"]
        observe_only = "managementPolicies" in spec and list(spec["managementPolicies"]) == ["Observe"]
        targets.add((group, manifest["kind"], manifest["metadata"]["namespace"], observe_only))
    return targets


def _plural(kind: str) -> str:
    lower = kind.lower()
    # Kubernetes' plural rule: a consonant before the final y makes "ies".
    return lower[:-1] + "ies" if re.search(r"[^aeiou]y$", lower) else lower + "s"


# provider-kubernetes versions and whether --enable-server-side-apply is on by
# default in each (it is from v1.2.0: the Observe path then dry-runs a
# server-side apply even for Observe-only Objects, internal/controller/object/
# syncer.go, which the API server authorises as patch).
PROVIDER_SSA_DEFAULT = {"v1.0.0": False, "v1.1.0": False, "v1.2.0": True, "v1.3.0": True}
MANAGE = {"get", "list", "watch", "create", "update", "patch", "delete"}


def observe_verbs(ssa: bool) -> set[str]:
    """What observing a watched Object's target needs from the API server."""
    return {"get", "list", "watch"} | ({"patch"} if ssa else set())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.lstrip("v").split("."))


def _admitted(constraint: str, version: str) -> bool:
    op, bound = re.fullmatch(r"(>=|>)?\s*(v[\d.]+)", constraint.strip()).groups()  # type: ignore[union-attr]
    return _version(version) > _version(bound) if op == ">" else _version(version) >= _version(bound)


def _granted(namespace: str) -> dict[tuple[str, str], set[str]]:
    """Verbs the provider's service account has in a namespace, from the shipped RBAC."""
    docs = load_yaml(EXAMPLES / "install" / "rbac.yaml")
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    bound = [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"]
    bound += [
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == namespace
    ]
    allowed: dict[tuple[str, str], set[str]] = {}
    for name in bound:
        for rule in roles[name]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    allowed.setdefault((group, resource), set()).update(rule["verbs"])
    return allowed


def test_rbac_lets_every_admitted_provider_version_do_what_the_objects_ask() -> None:
    """From provider-kubernetes v1.2.0, observing needs patch (a dry-run server-side apply)."""
    meta = load_yaml(CONFIGURATION / "crossplane.yaml")[0]
    constraint = next(
        d["version"] for d in meta["spec"]["dependsOn"] if "provider-kubernetes" in d["package"]
    )
    versions = [v for v in PROVIDER_SSA_DEFAULT if _admitted(constraint, v)]
    assert any(PROVIDER_SSA_DEFAULT[v] for v in versions), "the table must cover an SSA-default version"
    targets = _emitted_targets()
    observed = {(group, kind) for group, kind, _, observe_only in targets if observe_only}
    assert observed == {("apps", "Deployment"), ("ai.example.org", "InferenceGateway")}
    for version in versions:
        for group, kind, namespace, observe_only in sorted(targets):
            need = observe_verbs(PROVIDER_SSA_DEFAULT[version]) if observe_only else MANAGE
            verbs = _granted(namespace).get((group, _plural(kind)), set())
            assert need <= verbs, (
                f"provider-kubernetes {version}, {group}/{kind} in {namespace}: has {sorted(verbs)}"
            )


@pytest.mark.parametrize("resource", ["deployments", "statefulsets"])
def test_the_workload_kinds_the_readme_names_can_be_watched_everywhere_and_dry_run_where_bound(
    resource: str,
) -> None:
    assert {"get", "list", "watch"} <= _granted("team-a").get(("apps", resource), set())
    docs = load_yaml(EXAMPLES / "install" / "workload-rbac.yaml")
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "provider-kubernetes", "namespace": "crossplane-system"}
    ]
    assert any(
        "apps" in r["apiGroups"] and resource in r["resources"] and "patch" in r["verbs"]
        for r in role["rules"]
    )


def test_rbac_grants_patch_on_observed_kinds_only_where_they_live() -> None:
    assert "patch" not in _granted("team-a").get(("apps", "deployments"), set())
    assert "patch" in _granted("envoy-gateway-system").get(("apps", "deployments"), set())
    assert "patch" not in _granted("team-a").get(("ai.example.org", "inferencegateways"), set())
    assert "patch" in _granted("platform").get(("ai.example.org", "inferencegateways"), set())


# --- the image --------------------------------------------------------------------

# Which Python each base image carries.
PYTHON_OF_IMAGE = {
    r"^debian:12(-slim)?$": "3.11",
    r"^gcr\.io/distroless/python3-debian12(:.*)?$": "3.11",
    r"^debian:13(-slim)?$": "3.13",
    r"^gcr\.io/distroless/python3-debian13(:.*)?$": "3.13",
}


def _stages() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    return re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, flags=re.MULTILINE)


def _python_of(image: str) -> str:
    for pattern, version in PYTHON_OF_IMAGE.items():
        if re.match(pattern, image):
            return version
    raise AssertionError(f"unknown base image {image}")


def test_build_and_runtime_stages_run_the_same_python_as_the_project() -> None:
    stages = _stages()
    assert [name for _, name in stages] == ["build", "runtime"]
    versions = {_python_of(image) for image, _ in stages}
    assert len(versions) == 1, stages
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert versions.pop() in requires


def test_the_image_runs_as_non_root_and_serves_the_function() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER\s+nonroot", text, flags=re.MULTILINE)
    assert '"-m", "function"' in text


# --- the XRDs carry every field the models accept --------------------------------------


def _model_of(annotation: Any) -> Any:
    """The pydantic model inside Optional[...] or list[...], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _missing(model: Any, schema: dict[str, Any], path: str) -> list[str]:
    if schema.get("type") == "array":
        schema = schema["items"]
    props = schema.get("properties", {})
    out = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in props:
            out.append(f"{path}.{key}")
            continue
        inner = _model_of(info.annotation)
        if inner is not None:
            out += _missing(inner, props[key], f"{path}.{key}")
    return out


@pytest.mark.parametrize(
    ("xrd", "model"),
    [("inferencegateway-xrd.yaml", "InferenceGatewaySpec"), ("modelroute-xrd.yaml", "ModelRouteSpec")],
)
def test_the_xrd_declares_every_field_the_function_accepts(xrd: str, model: str) -> None:
    """An XRD that lacks a field prunes it before the function ever sees it."""
    doc = load_yaml(CONFIGURATION / xrd)[0]
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _missing(getattr(api, model), schema, "spec") == []


@pytest.mark.parametrize("document", [d.path for d in schemas.DOCUMENTS] + [schemas.REFERENCE])
def test_the_schemas_and_the_field_reference_are_generated_from_the_models(document: str) -> None:
    """One source: a field's type, bounds, default and description are written once, in
    function/api.py; the XRDs, the Input CRD and docs/reference.md follow. Run `make schemas`."""
    wanted = {d.path: schemas.generate(d) for d in schemas.DOCUMENTS} | {
        schemas.REFERENCE: schemas.reference()
    }
    assert (ROOT / document).read_text() == wanted[document], "run make schemas"


def test_an_overlay_that_repeats_the_model_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overlay adds only what a model cannot say: a bound written twice could disagree."""
    overlay = yaml.safe_load((schemas.OVERLAYS / "modelroute-xrd.yaml").read_text())
    overlay["extras"]["backends"]["maxItems"] = 7
    (tmp_path / "modelroute-xrd.yaml").write_text(yaml.safe_dump(overlay))
    monkeypatch.setattr(schemas, "OVERLAYS", tmp_path)
    with pytest.raises(ValueError, match="repeat what the model says: \\['maxItems'\\]"):
        schemas.generate(schemas.Document("x.yaml", "modelroute-xrd.yaml"))


def test_every_field_of_the_specs_is_described() -> None:
    """`kubectl explain` and docs/reference.md say what each field is for."""
    missing = []
    for overlay in ("inferencegateway-xrd.yaml", "modelroute-xrd.yaml", "input-crd.yaml"):
        _, schema = schemas._schema_of(overlay)
        missing += [
            f"{overlay}: {path}"
            for path, node, _ in schemas._fields(schema, "")
            if not node.get("description")
        ]
    assert missing == []


def _defaulted_nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)] if "default" in node else []
    for name, prop in (node.get("properties") or {}).items():
        found += _defaulted_nodes(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _defaulted_nodes(node["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("overlay", ["inferencegateway-xrd.yaml", "modelroute-xrd.yaml", "input-crd.yaml"])
def test_every_default_satisfies_the_rules_of_its_own_schema(overlay: str) -> None:
    """The API server checks a default against the CEL rules beneath it without applying the
    defaults nested in it: it refused an XRD whose listeners default was `[{name: http}]`
    ("no such key: port"), so a default must satisfy them as written."""
    from tests.k8s_schema import Report, check_rules  # noqa: PLC0415

    _, schema = schemas._schema_of(overlay)
    report = Report()
    for path, node in _defaulted_nodes(schema, "spec"):
        check_rules(node, node["default"], report, path)
    assert report.errors == []
    assert report.rules_evaluated > 0 or overlay == "input-crd.yaml"


def test_crossplane_may_read_the_httproutes_a_contested_model_requires() -> None:
    """Crossplane's Helm chart grants it nothing in gateway.networking.k8s.io; the shipped RBAC
    aggregates what the claims need into its ClusterRole (crossplane v2.4.0
    cluster/charts/crossplane/templates/clusterrole.yaml aggregates this label)."""
    docs = load_yaml(EXAMPLES / "install" / "rbac.yaml")
    aggregated = [
        d
        for d in docs
        if d["kind"] == "ClusterRole"
        and (d["metadata"].get("labels") or {}).get("rbac.crossplane.io/aggregate-to-crossplane") == "true"
    ]
    granted = {
        (group, resource, verb)
        for role in aggregated
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    api_version = claims.HTTPROUTE_API_VERSION
    for verb in ("get", "list", "watch"):  # Crossplane reads required resources through its cache
        assert (api_version.split("/")[0], "httproutes", verb) in granted
