"""The route's BackendTrafficPolicy: what each resilience setting becomes, and how each turns off."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from function.api import ModelRouteSpec
from function.resilience import build_traffic_policy

BASE = {
    "gatewayRef": {"name": "inference"},
    "backends": [{"name": "b", "endpoint": {"ip": "10.0.0.1", "port": 80}}],
}
DEFAULT_RETRY = {
    "numRetries": 2,
    "numAttemptsPerPriority": 1,
    "retryOn": {
        "triggers": ["connect-failure", "refused-stream", "reset-before-request", "retriable-status-codes"],
        "httpStatusCodes": [502, 503, 504],
    },
}
DEFAULT_PASSIVE = {
    "consecutive5XxErrors": 5,
    "consecutiveLocalOriginFailures": 5,
    "splitExternalLocalOriginErrors": True,
    "baseEjectionTime": "30s",
    "maxEjectionPercent": 100,
}


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    want: dict[str, Any]  # the policy's spec less targetRefs


CASES = [
    Case(
        "by default it retries twice, each on the next priority, ejects after 5 errors, and cuts a stream idle for 5 minutes",
        {},
        {
            "retry": DEFAULT_RETRY,
            "healthCheck": {"passive": DEFAULT_PASSIVE},
            "timeout": {"http": {"streamIdleTimeout": "300s"}},
        },
    ),
    Case(
        "zero attempts leaves retrying out",
        {"resilience": {"retry": {"attempts": 0}}},
        {"healthCheck": {"passive": DEFAULT_PASSIVE}, "timeout": {"http": {"streamIdleTimeout": "300s"}}},
    ),
    Case(
        "zero consecutive errors leaves ejection out",
        {"resilience": {"outlierDetection": {"consecutiveErrors": 0}}},
        {"retry": DEFAULT_RETRY, "timeout": {"http": {"streamIdleTimeout": "300s"}}},
    ),
    Case(
        "no status codes retries connection failures only",
        {"resilience": {"retry": {"attempts": 1, "statusCodes": []}}},
        {
            "retry": {
                "numRetries": 1,
                "numAttemptsPerPriority": 1,
                "retryOn": {"triggers": ["connect-failure", "refused-stream", "reset-before-request"]},
            },
            "healthCheck": {"passive": DEFAULT_PASSIVE},
            "timeout": {"http": {"streamIdleTimeout": "300s"}},
        },
    ),
    Case(
        "status codes are sorted and given once",
        {
            "resilience": {
                "retry": {"statusCodes": [503, 500, 503]},
                "outlierDetection": {"consecutiveErrors": 2, "ejectionTime": "1m"},
            }
        },
        {
            "retry": DEFAULT_RETRY | {"retryOn": DEFAULT_RETRY["retryOn"] | {"httpStatusCodes": [500, 503]}},
            "healthCheck": {
                "passive": DEFAULT_PASSIVE
                | {"consecutive5XxErrors": 2, "consecutiveLocalOriginFailures": 2, "baseEjectionTime": "1m"}
            },
            "timeout": {"http": {"streamIdleTimeout": "300s"}},
        },
    ),
    Case(
        "a stream idle timeout of 0s turns it off, as Envoy reads 0",
        {"timeouts": {"streamIdle": "0s"}},
        {
            "retry": DEFAULT_RETRY,
            "healthCheck": {"passive": DEFAULT_PASSIVE},
            "timeout": {"http": {"streamIdleTimeout": "0s"}},
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_setting_becomes_its_policy(case: Case) -> None:
    spec = ModelRouteSpec.model_validate(BASE | case.spec)
    got = build_traffic_policy(
        api_version="gateway.envoyproxy.io/v1alpha1",
        name="llama-1",
        namespace="team-a",
        http_route="llama-1",
        resilience=spec.resilience,
        timeouts=spec.timeouts,
    )
    assert got["kind"] == "BackendTrafficPolicy"
    assert got["metadata"] == {"name": "llama-1", "namespace": "team-a"}
    # The HTTPRoute Envoy AI Gateway generates from the AIGatewayRoute, by its name.
    assert got["spec"].pop("targetRefs") == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llama-1"}
    ]
    # Merged into a platform's Gateway-level policy, never replacing it.
    assert got["spec"].pop("mergeType") == "StrategicMerge"
    assert got["spec"] == case.want
