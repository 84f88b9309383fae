"""RunFunction's promises: one clear fatal for bad input, nothing lost, real gRPC."""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.resource import struct_to_dict

from function import claims, fn, gateway
from function.conditions import (
    BACKENDS_SERVING,
    GATEWAY_READY,
    ROUTING_READY,
    RoutingReason,
    Verdict,
    last_decided,
)
from function.fn import FunctionRunner
from function.outcome import Outcome, Requirement, selects, write
from tests import test_claims as claims_fixtures
from tests.known_bad import HTTPS_LISTENER
from tests.route_support import gw_required
from tests.support import (
    EXAMPLES,
    GATEWAY_INPUT,
    ROOT,
    ROUTE_INPUT,
    by_resource_name,
    load_yaml,
    make_request,
    run,
    served_function,
)
from tests.test_gateway import ALL_NAMES as GATEWAY_NAMES
from tests.test_references import VALUE as SECRET_VALUE

GW_XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
ROUTE_XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
GW_OBSERVED = by_resource_name(load_yaml(EXAMPLES / "inference-gateway" / "observed" / "ready.yaml"))
# What an earlier step of the pipeline desired: must come back untouched.
EARLIER = {"earlier-step": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}}


def with_spec(xr: dict[str, Any], **changes: Any) -> dict[str, Any]:
    xr = copy.deepcopy(xr)
    xr["spec"] |= changes
    return xr


