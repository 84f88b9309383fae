"""The XR conditions this function sets, and their closed sets of reasons.

A reason is an API: alerts and runbooks match on it. Every reason the function
can set is a member of one of the enums below, documented in the README, and
nothing else is ever emitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from function.readiness import condition

GATEWAY_READY = "GatewayReady"
ROUTING_READY = "RoutingReady"
BACKENDS_SERVING = "BackendsServing"


class GatewayReason(StrEnum):
    # Gateway Programmed, anchor Accepted, rollout finished with the ext-proc.
    AVAILABLE = "Available"
    # The Gateway does not exist yet or is not Programmed.
    WAITING_FOR_GATEWAY = "WaitingForGateway"
    # The anchor AIGatewayRoute does not exist yet or is not Accepted.
    WAITING_FOR_ANCHOR = "WaitingForAnchor"
    # Caller auth is on and its SecurityPolicy is not Accepted (a key Secret
    # missing): Envoy Gateway answers every request with 500 until it is.
    AUTH_NOT_ACCEPTED = "AuthNotAccepted"
    # provider-kubernetes looked and found no Envoy Deployment of that name.
    DEPLOYMENT_NOT_FOUND = "DeploymentNotFound"
    # The Deployment exists and its rollout is not finished.
    ROLLING_OUT = "RollingOut"
    # The rollout is finished but the template lacks the ext-proc marker.
    EXT_PROC_NOT_INJECTED = "ExtProcNotInjected"
    # No observation of the Deployment yet (or the provider cannot observe it).
    NOT_YET_OBSERVED = "NotYetObserved"


class RoutingReason(StrEnum):
    # Route and backends Accepted and the gateway reports GatewayReady=True.
    AVAILABLE = "Available"
    # The InferenceGateway cannot be read, does not exist, or has not
    # published where routes attach.
    GATEWAY_NOT_FOUND = "GatewayNotFound"
    # The InferenceGateway exists but is not GatewayReady.
    GATEWAY_NOT_READY = "GatewayNotReady"
    # The AIGatewayRoute does not exist yet or is not Accepted.
    ROUTE_NOT_ACCEPTED = "RouteNotAccepted"
    # The gateway asks callers for a key, this route's namespace is outside that
    # caller auth, and the SecurityPolicy that opens the route is not Accepted.
    AUTH_EXEMPTION_NOT_ACCEPTED = "AuthExemptionNotAccepted"
    # An AIServiceBackend (or its Backend) does not exist yet or is not Accepted.
    BACKEND_NOT_ACCEPTED = "BackendNotAccepted"
    # No backend that would take the model's requests has a serving workload.
    BACKEND_NOT_SERVING = "BackendNotServing"


class BackendsReason(StrEnum):
    """BackendsServing: how many backends serve, so a degraded model shows while it serves."""

    # Every backend serves (one without a workloadRef counts: nothing to observe).
    ALL_SERVING = "AllServing"
    # Some serve, some do not.
    DEGRADED = "Degraded"
    # None serves.
    NONE_SERVING = "NoneServing"


@dataclass(frozen=True)
class Verdict:
    """One condition as the function decided it on this call."""

    type: str
    ready: bool
    reason: str
    message: str

    @property
    def status(self) -> str:
        return "True" if self.ready else "False"

    def changed_from(self, xr: Mapping[str, Any]) -> bool:
        """True when status or reason differ from the XR's observed condition.

        Results (events) are emitted on transitions only: a steady state
        reconciled every minute must not flood the XR with identical events.
        """
        previous = condition(xr, self.type)
        if previous is None:
            return True
        return previous.get("status") != self.status or previous.get("reason") != self.reason
