"""The BackendTrafficPolicy of a model route: retries, fallback, ejection and stream timeouts.

Envoy AI Gateway turns an AIGatewayRoute into an HTTPRoute of the same name
(its provider-fallback example targets it so); Envoy Gateway's
BackendTrafficPolicy on that HTTPRoute is where Envoy's retry policy,
passive health checking and per-route timeouts are set.

Fallback needs retries. A backend of a lower priority takes requests only
once the higher priority's endpoints are ejected or a retry moves on: with a
dead priority-0 backend and no retry policy, `make traffic` saw every other
request fail with 503 against Envoy Gateway v1.8.1 and Envoy AI Gateway
v1.0.0. `numAttemptsPerPriority: 1` sends each retry to the next priority.
"""

from __future__ import annotations

from typing import Any

from function.api import OutlierDetection, Resilience, Retry, Timeouts
from function.objects import target_ref

# Envoy's retry triggers for a request that never reached the model: safe to
# send again whatever the model would have done with it.
_NEVER_ARRIVED = ["connect-failure", "refused-stream", "reset-before-request"]


def build_traffic_policy(
    *,
    api_version: str,
    name: str,
    namespace: str,
    http_route: str,
    resilience: Resilience,
    timeouts: Timeouts,
) -> dict[str, Any]:
    """The policy for one route; each part is left out when it is turned off."""
    manifest = target_ref(api_version, "BackendTrafficPolicy", name, namespace)
    spec: dict[str, Any] = {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": http_route}],
        # Merged into a platform's Gateway- or listener-level policy (token
        # rate limits, as Envoy AI Gateway's own examples target the Gateway)
        # instead of replacing it; with none, Envoy Gateway applies this one
        # alone (v1.8.1 internal/gatewayapi/backendtrafficpolicy.go).
        "mergeType": "StrategicMerge",
        "timeout": {"http": {"streamIdleTimeout": timeouts.stream_idle}},
    }
    retry = _retry(resilience.retry)
    if retry is not None:
        spec["retry"] = retry
    passive = _passive(resilience.outlier_detection)
    if passive is not None:
        spec["healthCheck"] = {"passive": passive}
    manifest["spec"] = spec
    return manifest


def _retry(retry: Retry) -> dict[str, Any] | None:
    if retry.attempts == 0:
        return None
    on: dict[str, Any] = {"triggers": list(_NEVER_ARRIVED)}
    if retry.status_codes:
        on["triggers"].append("retriable-status-codes")
        on["httpStatusCodes"] = sorted(set(retry.status_codes))
    return {"numRetries": retry.attempts, "numAttemptsPerPriority": 1, "retryOn": on}


def _passive(outlier: OutlierDetection) -> dict[str, Any] | None:
    if outlier.consecutive_errors == 0:
        return None
    return {
        "consecutive5XxErrors": outlier.consecutive_errors,
        "consecutiveLocalOriginFailures": outlier.consecutive_errors,
        "splitExternalLocalOriginErrors": True,
        "baseEjectionTime": outlier.ejection_time,
        # Envoy Gateway's default (10%) would never eject one of two
        # backends; ejecting a whole priority is what moves its traffic on,
        # and with every endpoint ejected Envoy's panic mode still routes.
        "maxEjectionPercent": 100,
    }