BAD = [
    pytest.param(GW_XR, None, "input: the function needs an Input", id="no input at all"),
    pytest.param(
        GW_XR,
        {**GATEWAY_INPUT, "compose": "Gateway"},
        "input.compose:",
        id="an input that composes an unknown kind",
    ),
    pytest.param(
        GW_XR,
        {**GATEWAY_INPUT, "anchor": {"headerName": "x-ai-eg-model"}},
        "input.anchor: the anchor must not match on x-ai-eg-model",
        id="an anchor on the model header",
    ),
    pytest.param(
        GW_XR,
        {**GATEWAY_INPUT, "anchor": {"headerName": "X-AI-EG-Model"}},
        "input.anchor: the anchor must not match on x-ai-eg-model",
        id="an anchor on the model header written in capitals (header names are case-insensitive)",
    ),
    pytest.param(
        GW_XR,
        {**GATEWAY_INPUT, "extProcMarkerAnnotation": "not a key!"},
        "input.extProcMarkerAnnotation:",
        id="a marker that is not an annotation key",
    ),
    pytest.param(
        with_spec(GW_XR, listeners=[{"name": "http", "port": 70000}]),
        GATEWAY_INPUT,
        "spec.listeners[0].port: Input should be less than or equal to 65535",
        id="a listener port out of range",
    ),
    pytest.param(
        with_spec(GW_XR, envoy={"replicas": 1.5}),
        GATEWAY_INPUT,
        "spec.envoy.replicas:",
        id="fractional replicas",
    ),
    pytest.param(
        with_spec(GW_XR, envoy={"deploymentNaming": "Hashed"}),
        GATEWAY_INPUT,
        "spec.envoy.deploymentNaming:",
        id="an unknown naming mode",
    ),
    pytest.param(
        with_spec(GW_XR, listners=[]),
        GATEWAY_INPUT,
        "spec.listners: Extra inputs are not permitted",
        id="a misspelt field",
    ),
    pytest.param(
        with_spec(GW_XR, listeners=[{"name": "a"}, {"name": "b", "protocol": "HTTP", "port": 80}]),
        GATEWAY_INPUT,
        "spec.listeners: the combination of port, protocol and hostname must be unique for each listener",
        id="two listeners on one port, protocol and hostname (the Gateway API CRD refuses the Gateway)",
    ),
    pytest.param(
        with_spec(GW_XR, listeners=[{"name": "a"}, {"name": "a", "port": 8080}]),
        GATEWAY_INPUT,
        "spec.listeners: listener names must be unique",
        id="two listeners of one name",
    ),
    pytest.param(
        with_spec(GW_XR, listeners=[{"name": "https", "protocol": "HTTPS", "port": 443}]),
        GATEWAY_INPUT,
        "spec.listeners[0]: an HTTPS listener needs tls.certificateRefs",
        id="HTTPS without certificates",
    ),
    *[
        pytest.param(with_spec(GW_XR, **spec), GATEWAY_INPUT, message, id=name)
        for name, spec, message in (
            (
                "a redirect on the listener the models are served on",
                {"listeners": [{"name": "http", "httpsRedirect": True}, HTTPS_LISTENER]},
                "spec.listeners: httpsRedirect sends clients to the first listener, where ModelRoutes attach: "
                "it must be HTTPS",
            ),
            (
                "a redirect to an HTTPS listener that is not where the models are",
                {
                    "listeners": [
                        {"name": "a"},
                        HTTPS_LISTENER,
                        {"name": "b", "port": 8080, "httpsRedirect": True},
                    ]
                },
                "spec.listeners: httpsRedirect sends clients to the first listener",
            ),
            (
                "a redirect to HTTPS on a gateway without HTTPS",
                {"listeners": [{"name": "a"}, {"name": "b", "port": 8080, "httpsRedirect": True}]},
                "spec.listeners: httpsRedirect sends clients to the first listener",
            ),
            (
                "an HTTPS listener redirecting to itself",
                {
                    "listeners": [
                        HTTPS_LISTENER,
                        {**HTTPS_LISTENER, "name": "b", "port": 8443, "httpsRedirect": True},
                    ]
                },
                "spec.listeners[1]: an HTTPS listener cannot redirect to HTTPS",
            ),
            (
                "a redirect behind a NodePort Service, whose clients use another port",
                {
                    "listeners": [HTTPS_LISTENER, {"name": "http", "httpsRedirect": True}],
                    "envoy": {"serviceType": "NodePort"},
                },
                "listeners: httpsRedirect cannot name the node port NodePort clients use",
            ),
            (
                "a health check path that is not a path",
                {"healthCheckPath": "healthz"},
                "spec.healthCheckPath:",
            ),
            (
                "a health check path that would answer the models' requests",
                {"healthCheckPath": "/v1/chat/completions"},
                "spec.healthCheckPath: /v1/chat/completions is under a path Envoy AI Gateway serves",
            ),
            (
                "a health check path with a character the API server's pattern refuses",
                {"healthCheckPath": "/a\u00a0b"},
                "spec.healthCheckPath: String should match pattern",
            ),
        )
    ],
    pytest.param(
        {
            "apiVersion": "ai.example.org/v1alpha1",
            "kind": "InferenceGateway",
            "metadata": {"name": "gw"},
        },
        GATEWAY_INPUT,
        "metadata:",
        id="an XR without a namespace",
    ),
    pytest.param(
        {**GW_XR, "spec": "nonsense"},
        GATEWAY_INPUT,
        "spec: must be an object",
        id="a spec that is not an object",
    ),
    pytest.param(
        with_spec(GW_XR, requestBufferLimit="4Gi"),
        GATEWAY_INPUT,
        "spec.requestBufferLimit: 4Gi is more than Envoy's largest buffer limit, 4294967295",
        id="a request buffer limit Envoy Gateway would refuse",
    ),
    *[
        pytest.param(
            with_spec(GW_XR, auth={"apiKeys": {"secretRefs": [{"name": "k"}], "routeNamespaces": covers}}),
            GATEWAY_INPUT,
            f"spec.auth.apiKeys.routeNamespaces: {message}",
            id=name,
        )
        for name, covers, message in (
            (
                "caller auth that exempts routes outside the gateway's namespace is refused",
                {"from": "Same"},
                "from: Same is refused: a route outside the caller auth would let callers without a key",
            ),
            (
                "caller auth that exempts routes outside listed namespaces is refused",
                {"from": "Names", "names": ["team-a"]},
                "from: Names is refused",
            ),
            (
                "caller auth for every route that also lists namespaces is refused",
                {"names": ["team-a"]},
                "names is refused: only from: All is accepted",
            ),
        )
    ],
    pytest.param(
        with_spec(ROUTE_XR, backends=[]),
        ROUTE_INPUT,
        "spec.backends: List should have at least 1 item",
        id="a route without backends",
    ),
    pytest.param(
        with_spec(
            ROUTE_XR,
            backends=[{"name": "a", "endpoint": {"hostname": "a.example", "ip": "10.0.0.1", "port": 80}}],
        ),
        ROUTE_INPUT,
        "spec.backends[0].endpoint: set exactly one of hostname and ip",
        id="a backend with both hostname and ip",
    ),
    *[
        pytest.param(
            with_spec(ROUTE_XR, backends=[{"name": "a", "endpoint": endpoint | {"port": 80}}]),
            ROUTE_INPUT,
            f"spec.backends[0].endpoint.{field}: {message}",
            id=name,
        )
        for name, endpoint, field, message in (
            (
                "a backend at the clouds' instance metadata address is refused",
                {"ip": "169.254.169.254"},
                "ip",
                "169.254.169.254 is link-local (169.254.0.0/16, where clouds serve instance metadata): refused",
            ),
            (
                "a backend at a node-local address is refused",
                {"ip": "169.254.20.10"},
                "ip",
                "169.254.20.10 is link-local",
            ),
            (
                "a backend at 0.0.0.0, which reaches the proxy's own host, is refused",
                {"ip": "0.0.0.0"},
                "ip",
                "0.0.0.0 is unspecified (Linux connects it to the proxy's own host): refused",
            ),
            (
                "a backend at GCP's metadata server by name is refused",
                {"hostname": "metadata.google.internal"},
                "hostname",
                "metadata.google.internal is a cloud's instance metadata service: refused",
            ),
            (
                "a backend at GCP's metadata server by the short name a pod's DNS search completes is refused",
                {"hostname": "metadata"},
                "hostname",
                "metadata is a cloud's instance metadata service: refused",
            ),
            (
                "a backend at Alibaba Cloud's metadata address is refused",
                {"ip": "100.100.100.200"},
                "ip",
                "100.100.100.200 is a cloud's instance metadata service: refused",
            ),
            *[
                (
                    f"the metadata address written as the name {name} is refused",
                    {"hostname": name},
                    "hostname",
                    f"{name} ends in a number, so it is an IP address, not a name: refused (set ip)",
                )
                for name in ("169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "a.0x")
            ],
            (
                "a backend at EC2's metadata server by name is refused",
                {"hostname": "instance-data.ec2.internal"},
                "hostname",
                "instance-data.ec2.internal is a cloud's instance metadata service: refused",
            ),
        )
    ],
    pytest.param(
        with_spec(ROUTE_XR, timeouts={"request": "soon"}),
        ROUTE_INPUT,
        "spec.timeouts.request:",
        id="a timeout that is not a duration",
    ),
]


@pytest.mark.parametrize(("xr", "inp", "want"), BAD)
def test_bad_input_gets_one_fatal_naming_the_field_and_changes_nothing(
    xr: dict[str, Any], inp: dict[str, Any] | None, want: str
) -> None:
    req = make_request(xr, inp, GW_OBSERVED, desired=EARLIER)
    rsp = run(req)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert want in rsp.results[0].message
    assert "Traceback" not in rsp.results[0].message
    # Desired state exactly as the request carried it: nothing composed, nothing lost.
    assert rsp.desired == req.desired
    assert not rsp.conditions


ACCEPTED_ENDPOINTS = [
    # Envoy Gateway refuses loopback unless Envoy runs on the host, where it is how a local model
    # server is reached (make traffic's routes): the function does not decide that for it.
    ("a loopback backend is left to Envoy Gateway", {"ip": "127.0.0.1"}),
    ("an address beside Alibaba Cloud's metadata address is served", {"ip": "100.100.100.201"}),
    ("an address just below the link-local range is served", {"ip": "169.253.255.255"}),
    ("a Service's cluster name is served", {"hostname": "vllm.team-a.svc.cluster.local"}),
    ("a name with numbers in it but not at its end is served", {"hostname": "10.0.0.1.nip.io"}),
    ("a name whose first label reads as hex is served", {"hostname": "0xdead.example.com"}),
    ("a name under the metadata server's name is served", {"hostname": "metadata.example.com"}),
]


@pytest.mark.parametrize(("name", "endpoint"), ACCEPTED_ENDPOINTS, ids=[c[0] for c in ACCEPTED_ENDPOINTS])
def test_backend_addresses_that_are_not_the_nodes_own_are_composed(
    name: str, endpoint: dict[str, Any]
) -> None:
    xr = with_spec(ROUTE_XR, backends=[{"name": "a", "endpoint": endpoint | {"port": 80}}])
    rsp = run(make_request(xr, ROUTE_INPUT, {}))
    assert fnv1.SEVERITY_FATAL not in [r.severity for r in rsp.results], name


def test_an_unexpected_error_is_one_fatal_line_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(*_: Any, **__: Any) -> None:
        raise KeyError("boom\nsecond line")

    monkeypatch.setattr(gateway, "compose", explode)
    req = make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED, desired=EARLIER)
    rsp = run(req)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith("internal error: KeyError:")
    assert "\n" not in rsp.results[0].message
    assert rsp.desired == req.desired


