"""RunFunction: validate the request, hand it to the composer the Input names.

Thin on purpose: parsing and the composers live in their own modules. Two
promises are kept here for both composers:

- bad input (an invalid XR spec or Input) gets exactly one fatal result that
  names the field; a fatal result stops Crossplane before garbage collection,
  so existing resources are left untouched;
- nothing unexpected escapes as a traceback: it is logged, and the caller
  gets a fatal result with a one-line message.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from pydantic import ValidationError

from function import gateway, route, structs
from function.api import Composes, InferenceGatewaySpec, Input, InvalidError, ModelRouteSpec, describe
from function.outcome import Outcome, selects, write

# gRPC's default message size, and the SDK's default for both directions.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024

# How many XRs' last logged transition are remembered (see FunctionRunner._log).
REMEMBERED_XRS = 10_000


def _parse_input(req: fnv1.RunFunctionRequest) -> Input:
    if not req.HasField("input"):
        raise InvalidError("input: the function needs an Input (gatewayreadiness.fn.crossplane.io/v1alpha1)")
    try:
        return Input.model_validate(structs.to_dict(req.input))
    except ValidationError as e:
        raise InvalidError(describe("input", e)) from None


def _spec(xr: dict[str, Any]) -> dict[str, Any]:
    spec = xr.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise InvalidError("spec: must be an object")
    # Crossplane's own fields on a v2 XR (crossplane.compositionRef and the
    # like) are not ours to validate.
    return {k: v for k, v in spec.items() if k != "crossplane"}


def compose(
    xr: dict[str, Any],
    inp: Input,
    observed: Mapping[str, Mapping[str, Any]],
    required: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    now: datetime | None = None,
) -> Outcome:
    """The composer the Input names, on plain data: the XR, and the observed and required
    resources by name (any Mapping: views here, dicts in the tests). `now` is the call's clock
    (the wall clock; tests fix it). Raises InvalidError for bad input."""
    metadata = xr.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name") or not metadata.get("namespace"):
        raise InvalidError(
            "metadata: the XR needs a name and a namespace (the XRDs are namespaced, Crossplane v2)"
        )
    try:
        if inp.compose is Composes.GATEWAY:
            outcome = gateway.compose(
                xr, InferenceGatewaySpec.model_validate(_spec(xr)), inp, observed, required, now=now
            )
        else:
            outcome = route.compose(
                xr, ModelRouteSpec.model_validate(_spec(xr)), inp, observed, required, now=now
            )
    except ValidationError as e:
        raise InvalidError(describe("spec", e)) from None
    version = metadata.get("resourceVersion")
    outcome.xr_version = version if isinstance(version, str) and version else None
    generation = metadata.get("generation")
    # A double through protobuf's Struct; anything else (a hostile XR) is not published.
    if (
        isinstance(generation, int | float)
        and not isinstance(generation, bool)
        and math.isfinite(generation)
        and generation == int(generation)
    ):
        outcome.xr_generation = int(generation)
    return outcome


def run(req: fnv1.RunFunctionRequest) -> Outcome:
    """Compose for one request; raises InvalidError for bad input."""
    inp = _parse_input(req)
    # Views: composers read a few fields of what may be large objects.
    return compose(
        structs.to_dict(req.observed.composite.resource),
        inp,
        {name: structs.StructView(item.resource) for name, item in req.observed.resources.items()},
        {
            name: [structs.StructView(item.resource) for item in items.items]
            for name, items in req.required_resources.items()
        },
    )


def _xr_id(req: fnv1.RunFunctionRequest) -> str:
    fields = req.observed.composite.resource.fields
    kind = fields["kind"].string_value if "kind" in fields else ""
    meta = fields["metadata"].struct_value.fields if "metadata" in fields else {}
    namespace = meta["namespace"].string_value if "namespace" in meta else ""
    name = meta["name"].string_value if "name" in meta else ""
    return f"{kind} {namespace}/{name}"


def _final(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> bool:
    """Whether this call's decision can be the reconcile's: it was handed everything its response asks for.

    Crossplane applies only the last call of a reconcile, and calls again while a
    call asks for a resource it was not handed (v2.4.0 `required_resources.go`,
    `FetchingFunctionRunner`). A decision made without it is fail-closed, not
    published: logged, it read as a transition that never happened (a route said
    ModelClaimed at once on the real stack while another claimant's HTTPRoute was
    not read yet; the reconcile's last call said True), and, remembered, it hid
    the real one that came 3 s later. v2.4.0 seeds a reconcile's first call with
    what the reconcile before fetched, under the same keys: after a spec edit
    (a model renamed, another gateway) a key may hold what an old selector
    found, so each object handed must be one the selector selects (found in
    review; an empty list cannot tell, and counts as handed)."""
    handed = req.required_resources
    return all(
        key in handed and all(selects(selector, structs.to_dict(item.resource)) for item in handed[key].items)
        for key, selector in rsp.requirements.resources.items()
    )


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """The gRPC servicer Crossplane calls."""

    def __init__(
        self, max_response_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, *, log_requests: bool = False
    ) -> None:
        self.log = logging.get_logger()
        self.max_response_bytes = max_response_bytes
        # --debug: one line per request. The SDK's logging filters below info
        # whatever its level, so these lines are written at info.
        self.log_requests = log_requests
        # The last transition logged per XR. Crossplane v2.4 calls again within a
        # reconcile when a required resource changed since it seeded the first
        # call, and both calls see the same XR: one decision, one line (issue #32).
        self._logged: OrderedDict[str, str] = OrderedDict()
        # One thread composes, so requests are answered one at a time as before
        # (the GIL allows no more) and what is remembered above needs no lock.
        self._composer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compose")

    def _first_time(self, xr: str, condition: str) -> bool:
        """True unless this transition of this XR is the one logged last."""
        if self._logged.get(xr) == condition:
            return False
        self._logged[xr] = condition
        self._logged.move_to_end(xr)
        if len(self._logged) > REMEMBERED_XRS:
            self._logged.popitem(last=False)
        return True

    def _log(
        self, req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, outcome: Outcome, seconds: float
    ) -> None:
        """Condition transitions at info; with --debug, one structured line per request."""
        if not (outcome.results or self.log_requests):
            return  # the steady state: nothing to log, nothing to format
        verdict = outcome.verdict
        condition = f"{verdict.type}={verdict.status} ({verdict.reason})" if verdict else "none"
        if outcome.transition and _final(req, rsp) and self._first_time(_xr_id(req), condition):
            self.log.info(
                "condition changed", xr=_xr_id(req), condition=condition, message=verdict and verdict.message
            )
        if not self.log_requests:
            return
        self.log.info(
            "composed",
            xr=_xr_id(req),
            tag=req.meta.tag,
            condition=condition,
            resources=len(outcome.resources),
            duration_ms=round(seconds * 1000, 2),
        )

    async def RunFunction(  # noqa: N802 - the gRPC method name
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext[Any, Any] | None
    ) -> fnv1.RunFunctionResponse:
        # Composing on the event loop would block it, and gRPC takes an arrived
        # call only when the loop runs: on SIGTERM it cancels the calls it has
        # not taken yet (13 of 16 concurrent callers' calls, every time). On a
        # thread of its own, composing leaves the loop free to take each call as
        # it arrives, and the SDK's 5 s grace answers those queued here (about
        # 2,000 at 400 a second; docs/operations.md).
        return await asyncio.get_running_loop().run_in_executor(self._composer, self.answer, req)

    def answer(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        """The response to one request: composed, or one fatal result."""
        rsp = response.to(req)
        started = time.perf_counter()
        try:
            outcome = run(req)
            write(outcome, rsp)
            self._log(req, rsp, outcome, time.perf_counter() - started)
        except InvalidError as e:
            self.log.info("refused", xr=_xr_id(req), reason=str(e))
            response.fatal(rsp, str(e))
        except Exception as e:  # one bad request must never take the server down
            self.log.exception("unexpected error composing", tag=req.meta.tag)
            # A fresh response: nothing half-written leaks out with the fatal.
            rsp = response.to(req)
            response.fatal(rsp, f"internal error: {type(e).__name__}: {e}".splitlines()[0])
        size = rsp.ByteSize()
        if size > self.max_response_bytes:
            # gRPC would fail the send with an error Crossplane reports without
            # context. A fatal result without the desired state is small, and
            # Crossplane ignores desired state on a fatal anyway.
            rsp = fnv1.RunFunctionResponse(meta=rsp.meta)
            response.fatal(
                rsp,
                f"the response would be {size} bytes, over the {self.max_response_bytes}-byte "
                "gRPC message limit; raise --max-send-message-size (MAX_SEND_MESSAGE_SIZE) and "
                "--max-recv-message-size here, and Crossplane's own limit, or compose less per XR",
            )
        return rsp
