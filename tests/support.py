"""Helpers shared by the tests: requests from plain dicts, YAML fixtures, CEL evaluators."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings

from function import fn, serving_record
from function.api import Input, InvalidError
from function.conditions import GATEWAY_READY, Verdict, last_decided
from function.fn import FunctionRunner
from function.outcome import Outcome
from function.readiness import get_path
from function.route import extproc_config
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from function.upstream import extproc_config_index_name
from tests.k8s_schema import yaml_docs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

GATEWAY_INPUT = {
    "apiVersion": "gatewayreadiness.fn.crossplane.io/v1alpha1",
    "kind": "Input",
    "compose": "InferenceGateway",
}
ROUTE_INPUT = {
    "apiVersion": "gatewayreadiness.fn.crossplane.io/v1alpha1",
    "kind": "Input",
    "compose": "ModelRoute",
}


# The call's clock for tests that judge a stamp against a bound: stamps taken
# from it (stamp_ago) and the call made at it (compose(..., now=CLOCK)) are
# exactly that far apart however slowly the test runs. From the wall clock
# they were not: the fresh-clone CI of 1c552c0 ran mutmut's first pass at
# nice 19 beside the real stages, and a case 24 s from the 25 s caller-auth
# hold was called more than half a second after its stamp.
CLOCK = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def written_at(seconds: float) -> str:
    """What a ConfigLoading message says of a configuration written `seconds` before CLOCK."""
    return f"configuration was written at {stamp_ago(seconds)};"


def stamp_ago(seconds: float, fmt: str = "%Y-%m-%dT%H:%M:%SZ", zone: timezone = UTC) -> str:
    """A stamp `seconds` before CLOCK, in whole seconds as Kubernetes writes one."""
    return (CLOCK.astimezone(zone) - timedelta(seconds=seconds)).strftime(fmt)


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return yaml_docs(path.read_text())


def by_resource_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in docs}


def controller_reference(xr: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference Crossplane puts on everything an XR composes: the XR as its controller."""
    return {
        "apiVersion": xr["apiVersion"],
        "kind": xr["kind"],
        "name": xr["metadata"]["name"],
        "uid": xr["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


# Where the example gateway's ext-proc configuration index is, as its serving record says.
EXTPROC_CONFIG = ("envoy-gateway-system", extproc_config_index_name("inference", "platform"))


def extproc_index(seconds: float | None = 18) -> dict[str, Any]:
    """The ext-proc configuration's index Secret, its data last written by Envoy AI Gateway `seconds`
    before CLOCK (never, with None). By default as long ago as a young route's configuration waits for
    it to be left alone: a configuration written before that is loaded, one written after is held."""
    namespace, name = EXTPROC_CONFIG
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"index.yaml": "dXVpZDogeA=="},
    }
    if seconds is not None:
        secret["metadata"]["managedFields"] = [
            {
                "manager": "envoy-ai-gateway-controller",
                "operation": "Update",
                "time": stamp_ago(seconds),
                "fieldsV1": {"f:data": {".": {}, "f:index.yaml": {}}, "f:type": {}},
            }
        ]
    return secret


def gateway_fetched(
    gw: dict[str, Any], index: dict[str, Any] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """What Crossplane hands a ModelRoute of this InferenceGateway: its serving record, as the
    gateway's function writes it from what the XR publishes, and the ext-proc configuration's index
    (`index`, extproc_index() by default). An XR without `status.gateway` was composed before the
    record existed: then no record, and the XR itself (the route's fallback)."""
    published = get_path(gw, "status", "gateway")
    if not isinstance(published, dict):
        return {SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [gw]}
    decided = last_decided(gw, GATEWAY_READY)
    record = serving_record.build(
        serving_record.record_name(gw["metadata"]["name"]),
        gw["metadata"]["namespace"],
        published,
        ready=decided is not None and decided.get("status") == "True",
        reason=str((decided or {}).get("reason") or ""),
        extproc_config=EXTPROC_CONFIG,
    )
    record["metadata"]["ownerReferences"] = [controller_reference(gw)]
    if decided is None:
        del record["data"]["ready"], record["data"]["reason"]
    return {SERVING_REQUIREMENT: [record], extproc_config.REQUIREMENT: [index or extproc_index()]}


def make_request(
    xr: dict[str, Any],
    inp: dict[str, Any] | None,
    observed: dict[str, dict[str, Any]] | None = None,
    required: dict[str, list[dict[str, Any]]] | None = None,
    desired: dict[str, dict[str, Any]] | None = None,
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="test"))
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(xr))
    if inp is not None:
        req.input.CopyFrom(resource.dict_to_struct(inp))
    for name, body in (observed or {}).items():
        req.observed.resources[name].resource.CopyFrom(resource.dict_to_struct(body))
    for name, body in (desired or {}).items():
        req.desired.resources[name].resource.CopyFrom(resource.dict_to_struct(body))
    for name, items in (required or {}).items():
        bucket = req.required_resources[name]
        for item in items:
            bucket.items.add().resource.CopyFrom(resource.dict_to_struct(item))
    return req


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """The response the gRPC servicer gives: for the tests of the gRPC path (tests/test_fn.py)."""
    return asyncio.run(FunctionRunner().RunFunction(req, None))