def test_earlier_pipeline_steps_keep_their_desired_resources() -> None:
    rsp = run(make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED, desired=EARLIER))
    assert "earlier-step" in rsp.desired.resources


# --- over real gRPC, in the process `make run` starts ---------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[grpcv1.FunctionRunnerServiceStub]:
    with served_function("--insecure") as address, grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        yield grpcv1.FunctionRunnerServiceStub(channel)


def test_the_served_function_composes_over_grpc(served: grpcv1.FunctionRunnerServiceStub) -> None:
    req = make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED)
    rsp = served.RunFunction(req, timeout=10)
    assert rsp.meta.tag == "test"
    assert set(rsp.desired.resources) == GATEWAY_NAMES
    assert rsp == run(req), "served and in-process answers are identical"


def test_the_served_function_answers_bad_input_with_a_fatal(
    served: grpcv1.FunctionRunnerServiceStub,
) -> None:
    rsp = served.RunFunction(make_request(GW_XR, None), timeout=10)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]


def test_the_serving_process_never_imports_the_kubernetes_client() -> None:
    code = "import sys, function.main, function.fn; assert 'kubernetes' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_the_server_starts_with_the_sdk_flags() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "function", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for flag in (
        "--address",
        "--insecure",
        "--tls-server-certs-dir",
        "--debug",
        "--max-recv-message-size",
    ):
        assert flag in out.stdout


# --- message size limits ----------------------------------------------------------------------


def _earlier_step_of(size: int) -> dict[str, dict[str, Any]]:
    """Desired state from an earlier pipeline step, about `size` bytes on the wire."""
    return {
        "big": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "big"},
            "data": {"blob": "x" * size},
        }
    }


def test_a_response_over_the_limit_is_one_clear_fatal(served: grpcv1.FunctionRunnerServiceStub) -> None:
    # The request fits (just under 4 MiB); our additions push the response over.
    req = make_request(GW_XR, GATEWAY_INPUT, desired=_earlier_step_of(4 * 1024 * 1024 - 1_000))
    assert req.ByteSize() < 4 * 1024 * 1024
    rsp = served.RunFunction(req, timeout=30)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert "over the 4194304-byte gRPC message limit" in rsp.results[0].message
    assert "--max-send-message-size" in rsp.results[0].message
    assert not rsp.desired.resources


