"""Secrets and ConfigMaps a backend names: upstream accepts everything, then cannot read them.

Issue #25 item 1: Envoy AI Gateway marks a BackendSecurityPolicy Accepted
without reading its Secret and then drops the backend, so requests routed to
it get 500 while every object says Accepted. RoutingReady reads the Secret
(existence and key only) as a required resource.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from crossplane.function import resource

from function import claims, serving_record
from function.conditions import BackendsReason, RoutingReason
from function.route.view import SERVING_REQUIREMENT
from tests.route_support import HTTPROUTE_KEY, gw_required
from tests.support import (
    EXAMPLES,
    ROUTE_INPUT,
    applied,
    by_resource_name,
    compose,
    load_yaml,
    make_request,
    run,
    said,
)

RT = EXAMPLES / "model-route"
XR = load_yaml(RT / "xr.yaml")[0]
READY_GW = load_yaml(RT / "required" / "ready" / "inference-gateway.yaml")[0]
COMPOSED = by_resource_name(load_yaml(RT / "observed" / "composed" / "resources.yaml"))
VALUE = "c2VjcmV0LXZhbHVlLW5ldmVyLXNob3du"  # a placeholder that must never be repeated


def _secret(
    name: str, data: dict[str, str] | None = None, string_data: dict[str, str] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "team-a"},
    }
    if data is not None:
        obj["data"] = data
    if string_data is not None:
        obj["stringData"] = string_data
    return obj


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team-a"},
        "data": data,
    }


def _hosted(**changes: Any) -> dict[str, Any]:
    """The example's XR with its hosted backend changed."""
    xr = copy.deepcopy(XR)
    hosted = xr["spec"]["backends"][1]
    for key, value in changes.items():
        if value is None:
            hosted.pop(key, None)
        else:
            hosted[key] = value
    return xr


AWS = {
    "apiKeySecretRef": None,
    "modelNameOverride": None,
    "schema": {"name": "AWSBedrock"},
    "credentials": {"aws": {"region": "us-east-1", "credentialsSecretRef": {"name": "aws-creds"}}},
}
WITH_CA = {"tls": {"caConfigMapRef": {"name": "hosted-ca"}}}

# (case, XR, fetched objects by requirement name, RoutingReady reason, what the message names)
CASES = [
    (
        "an API-key Secret holding apiKey lets the route serve",
        XR,
        {"secret-hosted-api-key": [_secret("hosted-api-key", {"apiKey": VALUE})]},
        RoutingReason.AVAILABLE,
        "",
    ),
    (
        "a missing API-key Secret says so, naming it",
        XR,
        {"secret-hosted-api-key": []},
        RoutingReason.REFERENCE_NOT_FOUND,
        "hosted: Secret team-a/hosted-api-key not found",
    ),
    (
        "an API-key Secret without the key apiKey says which key upstream reads",
        XR,
        {"secret-hosted-api-key": [_secret("hosted-api-key", {"api-key": VALUE})]},
        RoutingReason.REFERENCE_NOT_FOUND,
        "Secret team-a/hosted-api-key has no key apiKey",
    ),
    (
        "a key in stringData counts, as upstream reads it there too",
        XR,
        {"secret-hosted-api-key": [_secret("hosted-api-key", string_data={"apiKey": "k"})]},
        RoutingReason.AVAILABLE,
        "",
    ),
    (
        "a Secret Crossplane has not fetched yet is not judged",
        XR,
        {},
        RoutingReason.AVAILABLE,
        "",
    ),
    (
        "AWS credentials need the key credentials",
        _hosted(**AWS),
        {"secret-aws-creds": [_secret("aws-creds", {"config": VALUE})]},
        RoutingReason.REFERENCE_NOT_FOUND,
        "Secret team-a/aws-creds has no key credentials",
    ),
    (
        "a CA ConfigMap with ca.crt lets the route serve",
        _hosted(apiKeySecretRef=None, **WITH_CA),
        {"configmap-hosted-ca": [_config_map("hosted-ca", {"ca.crt": "PEM", "other": "x"})]},
        RoutingReason.AVAILABLE,
        "",
    ),
    (
        "a CA ConfigMap with one key of another name is read, as Envoy Gateway reads it",
        _hosted(apiKeySecretRef=None, **WITH_CA),
        {"configmap-hosted-ca": [_config_map("hosted-ca", {"bundle.pem": "PEM"})]},
        RoutingReason.AVAILABLE,
        "",
    ),
    (
        "a CA ConfigMap with several keys and no ca.crt says so",
        _hosted(apiKeySecretRef=None, **WITH_CA),
        {"configmap-hosted-ca": [_config_map("hosted-ca", {"a.pem": "PEM", "b.pem": "PEM"})]},
        RoutingReason.REFERENCE_NOT_FOUND,
        "ConfigMap team-a/hosted-ca has no key ca.crt",
    ),
    (
        "a missing CA ConfigMap says so",
        _hosted(apiKeySecretRef=None, **WITH_CA),
        {"configmap-hosted-ca": []},
        RoutingReason.REFERENCE_NOT_FOUND,
        "ConfigMap team-a/hosted-ca not found",
    ),
    (
        "a reference fetched is judged even when one before it is not fetched yet",
        _hosted(**WITH_CA),
        {"configmap-hosted-ca": []},
        RoutingReason.REFERENCE_NOT_FOUND,
        "ConfigMap team-a/hosted-ca not found",
    ),
    (
        "a backend with weight 0 takes no request, so its missing Secret holds nothing back",
        _hosted(weight=0),
        {"secret-hosted-api-key": []},
        RoutingReason.AVAILABLE,
        "",
    ),
]