def compose(
    xr: dict[str, Any],
    inp: dict[str, Any],
    observed: dict[str, dict[str, Any]] | None = None,
    required: dict[str, list[dict[str, Any]]] | None = None,
    *,
    now: datetime | None = None,
) -> Outcome:
    """What the function decides on one call, as its Outcome: plain data, no protobuf.

    The inputs go in as Crossplane's Structs carry them, every number a double,
    and through the same dispatcher the servicer uses (`fn.compose`); `now` is
    the call's clock (default: the wall clock).
    """
    return fn.compose(
        as_production_json(xr),
        Input.model_validate(inp),
        as_production_json(observed or {}),
        as_production_json(required or {}),
        now=now,
    )


def applied(
    xr: dict[str, Any],
    inp: dict[str, Any],
    observed: dict[str, dict[str, Any]],
    required: dict[str, list[dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """`observed` once provider-kubernetes has applied what `xr` composes now: each observed target
    is the one desired, with its desired spec, its status as it was. For a case that changes the spec of an example
    and judges the example's observed state, as if the change had long landed."""
    outcome = compose(xr, inp, observed, required)
    out = copy.deepcopy(observed)
    for name, body in outcome.resources.items():
        want = get_path(body, "spec", "forProvider", "manifest")
        manifest = get_path(out.get(name), "status", "atProvider", "manifest")
        if isinstance(want, dict) and isinstance(manifest, dict):
            # The target it names, with the spec desired of it.
            manifest |= {k: copy.deepcopy(want[k]) for k in ("apiVersion", "kind", "spec") if k in want}
            manifest["metadata"] = {**manifest.get("metadata", {}), **want.get("metadata", {})}
    return out


def refused(
    xr: dict[str, Any],
    inp: dict[str, Any],
    observed: dict[str, dict[str, Any]] | None = None,
    required: dict[str, list[dict[str, Any]]] | None = None,
) -> str:
    """The message of the one fatal result bad input gets (the servicer answers InvalidError with
    it and composes nothing, tests/test_fn.py)."""
    with pytest.raises(InvalidError) as refusal:
        compose(xr, inp, observed, required)
    return str(refusal.value)


def said(outcome: Outcome, typ: str) -> Verdict:
    """The one condition of that type the Outcome sets."""
    found = [v for v in outcome.conditions if v.type == typ]
    assert len(found) == 1, f"want exactly one {typ} condition, got {len(found)}"
    return found[0]


def warnings(outcome: Outcome) -> list[tuple[str, str]]:
    """The (reason, message) of each Warning event the Outcome emits."""
    return [(reason, message) for severity, reason, message in outcome.results if severity == "Warning"]


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    return {name: resource.struct_to_dict(r.resource) for name, r in rsp.desired.resources.items()}


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    found = [c for c in rsp.conditions if c.type == typ]
    assert len(found) == 1, f"want exactly one {typ} condition, got {len(found)}"
    return found[0]


def as_production_json(obj: Any) -> Any:
    """The object as provider-kubernetes hands it to cel-go: every number a double."""
    return json.loads(json.dumps(obj), parse_float=float, parse_int=float)


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served_function(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`python -m function ARGS` in its own process, as `make run` starts it; yields its address.

    Waits until the port accepts connections (which works for TLS and
    insecure servers alike) and stops the server afterwards.
    """
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", *args],
        cwd=ROOT,
        env={**os.environ, "ADDRESS": address, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    host, port = address.rsplit(":", 1)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((host, int(port))) == 0:
                    break
            if proc.poll() is not None:
                raise RuntimeError(f"the function exited with {proc.returncode} before serving")
            time.sleep(0.02)
        else:
            raise RuntimeError(f"the function did not listen on {address} within 60 s")
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def reach(strategy: Any, classify: Any, examples: int = 200) -> Counter[Any]:
    """How often a strategy's examples fall in each class: derandomized, so reproducible.

    Property tests prove little if their strategy rarely reaches the branch
    that matters; this measures it, so a test can require it.
    """
    seen: Counter[Any] = Counter()

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(example: Any) -> None:
        seen[classify(example)] += 1

    draw()
    return seen


def examples(n: int) -> int:
    """A property test's example count: n, or a tenth of it under mutation testing.

    mutmut (which sets MUTANT_UNDER_TEST, to "" at times) reruns the tests for each of some
    two thousand mutants; a tenth of the examples still reaches every branch
    the strategies are built to reach (see `reach`).
    """
    return max(10, n // 10) if "MUTANT_UNDER_TEST" in os.environ else n