def test_a_request_over_the_limit_is_refused_by_grpc_with_both_sizes(
    served: grpcv1.FunctionRunnerServiceStub,
) -> None:
    req = make_request(GW_XR, GATEWAY_INPUT, desired=_earlier_step_of(4 * 1024 * 1024 + 10))
    with pytest.raises(grpc.RpcError) as caught:
        served.RunFunction(req, timeout=30)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (caught.value.details() or "")


def test_a_raised_limit_serves_the_same_request() -> None:
    req = make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED, desired=_earlier_step_of(4 * 1024 * 1024 + 10))
    options = [
        ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ]
    with (
        served_function("--insecure", env={"MAX_RECV_MESSAGE_SIZE": "16"}) as address,
        grpc.insecure_channel(address, options=options) as channel,
    ):
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=30)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert {"big", "gateway", "anchor-route", "envoy-proxy", "envoy-deployment"} <= set(rsp.desired.resources)


def test_earlier_steps_keep_their_xr_status_fields() -> None:
    req = make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED)
    req.desired.composite.resource.update({"status": {"fromEarlierStep": "kept"}})
    rsp = run(req)
    status = rsp.desired.composite.resource["status"]
    assert status["fromEarlierStep"] == "kept"
    assert status["gateway"]["name"] == "inference"


def test_an_unexpected_error_is_exactly_its_type_and_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills a message that appends anything (a traceback line, a file path) to the error."""

    def explode(*_: Any, **__: Any) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(gateway, "compose", explode)
    rsp = run(make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED))
    assert [r.message for r in rsp.results] == ["internal error: ValueError: boom"]


# --- when Crossplane calls again ------------------------------------------------------------

ROUTE_READY_GW = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")[0]
ROUTE_COMPOSED = by_resource_name(
    load_yaml(EXAMPLES / "model-route" / "observed" / "composed" / "resources.yaml")
)
TTL_CASES = [
    pytest.param(
        make_request(GW_XR, GATEWAY_INPUT, GW_OBSERVED),
        120,
        id="a ready gateway is called again in 2 minutes",
    ),
    pytest.param(
        make_request(GW_XR, GATEWAY_INPUT, {}), 15, id="a gateway still waiting is called again in 15 s"
    ),
    pytest.param(
        make_request(ROUTE_XR, ROUTE_INPUT, ROUTE_COMPOSED, gw_required(ROUTE_READY_GW)),
        120,
        id="a ready route is called again in 2 minutes",
    ),
    pytest.param(
        make_request(ROUTE_XR, ROUTE_INPUT, {}, gw_required(ROUTE_READY_GW)),
        15,
        id="a route still waiting is called again in 15 s",
    ),
]


@pytest.mark.parametrize(("req", "seconds"), TTL_CASES)
def test_the_response_ttl_is_short_only_while_waiting(req: fnv1.RunFunctionRequest, seconds: int) -> None:
    """Watch events drive every change; the TTL is the fallback without --enable-watches, and a
    settled ModelRoute (two calls a reconcile) then costs one call per minute."""
    rsp = run(req)
    assert rsp.meta.ttl.ToSeconds() == seconds


@pytest.mark.parametrize("ready", [None, 0, "False"], ids=repr)
def test_a_verdict_is_true_or_false_and_nothing_else(ready: object) -> None:
    with pytest.raises(TypeError, match="ready must be True or False"):
        Verdict(ROUTING_READY, ready, RoutingReason.AVAILABLE, "m")  # type: ignore[arg-type]


class _Lines:
    """Stands in for the runner's logger: the info lines it was asked to write."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, msg: str, **kw: Any) -> None:
        self.lines.append((msg, kw))

    def transitions(self) -> list[str]:
        return [kw["xr"] + " " + kw["condition"] for msg, kw in self.lines if msg == "condition changed"]


def _gateway_xr(name: str) -> dict[str, Any]:
    xr = copy.deepcopy(GW_XR)
    xr["metadata"]["name"] = name
    return xr


# Everything the example gateway asks Crossplane for, as handed: no SecurityPolicy (no caller auth).
_GATEWAY_ALL_READ: dict[str, list[dict[str, Any]]] = {"security-policy-object": []}

LOG_CASES = [
    (
        "two calls of one reconcile that decide the same transition log it once",
        [(_gateway_xr("a"), "ready"), (_gateway_xr("a"), "ready")],
        ["InferenceGateway platform/a GatewayReady=True (Available)"],
    ),
    (
        "a decision that changes again is logged again",
        [(_gateway_xr("a"), "ready"), (_gateway_xr("a"), "rolling-out"), (_gateway_xr("a"), "ready")],
        [
            "InferenceGateway platform/a GatewayReady=True (Available)",
            "InferenceGateway platform/a GatewayReady=False (RollingOut)",
            "InferenceGateway platform/a GatewayReady=True (Available)",
        ],
    ),
    (
        "the same transition of two XRs is logged for each",
        [(_gateway_xr("a"), "ready"), (_gateway_xr("b"), "ready")],
        [
            "InferenceGateway platform/a GatewayReady=True (Available)",
            "InferenceGateway platform/b GatewayReady=True (Available)",
        ],
    ),
]


