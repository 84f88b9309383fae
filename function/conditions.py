"""The XR conditions this function sets, and their closed sets of reasons.

A reason is an API: alerts and runbooks match on it. Every reason the function
can set is a member of one of the enums below, documented in the README, and
nothing else is ever emitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from function.readiness import condition, get_path

GATEWAY_READY = "GatewayReady"
ROUTING_READY = "RoutingReady"
BACKENDS_SERVING = "BackendsServing"


class GatewayReason(StrEnum):
    # Gateway Programmed, anchor Accepted, rollout finished with the ext-proc.
    AVAILABLE = "Available"
    # The Gateway does not exist yet or is not Programmed.
    WAITING_FOR_GATEWAY = "WaitingForGateway"
    # A listener of the Gateway is not Programmed (an HTTPS listener without
    # its certificate), or not reported yet: Envoy serves nothing on it while
    # the Gateway itself says Programmed.
    LISTENER_NOT_PROGRAMMED = "ListenerNotProgrammed"
    # The anchor AIGatewayRoute does not exist yet or is not Accepted.
    WAITING_FOR_ANCHOR = "WaitingForAnchor"
    # Caller auth is on and its SecurityPolicy is not Accepted (a key Secret
    # missing), or auth was turned off and a refused policy is still there
    # (kept for the removal hold): Envoy Gateway answers every request with
    # 500 until it is Accepted, or deleted.
    AUTH_NOT_ACCEPTED = "AuthNotAccepted"
    # Envoy Gateway accepted the SecurityPolicy less than AUTH_PUSH_BOUND ago:
    # Envoy may not have its keys yet, and refuses every key until it has.
    AUTH_LOADING = "AuthLoading"
    # The ClientTrafficPolicy is not Accepted (Conflicted by an older policy on
    # the Gateway, or Invalid): Envoy keeps its 32 KiB request buffer, and AI
    # request bodies above it get 413.
    TRAFFIC_POLICY_NOT_ACCEPTED = "TrafficPolicyNotAccepted"
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
    # The gateway's listener admits routes from its own namespace only, and
    # this route is in another: Envoy Gateway refuses it (NotAllowedByListeners)
    # while Envoy AI Gateway says Accepted.
    ROUTE_NOT_ALLOWED = "RouteNotAllowed"
    # An older ModelRoute routes the same model on the same gateway: Envoy
    # serves only the oldest route's identical match.
    MODEL_CLAIMED = "ModelClaimed"
    # A Secret or ConfigMap a backend names is missing or lacks the key upstream
    # reads: every object says Accepted, and requests routed there fail (500).
    REFERENCE_NOT_FOUND = "ReferenceNotFound"
    # The AIGatewayRoute does not exist yet or is not Accepted.
    ROUTE_NOT_ACCEPTED = "RouteNotAccepted"
    # An AIServiceBackend (or its Backend) does not exist yet or is not Accepted.
    BACKEND_NOT_ACCEPTED = "BackendNotAccepted"
    # Envoy AI Gateway accepted the route within the last CONFIG_LOAD_BOUND:
    # its ext-proc may not have loaded the route's configuration yet.
    CONFIG_LOADING = "ConfigLoading"
    # No backend that would take the model's requests has a serving workload.
    BACKEND_NOT_SERVING = "BackendNotServing"
    # Every backend that would take the model's requests serves, but none has
    # the model loaded: its modelCheck probe of /v1/models does not list it.
    MODEL_NOT_LOADED = "ModelNotLoaded"


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
    # Where the answer changes on its own with time (a configuration's load bound passing): how
    # soon to be called again to say so, not a poll later. None where only an input moves it.
    recheck_in: timedelta | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # True or False: anything else is a composer's bug, not a third answer
        # to be read as falsy (mutation testing found None passing for False).
        if not isinstance(self.ready, bool):
            raise TypeError(f"{self.type}: ready must be True or False, not {self.ready!r}")

    @property
    def status(self) -> str:
        return "True" if self.ready else "False"

    def changed_from(self, xr: Mapping[str, Any]) -> bool:
        """True when status or reason differ from what the XR says was last decided.

        Results (events) are emitted on transitions only: a steady state
        reconciled every minute must not flood the XR with identical events.
        """
        previous = last_decided(xr, self.type)
        if previous is None:
            return True
        return previous.get("status") != self.status or previous.get("reason") != self.reason

    def published(self) -> dict[str, Any]:
        """The verdict as `status.serving`: what the XR's condition says, written back stale far
        more rarely than the condition (docs/operations.md, "Conditions that move backwards")."""
        return {"ready": self.ready, "reason": self.reason, "message": self.message}


# The status field that mirrors an XR's main condition (GatewayReady or
# RoutingReady). Crossplane server-side-applies the conditions it read from its
# cache at the start of a reconcile before it sets the function's, so a
# condition could move backwards for a while (crossplane/crossplane#7062, read
# in v2.4.0 `composition_functions.go` and measured at 100 routes, issue #32)
# until the answer was made conditional on the XR's version (outcome.py).
# What was last decided is read from here; routes read their gateway's here.
SERVING = "serving"
_MIRRORED = frozenset({GATEWAY_READY, ROUTING_READY})


def last_decided(xr: Mapping[str, Any] | None, condition_type: str) -> Mapping[str, Any] | None:
    """The XR's condition of that type as the function last decided it, shaped as a condition.

    From `status.serving` for the main condition, which Crossplane writes back
    stale far more rarely than the condition; from the condition itself for any other type and
    for an XR an older version composed, which has no `status.serving` yet.
    """
    serving = get_path(xr, "status", SERVING) if condition_type in _MIRRORED else None
    if (
        isinstance(serving, Mapping)
        and isinstance(serving.get("ready"), bool)
        and isinstance(serving.get("reason"), str)
        and serving["reason"]
    ):
        return {
            "type": condition_type,
            "status": "True" if serving["ready"] else "False",
            "reason": serving["reason"],
            "message": str(serving.get("message") or ""),
        }
    return condition(xr, condition_type)


def as_observed(xr: Mapping[str, Any], decided: Verdict) -> Verdict:
    """The XR's condition of decided's type as last decided, unchanged; decided where there is none.

    For a call that cannot judge the condition: it says again what the last
    judging call said, so it neither moves the condition nor counts as a transition.
    """
    previous = last_decided(xr, decided.type)
    if previous is None or previous.get("status") not in ("True", "False"):
        return decided
    reason = previous.get("reason")
    if not isinstance(reason, str) or not reason:
        return decided
    return Verdict(decided.type, previous["status"] == "True", reason, str(previous.get("message") or ""))


def event(verdict: Verdict) -> tuple[str, str, str]:
    """(severity, reason, message) of the event for a condition this call changes: what `kubectl
    describe` shows. A condition that stays as the XR has it says nothing (Outcome.announce), so a
    settled XR called every TTL logs no transition it did not decide."""
    return ("Normal" if verdict.ready else "Warning", verdict.reason, f"{verdict.type}: {verdict.message}")
