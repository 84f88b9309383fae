"""A ModelRoute's backends: credentials, workloads, failover, and when the ext-proc serves them."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from function import claims, readiness
from function.cel import workload_query
from function.conditions import RoutingReason
from function.naming import unique_name
from tests.route_support import (
    ALL_NAMES,
    COMPOSED,
    NOT_FETCHED,
    READY_GW,
    XR,
    accepted_ago,
    backend_of_schema,
    gw_required,
    httproute_made_of,
    served_required,
    spec_written,
    xr_saying,
)
from tests.support import (
    CLOCK,
    EXAMPLES,
    ROUTE_INPUT,
    applied,
    by_resource_name,
    compose,
    condition,
    load_yaml,
    refused,
    said,
    written_at,
)


def _policy_of(backend: dict[str, Any]) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [backend]
    rsp = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW))
    return rsp.resources["security-policy-b"]["spec"]["forProvider"]["manifest"]["spec"]


KEY = {"apiKeySecretRef": {"name": "key"}}


@dataclass(frozen=True)
class AuthCase:
    name: str
    backend: dict[str, Any]
    want: dict[str, Any]


AUTH_CASES = [
    AuthCase(
        "an OpenAI key is sent as Authorization Bearer (backendauth/api_key.go)",
        backend_of_schema("OpenAI", **KEY),
        {"type": "APIKey", "apiKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "a Cohere key is sent as Authorization Bearer",
        backend_of_schema("Cohere", **KEY),
        {"type": "APIKey", "apiKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "an Anthropic key is sent as x-api-key (backendauth/anthropicapikey.go)",
        backend_of_schema("Anthropic", **KEY),
        {"type": "AnthropicAPIKey", "anthropicAPIKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "an Azure OpenAI key is sent as Azure's api-key",
        backend_of_schema("AzureOpenAI", **KEY),
        {"type": "AzureAPIKey", "azureAPIKey": {"secretRef": {"name": "key"}}},
    ),
    AuthCase(
        "AWS Bedrock signs with AWS credentials from a Secret",
        backend_of_schema(
            "AWSBedrock",
            credentials={
                "aws": {"region": "us-east-1", "credentialsSecretRef": {"name": "aws"}, "profile": "p"}
            },
        ),
        {
            "type": "AWSCredentials",
            "awsCredentials": {
                "region": "us-east-1",
                "credentialsFile": {"secretRef": {"name": "aws"}, "profile": "p"},
            },
        },
    ),
    AuthCase(
        "GCP Vertex AI takes GCP credentials from a Secret",
        backend_of_schema(
            "GCPVertexAI",
            credentials={
                "gcp": {
                    "projectName": "proj",
                    "region": "us-central1",
                    "credentialsSecretRef": {"name": "gcp"},
                }
            },
        ),
        {
            "type": "GCPCredentials",
            "gcpCredentials": {
                "projectName": "proj",
                "region": "us-central1",
                "credentialsFile": {"secretRef": {"name": "gcp"}},
            },
        },
    ),
    AuthCase(
        "Azure OpenAI can take Entra ID credentials instead of a key",
        backend_of_schema(
            "AzureOpenAI",
            credentials={"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "az"}}},
        ),
        {
            "type": "AzureCredentials",
            "azureCredentials": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "az"}},
        },
    ),
]


@pytest.mark.parametrize("case", AUTH_CASES, ids=lambda c: c.name)
def test_the_security_policy_type_follows_the_schema(case: AuthCase) -> None:
    got = _policy_of(case.backend)
    assert {k: v for k, v in got.items() if k != "targetRefs"} == case.want


@pytest.mark.parametrize(
    ("backend", "field", "says"),
    [
        pytest.param(
            backend_of_schema("AWSBedrock", **KEY),
            "apiKeySecretRef",
            "credentials.aws",
            id="a key for Bedrock",
        ),
        pytest.param(
            backend_of_schema("AWSAnthropic", **KEY),
            "apiKeySecretRef",
            "credentials.aws",
            id="a key for AWS Anthropic",
        ),
        pytest.param(
            backend_of_schema("GCPVertexAI", **KEY),
            "apiKeySecretRef",
            "credentials.gcp",
            id="a key for Vertex",
        ),
        pytest.param(
            backend_of_schema(
                "OpenAI", credentials={"aws": {"region": "r", "credentialsSecretRef": {"name": "x"}}}
            ),
            "credentials",
            "apiKeySecretRef",
            id="AWS credentials for OpenAI",
        ),
        pytest.param(
            backend_of_schema(
                "AWSBedrock",
                credentials={
                    "gcp": {"projectName": "p", "region": "r", "credentialsSecretRef": {"name": "x"}}
                },
            ),
            "credentials",
            "credentials.aws",
            id="GCP credentials for Bedrock",
        ),
        pytest.param(
            backend_of_schema(
                "AzureOpenAI",
                **KEY,
                credentials={"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "x"}}},
            ),
            "credentials",
            "not both",
            id="a key and credentials at once",
        ),
        pytest.param(
            {**backend_of_schema("AzureOpenAI", **KEY), "schema": {"name": "AzureOpenAI"}},
            "schema",
            "needs version, Azure's api-version",
            id="Azure OpenAI without its api-version",
        ),
    ],
)
def test_credentials_the_provider_would_reject_are_one_fatal_naming_the_field(
    backend: dict[str, Any], field: str, says: str
) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [backend]
    message = refused(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    assert f"spec.backends[0].{field}" in message
    assert says in message


WORKLOAD_XR = load_yaml(EXAMPLES / "model-route" / "xr-workload.yaml")[0]


def _fatal(xr: dict[str, Any]) -> str:
    return refused(xr, ROUTE_INPUT, {}, gw_required(READY_GW))


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"namespace": "kube-system"}, "workloadRef.namespace", "own namespace"),
        ({"apiVersion": "v1", "kind": "Secret"}, "workloadRef.kind", "holds data"),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "workloadRef.kind", "holds data"),
        ({"readinessQuery": "object.status.replicas + 1"}, "workloadRef.readinessQuery", "boolean"),
        ({"readinessQuery": "object.status. &&"}, "workloadRef.readinessQuery", "not a valid CEL expression"),
        ({"name": "Not_A_Name"}, "workloadRef.name", ""),
    ],
    ids=[
        "a workload in another namespace",
        "a Secret as a workload",
        "a ConfigMap as a workload",
        "a query that is not boolean",
        "a query that does not parse",
        "a name Kubernetes would refuse",
    ],
)
def test_a_bad_workload_reference_is_one_fatal_naming_the_field(
    change: dict[str, Any], field: str, words: str
) -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["backends"][0]["workloadRef"] |= change
    message = _fatal(xr)
    assert f"spec.backends[0].{field}" in message
    assert words in message


def test_a_workload_is_observed_in_the_routes_own_namespace_watched_with_its_query() -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["backends"][0]["workloadRef"]["readinessQuery"] = "has(object.status)"
    obj = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["workload-vllm"]
    assert obj["metadata"]["namespace"] == "team-a"
    assert obj["spec"]["managementPolicies"] == ["Observe"]
    assert obj["spec"]["watch"] is True
    assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery", "celQuery": "has(object.status)"}
    assert obj["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm-llama", "namespace": "team-a"},
    }


def _backend_at(name: str, weight: int, priority: int, workload: bool) -> dict[str, Any]:
    b: dict[str, Any] = {
        "name": name,
        "endpoint": {"hostname": f"{name}.team-a.svc", "port": 8000},
        "weight": weight,
        "priority": priority,
    }
    if workload:
        b["workloadRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    return b


def _served(observed: dict[str, dict[str, Any]], name: str, serving: bool) -> None:
    observed[f"workload-{name}"] = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": f"llama-workload-{name}", "namespace": "team-a"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if serving else "False"},
                {"type": "Synced", "status": "True"},
            ],
            # The Deployment the backend's workloadRef names (_backend_at).
            "atProvider": {
                "manifest": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": name, "namespace": "team-a"},
                }
            },
        },
    }


# (backends as (name, weight, priority, serving or None for no workloadRef)) -> RoutingReady, BackendsServing,
# with retries and ejection off: requests land on the first priority level only
# (FAILOVER_CASES below have them on).
SERVING_CASES = {
    "one backend serving": ([("a", 1, 0, True)], True, "AllServing"),
    "one backend not serving": ([("a", 1, 0, False)], False, "NoneServing"),
    "two equal backends, one dead: the model still serves, degraded": (
        [("a", 1, 0, True), ("b", 1, 0, False)],
        True,
        "Degraded",
    ),
    "the first priority dead, a serving fallback: no failover, not served": (
        [("a", 1, 0, False), ("b", 1, 1, True)],
        False,
        "Degraded",
    ),
    "a dead backend of weight 0 takes nothing": ([("a", 0, 0, False), ("b", 1, 0, True)], True, "Degraded"),
    "an external backend (no workloadRef) counts as serving": (
        [("a", 1, 0, False), ("b", 1, 0, None)],
        True,
        "Degraded",
    ),
    "a serving backend of weight 0 takes nothing: its dead sibling gets every request": (
        [("a", 0, 0, True), ("b", 1, 0, False)],
        False,
        "Degraded",
    ),
    "a weight of 1 takes requests like any other": (
        [("a", 1, 0, True), ("b", 2, 1, False)],
        True,
        "Degraded",
    ),
    "every weight 0: no request goes anywhere, whatever serves": (
        [("a", 0, 0, False), ("b", 0, 1, True)],
        False,
        "Degraded",
    ),
}


@pytest.mark.parametrize("case", sorted(SERVING_CASES), ids=str)
def test_routing_ready_needs_a_serving_backend_where_requests_land(case: str) -> None:
    backends, routing, serving_reason = SERVING_CASES[case]
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [_backend_at(n, w, p, s is not None) for n, w, p, s in backends]
    xr["spec"]["resilience"] = NO_RETRY | NO_EJECTION
    composed = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW)).resources
    observed = {
        name: {
            **obj,
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}],
                "atProvider": {"manifest": obj["spec"]["forProvider"]["manifest"]},
            },
        }
        for name, obj in composed.items()
    }
    for n, _, _, s in backends:
        if s is not None:
            _served(observed, n, s)
    rsp = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW))
    got = said(rsp, "RoutingReady")
    assert (got.ready) is routing, got.message
    if not routing:
        assert got.reason == RoutingReason.BACKEND_NOT_SERVING
    serving = said(rsp, "BackendsServing")
    assert serving.reason == serving_reason
    named = [n for n, _, _, s in backends if s is not None]
    for first, second in itertools.pairwise(named):
        assert f"{first}: " in serving.message
        assert f"; {second}: " in serving.message


def test_the_request_timeout_is_the_route_rules_timeout() -> None:
    rule = compose(XR, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["route"]["spec"]["forProvider"][
        "manifest"
    ]["spec"]["rules"][0]
    assert rule["timeouts"] == {"request": XR["spec"]["timeouts"]["request"]}
    xr = copy.deepcopy(XR)
    del xr["spec"]["timeouts"]
    rule = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["route"]["spec"]["forProvider"][
        "manifest"
    ]["spec"]["rules"][0]
    assert "timeouts" not in rule


def _route_spec(xr: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["route"]["spec"][
        "forProvider"
    ]["manifest"]["spec"]
    return spec


def test_a_backend_may_be_sent_its_own_name_for_the_model() -> None:
    refs = {r["name"].split("-")[1]: r for r in _route_spec(XR)["rules"][0]["backendRefs"]}
    assert refs["hosted"]["modelNameOverride"] == "llama-3.1-8b-instruct"
    assert "modelNameOverride" not in refs["vllm"]


def test_token_usage_is_recorded_unless_turned_off() -> None:
    assert _route_spec(XR)["llmRequestCosts"] == [
        {"metadataKey": "llm_input_token", "type": "InputToken"},
        {"metadataKey": "llm_output_token", "type": "OutputToken"},
        {"metadataKey": "llm_total_token", "type": "TotalToken"},
    ]
    xr = copy.deepcopy(XR)
    xr["spec"]["recordTokenUsage"] = False
    assert "llmRequestCosts" not in _route_spec(xr)


def test_the_route_publishes_where_to_send_requests() -> None:
    status = compose(XR, ROUTE_INPUT, {}, gw_required(READY_GW)).desired_status()
    assert status["model"] == XR["spec"]["model"]
    assert status["gateway"]["url"] == READY_GW["status"]["gateway"]["url"]


@pytest.mark.parametrize(
    ("change", "field"),
    [({"modelNameOverride": ""}, "modelNameOverride"), ({"modelNameOverride": 7}, "modelNameOverride")],
    ids=["an empty model name override", "a model name override that is not a string"],
)
def test_a_bad_model_name_override_is_one_fatal_naming_it(change: dict[str, Any], field: str) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"][1] |= change
    assert f"spec.backends[1].{field}" in _fatal(xr)


def test_a_workload_observer_is_named_for_its_backend_and_judged_by_the_built_in_query() -> None:
    obj = compose(WORKLOAD_XR, ROUTE_INPUT, {}, gw_required(READY_GW)).resources["workload-vllm"]
    assert obj["metadata"]["name"] == unique_name("llama", "workload", "vllm", identity=("ModelRoute",))
    assert obj["spec"]["readiness"]["celQuery"] == workload_query("apps/v1", "Deployment")
    assert obj["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}


def _workload_object(
    manifest: dict[str, Any] | None, synced: str = "True", message: str = ""
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Synced", "status": synced, "message": message}]}
    if manifest is not None:
        status["atProvider"] = {"manifest": manifest}
    return {"status": status}


WORKLOAD_SUMMARIES = {
    "nothing observed yet": (None, "not observed yet"),
    "an Object without a manifest yet": (_workload_object(None), "not observed yet"),
    "a workload kind provider-kubernetes may not read says Forbidden, not 'not yet'": (
        _workload_object(
            None,
            "False",
            'cannot get object: statefulsets.apps "vllm" is forbidden: User cannot get resource "statefulsets"',
        ),
        'provider-kubernetes cannot observe it: cannot get object: statefulsets.apps "vllm" is forbidden: '
        'User cannot get resource "statefulsets"',
    ),
    "a Synced=False without a message is still not observed yet": (
        _workload_object(None, "False", ""),
        "not observed yet",
    ),
    "a Synced=False with no message field at all is still not observed yet": (
        {"status": {"conditions": [{"type": "Synced", "status": "False"}]}},
        "not observed yet",
    ),
    "a Deployment that is gone": (
        _workload_object({"kind": "Deployment"}, "False", "observe failed: external resource does not exist"),
        "Deployment not found",
    ),
    "a workload whose last read failed gives no numbers from the read before": (
        _workload_object(
            {"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 2}},
            "False",
            'observe failed: cannot get object: deployments.apps "vllm" is forbidden',
        ),
        "provider-kubernetes cannot read it now (its last read is not current): "
        'observe failed: cannot get object: deployments.apps "vllm" is forbidden',
    ),
    "a failure after a fresh read (a dry run it may not make) keeps the read's numbers": (
        _workload_object(
            {"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 2}},
            "False",
            "observe failed: cannot get desired state: cannot dry run SSA: forbidden",
        ),
        "2 of 2 replicas available",
    ),
    "two of two available": (
        _workload_object({"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 2}}),
        "2 of 2 replicas available",
    ),
    "rolling: one of two updated": (
        _workload_object({"spec": {"replicas": 2}, "status": {"availableReplicas": 2, "updatedReplicas": 1}}),
        "2 of 2 replicas available, 1 of 2 updated",
    ),
    "scaled to zero, counts omitted": (
        _workload_object({"spec": {"replicas": 0}, "status": {}}),
        "0 of 0 replicas available",
    ),
    "no counts at all": (_workload_object({}), "0 of 0 replicas available"),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_SUMMARIES), ids=str)
def test_how_a_replicated_workload_stands_in_words(case: str) -> None:
    observed, want = WORKLOAD_SUMMARIES[case]
    assert readiness.workload_summary("apps/v1", "Deployment", observed) == want


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        ([{"type": "Ready", "status": "True", "reason": "Ready"}], "Ready=True (Ready)"),
        ([{"type": "Ready", "status": "False"}], "Ready=False (no reason)"),
        ([{"type": "Other", "status": "True"}], "no Ready condition"),
    ],
    ids=["ready with a reason", "not ready without a reason", "no Ready condition"],
)
def test_how_any_other_workload_stands_in_words(conditions: list[dict[str, Any]], want: str) -> None:
    observed = _workload_object({"status": {"conditions": conditions}})
    assert readiness.workload_summary("serving.kserve.io/v1beta1", "InferenceService", observed) == want


def test_backends_serving_says_how_many_and_how_each_stands() -> None:
    example = load_yaml(EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml")
    rsp = compose(WORKLOAD_XR, ROUTE_INPUT, by_resource_name(example), gw_required(READY_GW))
    assert said(rsp, "BackendsServing").message == (
        "1 of 2 backends serving (1 without a workloadRef, counted as serving); vllm: 0 of 0 replicas available"
    )
    # Retries and ejection are on by default: the hosted fallback takes vLLM's requests.
    assert said(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    every = copy.deepcopy(WORKLOAD_XR)
    every["spec"]["backends"] = every["spec"]["backends"][:1]
    rsp = compose(
        every,
        ROUTE_INPUT,
        applied(every, ROUTE_INPUT, by_resource_name(example), gw_required(READY_GW)),
        gw_required(READY_GW),
    )
    assert said(rsp, "BackendsServing").message == "0 of 1 backends serving; vllm: 0 of 0 replicas available"
    assert said(rsp, "RoutingReady").message == (
        "no backend that takes the model's requests is serving (vllm); vllm: 0 of 0 replicas available"
    )
    assert condition(
        compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)), "BackendsServing"
    ).message == (
        "2 of 2 backends serving (2 without a workloadRef, counted as serving); no backend names a workload"
    )


def test_azure_openai_is_sent_its_api_version() -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["backends"] = [backend_of_schema("AzureOpenAI", **KEY)]
    rsp = compose(xr, ROUTE_INPUT, {}, gw_required(READY_GW))
    schema = rsp.resources["service-backend-b"]["spec"]["forProvider"]["manifest"]["spec"]["schema"]
    assert schema == {"name": "AzureOpenAI", "version": "2025-01-01-preview"}


NO_RETRY = {"retry": {"attempts": 0}}


NO_EJECTION = {"outlierDetection": {"consecutiveErrors": 0}}


@dataclass(frozen=True)
class FailoverCase:
    name: str
    resilience: dict[str, Any]
    weights: tuple[int, int]  # vllm's, the hosted fallback's
    reason: RoutingReason
    # Whether Envoy Gateway accepted the route's BackendTrafficPolicy (the provider's Ready).
    policy_accepted: bool = True


FAILOVER_CASES = [
    FailoverCase(
        "with retries and ejection on (the default), the fallback takes a dead vLLM's requests",
        {},
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with retries alone, the fallback takes a dead vLLM's requests",
        NO_EJECTION,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with ejection alone, the fallback takes a dead vLLM's requests",
        NO_RETRY,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "a single retry is enough to reach the fallback",
        {"retry": {"attempts": 1}} | NO_EJECTION,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "ejection after a single error is enough to reach the fallback",
        {"outlierDetection": {"consecutiveErrors": 1}} | NO_RETRY,
        (1, 1),
        RoutingReason.AVAILABLE,
    ),
    FailoverCase(
        "with both off, a dead first level is never failed over",
        NO_RETRY | NO_EJECTION,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    FailoverCase(
        "a BackendTrafficPolicy Conflicted by an older one configures no retry: the dead first level "
        "is not failed over",
        {},
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "a policy not accepted configures no single retry either: the dead first level is not failed over",
        {"retry": {"attempts": 1}} | NO_EJECTION,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "a policy not accepted configures no ejection after a single error either",
        {"outlierDetection": {"consecutiveErrors": 1}} | NO_RETRY,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "with both off, a policy not accepted changes nothing: the first level alone counts either way",
        NO_RETRY | NO_EJECTION,
        (1, 1),
        RoutingReason.BACKEND_NOT_SERVING,
        policy_accepted=False,
    ),
    FailoverCase(
        "a fallback of weight 0 takes nothing, whatever retries do",
        {},
        (1, 0),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
    FailoverCase(
        "with every weight 0 nothing takes requests, retries or not",
        {},
        (0, 0),
        RoutingReason.BACKEND_NOT_SERVING,
    ),
]


@pytest.mark.parametrize("case", FAILOVER_CASES, ids=lambda c: c.name)
def test_which_backends_take_the_models_requests(case: FailoverCase) -> None:
    xr = copy.deepcopy(WORKLOAD_XR)
    xr["spec"]["resilience"] = case.resilience
    for backend, weight in zip(xr["spec"]["backends"], case.weights, strict=True):
        backend["weight"] = weight
    scaled_to_zero = load_yaml(
        EXAMPLES / "model-route" / "observed" / "workload-scaled-to-zero" / "resources.yaml"
    )
    observed = applied(xr, ROUTE_INPUT, by_resource_name(scaled_to_zero), gw_required(READY_GW))
    if not case.policy_accepted:
        observed["traffic-policy"] = copy.deepcopy(observed["traffic-policy"])
        ready = next(c for c in observed["traffic-policy"]["status"]["conditions"] if c["type"] == "Ready")
        ready["status"] = "False"
    rsp = compose(xr, ROUTE_INPUT, observed, gw_required(READY_GW))
    got = said(rsp, "RoutingReady")
    assert got.reason == case.reason
    # Said exactly when the policy would have failed over and is not in effect.
    lost = not case.policy_accepted and case.resilience != NO_RETRY | NO_EJECTION
    assert ("the BackendTrafficPolicy is not Accepted" in got.message) is lost
    assert said(rsp, "BackendsServing").reason == "Degraded"


# (case, the Backend's generation, its Accepted's observedGeneration (None: not stamped)) -> RoutingReady
GENERATION_CASES = [
    ("a Backend Accepted of its current generation serves", 2, 2, RoutingReason.AVAILABLE),
    (
        "a Backend Accepted of the generation before its endpoint changed routes the old endpoint",
        2,
        1,
        RoutingReason.BACKEND_NOT_ACCEPTED,
    ),
    ("an Accepted that names no generation is judged as it is", 2, None, RoutingReason.AVAILABLE),
]


@pytest.mark.parametrize(
    ("generation", "judged", "reason"),
    [c[1:] for c in GENERATION_CASES],
    ids=[c[0] for c in GENERATION_CASES],
)
def test_a_backend_counts_only_once_envoy_gateway_accepted_its_current_generation(
    generation: int, judged: int | None, reason: RoutingReason
) -> None:
    """Found in review: with Envoy Gateway's controller down, a Backend whose endpoint changed kept the
    Accepted of the endpoint before, and the route said True while Envoy sent to the old one."""
    observed = applied(XR, ROUTE_INPUT, copy.deepcopy(COMPOSED), gw_required(READY_GW))
    manifest = observed["backend-vllm"]["status"]["atProvider"]["manifest"]
    manifest["metadata"]["generation"] = float(generation)  # as protobuf hands numbers over
    accepted = next(c for c in manifest["status"]["conditions"] if c["type"] == "Accepted")
    if judged is not None:
        accepted["observedGeneration"] = float(judged)
    got = said(compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW), now=CLOCK), "RoutingReady")
    assert (got.ready, got.reason) == (reason is RoutingReason.AVAILABLE, reason), got.message
    if reason is RoutingReason.BACKEND_NOT_ACCEPTED:
        assert "the Accepted of backend-vllm is of an older generation" in got.message


def test_the_traffic_policy_targets_the_httproute_named_after_the_route() -> None:
    """Envoy AI Gateway names the HTTPRoute it makes after the AIGatewayRoute; a policy aimed elsewhere does nothing."""
    got = compose(XR, ROUTE_INPUT, {}, gw_required(READY_GW)).resources
    route = got["route"]["spec"]["forProvider"]["manifest"]["metadata"]
    policy = got["traffic-policy"]["spec"]["forProvider"]["manifest"]
    assert policy["metadata"] == route
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["name"]}
    ]


LOADING_CASES = [
    ("a route accepted 3 s ago is not served yet by the ext-proc", "route", 3, RoutingReason.CONFIG_LOADING),
    (
        "a backend accepted 3 s ago is not served yet by the ext-proc",
        "service-backend-vllm",
        3,
        RoutingReason.CONFIG_LOADING,
    ),
    ("a route accepted 13 s ago is still loading", "route", 13, RoutingReason.CONFIG_LOADING),
    (
        "a route accepted 16 s ago is still loading: Envoy has answered 503 until 15.7 s after a write",
        "route",
        16,
        RoutingReason.CONFIG_LOADING,
    ),
    ("a route accepted 20 s ago is served", "route", 20, RoutingReason.AVAILABLE),
    ("a stamp a few seconds ahead of our clock still holds", "route", -10, RoutingReason.CONFIG_LOADING),
    (
        "a Backend accepted 3 s ago, after its route's configuration loaded, holds True back",
        "backend-vllm",
        3,
        RoutingReason.CONFIG_LOADING,
    ),
    ("a Backend accepted 20 s ago holds nothing", "backend-vllm", 20, RoutingReason.AVAILABLE),
]


@pytest.mark.parametrize(
    ("name", "target", "ago", "reason"), LOADING_CASES, ids=[c[0] for c in LOADING_CASES]
)
def test_routing_ready_waits_for_the_ext_proc_to_load_the_route(
    name: str, target: str, ago: float, reason: RoutingReason
) -> None:
    """Measured on the real data plane: 500 "unknown backend" until 8-9 s after Accepted."""
    rsp = compose(XR, ROUTE_INPUT, accepted_ago(target, ago), gw_required(READY_GW), now=CLOCK)
    got = said(rsp, "RoutingReady")
    assert got.reason == reason, name
    next_call = rsp.next_call()
    assert next_call is not None
    ttl = next_call.total_seconds()
    if reason is RoutingReason.CONFIG_LOADING:
        assert got.ready is False
        assert written_at(ago) in got.message, (name, got.message)
        assert "ext-proc load it within 18 s" in got.message
        # The same message a second later: one that changed each call would be a status write each
        # call, and each write calls the route again (a loop for the whole hold).
        later = compose(
            XR,
            ROUTE_INPUT,
            accepted_ago(target, ago),
            gw_required(READY_GW),
            now=CLOCK + timedelta(seconds=1),
        )
        if said(later, "RoutingReady").reason is RoutingReason.CONFIG_LOADING:
            assert said(later, "RoutingReady").message == got.message
        # Called again one second after the bound has passed, not a poll later.
        assert ttl == min(15, 18 - ago + 1), (name, ttl)
    else:
        assert ttl == 120  # settled: the usual TTL
    # The desired state is whole either way.
    assert set(rsp.resources) == ALL_NAMES


# (case, target, when the spec was written, the managedFields entry's own fields) -> RoutingReady,
# under an Accepted stamp of 60 s ago.
SPEC_WRITTEN_CASES = [
    (
        "a route whose spec was written 3 s ago is loading: its HTTPRoute agrees, Envoy may not have it yet",
        "route",
        3,
        {},
        "CONFIG_LOADING",
    ),
    ("a backend's spec written 3 s ago is loading", "service-backend-vllm", 3, {}, "CONFIG_LOADING"),
    (
        "a Backend's spec written 3 s ago holds nothing: only its first acceptance made a new cluster",
        "backend-vllm",
        3,
        {},
        "AVAILABLE",
    ),
    ("a spec written 20 s ago whose HTTPRoute agrees has been loaded", "route", 20, {}, "AVAILABLE"),
    (
        "the controller's own status write is no spec",
        "route",
        3,
        {"subresource": "status", "fieldsV1": {"f:status": {}}},
        "AVAILABLE",
    ),
    (
        "a write of metadata alone (a finalizer) changes no configuration",
        "route",
        3,
        {"manager": "envoy-ai-gateway-controller", "fieldsV1": {"f:metadata": {"f:finalizers": {}}}},
        "AVAILABLE",
    ),
]


@pytest.mark.parametrize(
    ("name", "target", "ago", "entry", "reason"), SPEC_WRITTEN_CASES, ids=[c[0] for c in SPEC_WRITTEN_CASES]
)
def test_a_spec_written_after_its_accepted_stamp_is_still_loading(
    name: str, target: str, ago: float, entry: dict[str, Any], reason: str
) -> None:
    """Envoy AI Gateway restamps Accepted only when it reconciles: until then the stamp is of the old spec.
    Its HTTPRoute agrees with the spec here (tests/test_route_httproute.py: where it does not)."""
    observed = accepted_ago(target, 60)
    spec_written(observed, target, ago, **entry)
    made = httproute_made_of(compose(XR, ROUTE_INPUT, COMPOSED, gw_required(READY_GW)).resources)
    required = gw_required(READY_GW) | {claims.httproute_key(("team-a", "llama-648adb3a")): [made]}
    got = said(compose(XR, ROUTE_INPUT, observed, required, now=CLOCK), "RoutingReady")
    assert got.reason == RoutingReason[reason], (name, got.message)


def test_a_stamp_far_in_the_future_holds_nothing_back() -> None:
    """A controller clock ten minutes ahead cannot hold RoutingReady back for ten minutes."""
    rsp = compose(XR, ROUTE_INPUT, accepted_ago("route", -600), gw_required(READY_GW), now=CLOCK)
    assert said(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE


def test_a_first_call_cannot_keep_a_condition_it_cannot_read() -> None:
    """A condition without a reason is not kept: the call decides (GatewayNotFound), silently."""
    xr = xr_saying("True", "", "m")
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED)
    assert said(rsp, "RoutingReady").reason == RoutingReason.GATEWAY_NOT_FOUND
    assert rsp.results == []


def test_a_first_call_keeps_a_condition_without_a_message_as_it_is() -> None:
    xr = xr_saying("True", "Available", "")
    del xr["status"]["conditions"][0]["message"]
    got = said(compose(xr, ROUTE_INPUT, COMPOSED, NOT_FETCHED), "RoutingReady")
    assert (got.reason, got.message) == ("Available", "")


def test_a_traffic_policy_not_accepted_holds_nothing_back_while_the_first_level_serves() -> None:
    """Without the policy requests are still served by the first priority level: not a BackendNotAccepted."""
    observed = copy.deepcopy(COMPOSED)
    ready = next(c for c in observed["traffic-policy"]["status"]["conditions"] if c["type"] == "Ready")
    ready["status"] = "False"
    rsp = compose(XR, ROUTE_INPUT, observed, gw_required(READY_GW))
    assert said(rsp, "RoutingReady").reason == RoutingReason.AVAILABLE
    assert not rsp.ready["traffic-policy"]


ALLOWED_CASES = [
    pytest.param(
        "Same", "platform", RoutingReason.ROUTE_NOT_ALLOWED, id="Same refuses a route from another namespace"
    ),
    pytest.param(
        "Same", "team-a", RoutingReason.AVAILABLE, id="Same admits a route in the gateway's own namespace"
    ),
    pytest.param("All", "platform", RoutingReason.AVAILABLE, id="All admits a route from any namespace"),
    pytest.param(
        None, "platform", RoutingReason.AVAILABLE, id="a gateway that publishes nothing is not second-guessed"
    ),
]


@pytest.mark.parametrize(("allowed", "gateway_namespace", "reason"), ALLOWED_CASES)
def test_a_route_the_listener_refuses_says_so(
    allowed: str | None, gateway_namespace: str, reason: RoutingReason
) -> None:
    """Envoy AI Gateway says Accepted once it wrote the HTTPRoute; Envoy Gateway refuses it by allowedRoutes."""
    gw = copy.deepcopy(READY_GW)
    gw["status"]["gateway"]["namespace"] = gateway_namespace
    if allowed is None:
        gw["status"]["gateway"].pop("allowedRoutes", None)
    else:
        gw["status"]["gateway"]["allowedRoutes"] = allowed
    # The route attaches to the gateway's namespace, and has been applied there.
    observed = applied(XR, ROUTE_INPUT, COMPOSED, gw_required(gw))
    got = said(compose(XR, ROUTE_INPUT, observed, served_required(XR, gw)), "RoutingReady")
    assert got.reason == reason
    assert (got.ready) is (reason is RoutingReason.AVAILABLE)
    if reason is RoutingReason.ROUTE_NOT_ALLOWED:
        assert "allowedRoutes Same" in got.message