@pytest.mark.parametrize(("name", "calls", "want"), LOG_CASES, ids=[c[0] for c in LOG_CASES])
def test_a_transition_is_logged_once_per_decision(
    name: str, calls: list[tuple[dict[str, Any], str]], want: list[str]
) -> None:
    runner = FunctionRunner()
    lines = _Lines()
    runner.log = lines  # type: ignore[assignment]
    for xr, state in calls:
        observed = by_resource_name(load_yaml(EXAMPLES / "inference-gateway" / "observed" / f"{state}.yaml"))
        asyncio.run(runner.RunFunction(make_request(xr, GATEWAY_INPUT, observed, _GATEWAY_ALL_READ), None))
    assert lines.transitions() == want, name


def _route_said(serving: dict[str, Any] | None, backends: dict[str, str]) -> dict[str, Any]:
    """The example route, its status as a call finds it: serving as given, BackendsServing as given."""
    xr = copy.deepcopy(ROUTE_XR)
    xr["status"] = {
        "conditions": [{"type": BACKENDS_SERVING, "lastTransitionTime": "2026-12-06T12:26:23Z", **backends}]
    }
    if serving is not None:
        xr["status"]["serving"] = serving
    return xr


# What Crossplane leaves on each condition a function set when a call fails fatally (v2.4.0
# composite/reconciler.go): the function unreachable while its revision changes, say.
_FATAL = {"status": "Unknown", "reason": "FatalError", "message": "A fatal error occurred before ..."}
_SERVING = {
    "ready": True,
    "reason": "Available",
    "message": "model meta-llama/Llama-3.1-8B-Instruct is served",
}
_ALL_SERVING = {"status": "True", "reason": "AllServing", "message": "2 of 2 backends serving"}

ROUTE_LOG_CASES = [
    (
        "BackendsServing back after a fatal error logs no RoutingReady transition, and says itself as an event",
        _route_said(_SERVING, _FATAL),
        [],
        ["AllServing"],
    ),
    (
        "a route whose RoutingReady changes logs it",
        _route_said({**_SERVING, "ready": False, "reason": "ConfigLoading"}, _ALL_SERVING),
        ["ModelRoute team-a/llama RoutingReady=True (Available)"],
        ["Available"],
    ),
    (
        "a route whose conditions all stay logs nothing and says nothing",
        _route_said(_SERVING, _ALL_SERVING),
        [],
        [],
    ),
]


@pytest.mark.parametrize(
    ("name", "xr", "want", "events"), ROUTE_LOG_CASES, ids=[c[0] for c in ROUTE_LOG_CASES]
)
def test_only_the_main_conditions_transition_is_logged(
    name: str, xr: dict[str, Any], want: list[str], events: list[str]
) -> None:
    runner = FunctionRunner()
    lines = _Lines()
    runner.log = lines  # type: ignore[assignment]
    rsp = asyncio.run(
        runner.RunFunction(make_request(xr, ROUTE_INPUT, ROUTE_COMPOSED, _route_all_read()), None)
    )
    assert lines.transitions() == want, name
    assert [r.reason for r in rsp.results] == events, name


# The label value the example route's claimants carry: its model on its gateway.
_ROUTE_CLAIM = claims.claim(
    ROUTE_XR["spec"]["gatewayRef"]["namespace"],
    ROUTE_XR["spec"]["gatewayRef"]["name"],
    ROUTE_XR["spec"]["model"],
)


