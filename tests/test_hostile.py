"""Hostile input: whatever a request carries, the answer is well formed.

Every request gets either exactly one fatal result with a one-line message
(no traceback), or a normal response with at least as many desired resources
as observed ones. Nothing raises.
"""

from __future__ import annotations

import copy
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function.route import removed_by_spec
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT
from tests.support import (
    EXAMPLES,
    GATEWAY_INPUT,
    ROUTE_INPUT,
    by_resource_name,
    examples,
    gateway_fetched,
    load_yaml,
    make_request,
    run,
)

GW_XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
ROUTE_XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
GW_OBSERVED = by_resource_name(load_yaml(EXAMPLES / "inference-gateway" / "observed" / "ready.yaml"))
ROUTE_OBSERVED = by_resource_name(
    load_yaml(EXAMPLES / "model-route" / "observed" / "composed" / "resources.yaml")
)
READY_GWS = [
    load_yaml(EXAMPLES / "model-route" / "required" / state / "inference-gateway.yaml")[0]
    for state in ("ready", "ready-auth")
]
# Every field of the API appears in what is corrupted, the newer ones included.
GW_XR = copy.deepcopy(GW_XR)
GW_XR["spec"] |= {
    "auth": {
        "apiKeys": {
            "secretRefs": [{"name": "client-keys"}],
            "header": "x-api-key",
            "forwardClientIDHeader": "x-client-id",
            "routeNamespaces": {"from": "All"},
        }
    },
    "requestBufferLimit": "8Mi",
    "envoy": {
        "deployMode": "GatewayNamespace",
        "serviceType": "NodePort",
        "deploymentNaming": "Generated",
        "spread": {"policy": "Required", "topologyKey": "topology.kubernetes.io/zone"},
        "shutdown": {"drainTimeout": "300s", "minDrainDuration": "5s"},
        "accessLog": {"modelAndTokens": True},
    },
}
ROUTE_XR = copy.deepcopy(ROUTE_XR)
ROUTE_XR["spec"]["backends"] += [
    {
        "name": "bedrock",
        "endpoint": {"hostname": "bedrock-runtime.us-east-1.amazonaws.com", "port": 443},
        "schema": {"name": "AWSBedrock"},
        "credentials": {
            "aws": {"region": "us-east-1", "credentialsSecretRef": {"name": "aws"}, "profile": "p"}
        },
    },
    {
        "name": "azure",
        "endpoint": {"hostname": "x.openai.azure.com", "port": 443},
        "schema": {"name": "AzureOpenAI", "version": "2025-01-01-preview"},
        "credentials": {"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "az"}}},
    },
]
ROUTE_XR["spec"] |= {
    "timeouts": {"request": "120s", "streamIdle": "0s"},
    "resilience": {
        "retry": {"attempts": 3, "statusCodes": [500, 503]},
        "outlierDetection": {"consecutiveErrors": 0, "ejectionTime": "1m"},
    },
}

# JSON as a protobuf Struct can hold it: numbers are doubles.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


def corrupt(draw: st.DrawFn, doc: Any, depth: int = 0) -> Any:
    """Replace, drop or keep parts of a valid document at random."""
    choice = draw(st.integers(min_value=0, max_value=9))
    if choice == 0 or depth > 6:
        return draw(json_values)
    if isinstance(doc, dict):
        out = {}
        for key, value in doc.items():
            if draw(st.integers(min_value=0, max_value=7)) == 0:
                continue
            out[key] = corrupt(draw, value, depth + 1)
        if draw(st.integers(min_value=0, max_value=7)) == 0:
            out[draw(st.text(max_size=8))] = draw(json_values)
        return out
    if isinstance(doc, list):
        items = [corrupt(draw, v, depth + 1) for v in doc]
        if items and draw(st.booleans()):
            items = items * draw(st.integers(min_value=1, max_value=50))
        return items
    return doc


@st.composite
def hostile_requests(draw: st.DrawFn) -> tuple[fnv1.RunFunctionRequest, set[str]]:
    route = draw(st.booleans())
    xr = copy.deepcopy(ROUTE_XR if route else GW_XR)
    xr["spec"] = corrupt(draw, xr["spec"]) if draw(st.booleans()) else xr["spec"]
    inp: Any = copy.deepcopy(ROUTE_INPUT if route else GATEWAY_INPUT)
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        inp = corrupt(draw, inp)
    observed_source = ROUTE_OBSERVED if route else GW_OBSERVED
    observed = {
        name: corrupt(draw, copy.deepcopy(obj)) if draw(st.booleans()) else copy.deepcopy(obj)
        for name, obj in observed_source.items()
        if draw(st.integers(min_value=0, max_value=3))
    }
    observed = {k: v for k, v in observed.items() if isinstance(v, dict)}
    required: dict[str, list[dict[str, Any]]] = {}
    if route and draw(st.booleans()):
        gw = draw(st.sampled_from(READY_GWS))
        if draw(st.booleans()):
            # The gateway's serving record, corrupted.
            record = corrupt(draw, copy.deepcopy(gateway_fetched(gw)[SERVING_REQUIREMENT][0]))
            required[SERVING_REQUIREMENT] = [record] if isinstance(record, dict) else []
        else:
            # No record: the InferenceGateway itself, corrupted.
            xr_gw = corrupt(draw, copy.deepcopy(gw))
            required[SERVING_REQUIREMENT] = []
            required[GATEWAY_REQUIREMENT] = [xr_gw] if isinstance(xr_gw, dict) else []
    if not isinstance(inp, dict):
        inp = {"not": "an input"}
    return make_request(xr, inp, observed, required), set(observed)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_requests())
def test_every_hostile_request_gets_a_well_formed_answer(
    case: tuple[fnv1.RunFunctionRequest, set[str]],
) -> None:
    req, observed = case
    rsp = run(req)
    fatal = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        assert len(fatal) == 1
        assert "Traceback" not in fatal[0].message
        assert "\n" not in fatal[0].message
        assert not fatal[0].message.startswith("internal error"), fatal[0].message
        assert rsp.desired == req.desired, "a fatal result changes nothing"
    else:
        gone = observed - set(rsp.desired.resources)
        # Only a backend the (valid) spec no longer lists may go.
        assert all(removed_by_spec(name) for name in gone), gone
