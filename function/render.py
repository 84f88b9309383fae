"""`python -m function render`: `crossplane render` for this function, without Docker.

`crossplane render` needs Docker or a Crossplane binary, which many CI
machines lack. This command takes the same files (XR, Composition, observed
and required resources), runs this function's step of the Composition through
a real gRPC server on loopback, answers required-resource requests from the
files in rounds as Crossplane does, and prints the same kind of YAML stream:
the XR with its status and conditions, each composed resource with its
`crossplane.io/composition-resource-name` annotation, and results if asked.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click
import grpc
import yaml
from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.fn import FunctionRunner
from function.outcome import selects

FUNCTION_NAME = "example-function-gateway-readiness"
RESOURCE_NAME_ANNOTATION = "crossplane.io/composition-resource-name"
# Crossplane stops resolving requirements after this many rounds.
MAX_ROUNDS = 5
# crossplane render prints this fixed time so its output is reproducible.
RENDER_TIME = "2024-01-01T00:00:00Z"

_SEVERITY = {
    fnv1.SEVERITY_NORMAL: "SEVERITY_NORMAL",
    fnv1.SEVERITY_WARNING: "SEVERITY_WARNING",
    fnv1.SEVERITY_FATAL: "SEVERITY_FATAL",
}
_STATUS = {
    fnv1.STATUS_CONDITION_TRUE: "True",
    fnv1.STATUS_CONDITION_FALSE: "False",
    fnv1.STATUS_CONDITION_UNKNOWN: "Unknown",
}


class RenderError(Exception):
    """What crossplane render would print as its error."""


def load_documents(path: str | None) -> list[dict[str, Any]]:
    """Every YAML document in a file, or in every .yaml file of a directory."""
    if path is None:
        return []
    p = Path(path)
    files = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) if p.is_dir() else [p]
    if not files:
        # As crossplane render says it: an empty folder is a mistake, not "nothing".
        raise RenderError(f"no YAML files found in {path!r} (.yaml or .yml)")
    docs: list[dict[str, Any]] = []
    for f in files:
        try:
            docs.extend(d for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict))
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise RenderError(f"{f}: invalid YAML{line}: {problem}") from None
        except OSError as e:
            raise RenderError(f"{f}: {e.strerror or e}") from None
    return docs


def load_one(path: str, what: str) -> dict[str, Any]:
    """The single object a file holds (the XR, the Composition)."""
    if Path(path).is_dir():
        raise RenderError(f"{path}: is a folder; give the {what}'s YAML file")
    docs = load_documents(path)
    if not docs:
        raise RenderError(f"{path}: holds no YAML object; want the {what}")
    return docs[0]


def find_step(composition: Mapping[str, Any], function_name: str) -> Mapping[str, Any]:
    steps = (composition.get("spec") or {}).get("pipeline") or []
    for step in steps:
        if (step.get("functionRef") or {}).get("name") == function_name:
            return dict(step)
    raise RenderError(f"the Composition has no pipeline step with functionRef.name {function_name}")


def _observed_state(xr: dict[str, Any], observed: Iterable[dict[str, Any]]) -> fnv1.State:
    state = fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr)))
    for doc in observed:
        name = ((doc.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_NAME_ANNOTATION)
        if not name:
            raise RenderError(
                f"observed resource {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')} "
                f"has no {RESOURCE_NAME_ANNOTATION} annotation"
            )
        state.resources[name].resource.CopyFrom(resource.dict_to_struct(doc))
    return state


async def _serve_and_call(requests: _Rounds) -> fnv1.RunFunctionResponse:
    server = grpc.aio.server()
    grpcv1.add_FunctionRunnerServiceServicer_to_server(FunctionRunner(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            return await requests.run(stub)
    finally:
        await server.stop(grace=None)


class _Rounds:
    """Call the function until its requirements stop changing, as Crossplane does."""

    def __init__(self, req: fnv1.RunFunctionRequest, required: list[dict[str, Any]]) -> None:
        self.req = req
        self.required = required

    async def run(self, stub: grpcv1.FunctionRunnerServiceStub) -> fnv1.RunFunctionResponse:
        previous: fnv1.Requirements | None = None
        rsp = fnv1.RunFunctionResponse()
        for _ in range(MAX_ROUNDS):
            rsp = await stub.RunFunction(self.req)
            if previous is not None and rsp.requirements == previous:
                return rsp
            previous = rsp.requirements
            self.req.required_resources.clear()
            for key, selector in rsp.requirements.resources.items():
                items = self.req.required_resources[key]
                for doc in self.required:
                    if selects(selector, doc):
                        items.items.add().resource.CopyFrom(resource.dict_to_struct(doc))
            if not rsp.requirements.resources:
                return rsp
        return rsp


def render(
    xr: dict[str, Any],
    composition: Mapping[str, Any],
    observed: list[dict[str, Any]],
    required: list[dict[str, Any]],
    function_name: str = FUNCTION_NAME,
) -> tuple[fnv1.RunFunctionResponse, str]:
    step = find_step(composition, function_name)
    req = fnv1.RunFunctionRequest(
        meta=fnv1.RequestMeta(tag="render"),
        observed=_observed_state(xr, observed),
    )
    if step.get("input") is not None:
        req.input.CopyFrom(resource.dict_to_struct(dict(step["input"])))
    rsp = asyncio.run(_serve_and_call(_Rounds(req, required)))
    return rsp, str(step.get("step", ""))


def _condition(c: fnv1.Condition) -> dict[str, Any]:
    out = {
        "lastTransitionTime": RENDER_TIME,
        "reason": c.reason,
        "status": _STATUS.get(c.status, "Unknown"),
        "type": c.type,
    }
    if c.HasField("message") and c.message:
        out["message"] = c.message
    return out


# System condition types Crossplane owns; a function's conditions of these
# types are ignored (crossplane-runtime IsSystemConditionType).
_SYSTEM_CONDITIONS = {"Ready", "Synced", "Healthy"}


def _composed_metadata(
    body: dict[str, Any], name: str, xr: Mapping[str, Any], observed: Mapping[str, Any] | None
) -> None:
    """Crossplane's metadata for a composed resource (crank render SetComposedResourceMetadata).

    An existing composed resource keeps its observed name and namespace,
    whatever name the function desires now (v2.2.1 cmd/crank/render/render.go;
    the composition controller does the same).
    """
    metadata = xr.get("metadata") or {}
    meta = body.setdefault("metadata", {})
    if observed is not None:
        seen = observed.get("metadata") or {}
        for key in ("namespace", "name", "generateName"):
            if seen.get(key):
                meta[key] = seen[key]
            else:
                meta.pop(key, None)
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = f"{metadata.get('name')}-"
    if metadata.get("namespace"):
        meta["namespace"] = metadata["namespace"]
    meta.setdefault("annotations", {})[RESOURCE_NAME_ANNOTATION] = name
    meta.setdefault("labels", {})["crossplane.io/composite"] = metadata.get("name")
    meta["ownerReferences"] = [
        {
            "apiVersion": xr.get("apiVersion"),
            "blockOwnerDeletion": True,
            "controller": True,
            "kind": xr.get("kind"),
            "name": metadata.get("name"),
            "uid": metadata.get("uid", ""),
        }
    ]


def output_documents(
    xr: dict[str, Any],
    rsp: fnv1.RunFunctionResponse,
    step: str,
    *,
    include_results: bool,
    observed: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The YAML stream crossplane render (v2.2.1) prints, as documents."""
    fatal = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        raise RenderError(f"pipeline step {step!r} returned a fatal result: {fatal[0].message}")
    metadata = xr.get("metadata") or {}
    status = dict(resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {})
    ready = rsp.desired.composite.ready == fnv1.READY_TRUE
    # Ready first, then the function's own types in order, a later one of a
    # type replacing an earlier one, as crossplane-runtime SetConditions does.
    conditions: dict[str, dict[str, Any]] = {
        "Ready": {
            "lastTransitionTime": RENDER_TIME,
            "reason": "Available" if ready else "Creating",
            "status": "True" if ready else "False",
            "type": "Ready",
        }
    }
    for c in rsp.conditions:
        if c.type not in _SYSTEM_CONDITIONS:
            conditions[c.type] = _condition(c)
    status["conditions"] = list(conditions.values())
    out_xr = {
        "apiVersion": xr.get("apiVersion"),
        "kind": xr.get("kind"),
        "metadata": {k: metadata[k] for k in ("name", "namespace") if k in metadata},
        "status": status,
    }
    docs = [out_xr]
    seen = {
        ((d.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_NAME_ANNOTATION): d
        for d in observed
    }
    for name in sorted(rsp.desired.resources):
        body = resource.struct_to_dict(rsp.desired.resources[name].resource)
        _ints(body)
        _composed_metadata(body, name, xr, seen.get(name))
        docs.append(body)
    if include_results:
        docs.extend(
            {
                "apiVersion": "render.crossplane.io/v1beta1",
                "kind": "Result",
                "message": r.message,
                "severity": _SEVERITY.get(r.severity, "SEVERITY_UNSPECIFIED"),
                "step": step,
            }
            for r in rsp.results
        )
    _ints(out_xr)
    return docs


def _ints(node: Any) -> None:
    """Print whole floats as ints, as Kubernetes' JSON does (Structs only hold doubles)."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return
    for key, value in items:
        if isinstance(value, float) and value.is_integer():
            node[key] = int(value)
        else:
            _ints(value)


def dump(docs: list[dict[str, Any]]) -> str:
    return "---\n" + "---\n".join(yaml.safe_dump(d, sort_keys=True) for d in docs)


@click.command()
@click.argument("xr_path", metavar="XR")
@click.argument("composition_path", metavar="COMPOSITION")
@click.option("--observed-resources", "-o", help="YAML file or directory of observed composed resources.")
@click.option("--required-resources", "-e", help="YAML file or directory of required resources.")
@click.option("--include-function-results", "-r", is_flag=True, help="Print the function's results.")
@click.option(
    "--function-name", default=FUNCTION_NAME, show_default=True, help="The step's functionRef.name."
)
def cli(  # noqa: PLR0917 - click passes options as arguments
    xr_path: str,
    composition_path: str,
    observed_resources: str | None,
    required_resources: str | None,
    include_function_results: bool,
    function_name: str,
) -> None:
    """Render XR with COMPOSITION through this function over gRPC."""
    # stdout is the rendered YAML stream: the server's log lines stay out of it.
    logging.configure(level=logging.Level.DISABLED)
    try:
        xr = load_one(xr_path, "XR")
        composition = load_one(composition_path, "Composition")
        observed = load_documents(observed_resources)
        rsp, step = render(xr, composition, observed, load_documents(required_resources), function_name)
        sys.stdout.write(
            dump(output_documents(xr, rsp, step, include_results=include_function_results, observed=observed))
        )
    except RenderError as e:
        raise click.ClickException(str(e)) from None