def _route_all_read(
    claimants: list[dict[str, Any]] | None = None, httproutes: list[dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Everything the example route asks Crossplane for, as handed: its gateway ready, its own
    HTTPRoute (or those given, each under its name's key), the claimants listed (none by default),
    and its hosted backend's key Secret."""
    listed = copy.deepcopy(claimants or [])
    for claimant in listed:  # each as the requirement selects it: labelled with the route's claim
        claimant["metadata"]["labels"][claims.LABEL] = _ROUTE_CLAIM
    required = gw_required(ROUTE_READY_GW) | {
        claims.REQUIREMENT: listed,
        claims.ROUTED_REQUIREMENT: [],
        "secret-hosted-api-key": [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hosted-api-key", "namespace": "team-a"},
                "data": {"apiKey": SECRET_VALUE},
            }
        ],
    }
    for made in httproutes or ():
        required[claims.httproute_key((made["metadata"]["namespace"], made["metadata"]["name"]))] = [made]
    return required


def test_a_decision_of_a_call_crossplane_repeats_is_not_logged_and_the_reconciles_own_is() -> None:
    """Crossplane applies only a reconcile's last call, and calls again while a call asks for what
    it was not handed (v2.4.0 `required_resources.go`). On the real stack a route said True; a
    younger claimant appeared, and the first call, seeded before its HTTPRoute was read, failed
    closed (ModelClaimed): the log said so, the reconcile's last call said True, and 3 s later the
    route's real ModelClaimed (its HTTPRoute made again, now the younger) was not logged at all."""
    runner = FunctionRunner()
    lines = _Lines()
    runner.log = lines  # type: ignore[assignment]
    xr = _route_said(_SERVING, _ALL_SERVING)
    ours, theirs = claims_fixtures.OUR_HTTPROUTE, claims_fixtures.T_OTHER
    listed = [claims_fixtures.MINE, claims_fixtures.OTHER]
    older = claims_fixtures.httproute(*ours, "2026-11-29T12:00:01Z")
    theirs_made = claims_fixtures.httproute(*theirs, "2026-11-29T13:00:05Z")

    def call(required: dict[str, list[dict[str, Any]]]) -> fnv1.RunFunctionResponse:
        return asyncio.run(runner.RunFunction(make_request(xr, ROUTE_INPUT, ROUTE_COMPOSED, required), None))

    # The first call, handed what the reconcile before fetched: not the younger claimant's HTTPRoute.
    seeded = _route_all_read(listed, [older])
    first = call(seeded)
    assert claims.httproute_key(theirs) in first.requirements.resources
    assert [c.reason for c in first.conditions if c.type == ROUTING_READY] == ["ModelClaimed"]
    last = call(_route_all_read(listed, [older, theirs_made]))
    assert [c.reason for c in last.conditions if c.type == ROUTING_READY] == ["Available"]
    assert lines.transitions() == [], "a decision Crossplane never applied was logged"
    # The route's HTTPRoute made again, younger than the other's: the reconcile's own decision.
    remade = claims_fixtures.httproute(*ours, "2026-11-29T14:00:00Z")
    call(_route_all_read(listed, [remade, theirs_made]))
    assert lines.transitions() == ["ModelRoute team-a/llama RoutingReady=False (ModelClaimed)"]


def test_the_memory_of_logged_transitions_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fn, "REMEMBERED_XRS", 2)
    runner = FunctionRunner()
    for xr in ("a", "b", "c", "a"):
        assert runner._first_time(xr, "GatewayReady=True (Available)")
    assert list(runner._logged) == ["c", "a"]


def test_composing_leaves_the_event_loop_free_to_take_the_next_call() -> None:
    """gRPC takes an arrived call only when the server's event loop runs; one left untaken when
    SIGTERM comes is cancelled, not answered (13 of 16 concurrent callers' calls were cut when
    composing ran on the loop). Composing runs on a thread of its own: the loop ticks meanwhile."""
    runner = FunctionRunner()
    req = make_request(ROUTE_XR, ROUTE_INPUT)
    ticks = 0

    async def ticker(done: asyncio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def call() -> fnv1.RunFunctionResponse:
        done = asyncio.Event()
        task = asyncio.ensure_future(ticker(done))
        await asyncio.sleep(0)  # the ticker's first tick
        started = ticks
        try:
            return await runner.RunFunction(req, None)
        finally:
            assert ticks > started + 1, "the loop did not run while the call composed"
            done.set()
            await task

    rsp = asyncio.run(call())
    assert rsp.desired.resources


def _xr_said(serving: dict[str, Any] | None, conditions: list[dict[str, str]]) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions}
    if serving is not None:
        status["serving"] = serving
    return {"status": status}


LAST_DECIDED_CASES = [
    (
        "the main condition is read from status.serving, which Crossplane writes back stale far more rarely",
        _xr_said(
            {"ready": False, "reason": "RollingOut", "message": "rolling"},
            [{"type": GATEWAY_READY, "status": "True", "reason": "Available"}],
        ),
        GATEWAY_READY,
        ("False", "RollingOut"),
    ),
    (
        "any other condition type is read from the condition itself, never from the main decision",
        _xr_said(
            {"ready": True, "reason": "Available", "message": "served"},
            [{"type": BACKENDS_SERVING, "status": "False", "reason": "BackendNotServing"}],
        ),
        BACKENDS_SERVING,
        ("False", "BackendNotServing"),
    ),
    (
        "an XR an older version composed, without status.serving, is read from its condition",
        _xr_said(None, [{"type": ROUTING_READY, "status": "True", "reason": "Available"}]),
        ROUTING_READY,
        ("True", "Available"),
    ),
]


@pytest.mark.parametrize(
    ("name", "xr", "typ", "want"), LAST_DECIDED_CASES, ids=[c[0] for c in LAST_DECIDED_CASES]
)
def test_what_was_last_decided_is_read_where_it_cannot_be_stale(
    name: str, xr: dict[str, Any], typ: str, want: tuple[str, str]
) -> None:
    got = last_decided(xr, typ) or {}
    assert (got.get("status"), got.get("reason")) == want, name


# --- the one writer: every part of an Outcome where Crossplane reads it --------------------------

_MAIN = Verdict(ROUTING_READY, False, RoutingReason.GATEWAY_NOT_READY, "rolling")
_EXTRA = Verdict(BACKENDS_SERVING, True, "AllServing", "1 of 1 serve")
_WRITTEN = Outcome(
    resources={
        "route": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}},
        "not-yet": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}},
    },
    ready={"route": True},
    status={"model": "m"},
    verdict=_MAIN,
    extra=[_EXTRA],
    results=[("Warning", "GatewayNotReady", "rolling"), ("Normal", "AllServing", "1 of 1 serve")],
    requirements={
        "by-name": Requirement("v1", "ConfigMap", "rec", "platform"),
        "by-label": Requirement("v1", "ConfigMap", "", "", labels=(("team", "a"),)),
        "by-label-here": Requirement("v1", "Secret", "", "team-a", labels=(("k", "v"),)),
    },
    ttl=timedelta(seconds=3),
    xr_version="4711",
)