@pytest.mark.parametrize(("name", "xr", "fetched", "reason", "names"), CASES, ids=[c[0] for c in CASES])
def test_routing_ready_reads_what_upstream_reads(
    name: str, xr: dict[str, Any], fetched: dict[str, Any], reason: str, names: str
) -> None:
    required = {**gw_required(READY_GW), **fetched}
    rsp = compose(xr, ROUTE_INPUT, applied(xr, ROUTE_INPUT, COMPOSED, required), required)
    got = said(rsp, "RoutingReady")
    assert got.reason == reason, (name, got.message)
    assert names in got.message, name


def test_a_backend_whose_secret_is_missing_is_not_serving() -> None:
    rsp = compose(XR, ROUTE_INPUT, COMPOSED, {**gw_required(READY_GW), "secret-hosted-api-key": []})
    got = said(rsp, "BackendsServing")
    assert (got.reason, got.message.split(";")[0]) == (
        BackendsReason.DEGRADED,
        "1 of 2 backends serving (1 without a workloadRef, counted as serving)",
    )
    assert "hosted: Secret team-a/hosted-api-key not found" in got.message


def test_each_problem_of_a_backend_is_named_in_backends_serving() -> None:
    required = {**gw_required(READY_GW), "secret-hosted-api-key": [], "configmap-hosted-ca": []}
    rsp = compose(_hosted(**WITH_CA), ROUTE_INPUT, COMPOSED, required)
    assert said(rsp, "BackendsServing").message.endswith(
        "hosted: Secret team-a/hosted-api-key not found, ConfigMap team-a/hosted-ca not found"
    )