def _written(outcome: Outcome) -> fnv1.RunFunctionResponse:
    req = make_request(ROUTE_XR, ROUTE_INPUT, desired=EARLIER)
    req.desired.composite.resource.update({"status": {"fromEarlierStep": "kept"}})
    rsp = response.to(req)
    write(outcome, rsp)
    return rsp


WRITER_CASES = [
    (
        "each resource is written with its readiness, beside what earlier steps desired",
        lambda rsp: {
            name: (r.resource["metadata"]["name"], r.ready) for name, r in rsp.desired.resources.items()
        },
        {
            "earlier-step": ("x", fnv1.READY_UNSPECIFIED),
            "not-yet": ("n", fnv1.READY_FALSE),
            "route": ("r", fnv1.READY_TRUE),
        },
    ),
    (
        "the status is merged into what earlier steps wrote, with the verdict as status.serving",
        lambda rsp: dict(rsp.desired.composite.resource["status"]),
        {
            "fromEarlierStep": "kept",
            "model": "m",
            "serving": {"ready": False, "reason": "GatewayNotReady", "message": "rolling"},
        },
    ),
    (
        "the XR's resourceVersion the call decided from is the precondition of Crossplane's status apply",
        lambda rsp: rsp.desired.composite.resource["metadata"]["resourceVersion"],
        "4711",
    ),
    (
        "the main condition is written first, then the others",
        lambda rsp: [(c.type, c.status, c.reason, c.message) for c in rsp.conditions],
        [
            (ROUTING_READY, fnv1.STATUS_CONDITION_FALSE, "GatewayNotReady", "rolling"),
            (BACKENDS_SERVING, fnv1.STATUS_CONDITION_TRUE, "AllServing", "1 of 1 serve"),
        ],
    ),
    (
        "the XR's Ready follows the main condition, not the composed resources",
        lambda rsp: rsp.desired.composite.ready,
        fnv1.READY_FALSE,
    ),
    (
        "a composer's sooner TTL wins over the verdict's usual one",
        lambda rsp: rsp.meta.ttl.ToTimedelta(),
        timedelta(seconds=3),
    ),
    (
        "each result keeps its severity, reason and message, in order",
        lambda rsp: [(r.severity, r.reason, r.message) for r in rsp.results],
        [
            (fnv1.SEVERITY_WARNING, "GatewayNotReady", "rolling"),
            (fnv1.SEVERITY_NORMAL, "AllServing", "1 of 1 serve"),
        ],
    ),
    (
        "a requirement by name names its namespace; by labels, in every namespace or in one",
        lambda rsp: {
            key: (
                s.api_version,
                s.kind,
                s.match_name,
                dict(s.match_labels.labels),
                s.namespace if s.HasField("namespace") else None,
            )
            for key, s in rsp.requirements.resources.items()
        },
        {
            "by-name": ("v1", "ConfigMap", "rec", {}, "platform"),
            "by-label": ("v1", "ConfigMap", "", {"team": "a"}, None),
            "by-label-here": ("v1", "Secret", "", {"k": "v"}, "team-a"),
        },
    ),
]


@pytest.mark.parametrize(("name", "read", "want"), WRITER_CASES, ids=[c[0] for c in WRITER_CASES])
def test_the_writer_puts_each_part_of_an_outcome_where_crossplane_reads_it(
    name: str, read: Callable[[fnv1.RunFunctionResponse], Any], want: Any
) -> None:
    assert read(_written(_WRITTEN)) == want, name


@pytest.mark.parametrize(
    ("ready", "ttl", "want"),
    [
        (True, None, timedelta(minutes=2)),
        (False, None, timedelta(seconds=15)),
        (True, timedelta(minutes=5), timedelta(minutes=2)),
        (False, timedelta(seconds=4), timedelta(seconds=4)),
    ],
    ids=[
        "a settled verdict is called again in 2 minutes",
        "a waiting verdict in 15 s",
        "a later TTL never delays the usual one",
        "a sooner TTL is kept",
    ],
)
def test_the_next_call_is_the_verdict_s_usual_ttl_or_sooner(
    ready: bool, ttl: timedelta | None, want: timedelta
) -> None:
    outcome = Outcome(verdict=Verdict(ROUTING_READY, ready, "r", "m"), ttl=ttl)
    assert outcome.next_call() == want
    written = _written(outcome)
    assert written.meta.ttl.ToTimedelta() == want
    assert written.desired.composite.ready == (fnv1.READY_TRUE if ready else fnv1.READY_FALSE)