GCP = {
    "apiKeySecretRef": None,
    "modelNameOverride": None,
    "schema": {"name": "GCPVertexAI"},
    "credentials": {
        "gcp": {"projectName": "p", "region": "us-east1", "credentialsSecretRef": {"name": "gcp-creds"}}
    },
}
AZURE = {
    "apiKeySecretRef": None,
    "modelNameOverride": None,
    "schema": {"name": "AzureOpenAI", "version": "2025-01-01-preview"},
    "credentials": {"azure": {"tenantID": "t", "clientID": "c", "clientSecretRef": {"name": "azure-app"}}},
}
# (case, the hosted backend's changes, its requirement: name, kind, object name; the key read)
REQUIRED_CASES = [
    (
        "an API key is read from its Secret's apiKey",
        {},
        ("secret-hosted-api-key", "Secret", "hosted-api-key"),
        "apiKey",
    ),
    (
        "AWS credentials are read from credentials",
        AWS,
        ("secret-aws-creds", "Secret", "aws-creds"),
        "credentials",
    ),
    (
        "GCP credentials are read from service_account.json",
        GCP,
        ("secret-gcp-creds", "Secret", "gcp-creds"),
        "service_account.json",
    ),
    (
        "an Azure app's secret is read from client-secret",
        AZURE,
        ("secret-azure-app", "Secret", "azure-app"),
        "client-secret",
    ),
]


@pytest.mark.parametrize(
    ("name", "changes", "want", "key"), REQUIRED_CASES, ids=[c[0] for c in REQUIRED_CASES]
)
def test_each_credential_is_required_and_read_at_upstream_s_key(
    name: str, changes: dict[str, Any], want: tuple[str, str, str], key: str
) -> None:
    xr = _hosted(**changes)
    rsp = compose(xr, ROUTE_INPUT, COMPOSED, gw_required(READY_GW))
    sel = rsp.requirements[want[0]]
    assert (sel.api_version, sel.kind, sel.name, sel.namespace) == ("v1", want[1], want[2], "team-a"), name
    fetched = {**gw_required(READY_GW), want[0]: [_secret(want[2], {"other": VALUE})]}
    message = said(compose(xr, ROUTE_INPUT, COMPOSED, fetched), "RoutingReady").message
    assert f"Secret team-a/{want[2]} has no key {key}" in message, name
    fetched[want[0]] = [_secret(want[2], {key: VALUE})]
    got = said(compose(xr, ROUTE_INPUT, applied(xr, ROUTE_INPUT, COMPOSED, fetched), fetched), "RoutingReady")
    assert got.reason == RoutingReason.AVAILABLE, (name, got.message)


def test_every_referenced_object_is_required_once_on_every_call() -> None:
    xr = _hosted(**WITH_CA)
    for fetched in ({}, gw_required(READY_GW)):
        rsp = compose(xr, ROUTE_INPUT, COMPOSED, fetched)
        got = {
            key: (sel.api_version, sel.kind, sel.name, sel.namespace)
            for key, sel in rsp.requirements.items()
            if key not in (claims.REQUIREMENT, claims.ROUTED_REQUIREMENT)  # by label: tests/test_claims.py
        }
        assert got == {
            SERVING_REQUIREMENT: ("v1", "ConfigMap", serving_record.record_name("inference"), "platform"),
            "secret-hosted-api-key": ("v1", "Secret", "hosted-api-key", "team-a"),
            "configmap-hosted-ca": ("v1", "ConfigMap", "hosted-ca", "team-a"),
            # Its own HTTPRoute, for what Envoy Gateway says of it (tests/test_route_httproute.py).
            HTTPROUTE_KEY: ("gateway.networking.k8s.io/v1", "HTTPRoute", "llama-648adb3a", "team-a"),
        }


def test_a_secret_s_value_goes_nowhere() -> None:
    """Not in a composed resource, a condition, an event or the status: only its key is read."""
    for data in ({"apiKey": VALUE}, {"wrong": VALUE}):
        # The whole gRPC answer, as Crossplane receives it.
        rsp = run(
            make_request(
                XR,
                ROUTE_INPUT,
                COMPOSED,
                {**gw_required(READY_GW), "secret-hosted-api-key": [_secret("hosted-api-key", data)]},
            )
        )
        dumped = json.dumps(
            {
                "desired": {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()},
                "xr": resource.struct_to_dict(rsp.desired.composite.resource),
                "conditions": [c.message for c in rsp.conditions],
                "results": [r.message for r in rsp.results],
            }
        )
        assert VALUE not in dumped