def test_an_outcome_without_a_verdict_sets_no_condition_ready_or_ttl_of_its_own() -> None:
    outcome = Outcome(ttl=timedelta(seconds=1))
    assert outcome.next_call() is None
    rsp = _written(outcome)
    sdk_default = response.to(make_request(ROUTE_XR, ROUTE_INPUT)).meta.ttl
    assert (list(rsp.conditions), rsp.desired.composite.ready, rsp.meta.ttl) == (
        [],
        fnv1.READY_UNSPECIFIED,
        sdk_default,
    )


@pytest.mark.parametrize(
    ("version", "want"),
    [("8231", "8231"), (None, None), ("", None), (8231, None)],
    ids=[
        "an XR read from the API server: its version is the precondition",
        "an XR without a version: no precondition",
        "an empty version: no precondition",
        "a version that is not a string: no precondition",
    ],
)
def test_the_answer_is_conditional_on_the_xr_version_it_was_decided_from(
    version: Any, want: str | None
) -> None:
    """Issue #32: Crossplane applies the XR's status with the conditions of the copy it read from
    its cache; conditional on that copy's version, a stale copy's apply is refused, not written."""
    xr = copy.deepcopy(ROUTE_XR)
    if version is not None:
        xr["metadata"]["resourceVersion"] = version
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(ROUTE_READY_GW)))
    desired_xr = struct_to_dict(rsp.desired.composite.resource)
    assert desired_xr.get("metadata", {}).get("resourceVersion") == want


@pytest.mark.parametrize(
    ("generation", "want"),
    [(7, 7), (None, None), ("7", None), (True, None), (7.5, None), (float("inf"), None)],
    ids=[
        "the generation decided for is published beside the decision",
        "an XR without a generation: none published",
        "a generation that is not a number: none published",
        "a boolean is no generation",
        "a fraction is no generation",
        "an infinite generation is no generation, and no crash",
    ],
)
def test_the_decision_names_the_generation_it_was_made_for(generation: Any, want: int | None) -> None:
    """Crossplane stamps no generation on a function's conditions: status.serving carries the one
    it was decided for, so a reader can tell a decision about the spec before from one about this."""
    xr = copy.deepcopy(ROUTE_XR)
    if generation is not None:
        xr["metadata"]["generation"] = generation
    rsp = run(make_request(xr, ROUTE_INPUT, {}, gw_required(ROUTE_READY_GW)))
    serving = struct_to_dict(rsp.desired.composite.resource)["status"]["serving"]
    assert serving.get("observedGeneration") == want
    assert {"ready", "reason", "message"} <= set(serving)


def test_a_first_call_handed_what_an_old_selector_found_is_not_taken_for_the_reconcile_s() -> None:
    """Crossplane v2.4.0 seeds a reconcile's first call with what the reconcile before fetched,
    under the same keys: after the route's model is renamed, the claimants listed are those of the
    old model (found in review). Every key is there; what a key holds is not what it asks for."""
    runner = FunctionRunner()
    lines = _Lines()
    runner.log = lines  # type: ignore[assignment]
    renamed = _route_said({**_SERVING, "ready": False, "reason": "ConfigLoading"}, _ALL_SERVING)
    renamed["spec"]["model"] = "meta-llama/Llama-3.3-70B-Instruct"
    seeded = _route_all_read([claims_fixtures.MINE])  # labelled with the claim of the model before
    rsp = asyncio.run(runner.RunFunction(make_request(renamed, ROUTE_INPUT, ROUTE_COMPOSED, seeded), None))
    assert set(rsp.requirements.resources) <= set(seeded), "every key was handed"
    assert lines.transitions() == [], "a decision made of the old model's claimants was logged"


def _selector(**fields: Any) -> fnv1.ResourceSelector:
    labels = fields.pop("labels", None)
    selector = fnv1.ResourceSelector(api_version="v1", kind="Secret", **fields)
    if labels is not None:
        selector.match_labels.labels.update(labels)
    return selector


def _doc(
    kind: str = "Secret", namespace: str = "platform", name: str = "idx", **labels: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
    }


@pytest.mark.parametrize(
    ("selector", "doc", "want"),
    [
        (_selector(match_name="idx", namespace="platform"), _doc(), True),
        (_selector(match_name="idx", namespace="platform"), _doc(kind="ConfigMap"), False),
        (_selector(match_name="idx", namespace="platform"), {**_doc(), "apiVersion": "v2"}, False),
        (_selector(match_name="idx", namespace="platform"), _doc(namespace="team-a"), False),
        (_selector(match_name="idx"), _doc(namespace="team-a"), True),
        (_selector(match_name="idx", namespace="platform"), _doc(name="other"), False),
        (_selector(labels={"team": "a"}), _doc(team="a"), True),
        (_selector(labels={"team": "a"}), _doc(team="b"), False),
    ],
    ids=[
        "an object of the kind, namespace and name the selector names is selected",
        "an object of another kind by the same name is not",
        "an object of another apiVersion is not",
        "an object in another namespace than the one named is not",
        "a selector that names no namespace selects the name in any",
        "an object of another name is not",
        "an object carrying every label of a label selector is selected",
        "an object whose label has another value is not",
    ],
)
def test_a_requirement_selects_what_crossplane_would_hand_for_it(
    selector: fnv1.ResourceSelector, doc: dict[str, Any], want: bool
) -> None:
    assert selects(selector, doc) is want
