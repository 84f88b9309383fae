"""The InferenceGateway composition: builders, GatewayReady in every observed state."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from function import gateway, readiness, serving_record
from function.api import InferenceGatewaySpec, Input, Listener
from function.cel import policy_accepted_query
from function.conditions import GatewayReason
from function.gateway import POLICY_OBJECT_REQUIREMENT
from function.gateway.anchor import build_anchor
from function.gateway.plan import (
    ANCHOR,
    CLIENT_TRAFFIC_POLICY,
    ENVOY_PROXY,
    ENVOY_SERVICE,
    GATEWAY,
    HTTPS_REDIRECT,
    OBSERVER,
    SECURITY_POLICY,
    SERVING_RECORD,
    GatewayPlan,
)
from function.gateway.verdict import (
    AUTH_REMOVAL_BOUND,
    AUTH_REMOVAL_HOLD,
    AUTH_REMOVAL_RECHECK,
    auth_policy_held,
    auth_removed_in,
    caller_auth,
    client_port,
    listener_url,
)
from function.naming import pinned_deployment_name, unique_name
from function.outcome import WAITING_TTL, Outcome
from tests.support import (
    CLOCK,
    EXAMPLES,
    GATEWAY_INPUT,
    applied,
    by_resource_name,
    compose,
    controller_reference,
    load_yaml,
    make_request,
    refused,
    run,
    said,
    stamp_ago,
)

XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
# The same XR after it was last ready: its status names the template it settled on.
XR_SETTLED = load_yaml(EXAMPLES / "inference-gateway" / "xr-settled.yaml")[0]
ALL_NAMES = {ANCHOR, CLIENT_TRAFFIC_POLICY, ENVOY_PROXY, GATEWAY, OBSERVER, SERVING_RECORD}


def observed_state(name: str) -> dict[str, dict[str, Any]]:
    return by_resource_name(load_yaml(EXAMPLES / "inference-gateway" / "observed" / f"{name}.yaml"))


def plan(spec: dict[str, Any] | None = None, inp: dict[str, Any] | None = None) -> GatewayPlan:
    return GatewayPlan(
        xr_name="inference",
        xr_namespace="platform",
        spec=InferenceGatewaySpec.model_validate(spec or {}),
        inp=Input.model_validate(inp or GATEWAY_INPUT),
    )


# --- builders ----------------------------------------------------------------------


@dataclass(frozen=True)
class BuilderCase:
    name: str
    spec: dict[str, Any]
    path: tuple[str | int, ...]
    want: Any
    build: str = "envoy_proxy"


def dig(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        obj = obj[step] if isinstance(step, int) or step in obj else "<absent>"
        if obj == "<absent>":
            return obj
    return obj


BUILDER_CASES = [
    BuilderCase(
        "Pinned mode pins the Deployment name in the EnvoyProxy",
        {},
        ("spec", "provider", "kubernetes", "envoyDeployment", "name"),
        pinned_deployment_name("platform", "inference"),
    ),
    BuilderCase(
        "Generated mode leaves the Deployment name to Envoy Gateway",
        {"envoy": {"deploymentNaming": "Generated"}},
        ("spec", "provider", "kubernetes", "envoyDeployment", "name"),
        "<absent>",
    ),
    BuilderCase(
        "replicas go to the EnvoyProxy",
        {"envoy": {"replicas": 3}},
        ("spec", "provider", "kubernetes", "envoyDeployment", "replicas"),
        3,
    ),
    BuilderCase(
        "a maxUnavailable PDB goes to the EnvoyProxy",
        {"envoy": {"podDisruptionBudget": {"maxUnavailable": 1}}},
        ("spec", "provider", "kubernetes", "envoyPDB"),
        {"maxUnavailable": 1},
    ),
    BuilderCase(
        "by default the replicas spread across nodes where they can, selected by the gateway's own labels",
        {},
        ("spec", "provider", "kubernetes", "envoyDeployment", "pod", "topologySpreadConstraints"),
        [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {
                    "matchLabels": {
                        "gateway.envoyproxy.io/owning-gateway-name": "inference",
                        "gateway.envoyproxy.io/owning-gateway-namespace": "platform",
                    }
                },
            }
        ],
    ),
    BuilderCase(
        "a Required spread never shares a zone",
        {"envoy": {"spread": {"policy": "Required", "topologyKey": "topology.kubernetes.io/zone"}}},
        ("spec", "provider", "kubernetes", "envoyDeployment", "pod", "topologySpreadConstraints", 0),
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {
                "matchLabels": {
                    "gateway.envoyproxy.io/owning-gateway-name": "inference",
                    "gateway.envoyproxy.io/owning-gateway-namespace": "platform",
                }
            },
        },
    ),
    BuilderCase(
        "spread None leaves the pod spec to Envoy Gateway",
        {"envoy": {"spread": {"policy": "None"}}},
        ("spec", "provider", "kubernetes", "envoyDeployment", "pod"),
        "<absent>",
    ),
    BuilderCase(
        "by default Envoy Gateway's own access log is left alone",
        {},
        ("spec", "telemetry"),
        "<absent>",
    ),
    BuilderCase(
        "the model-and-tokens access log writes one JSON line per request to stdout",
        {"envoy": {"accessLog": {"modelAndTokens": True}}},
        ("spec", "telemetry", "accessLog", "settings", 0, "sinks"),
        [{"type": "File", "file": {"path": "/dev/stdout"}}],
    ),
    BuilderCase(
        "the model-and-tokens access log reads the model header and the recorded token metadata",
        {"envoy": {"accessLog": {"modelAndTokens": True}}},
        ("spec", "telemetry", "accessLog", "settings", 0, "format", "json", "llm_total_token"),
        "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%",
    ),
    BuilderCase(
        "by default Envoy drains for two minutes, at least ten seconds",
        {},
        ("spec", "shutdown"),
        {"drainTimeout": "120s", "minDrainDuration": "10s"},
    ),
    BuilderCase(
        "the drain times go to the EnvoyProxy",
        {"envoy": {"shutdown": {"drainTimeout": "15m", "minDrainDuration": "0s"}}},
        ("spec", "shutdown"),
        {"drainTimeout": "15m", "minDrainDuration": "0s"},
    ),
    BuilderCase(
        "the EnvoyProxy lives in the gateway namespace",
        {"namespace": "ai-gateways"},
        ("metadata", "namespace"),
        "ai-gateways",
    ),
    BuilderCase(
        "the Gateway points at its EnvoyProxy",
        {},
        ("spec", "infrastructure", "parametersRef"),
        {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": "inference"},
        "gateway",
    ),
    BuilderCase(
        "the Gateway carries its class",
        {"gatewayClassName": "eg"},
        ("spec", "gatewayClassName"),
        "eg",
        "gateway",
    ),
    BuilderCase(
        "an HTTPS listener terminates TLS with its certificate refs",
        {
            "listeners": [
                {
                    "name": "https",
                    "protocol": "HTTPS",
                    "port": 443,
                    "tls": {"certificateRefs": [{"name": "cert", "namespace": "certs"}]},
                }
            ]
        },
        ("spec", "listeners", 0, "tls"),
        {
            "mode": "Terminate",
            "certificateRefs": [{"group": "", "kind": "Secret", "name": "cert", "namespace": "certs"}],
        },
        "gateway",
    ),
    BuilderCase(
        "listeners admit routes from all namespaces by default",
        {},
        ("spec", "listeners", 0, "allowedRoutes"),
        {"namespaces": {"from": "All"}},
        "gateway",
    ),
    BuilderCase(
        "the anchor attaches to the Gateway",
        {},
        ("spec", "parentRefs"),
        [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"}],
        "anchor",
    ),
    BuilderCase("the anchor has no backends", {}, ("spec", "rules", 0, "backendRefs"), "<absent>", "anchor"),
    BuilderCase(
        "the anchor's one match is exact on the anchor header",
        {},
        ("spec", "rules", 0, "matches", 0, "headers", 0, "name"),
        "x-gateway-readiness-anchor",
        "anchor",
    ),
    BuilderCase(
        "the observer names only the Deployment",
        {},
        (),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": pinned_deployment_name("platform", "inference"),
                "namespace": "envoy-gateway-system",
            },
        },
        "observer_target",
    ),
    BuilderCase(
        "the observer follows GatewayNamespace mode with Envoy Gateway's own name",
        {"envoy": {"deployMode": "GatewayNamespace", "deploymentNaming": "Generated"}},
        ("metadata",),
        {"name": "inference", "namespace": "platform"},
        "observer_target",
    ),
    BuilderCase(
        "a pinned name in GatewayNamespace mode is observed in the Gateway's namespace",
        {"envoy": {"deployMode": "GatewayNamespace"}},
        ("metadata",),
        {"name": pinned_deployment_name("platform", "inference"), "namespace": "platform"},
        "observer_target",
    ),
    BuilderCase(
        "a gateway placed in another namespace carries its XR namespace and a hash in its name",
        {"namespace": "ai"},
        ("metadata",),
        {"name": unique_name("platform", "inference", identity=("Gateway",)), "namespace": "ai"},
        "gateway",
    ),
    BuilderCase(
        "the Envoy Service is a LoadBalancer by default",
        {},
        ("spec", "provider", "kubernetes", "envoyService"),
        {"type": "LoadBalancer"},
    ),
    BuilderCase(
        "the Envoy Service type is configurable for clusters without a load balancer",
        {"envoy": {"serviceType": "ClusterIP"}},
        ("spec", "provider", "kubernetes", "envoyService"),
        {"type": "ClusterIP"},
    ),
    BuilderCase(
        "the ClientTrafficPolicy raises the request buffer to 50Mi by default (upstream examples/basic)",
        {},
        ("spec", "connection", "bufferLimit"),
        "50Mi",
        "client_traffic_policy",
    ),
    BuilderCase(
        "the request buffer limit is configurable",
        {"requestBufferLimit": "8Mi"},
        ("spec", "connection", "bufferLimit"),
        "8Mi",
        "client_traffic_policy",
    ),
    BuilderCase(
        "the ClientTrafficPolicy targets the gateway's Gateway",
        {},
        ("spec", "targetRefs"),
        [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"}],
        "client_traffic_policy",
    ),
]


@pytest.mark.parametrize("case", BUILDER_CASES, ids=lambda c: c.name)
def test_builders(case: BuilderCase) -> None:
    manifest = getattr(gateway, f"build_{case.build}")(plan(case.spec))
    assert dig(manifest, case.path) == case.want


def test_the_anchor_never_matches_the_model_header() -> None:
    anchor = build_anchor(plan())
    headers = [h for rule in anchor["spec"]["rules"] for m in rule["matches"] for h in m["headers"]]
    assert headers
    assert all(h["name"] != "x-ai-eg-model" for h in headers)
    assert all(h["type"] == "Exact" for h in headers)


def test_the_observer_is_observe_only_and_watched() -> None:
    observer = gateway.build_objects(plan())[OBSERVER]
    assert observer["spec"]["managementPolicies"] == ["Observe"]
    assert observer["spec"]["watch"] is True
    assert observer["spec"]["readiness"]["policy"] == "DeriveFromCelQuery"


# --- the composer in every observed state -------------------------------------------


def with_observer(state: str, mutate: Any) -> dict[str, dict[str, Any]]:
    observed = copy.deepcopy(observed_state(state))
    mutate(observed[OBSERVER])
    return observed


def _unsynced(obj: dict[str, Any]) -> None:
    obj["status"] = {
        "conditions": [
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "cannot get object: forbidden",
            }
        ]
    }


def with_resource(state: str, name: str, mutate: Any) -> dict[str, dict[str, Any]]:
    observed = copy.deepcopy(observed_state(state))
    mutate(observed[name])
    return observed


def _set_synced(obj: dict[str, Any], message: str) -> None:
    for c in obj["status"]["conditions"]:
        if c["type"] == "Synced":
            c.update(status="False", reason="ReconcileError", message=message)


def _target_gone(obj: dict[str, Any]) -> None:
    _set_synced(obj, "observe failed: external resource does not exist")


def _retargeted(obj: dict[str, Any]) -> None:
    """What the observer reports right after the gateway's Deployment name changed: the old one's."""
    obj["status"]["atProvider"]["manifest"]["metadata"]["name"] = "envoy-platform-inference-0123abcd"


def _unread(obj: dict[str, Any]) -> None:
    """provider-kubernetes v1.2.1 after its GET of the target failed: Ready and the manifest as before."""
    _set_synced(
        obj,
        'observe failed: cannot get object: deployments.apps "envoy-platform-inference" is forbidden: '
        'User "system:serviceaccount:crossplane-system:provider-kubernetes" cannot get resource "deployments"',
    )


def _unconnected(obj: dict[str, Any]) -> None:
    _set_synced(
        obj,
        'connect failed: cannot get provider config: ProviderConfig.kubernetes.m.crossplane.io "default" not found',
    )


def _paused(obj: dict[str, Any]) -> None:
    for c in obj["status"]["conditions"]:
        if c["type"] == "Synced":
            c.update(status="False", reason="ReconcilePaused", message="Reconciliation is paused")


def _forbidden_dry_run(obj: dict[str, Any]) -> None:
    _set_synced(
        obj,
        # provider-kubernetes v1.2.1: the SSA dry run in GetDesiredState, after setAtProvider.
        "observe failed: cannot get desired state: cannot dry run SSA: deployments.apps "
        '"envoy-platform-inference" is forbidden: User cannot patch resource deployments',
    )


def _no_terminating_field(obj: dict[str, Any]) -> None:
    obj["status"]["atProvider"]["manifest"]["status"].pop("terminatingReplicas", None)


def _not_ready_yet(obj: dict[str, Any]) -> None:
    obj["status"]["conditions"][0]["status"] = "False"


def _gateway_not_programmed(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    observed = copy.deepcopy(observed)
    observed[GATEWAY]["status"]["conditions"][0]["status"] = "False"
    return observed


def _listeners(
    observed: dict[str, dict[str, Any]], reported: list[dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """The ready state with the Gateway's status.listeners replaced (None: not reported at all)."""
    observed = copy.deepcopy(observed)
    status = observed[GATEWAY]["status"]["atProvider"]["manifest"]["status"]
    if reported is None:
        status.pop("listeners")
    else:
        status["listeners"] = reported
    return observed


_NO_CERT = {
    "name": "http",
    "conditions": [
        {"type": "Programmed", "status": "False", "reason": "Invalid", "message": "Bad TLS configuration"},
        {"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef"},
    ],
}


def with_ready_false(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["status"]["conditions"][0]["status"] = "False"
    return obj


def _traffic_policy_status(
    observed: dict[str, dict[str, Any]], ancestors: list[dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """The ready state with the ClientTrafficPolicy not Ready and its ancestors replaced (None: no status)."""
    observed = copy.deepcopy(observed)
    policy = observed[CLIENT_TRAFFIC_POLICY]
    policy["status"]["conditions"][0]["status"] = "False"
    manifest = policy["status"]["atProvider"]["manifest"]
    if ancestors is None:
        manifest.pop("status")
    else:
        manifest["status"] = {"ancestors": ancestors}
    return observed


def _traffic_policy_conflicted(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ready state with the ClientTrafficPolicy Conflicted, as Envoy Gateway marks the younger of two."""
    observed = copy.deepcopy(observed)
    policy = observed[CLIENT_TRAFFIC_POLICY]
    policy["status"]["conditions"][0]["status"] = "False"
    accepted = policy["status"]["atProvider"]["manifest"]["status"]["ancestors"][0]["conditions"][0]
    accepted |= {"status": "False", "reason": "Conflicted", "message": "an older policy targets the Gateway"}
    return observed


@dataclass(frozen=True)
class ComposeCase:
    name: str
    observed: dict[str, dict[str, Any]]
    reason: GatewayReason
    ready: bool
    message_has: str = ""
    xr: dict[str, Any] = field(default_factory=lambda: XR)


# An HTTPS listener beside the http one that model routes attach to.
TWO_LISTENERS_XR = {
    **XR,
    "spec": {
        **XR["spec"],
        "listeners": [
            {"name": "http"},
            {
                "name": "https",
                "protocol": "HTTPS",
                "port": 443,
                "tls": {"certificateRefs": [{"name": "gw-tls"}]},
            },
        ],
    },
}


COMPOSE_CASES = [
    ComposeCase(
        "a gateway just created waits for its Gateway",
        {},
        GatewayReason.WAITING_FOR_GATEWAY,
        False,
        "has not been created yet",
    ),
    ComposeCase(
        "a Gateway not Programmed is waited for",
        _gateway_not_programmed(observed_state("ready")),
        GatewayReason.WAITING_FOR_GATEWAY,
        False,
        "is not Programmed",
    ),
    ComposeCase(
        "a listener Programmed=False under a Programmed Gateway serves nothing",
        _listeners(observed_state("ready"), [_NO_CERT]),
        GatewayReason.LISTENER_NOT_PROGRAMMED,
        False,
        "listener http is not Programmed (Invalid: Bad TLS configuration)",
    ),
    ComposeCase(
        "a listener without a Programmed condition serves nothing",
        _listeners(observed_state("ready"), [{"name": "http", "conditions": []}]),
        GatewayReason.LISTENER_NOT_PROGRAMMED,
        False,
        "listener http is not Programmed: Envoy serves nothing on it",
    ),
    ComposeCase(
        "a Gateway that reports no listeners yet is not taken as serving",
        _listeners(observed_state("ready"), None),
        GatewayReason.LISTENER_NOT_PROGRAMMED,
        False,
        "has not reported listener http yet",
    ),
    ComposeCase(
        "only the listener the spec declares counts, another one reported is not asked for",
        _listeners(observed_state("ready"), [{**_NO_CERT, "name": "other"}]),
        GatewayReason.LISTENER_NOT_PROGRAMMED,
        False,
        "has not reported listener http yet",
    ),
    ComposeCase(
        "a broken second listener carries no model route and leaves the gateway Available",
        _listeners(
            applied(TWO_LISTENERS_XR, GATEWAY_INPUT, observed_state("ready"), {}),
            [
                {"name": "http", "conditions": [{"type": "Programmed", "status": "True"}]},
                {**_NO_CERT, "name": "https"},
            ],
        ),
        GatewayReason.AVAILABLE,
        True,
        xr=TWO_LISTENERS_XR,
    ),
    ComposeCase(
        "a ClientTrafficPolicy Conflicted leaves Envoy's 32 KiB buffer, and says why",
        _traffic_policy_conflicted(observed_state("ready")),
        GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
        False,
        "is not Accepted (Conflicted: an older policy targets the Gateway): Envoy keeps its 32 KiB",
    ),
    ComposeCase(
        "a ClientTrafficPolicy not yet observed is waited for",
        {k: v for k, v in observed_state("ready").items() if k != CLIENT_TRAFFIC_POLICY},
        GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
        False,
        "the ClientTrafficPolicy of Gateway platform/inference has not been created yet: Envoy keeps",
    ),
    ComposeCase(
        "a ClientTrafficPolicy without any ancestor status is not Accepted, and says no reason",
        _traffic_policy_status(observed_state("ready"), None),
        GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
        False,
        "the ClientTrafficPolicy of Gateway platform/inference is not Accepted: Envoy keeps",
    ),
    ComposeCase(
        "a ClientTrafficPolicy refused by two ancestors gives both reasons, in order",
        _traffic_policy_status(
            observed_state("ready"),
            [
                {
                    "conditions": [
                        {"type": "Accepted", "status": "False", "reason": "Invalid", "message": "b"}
                    ]
                },
                {
                    "conditions": [
                        {"type": "Accepted", "status": "False", "reason": "Conflicted", "message": "a"}
                    ]
                },
                {
                    "conditions": [
                        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "c"}
                    ]
                },
            ],
        ),
        GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
        False,
        "is not Accepted (Conflicted: a; Invalid: b): Envoy keeps",
    ),
    ComposeCase(
        "a ClientTrafficPolicy the provider says is not Ready is not taken as Accepted",
        {
            **observed_state("ready"),
            CLIENT_TRAFFIC_POLICY: with_ready_false(observed_state("ready")[CLIENT_TRAFFIC_POLICY]),
        },
        GatewayReason.TRAFFIC_POLICY_NOT_ACCEPTED,
        False,
        "is not Accepted: Envoy keeps",
    ),
    ComposeCase(
        "an anchor not yet observed is waited for",
        {k: v for k, v in observed_state("ready").items() if k != ANCHOR},
        GatewayReason.WAITING_FOR_ANCHOR,
        False,
    ),
    ComposeCase(
        "a missing Deployment is reported as not found",
        observed_state("deployment-not-found"),
        GatewayReason.DEPLOYMENT_NOT_FOUND,
        False,
        "deploymentNaming",
    ),
    ComposeCase(
        "an old-template pod still running is a rollout",
        observed_state("rolling-out"),
        GatewayReason.ROLLING_OUT,
        False,
        "1 of 3 pods run the current template",
    ),
    ComposeCase(
        "one of two pods drained stays ready under AtLeastOne",
        observed_state("one-of-two-drained"),
        GatewayReason.AVAILABLE,
        True,
        "1 available of 2 desired",
    ),
    ComposeCase(
        "a finished rollout without the marker lacks the ext-proc",
        observed_state("marker-missing"),
        GatewayReason.EXT_PROC_NOT_INJECTED,
        False,
        "extproc-config-hash",
    ),
    ComposeCase(
        "everything in effect is ready",
        observed_state("ready"),
        GatewayReason.AVAILABLE,
        True,
        "2 updated, 2 available of 2 desired",
    ),
    ComposeCase(
        "an observer the provider cannot read is not yet observed",
        with_observer("ready", _unsynced),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "forbidden",
    ),
    ComposeCase(
        "an observer whose last read failed (RBAC revoked) is not current, whatever its earlier Ready says",
        with_observer("ready", _unread),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "so its last observation is not current",
    ),
    ComposeCase(
        "an observer the provider cannot connect for is not current, whatever its earlier Ready says",
        with_observer("ready", _unconnected),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "ProviderConfig",
    ),
    ComposeCase(
        "a Gateway the provider cannot read now is not current, whatever its earlier Ready says",
        with_resource("ready", GATEWAY, _unread),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "cannot read the Gateway of Gateway platform/inference now, so its last status is not current: "
        "observe failed: cannot get object",
    ),
    ComposeCase(
        "an anchor the provider cannot read now is not current, whatever its earlier Ready says",
        with_resource("ready", ANCHOR, _unread),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "cannot read the anchor AIGatewayRoute of",
    ),
    ComposeCase(
        "a ClientTrafficPolicy the provider cannot read now is not current, whatever its earlier Ready says",
        with_resource("ready", CLIENT_TRAFFIC_POLICY, _unread),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "cannot read the ClientTrafficPolicy of",
    ),
    ComposeCase(
        "a failure after a fresh read of the Gateway (it cannot get connection details) leaves that read",
        with_resource(
            "ready", GATEWAY, lambda o: _set_synced(o, "observe failed: cannot get connection details")
        ),
        GatewayReason.AVAILABLE,
        True,
    ),
    ComposeCase(
        "a rollout that looks finished waits for the provider's own verdict",
        with_observer("ready", _not_ready_yet),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "waiting for provider-kubernetes",
    ),
    ComposeCase(
        "the observer created but never read is not yet observed",
        with_observer("ready", lambda o: o.pop("status")),
        GatewayReason.NOT_YET_OBSERVED,
        False,
    ),
    ComposeCase(
        "a Deployment deleted after it was observed is not found, whatever its stale manifest and Ready "
        "say (provider-kubernetes keeps both and sets only Synced=False)",
        observed_state("deployment-gone"),
        GatewayReason.DEPLOYMENT_NOT_FOUND,
        False,
        "does not exist",
    ),
    ComposeCase(
        "a Gateway deleted out of band is waited for, whatever its stale Ready says",
        with_resource("ready", GATEWAY, _target_gone),
        GatewayReason.WAITING_FOR_GATEWAY,
        False,
    ),
    ComposeCase(
        "an anchor deleted out of band is waited for, whatever its stale Ready says",
        with_resource("ready", ANCHOR, _target_gone),
        GatewayReason.WAITING_FOR_ANCHOR,
        False,
    ),
    ComposeCase(
        "a dry-run the provider may not make (provider-kubernetes >= v1.2.0 without patch) leaves "
        "readiness computed on a fresh observation",
        with_observer("ready", _forbidden_dry_run),
        GatewayReason.AVAILABLE,
        True,
    ),
    ComposeCase(
        "old pods still terminating after a template change keep the gateway rolling out "
        "(status.replicas leaves terminating pods out; terminatingReplicas counts them)",
        observed_state("old-pods-terminating"),
        GatewayReason.ROLLING_OUT,
        False,
        "2 terminating pods may still run a previous template",
        xr=XR_SETTLED,
    ),
    ComposeCase(
        "a drained pod of the template the gateway settled on leaves it ready: the other pod serves",
        observed_state("current-pod-draining"),
        GatewayReason.AVAILABLE,
        True,
        "1 available of 2 desired",
        xr=XR_SETTLED,
    ),
    ComposeCase(
        "a terminating pod with no settled template is taken for an old one (the safe side)",
        observed_state("current-pod-draining"),
        GatewayReason.ROLLING_OUT,
        False,
        "1 terminating pods",
    ),
    ComposeCase(
        "an anchor whose reconciliation is paused is not in effect: nothing keeps its Ready current "
        "(found on the real stack: a paused anchor was deleted and still read Ready)",
        with_resource("ready", ANCHOR, _paused),
        GatewayReason.WAITING_FOR_ANCHOR,
        False,
    ),
    ComposeCase(
        "an observer still reporting the Deployment it watched before (deploymentNaming changed) has not "
        "observed the gateway's Deployment yet, whatever the old one's Ready says (found in review)",
        with_observer("ready", _retargeted),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "the observer still reports envoy-gateway-system/envoy-platform-inference-0123abcd",
    ),
    ComposeCase(
        "a paused observer observes nothing",
        with_observer("ready", _paused),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "paused",
    ),
    ComposeCase(
        "a cluster that reports no terminatingReplicas (before Kubernetes 1.35) is judged on replicas",
        with_observer("ready", _no_terminating_field),
        GatewayReason.AVAILABLE,
        True,
    ),
]


@pytest.mark.parametrize("case", COMPOSE_CASES, ids=lambda c: c.name)
def test_gateway_ready_in_every_observed_state(case: ComposeCase) -> None:
    got = said(compose(case.xr, GATEWAY_INPUT, case.observed), "GatewayReady")
    assert got.reason == case.reason
    # The XR's Ready follows this condition (outcome.write).
    assert got.ready is case.ready
    assert case.message_has in got.message


@pytest.mark.parametrize("case", COMPOSE_CASES, ids=lambda c: c.name)
def test_every_composed_resource_is_emitted_in_every_state(case: ComposeCase) -> None:
    rsp = compose(case.xr, GATEWAY_INPUT, case.observed)
    assert set(rsp.resources) == ALL_NAMES
    assert set(case.observed) <= set(rsp.resources)


@pytest.mark.parametrize("case", COMPOSE_CASES, ids=lambda c: c.name)
def test_the_same_request_gives_the_same_bytes(case: ComposeCase) -> None:
    # The whole gRPC answer, as Crossplane receives it.
    first = run(make_request(case.xr, GATEWAY_INPUT, case.observed))
    second = run(make_request(case.xr, GATEWAY_INPUT, case.observed))
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)


def test_status_publishes_where_routes_attach_and_the_deployment_summary() -> None:
    rsp = compose(XR, GATEWAY_INPUT, observed_state("rolling-out"))
    status = desired_status(rsp)
    assert status["gateway"] == {
        "name": "inference",
        "namespace": "platform",
        "listener": "http",
        "allowedRoutes": "All",
        "address": "172.18.0.200",
        "url": "http://172.18.0.200",
        "urls": ["http://172.18.0.200"],
    }
    assert status["deployment"] == {
        "name": pinned_deployment_name("platform", "inference"),
        "namespace": "envoy-gateway-system",
        "replicas": 2,
        "updatedReplicas": 1,
        "availableReplicas": 2,
        "extProcInjected": True,
    }


def desired_status(rsp: Outcome) -> dict[str, Any]:
    status = rsp.desired_status()
    return {
        k: {kk: int(vv) if isinstance(vv, float) else vv for kk, vv in v.items()} for k, v in status.items()
    }


def xr_with_condition(status: str, reason: str) -> dict[str, Any]:
    xr = copy.deepcopy(XR)
    xr["status"] = {"conditions": [{"type": "GatewayReady", "status": status, "reason": reason}]}
    return xr


def xr_written_back(status: str, reason: str, *, decided: bool, decided_reason: str) -> dict[str, Any]:
    """An XR whose condition Crossplane wrote back from its cache (issue #32) while
    status.serving still holds what the function last decided."""
    xr = xr_with_condition(status, reason)
    xr["status"]["serving"] = {"ready": decided, "reason": decided_reason, "message": "as decided"}
    return xr


@pytest.mark.parametrize(
    ("xr", "state", "want"),
    [
        pytest.param(XR, "ready", [("Normal", "Available")], id="the first verdict is announced"),
        pytest.param(
            xr_with_condition("True", "Available"),
            "ready",
            [],
            id="an unchanged verdict is not announced again",
        ),
        pytest.param(
            xr_with_condition("True", "Available"),
            "rolling-out",
            [("Warning", "RollingOut")],
            id="losing readiness is a warning",
        ),
        pytest.param(
            xr_with_condition("False", "RollingOut"),
            "marker-missing",
            [("Warning", "ExtProcNotInjected")],
            id="a new reason is announced",
        ),
        pytest.param(
            xr_with_condition("False", "RollingOut"),
            "ready",
            [("Normal", "Available")],
            id="becoming ready is normal",
        ),
        pytest.param(
            xr_written_back("True", "Available", decided=False, decided_reason="RollingOut"),
            "rolling-out",
            [],
            id="a stale True written back over a decided RollingOut is no transition",
        ),
        pytest.param(
            xr_written_back("False", "RollingOut", decided=True, decided_reason="Available"),
            "ready",
            [],
            id="a stale RollingOut written back over a decided Available is no transition",
        ),
        pytest.param(
            xr_written_back("False", "RollingOut", decided=False, decided_reason="RollingOut"),
            "ready",
            [("Normal", "Available")],
            id="a decision that changes is announced whatever the condition says",
        ),
    ],
)
def test_results_only_on_transitions(xr: dict[str, Any], state: str, want: list[tuple[str, str]]) -> None:
    rsp = compose(xr, GATEWAY_INPUT, observed_state(state))
    assert [(severity, reason) for severity, reason, _ in rsp.results] == want


def test_an_observed_resource_this_version_does_not_know_is_kept() -> None:
    observed = dict(observed_state("ready"))
    observed["from-an-older-version"] = copy.deepcopy(observed[GATEWAY])
    rsp = compose(XR, GATEWAY_INPUT, observed)
    assert set(rsp.resources) == ALL_NAMES | {"from-an-older-version"}


def test_an_observed_configmap_this_version_does_not_know_is_kept_with_its_data() -> None:
    """A ConfigMap Crossplane composed directly carries its desired state in data, not spec."""
    observed = dict(observed_state("ready"))
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "old-record", "namespace": "platform", "uid": "1"},
        "data": {"ready": "True"},
    }
    observed["from-an-older-version"] = configmap
    rsp = compose(XR, GATEWAY_INPUT, observed)
    assert rsp.resources["from-an-older-version"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "old-record", "namespace": "platform"},
        "data": {"ready": "True"},
    }
    # It exists, and a ConfigMap has no status to judge.
    assert rsp.ready["from-an-older-version"]


@pytest.mark.parametrize(
    ("xr", "state", "want"),
    [
        pytest.param(XR, "ready", "095339c1c74968d3", id="a ready gateway settles on its template"),
        pytest.param(
            XR_SETTLED,
            "old-pods-terminating",
            "095339c1c74968d3",
            id="a rollout in progress keeps the template settled before",
        ),
        pytest.param(XR, "rolling-out", None, id="a gateway never ready has no settled template"),
        pytest.param(
            XR_SETTLED, "deployment-gone", "095339c1c74968d3", id="a vanished Deployment keeps the last one"
        ),
    ],
)
def test_the_settled_template_is_remembered_only_when_ready(
    xr: dict[str, Any], state: str, want: str | None
) -> None:
    rsp = compose(xr, GATEWAY_INPUT, observed_state(state))
    assert desired_status(rsp)["deployment"].get("settledTemplate") == want


@pytest.mark.parametrize(
    ("observed", "published"),
    [
        (observed_state("ready"), True),
        (observed_state("deployment-gone"), False),
        (with_observer("ready", _unread), False),
    ],
    ids=[
        "a Deployment read now reports its numbers",
        "a vanished Deployment reports no stale numbers",
        "a Deployment the provider cannot read now reports no numbers of its last read",
    ],
)
def test_only_a_current_read_publishes_the_deployments_numbers(
    observed: dict[str, dict[str, Any]], published: bool
) -> None:
    rsp = compose(XR, GATEWAY_INPUT, observed)
    assert ("availableReplicas" in desired_status(rsp)["deployment"]) is published


# --- found by mutation testing: branches no other test told apart --------------------------


def _one_of_two_drained(spec_envoy: dict[str, Any]) -> Outcome:
    xr = copy.deepcopy(XR)
    xr["spec"]["envoy"] = {**xr["spec"].get("envoy", {}), **spec_envoy}
    return compose(xr, GATEWAY_INPUT, observed_state("one-of-two-drained"))


def test_all_pods_policy_is_not_ready_with_one_of_two_drained_where_at_least_one_is() -> None:
    at_least_one = said(_one_of_two_drained({}), "GatewayReady")
    assert at_least_one.ready
    every = said(_one_of_two_drained({"availabilityPolicy": "All"}), "GatewayReady")
    assert every.ready is False
    assert "1 of 2 desired pods are available" in every.message


def _with_observed_manifest(value: Any) -> dict[str, dict[str, Any]]:
    observed = observed_state("ready")
    observed[OBSERVER]["status"]["atProvider"]["manifest"] = value
    return observed


@pytest.mark.parametrize("value", ["not an object", ["a", "list"], 7], ids=["a string", "a list", "a number"])
def test_an_observed_manifest_that_is_not_an_object_is_not_an_observation(value: Any) -> None:
    rsp = compose(XR, GATEWAY_INPUT, _with_observed_manifest(value))
    got = said(rsp, "GatewayReady")
    assert got.ready is False
    status = rsp.desired_status()
    assert "updatedReplicas" not in status.get("deployment", {})


@pytest.mark.parametrize("value", [7, {"digest": "x"}, ["x"]], ids=["a number", "an object", "a list"])
def test_a_settled_template_that_is_not_a_string_is_forgotten(value: Any) -> None:
    """The XR's status is anyone's to write; a non-string there must not be trusted (nor crash)."""
    xr = copy.deepcopy(XR_SETTLED)
    xr["status"]["deployment"]["settledTemplate"] = value
    rsp = compose(xr, GATEWAY_INPUT, observed_state("current-pod-draining"))
    got = said(rsp, "GatewayReady")
    # With no settled template a terminating pod counts as old: the safe side.
    assert (got.status, got.reason) == ("False", GatewayReason.ROLLING_OUT)


def test_an_absent_count_reads_as_zero_in_the_message() -> None:
    observed = observed_state("rolling-out")
    manifest = observed[OBSERVER]["status"]["atProvider"]["manifest"]
    manifest["status"].pop("updatedReplicas", None)
    rsp = compose(XR, GATEWAY_INPUT, observed)
    assert (
        f"0 of {manifest['status']['replicas']} pods run the current template"
        in said(rsp, "GatewayReady").message
    )


@pytest.mark.parametrize(
    ("missing", "words"),
    [
        ("gateway", "Gateway platform/inference has not been created yet"),
        ("anchor-route", "has not been created yet"),
    ],
)
def test_a_resource_not_created_yet_is_named_in_the_message(missing: str, words: str) -> None:
    observed = observed_state("ready")
    del observed[missing]
    got = said(compose(XR, GATEWAY_INPUT, observed), "GatewayReady")
    assert got.ready is False
    assert words in got.message


@pytest.mark.parametrize(
    ("name", "words"), [("gateway", "is not Programmed"), ("anchor-route", "is not Accepted")]
)
def test_a_resource_not_in_effect_is_named_in_the_message(name: str, words: str) -> None:
    observed = observed_state("ready")
    observed[name]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "Unavailable"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    ]
    got = said(compose(XR, GATEWAY_INPUT, observed), "GatewayReady")
    assert words in got.message


def test_only_a_string_address_is_published() -> None:
    observed = observed_state("ready")
    observed[GATEWAY]["status"]["atProvider"]["manifest"]["status"]["addresses"] = [
        {"type": "IPAddress", "value": 7},
        "not an object",
        {"type": "IPAddress", "value": "10.0.0.9"},
    ]
    status = compose(XR, GATEWAY_INPUT, observed).desired_status()
    assert status["gateway"]["address"] == "10.0.0.9"


URL_CASES = {
    "an HTTP listener on port 80 has no port in its URL": ({"name": "a"}, "10.0.0.1", 80, "http://10.0.0.1"),
    "an HTTP listener on another port names it": (
        {"name": "a", "port": 8080},
        "10.0.0.1",
        8080,
        "http://10.0.0.1:8080",
    ),
    "an HTTPS listener with a hostname is reached by that name": (
        {
            "name": "a",
            "protocol": "HTTPS",
            "port": 443,
            "hostname": "ai.example.com",
            "tls": {"certificateRefs": [{"name": "cert"}]},
        },
        "10.0.0.1",
        443,
        "https://ai.example.com",
    ),
    "a wildcard hostname has no URL: the bare address matches no virtual host, clients choose the host": (
        {"name": "a", "hostname": "*.example.com"},
        "10.0.0.1",
        80,
        None,
    ),
    "an IPv6 address is bracketed": ({"name": "a", "port": 8080}, "fd00::1", 8080, "http://[fd00::1]:8080"),
    "a listener reached on a node port names the node port, not its own": (
        {"name": "a"},
        "172.18.0.3",
        31080,
        "http://172.18.0.3:31080",
    ),
    "a listener whose port is not known yet has no URL": ({"name": "a"}, "172.18.0.3", None, None),
}


@pytest.mark.parametrize("case", sorted(URL_CASES), ids=str)
def test_the_url_clients_use_for_each_listener(case: str) -> None:
    listener, address, port, want = URL_CASES[case]
    assert listener_url(Listener.model_validate(listener), address, port) == want


def _node_port_service(ports: list[dict[str, Any]] | None, *, gone: bool = False) -> dict[str, Any]:
    """The observed Envoy Service Object of the nodeport-ready example, with other ports, or gone since."""
    service = copy.deepcopy(observed_state("nodeport-ready")[ENVOY_SERVICE])
    spec = service["status"]["atProvider"]["manifest"]["spec"]
    if ports is None:
        del spec["ports"]
    else:
        spec["ports"] = ports
    if gone:
        # What provider-kubernetes reports once the target is deleted: the
        # last manifest stays, Synced turns False (readiness.target_gone).
        synced = service["status"]["conditions"][1]
        synced |= {"status": "False", "message": "observe failed: external resource does not exist"}
    return service


CLIENT_PORT_CASES = [
    pytest.param({}, None, 80, id="a LoadBalancer gateway is reached on the listener's port"),
    pytest.param(
        {"serviceType": "ClusterIP"}, None, 80, id="a ClusterIP gateway is reached on the listener's port"
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 80, "protocol": "TCP", "nodePort": 31080}]),
        31080,
        id="a NodePort gateway is reached on the node port of the listener's Service port",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 80.0, "nodePort": 31080.0}]),
        31080,
        id="numbers read as the provider reports them (doubles) still name the node port",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 8080, "protocol": "TCP", "nodePort": 31081}]),
        None,
        id="a node port of another listener port is not this listener's",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 80, "protocol": "UDP", "nodePort": 31082}]),
        None,
        id="a UDP port of the same number is not the HTTP listener's",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 80, "protocol": "TCP"}]),
        None,
        id="a port without its node port assigned yet gives no port",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service(None),
        None,
        id="a Service without ports gives no port",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        _node_port_service([{"port": 80, "protocol": "TCP", "nodePort": 31080}], gone=True),
        None,
        id="a Service deleted since it was observed gives no port: its last manifest is history",
    ),
    pytest.param(
        {"serviceType": "NodePort"},
        None,
        None,
        id="a NodePort gateway whose Service is not observed yet has no port",
    ),
]


@pytest.mark.parametrize(("envoy", "service", "want"), CLIENT_PORT_CASES)
def test_the_port_clients_reach_the_first_listener_on(
    envoy: dict[str, Any], service: dict[str, Any] | None, want: int | None
) -> None:
    observed = {} if service is None else {ENVOY_SERVICE: service}
    assert client_port(plan({"envoy": envoy}), observed) == want


STATUS_URL_CASES = [
    pytest.param(
        [{"name": "http"}, {"name": "other", "port": 8080}],
        {},
        {"url": "http://172.18.0.200", "urls": ["http://172.18.0.200"]},
        id="only the listener routes attach to gets a URL, however many the Gateway has",
    ),
    pytest.param(
        [{"name": "http", "hostname": "*.example.com"}],
        {},
        {"hostname": "*.example.com"},
        id="a wildcard listener publishes its hostname and no URL",
    ),
    pytest.param(
        [{"name": "http"}],
        {"serviceType": "NodePort"},
        {},
        id="a NodePort gateway whose Envoy Service is not observed yet publishes its node address and no URL",
    ),
]


@pytest.mark.parametrize(("listeners", "envoy", "want"), STATUS_URL_CASES)
def test_the_published_urls_are_only_ones_that_reach_a_model(
    listeners: list[dict[str, Any]], envoy: dict[str, Any], want: dict[str, Any]
) -> None:
    xr = copy.deepcopy(XR)
    xr["spec"]["listeners"] = listeners
    xr["spec"].setdefault("envoy", {}).update(envoy)
    published = compose(xr, GATEWAY_INPUT, observed_state("ready")).desired_status()["gateway"]
    got = {k: published[k] for k in ("url", "urls", "hostname") if k in published}
    assert got == want
    assert published["address"] == "172.18.0.200"


def test_the_status_says_whether_the_ext_proc_marker_is_on_the_template() -> None:
    status = compose(XR, GATEWAY_INPUT, observed_state("marker-missing")).desired_status()
    assert status["deployment"]["extProcInjected"] is False


# --- caller authentication ------------------------------------------------------------

AUTH_XR = copy.deepcopy(XR)
AUTH_XR["spec"]["auth"] = {
    "apiKeys": {
        "secretRefs": [{"name": "client-keys"}, {"name": "more-keys"}],
        "forwardClientIDHeader": "x-client-id",
    }
}


def _with_policy(ready: bool) -> dict[str, dict[str, Any]]:
    """The ready gateway's observed state plus its SecurityPolicy Object, Ready as the query found it."""
    observed = observed_state("ready")
    policy = copy.deepcopy(observed[ANCHOR])
    if not ready:
        _not_ready_yet(policy)
    observed[SECURITY_POLICY] = policy
    return applied(AUTH_XR, GATEWAY_INPUT, observed, {})


def _policy_unread() -> dict[str, dict[str, Any]]:
    observed = _with_policy(ready=True)
    _set_synced(observed[SECURITY_POLICY], "connect failed: cannot get provider config")
    return observed


AUTH_CASES = [
    ComposeCase(
        "with caller auth on, a gateway otherwise ready waits for its SecurityPolicy",
        observed_state("ready"),
        GatewayReason.AUTH_NOT_ACCEPTED,
        False,
        "Gateway platform/inference has not been created yet: Envoy Gateway",
        AUTH_XR,
    ),
    ComposeCase(
        "a SecurityPolicy that is not Accepted (a key Secret missing) keeps GatewayReady False",
        _with_policy(ready=False),
        GatewayReason.AUTH_NOT_ACCEPTED,
        False,
        "inference is not Accepted (is a key Secret missing?): Envoy Gateway answers every request with 500",
        AUTH_XR,
    ),
    ComposeCase(
        "a SecurityPolicy the provider cannot read now is not current, whatever its earlier Ready says",
        _policy_unread(),
        GatewayReason.NOT_YET_OBSERVED,
        False,
        "cannot read the API-key SecurityPolicy of Gateway platform/inference now",
        AUTH_XR,
    ),
    ComposeCase(
        "an Accepted SecurityPolicy leaves the verdict to the rollout",
        _with_policy(ready=True),
        GatewayReason.AVAILABLE,
        True,
        "",
        AUTH_XR,
    ),
    ComposeCase(
        "with caller auth off, no SecurityPolicy is composed or waited for",
        observed_state("ready"),
        GatewayReason.AVAILABLE,
        True,
    ),
]


@pytest.mark.parametrize("case", AUTH_CASES, ids=lambda c: c.name)
def test_caller_auth_gates_gateway_ready_and_is_always_composed(case: ComposeCase) -> None:
    rsp = compose(case.xr, GATEWAY_INPUT, case.observed)
    got = said(rsp, "GatewayReady")
    assert (got.reason, got.ready) == (case.reason, case.ready)
    assert case.message_has in got.message
    auth_on = "auth" in case.xr["spec"]
    assert set(rsp.resources) == ALL_NAMES | ({SECURITY_POLICY} if auth_on else set())


def test_the_security_policy_checks_the_key_on_the_gateway_and_keeps_it_from_providers() -> None:
    rsp = compose(AUTH_XR, GATEWAY_INPUT, {})
    obj = rsp.resources[SECURITY_POLICY]
    assert obj["metadata"] == {"name": "inference-security-policy-bf6f81ec", "namespace": "platform"}
    # Judged by Envoy Gateway's per-ancestor Accepted, and watched: its status feeds GatewayReady.
    assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery", "celQuery": policy_accepted_query()}
    assert obj["spec"]["watch"] is True
    manifest = obj["spec"]["forProvider"]["manifest"]
    assert (manifest["kind"], manifest["metadata"]["namespace"]) == ("SecurityPolicy", "platform")
    assert manifest["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"}],
        "apiKeyAuth": {
            "credentialRefs": [
                {"group": "", "kind": "Secret", "name": "client-keys"},
                {"group": "", "kind": "Secret", "name": "more-keys"},
            ],
            # Envoy takes `Authorization: Bearer <key>` as OpenAI's SDKs send it.
            "extractFrom": [{"headers": ["authorization"]}],
            "sanitize": True,
            "forwardClientIDHeader": "x-client-id",
        },
    }


def test_turning_auth_off_removes_exactly_its_security_policy() -> None:
    """Kept, the policy would go on refusing every caller without a key: it goes once its removal
    hold has passed, and nothing else goes with it."""
    observed = _with_policy(ready=True)
    observed["legacy-thing"] = copy.deepcopy(observed[ANCHOR])
    xr = copy.deepcopy(XR)
    xr["status"] = {"gateway": {"callerAuth": {"header": "authorization", "removedAt": _stamp(26)}}}
    rsp = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    assert set(rsp.resources) == ALL_NAMES | {"legacy-thing"}
    assert said(rsp, "GatewayReady").reason == GatewayReason.AVAILABLE


def test_leaving_node_port_removes_exactly_its_service_observer() -> None:
    """Observe-only: deleting the Object leaves Envoy Gateway's Service alone."""
    observed = observed_state("nodeport-ready")
    observed["legacy-thing"] = copy.deepcopy(observed[ANCHOR])
    node_port = copy.deepcopy(XR)
    node_port["spec"].setdefault("envoy", {})["serviceType"] = "NodePort"
    assert set(compose(node_port, GATEWAY_INPUT, observed).resources) == ALL_NAMES | {
        ENVOY_SERVICE,
        "legacy-thing",
    }
    rsp = compose(XR, GATEWAY_INPUT, observed)
    assert set(rsp.resources) == ALL_NAMES | {"legacy-thing"}
    assert said(rsp, "GatewayReady").reason == GatewayReason.AVAILABLE


def test_the_status_tells_routes_that_a_key_is_needed_and_in_which_header() -> None:
    xr = copy.deepcopy(AUTH_XR)
    xr["spec"]["auth"]["apiKeys"] |= {"header": "x-api-key", "routeNamespaces": {"from": "All"}}
    status = compose(xr, GATEWAY_INPUT, {}).desired_status()
    # No coverage is published: every route on the gateway needs a key.
    assert status["gateway"]["callerAuth"] == {"header": "x-api-key"}
    default = compose(AUTH_XR, GATEWAY_INPUT, {}).desired_status()
    assert default["gateway"]["callerAuth"] == {"header": "authorization"}
    off = compose(XR, GATEWAY_INPUT, {}).desired_status()
    assert "callerAuth" not in off["gateway"]


@pytest.mark.parametrize(
    ("limit", "allowed"),
    [("4095Mi", True), ("4194303Ki", True), ("4294967295", True), ("4Gi", False), ("4294967296", False)],
    ids=str,
)
def test_the_request_buffer_limit_stops_at_envoys_uint32(limit: str, allowed: bool) -> None:
    """Envoy Gateway refuses more than 2^32 - 1 bytes and Envoy keeps its 32 KiB default."""
    xr = copy.deepcopy(XR)
    xr["spec"]["requestBufferLimit"] = limit
    if allowed:
        compose(xr, GATEWAY_INPUT, {})
    else:
        assert refused(xr, GATEWAY_INPUT, {}).startswith("spec.requestBufferLimit")


def _policy_accepted_ago(
    seconds: float, status: str = "True", fmt: str = "%Y-%m-%dT%H:%M:%SZ", zone: timezone = UTC
) -> dict[str, dict[str, Any]]:
    """The ready gateway with its SecurityPolicy Accepted by Envoy Gateway `seconds` ago, on one ancestor."""
    observed = _with_policy(ready=True)
    stamp = stamp_ago(seconds, fmt, zone)
    manifest = observed[SECURITY_POLICY]["status"]["atProvider"]["manifest"]
    manifest["status"] = {
        "ancestors": [
            {
                "ancestorRef": {"name": "inference"},
                "conditions": [
                    {"type": "Accepted", "status": status, "reason": "Accepted", "lastTransitionTime": stamp}
                ],
            }
        ]
    }
    return observed


POLICY_GENERATION_CASES = [
    # (name, the policy's generation, each ancestor's Accepted observedGeneration, reason)
    ("every ancestor judged the policy's current generation", 3, [3, 3], GatewayReason.AVAILABLE),
    (
        "one ancestor judged an older generation: its keys may yet be refused",
        3,
        [3, 2],
        GatewayReason.AUTH_NOT_ACCEPTED,
    ),
    ("the only ancestor judged an older generation", 3, [2], GatewayReason.AUTH_NOT_ACCEPTED),
    ("an Accepted that names no generation is taken as it says", 3, [None], GatewayReason.AVAILABLE),
    ("an ancestor ahead of the generation read is current", 3, [4], GatewayReason.AVAILABLE),
]


@pytest.mark.parametrize(
    ("name", "generation", "judged", "reason"),
    POLICY_GENERATION_CASES,
    ids=[c[0] for c in POLICY_GENERATION_CASES],
)
def test_a_security_policy_is_trusted_only_as_accepted_of_its_current_generation(
    name: str, generation: int, judged: list[int | None], reason: GatewayReason
) -> None:
    """make faults (CI104 of b0a3102): a new policy's Object read the Accepted an older policy of
    its name had, while Envoy Gateway had not judged the new keys; it then refused them, and
    Envoy answered every request 500 while GatewayReady said True for 27 s."""
    observed = _policy_accepted_ago(600)
    manifest = observed[SECURITY_POLICY]["status"]["atProvider"]["manifest"]
    manifest.setdefault("metadata", {})["generation"] = generation
    template = manifest["status"]["ancestors"][0]
    manifest["status"]["ancestors"] = [
        {
            **copy.deepcopy(template),
            "ancestorRef": {"name": f"ancestor-{i}"},
            "conditions": [
                {**template["conditions"][0], **({"observedGeneration": g} if g is not None else {})}
            ],
        }
        for i, g in enumerate(judged)
    ]
    got = said(compose(AUTH_XR, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady")
    assert got.reason == reason, (name, got.message)
    if reason == GatewayReason.AUTH_NOT_ACCEPTED:
        assert "older generation" in got.message, name


AUTH_LOADING_CASES = [
    ("a SecurityPolicy accepted 1 s ago: Envoy may not have its keys yet", 1, GatewayReason.AUTH_LOADING),
    ("a SecurityPolicy accepted 4 s ago is still on its way to Envoy", 4, GatewayReason.AUTH_LOADING),
    ("a SecurityPolicy accepted 7 s ago is in effect", 7, GatewayReason.AVAILABLE),
    ("a stamp ten minutes ahead of our clock is not judged", -600, GatewayReason.AVAILABLE),
]


@pytest.mark.parametrize(
    ("name", "ago", "reason"), AUTH_LOADING_CASES, ids=[c[0] for c in AUTH_LOADING_CASES]
)
def test_gateway_ready_waits_for_envoy_to_receive_the_keys(
    name: str, ago: float, reason: GatewayReason
) -> None:
    """Found on the real data plane: a keyed request refused (401) right after the policy turned Accepted."""
    rsp = compose(AUTH_XR, GATEWAY_INPUT, _policy_accepted_ago(ago), now=CLOCK)
    got = said(rsp, "GatewayReady")
    assert got.reason == reason, name
    next_call = rsp.next_call()
    assert next_call is not None
    ttl = next_call.total_seconds()
    if reason is GatewayReason.AUTH_LOADING:
        accepted = CLOCK - timedelta(seconds=ago)
        assert (
            f"SecurityPolicy of Gateway platform/inference was accepted or changed at {readiness.stamp(accepted)}; "
            in got.message
        )
        assert f"until {readiness.stamp(accepted + timedelta(seconds=5))})" in got.message
        assert ttl == 5 - ago + 1, (name, ttl)
        # The same message a second later: one that changed each call would be written each call.
        later = compose(AUTH_XR, GATEWAY_INPUT, _policy_accepted_ago(ago), now=CLOCK + timedelta(seconds=1))
        if ago < 4:
            assert said(later, "GatewayReady").message == got.message
    else:
        assert ttl == 120


def _policy_changed(
    observed: dict[str, dict[str, Any]], *, header: str | None, written_ago: float | None
) -> None:
    """The observed SecurityPolicy with another header than the spec asks (not applied yet), or its
    spec written `written_ago` seconds ago (a managedFields entry)."""
    manifest = observed[SECURITY_POLICY]["status"]["atProvider"]["manifest"]
    if header is not None:
        manifest["spec"]["apiKeyAuth"]["extractFrom"] = [{"headers": [header]}]
    if written_ago is not None:
        manifest.setdefault("metadata", {})["managedFields"] = [
            {
                "manager": "provider-kubernetes/platform-inference",
                "operation": "Apply",
                "time": stamp_ago(written_ago),
                "fieldsV1": {"f:spec": {"f:apiKeyAuth": {}}},
            }
        ]


POLICY_CHANGED_CASES = [
    # (name, the header observed, its spec written s ago, its Accepted stamp s ago, words said)
    (
        "a header changed and not applied yet: Envoy checks the old one",
        "x-old-key",
        None,
        600,
        "has not applied it",
    ),
    (
        "a header not applied yet beside a stamp just past its bound: held for the apply alone",
        "x-old-key",
        None,
        5,
        "has not applied it",
    ),
    (
        "a header changed and applied 2 s ago is on its way to Envoy",
        None,
        2,
        600,
        "was accepted or changed at 2026-",
    ),
    ("a change applied 6 s ago is in effect", None, 6, 600, None),
]


@pytest.mark.parametrize(
    ("name", "header", "written_ago", "accepted_ago", "words"),
    POLICY_CHANGED_CASES,
    ids=[c[0] for c in POLICY_CHANGED_CASES],
)
def test_a_changed_security_policy_holds_gateway_ready_until_envoy_checks_it(
    name: str, header: str | None, written_ago: float | None, accepted_ago: float, words: str | None
) -> None:
    """Found in review: the status told callers a new header at once, while the policy stayed Accepted
    with its old stamp and Envoy checked the old header (401 for callers sending the new one)."""
    observed = _policy_accepted_ago(accepted_ago)
    _policy_changed(observed, header=header, written_ago=written_ago)
    rsp = compose(AUTH_XR, GATEWAY_INPUT, observed, now=CLOCK)
    got = said(rsp, "GatewayReady")
    if words is None:
        assert got.reason == GatewayReason.AVAILABLE, (name, got.message)
        return
    assert (got.reason, got.ready) == (GatewayReason.AUTH_LOADING, False), (name, got.message)
    assert words in got.message
    next_call = rsp.next_call()
    assert next_call is not None
    # Held on a stamp: called again once the bound has passed; on an apply not made, at the pace of
    # a gateway waiting (its apply wakes it sooner).
    want = timedelta(seconds=5 - written_ago + 1) if written_ago is not None else WAITING_TTL
    assert next_call == want
    assert set(observed) <= set(rsp.resources)


STAMP_CASES = [
    ("a stamp with another zone's offset is read in that zone", 1, "True", "%Y-%m-%dT%H:%M:%S%z", 2, True),
    ("a stamp without a zone is read as UTC", 1, "True", "%Y-%m-%dT%H:%M:%S", 0, True),
    ("an Accepted=False stamp holds nothing", 1, "False", "%Y-%m-%dT%H:%M:%SZ", 0, False),
]


@pytest.mark.parametrize(
    ("name", "ago", "status", "fmt", "hours", "holds"), STAMP_CASES, ids=[c[0] for c in STAMP_CASES]
)
def test_the_policy_stamp_is_read_as_kubernetes_writes_it(  # noqa: PLR0917 - one parameter per column
    name: str, ago: float, status: str, fmt: str, hours: int, holds: bool
) -> None:
    zone = timezone(timedelta(hours=hours))
    rsp = compose(AUTH_XR, GATEWAY_INPUT, _policy_accepted_ago(ago, status, fmt, zone), now=CLOCK)
    reason = said(rsp, "GatewayReady").reason
    assert (reason == GatewayReason.AUTH_LOADING) is holds, (name, reason)


def test_a_policy_observed_after_auth_is_turned_off_holds_nothing() -> None:
    """Its stamp is about keys nobody is asked for any more."""
    rsp = compose(XR, GATEWAY_INPUT, _policy_accepted_ago(1), now=CLOCK)
    assert said(rsp, "GatewayReady").reason == GatewayReason.AVAILABLE


@pytest.mark.parametrize(
    "namespace",
    ["elsewhere", None],
    ids=[
        "a gateway moved to another namespace is refused",
        "a gateway moved back to its XR's namespace is refused",
    ],
)
def test_a_gateway_cannot_move_and_nothing_it_composed_changes(namespace: str | None) -> None:
    # The ready state holds its targets in `platform`, the XR's namespace;
    # `None` stands for a gateway composed elsewhere and now told to come home.
    observed = observed_state("ready")
    xr = copy.deepcopy(XR)
    if namespace is None:
        for obj in observed.values():
            if obj["spec"].get("managementPolicies") != ["Observe"]:
                obj["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] = "elsewhere"
    else:
        xr["spec"]["namespace"] = namespace
    assert refused(xr, GATEWAY_INPUT, observed).split(":")[0] == "spec.namespace"


def test_an_upgraded_gateway_keeps_every_name_its_objects_hold_and_the_pinned_deployment() -> None:
    observed = observed_state("ready")
    renamed = {"gateway": "old-gateway", "envoy-proxy": "old-proxy", "anchor-route": "old-anchor"}
    for key, name in renamed.items():
        observed[key]["spec"]["forProvider"]["manifest"]["metadata"]["name"] = name
    proxy = observed["envoy-proxy"]["spec"]["forProvider"]["manifest"]
    proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["name"] = "envoy-old"
    got = compose(XR, GATEWAY_INPUT, observed).resources
    assert {
        key: got[key]["spec"]["forProvider"]["manifest"]["metadata"]["name"] for key in renamed
    } == renamed
    gateway = got["gateway"]["spec"]["forProvider"]["manifest"]
    assert gateway["spec"]["infrastructure"]["parametersRef"]["name"] == "old-proxy"
    for key in ("anchor-route",):
        assert got[key]["spec"]["forProvider"]["manifest"]["spec"]["parentRefs"][0]["name"] == "old-gateway"
    for key in ("client-traffic-policy",):
        assert got[key]["spec"]["forProvider"]["manifest"]["spec"]["targetRefs"][0]["name"] == "old-gateway"
    # The observer follows the Deployment Envoy Gateway keeps for the held EnvoyProxy.
    assert got["envoy-deployment"]["spec"]["forProvider"]["manifest"]["metadata"]["name"] == "envoy-old"
    assert (
        got["envoy-proxy"]["spec"]["forProvider"]["manifest"]["spec"]["provider"]["kubernetes"][
            "envoyDeployment"
        ]["name"]
        == "envoy-old"
    )


@pytest.mark.parametrize(
    "key",
    ["gateway", "envoy-proxy", "anchor-route", "client-traffic-policy", "security-policy", "https-redirect"],
)
def test_any_one_target_held_in_another_namespace_is_refused(key: str) -> None:
    observed = _with_policy(ready=True)
    redirect = compose(HTTPS_XR, GATEWAY_INPUT, {}).resources[HTTPS_REDIRECT]
    observed[HTTPS_REDIRECT] = copy.deepcopy(redirect) | {
        "status": {"atProvider": {"manifest": redirect["spec"]["forProvider"]["manifest"]}}
    }
    observed[key]["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] = "elsewhere"
    message = refused(AUTH_XR, GATEWAY_INPUT, observed)
    assert message.split(":")[0] == "spec.namespace"
    assert "'elsewhere'" in message


def test_an_observe_only_object_in_another_namespace_is_no_move() -> None:
    # The Envoy Deployment lives in Envoy Gateway's namespace, and is only observed.
    observed = observed_state("ready")
    assert (
        observed["envoy-deployment"]["spec"]["forProvider"]["manifest"]["metadata"]["namespace"] != "platform"
    )
    assert set(compose(XR, GATEWAY_INPUT, observed).resources) == ALL_NAMES


@pytest.mark.parametrize("held", [42, "", None], ids=["a number", "an empty name", "no name"])
def test_an_envoy_proxy_holding_no_usable_pinned_name_gets_the_derived_one(held: Any) -> None:
    observed = observed_state("ready")
    derived = compose(XR, GATEWAY_INPUT, observed).resources["envoy-deployment"]
    deployment = observed["envoy-proxy"]["spec"]["forProvider"]["manifest"]["spec"]["provider"]["kubernetes"][
        "envoyDeployment"
    ]
    deployment["name"] = held
    got = compose(XR, GATEWAY_INPUT, observed).resources["envoy-deployment"]
    assert (
        got["spec"]["forProvider"]["manifest"]["metadata"]
        == derived["spec"]["forProvider"]["manifest"]["metadata"]
    )


# --- the serving record: what routes read, changed only when what they act on changes ----------


def _xr_status(rsp: Outcome) -> dict[str, Any]:
    return dict(rsp.desired_status())


def test_a_rollout_step_rewrites_the_gateway_s_status_but_not_its_serving_record() -> None:
    observed = observed_state("rolling-out")
    later = copy.deepcopy(observed)
    later[OBSERVER]["status"]["atProvider"]["manifest"]["status"]["updatedReplicas"] = 2
    first = compose(XR, GATEWAY_INPUT, observed)
    second = compose(XR, GATEWAY_INPUT, later)
    assert said(second, "GatewayReady").reason == GatewayReason.ROLLING_OUT
    assert _xr_status(first) != _xr_status(second)
    assert first.resources[SERVING_RECORD] == second.resources[SERVING_RECORD]


@pytest.mark.parametrize("state", ["ready", "rolling-out", "deployment-not-found"])
def test_the_serving_record_reads_back_as_what_the_gateway_publishes_and_decides(state: str) -> None:
    rsp = compose(XR, GATEWAY_INPUT, observed_state(state))
    record = rsp.resources[SERVING_RECORD]
    assert (record["apiVersion"], record["kind"]) == ("v1", "ConfigMap")
    assert record["metadata"] == {"name": serving_record.record_name("inference"), "namespace": "platform"}
    published = _xr_status(rsp)
    read = serving_record.as_gateway(record)
    assert read is not None
    assert read["status"]["gateway"] == published["gateway"]
    gateway_ready = said(rsp, "GatewayReady")
    assert read["status"]["serving"] == {
        "ready": gateway_ready.ready,
        "reason": gateway_ready.reason,
    }
    # The message, which follows a rollout step by step, is not in it.
    assert gateway_ready.message not in json.dumps(record)


def test_the_serving_record_is_ready_once_it_exists() -> None:
    observed = observed_state("ready")
    without = compose(XR, GATEWAY_INPUT, observed)
    assert without.ready[SERVING_RECORD] is False
    record = copy.deepcopy(without.resources[SERVING_RECORD])
    record["metadata"]["annotations"] = {"crossplane.io/composition-resource-name": SERVING_RECORD}
    with_record = compose(XR, GATEWAY_INPUT, {**observed, SERVING_RECORD: record})
    assert with_record.ready[SERVING_RECORD]


# --- inference on HTTPS only: the redirect, and Envoy's own health check ---

HTTPS_XR = load_yaml(EXAMPLES / "inference-gateway" / "xr-https.yaml")[0]


def _manifest(rsp: Any, key: str) -> dict[str, Any]:
    return rsp.resources[key]["spec"]["forProvider"]["manifest"]


def test_a_redirecting_listener_gets_an_https_redirect_and_no_ai_route() -> None:
    rsp = compose(HTTPS_XR, GATEWAY_INPUT, {})
    assert set(rsp.resources) == ALL_NAMES | {HTTPS_REDIRECT}
    redirect = _manifest(rsp, HTTPS_REDIRECT)
    assert (redirect["kind"], redirect["metadata"]["namespace"]) == ("HTTPRoute", "platform")
    assert redirect["spec"] == {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "name": "inference",
                "sectionName": "http",
            }
        ],
        # Port 443: Gateway API's default for https, so none is named; the host is the listener's,
        # which takes TLS for that name only.
        "rules": [
            {
                "filters": [
                    {
                        "type": "RequestRedirect",
                        "requestRedirect": {
                            "scheme": "https",
                            "statusCode": 301,
                            "hostname": "inference.example.com",
                        },
                    }
                ]
            }
        ],
    }
    # The anchor's HTTPRoute ends in a catch-all 404 rule (Envoy AI Gateway v1.1.0
    # ai_gateway_route.go, "route-not-found"); on the redirecting listener it would tie
    # with the redirect, and the older route wins a tie.
    assert _manifest(rsp, "anchor-route")["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference", "sectionName": "https"}
    ]
    assert rsp.resources[HTTPS_REDIRECT]["spec"]["watch"] is True


def test_a_gateway_without_a_redirect_keeps_its_anchor_on_every_listener() -> None:
    xr = copy.deepcopy(HTTPS_XR)
    xr["spec"]["listeners"][1]["httpsRedirect"] = False
    rsp = compose(xr, GATEWAY_INPUT, {})
    assert HTTPS_REDIRECT not in rsp.resources
    assert _manifest(rsp, "anchor-route")["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"}
    ]


REDIRECT_CASES = [
    (
        "the listener's host name and port 443: the host named, no port",
        {},
        {"hostname": "inference.example.com"},
    ),
    (
        "a port other than 443 is named",
        {"port": 8443},
        {"hostname": "inference.example.com", "port": 8443},
    ),
    ("no host name: the request's host is kept", {"hostname": None}, {}),
    ("a wildcard host name names no host: the request's is kept", {"hostname": "*.example.com"}, {}),
]


@pytest.mark.parametrize(("name", "first", "want"), REDIRECT_CASES, ids=[c[0] for c in REDIRECT_CASES])
def test_the_redirect_sends_clients_to_the_first_listener(
    name: str, first: dict[str, Any], want: dict[str, Any]
) -> None:
    xr = copy.deepcopy(HTTPS_XR)
    xr["spec"]["listeners"][0] = {
        k: v for k, v in (xr["spec"]["listeners"][0] | first).items() if v is not None
    }
    redirect = _manifest(compose(xr, GATEWAY_INPUT, {}), HTTPS_REDIRECT)
    assert redirect["spec"]["rules"][0]["filters"][0]["requestRedirect"] == {
        "scheme": "https",
        "statusCode": 301,
        **want,
    }, name


def test_the_anchor_names_every_listener_but_the_redirecting_ones() -> None:
    xr = copy.deepcopy(HTTPS_XR)
    xr["spec"]["listeners"] += [
        {"name": "plain", "port": 8080},
        {"name": "http-alt", "port": 8081, "httpsRedirect": True},
    ]
    rsp = compose(xr, GATEWAY_INPUT, {})
    assert [p["sectionName"] for p in _manifest(rsp, "anchor-route")["spec"]["parentRefs"]] == [
        "https",
        "plain",
    ]
    assert [p["sectionName"] for p in _manifest(rsp, HTTPS_REDIRECT)["spec"]["parentRefs"]] == [
        "http",
        "http-alt",
    ]


def test_a_redirect_turned_off_is_removed_and_one_still_asked_for_is_never_dropped() -> None:
    composed = compose(HTTPS_XR, GATEWAY_INPUT, {}).resources
    observed = {key: composed[key] for key in (HTTPS_REDIRECT, GATEWAY)}
    # Still asked for, observed or not: emitted.
    assert HTTPS_REDIRECT in compose(HTTPS_XR, GATEWAY_INPUT, observed).resources
    xr = copy.deepcopy(HTTPS_XR)
    xr["spec"]["listeners"][1]["httpsRedirect"] = False
    rsp = compose(xr, GATEWAY_INPUT, observed)
    assert HTTPS_REDIRECT not in rsp.resources
    assert set(rsp.resources) == ALL_NAMES


@pytest.mark.parametrize(
    ("name", "path", "want"),
    [
        ("no health check path: Envoy answers no health check", None, None),
        ("a health check path: Envoy answers it on every listener", "/healthz", {"path": "/healthz"}),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_envoy_answers_the_health_check_only_when_asked(name: str, path: str | None, want: Any) -> None:
    xr = copy.deepcopy(XR)
    if path is not None:
        xr["spec"]["healthCheckPath"] = path
    rsp = compose(xr, GATEWAY_INPUT, {})
    # A field of the ClientTrafficPolicy the gateway already has: no resource added.
    assert set(rsp.resources) == ALL_NAMES
    assert _manifest(rsp, CLIENT_TRAFFIC_POLICY)["spec"].get("healthCheck") == want, name


# --- caller auth turned off: callers still told to send a key until Envoy drops the check ---


def _stamp(seconds_ago: float) -> str:
    return stamp_ago(seconds_ago)


AUTH_REMOVAL_CASES = [
    # (name, callerAuth published before, seconds since removedAt, told to send a key, policy kept)
    (
        "auth just turned off: callers told to send a key from now, and the policy kept",
        {"header": "authorization"},
        0,
        True,
        True,
    ),
    (
        "5 s after auth was turned off: still told, the policy still kept",
        {"header": "authorization", "removedAt": 5},
        5,
        True,
        True,
    ),
    (
        "24 s after: the routes may not have published it yet, policy kept",
        {"header": "x-api-key", "removedAt": 24},
        24,
        True,
        True,
    ),
    (
        "26 s after: the policy goes, its Object found gone, callers still told while its deletion reaches Envoy",
        {"header": "authorization", "removedAt": 26},
        26,
        True,
        False,
    ),
    (
        "41 s after, its Object found gone 15 s before: Envoy has dropped the check, nothing told, nothing kept",
        {"header": "authorization", "removedAt": 41, "policyGoneAt": 15},
        41,
        False,
        False,
    ),
    (
        "a removal stamped ahead of our clock counts from now",
        {"header": "authorization", "removedAt": -600},
        0,
        True,
        True,
    ),
    (
        "a status that lost callerAuth while the policy is still there: told its header, held as if just turned off",
        None,
        0,
        True,
        True,
    ),
    (
        "a header that is no string, the policy still there: its own header told, held",
        {"header": 7},
        0,
        True,
        True,
    ),
    (
        "a header that is no string beside a stamp long past: the stamp is not trusted, held from now",
        {"header": 7, "removedAt": 41},
        0,
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("name", "previous", "ago", "told", "kept"), AUTH_REMOVAL_CASES, ids=[c[0] for c in AUTH_REMOVAL_CASES]
)
def test_auth_turned_off_keeps_keys_checked_until_routes_know_and_callers_told_until_envoy_stops(
    name: str, previous: dict[str, Any] | None, ago: float, told: bool, kept: bool
) -> None:
    """Found on the real data plane: with auth turned off, status said no key was needed while Envoy
    still answered keyless requests 401 (fresh-clone CI of e1479f1); and with the policy dropped in
    the call that turned auth off, Envoy served a keyless request while a route still said a key was
    needed (fresh-clone CI of 6b5b602)."""
    xr = copy.deepcopy(XR)
    if previous is not None:
        published = dict(previous)
        for stamp in ("removedAt", "policyGoneAt"):
            if stamp in published:
                published[stamp] = _stamp(published[stamp])
        xr["status"] = {"gateway": {"callerAuth": published}}
    observed = _policy_accepted_ago(600)
    # Its Object, once it has left the desired state, gone at once (as provider-kubernetes deletes it).
    rsp = compose(xr, GATEWAY_INPUT, observed, {POLICY_OBJECT_REQUIREMENT: []}, now=CLOCK)
    # The policy, while kept, is emitted exactly as observed: nothing about it is re-decided.
    assert (SECURITY_POLICY in rsp.resources) == kept, name
    if kept:
        assert rsp.resources[SECURITY_POLICY]["spec"] == observed[SECURITY_POLICY]["spec"], name
    assert set(rsp.resources) - {SECURITY_POLICY} == ALL_NAMES, name
    # Requests with a key are served either way: GatewayReady is not held for it.
    assert said(rsp, "GatewayReady").ready, name
    got = rsp.status["gateway"].get("callerAuth")
    if not told:
        assert got is None, name
        return
    # The header published before, or else the one the policy still there makes Envoy check.
    header = previous.get("header") if previous else None
    assert got["header"] == (header if isinstance(header, str) else "authorization"), name
    assert (CLOCK - datetime.fromisoformat(got["removedAt"])).total_seconds() == ago, name
    # Called again a second after the policy is due to go, then after callers stop being told
    # (AUTH_REMOVAL_BOUND after this call found its Object gone).
    due = AUTH_REMOVAL_HOLD.total_seconds() - ago if kept else AUTH_REMOVAL_BOUND.total_seconds()
    next_call = rsp.next_call()
    assert next_call is not None
    assert next_call.total_seconds() == due + 1, (name, next_call)


@dataclass(frozen=True)
class DeletionCase:
    """Auth turned off `ago` seconds before, the SecurityPolicy's Object as Crossplane fetched it."""

    name: str
    ago: float
    # Fetched: there (its deletion not done) or gone; None: not fetched for this call.
    there: bool | None
    # callerAuth's memory before this call: policyDeleting, or policyGoneAt (seconds ago).
    deleting: bool = False
    gone_ago: float | None = None
    # The controller of the Object fetched: this XR, or another of that name elsewhere.
    owner: str = "inference"
    # Then: told to send a key, with this memory, called again in (seconds).
    told: bool = True
    memory: dict[str, Any] = field(default_factory=dict)
    next_call: float | None = None


DELETION_CASES = [
    DeletionCase(
        "exactly at the hold's end, its Object still there: the policy has left, told and remembered",
        AUTH_REMOVAL_HOLD.total_seconds(),
        there=True,
        memory={"policyDeleting": True},
        next_call=AUTH_REMOVAL_RECHECK.total_seconds(),
    ),
    DeletionCase(
        "26 s after, its Object still there (provider-kubernetes down): told, remembered, looked at again",
        26,
        there=True,
        memory={"policyDeleting": True},
        next_call=AUTH_REMOVAL_RECHECK.total_seconds(),
    ),
    DeletionCase(
        "10 minutes after, its Object still there: still told (Envoy still checks keys)",
        600,
        there=True,
        deleting=True,
        memory={"policyDeleting": True},
        next_call=AUTH_REMOVAL_RECHECK.total_seconds(),
    ),
    DeletionCase(
        "not fetched for this call (its first): counted as still there",
        600,
        there=None,
        deleting=True,
        memory={"policyDeleting": True},
        next_call=AUTH_REMOVAL_RECHECK.total_seconds(),
    ),
    DeletionCase(
        "10 minutes after, found gone now after it was seen there: told 15 s more from now",
        600,
        there=False,
        deleting=True,
        memory={"policyGoneAt": 0},
        next_call=AUTH_REMOVAL_BOUND.total_seconds() + 1,
    ),
    DeletionCase(
        "seen there on the call before, gone now, beside a gone stamp restored from before: 15 s from now",
        600,
        there=False,
        deleting=True,
        gone_ago=14,
        memory={"policyGoneAt": 0},
        next_call=AUTH_REMOVAL_BOUND.total_seconds() + 1,
    ),
    DeletionCase(
        "found gone 14 s ago: still told",
        600,
        there=False,
        gone_ago=14,
        memory={"policyGoneAt": 14},
        next_call=AUTH_REMOVAL_BOUND.total_seconds() + 1 - 14,
    ),
    DeletionCase(
        "found gone 15 s ago: Envoy has dropped the check, nothing told",
        600,
        there=False,
        gone_ago=15,
        told=False,
    ),
    DeletionCase(
        "a gone stamp ahead of our clock counts from now",
        600,
        there=False,
        gone_ago=-600,
        memory={"policyGoneAt": 0},
        next_call=AUTH_REMOVAL_BOUND.total_seconds() + 1,
    ),
    DeletionCase(
        "no memory of it past the hold (a status write refused, or from before), gone now: 15 s from now",
        41,
        there=False,
        memory={"policyGoneAt": 0},
        next_call=AUTH_REMOVAL_BOUND.total_seconds() + 1,
    ),
    DeletionCase(
        "an Object of that name another XR controls is not this gateway's policy: counted gone",
        600,
        there=True,
        owner="another",
        gone_ago=15,
        told=False,
    ),
]


@pytest.mark.parametrize("case", DELETION_CASES, ids=[c.name for c in DELETION_CASES])
def test_callers_are_told_to_send_a_key_while_the_policys_deletion_is_not_done(case: DeletionCase) -> None:
    """Found in review: with the policy's deletion stuck (provider-kubernetes down), past the hold the
    status said no key was needed while Envoy still checked keys, and Crossplane no longer observes
    an Object that has left the desired state: so it is required by name."""
    xr = copy.deepcopy(XR)
    told: dict[str, Any] = {"header": "authorization", "removedAt": _stamp(case.ago)}
    if case.deleting:
        told["policyDeleting"] = True
    if case.gone_ago is not None:
        told["policyGoneAt"] = _stamp(case.gone_ago)
    xr["status"] = {"gateway": {"callerAuth": told}}
    controller = controller_reference(XR) | {"name": case.owner}
    fetched = [{"kind": "Object", "metadata": {"ownerReferences": [controller]}}] if case.there else []
    required = {} if case.there is None else {POLICY_OBJECT_REQUIREMENT: fetched}
    observed = _policy_accepted_ago(600)
    rsp = compose(xr, GATEWAY_INPUT, observed, required, now=CLOCK)
    # Asked for by name, in the XR's namespace, on every call while callers are told.
    want = rsp.requirements[POLICY_OBJECT_REQUIREMENT]
    assert (want.api_version, want.kind, want.name, want.namespace) == (
        "kubernetes.m.crossplane.io/v1alpha1",
        "Object",
        unique_name("inference", "security-policy", identity=("InferenceGateway",)),
        "platform",
    )
    assert SECURITY_POLICY not in rsp.resources
    got = rsp.status["gateway"].get("callerAuth")
    assert (got is not None) is case.told, got
    if not case.told:
        return
    memory = {k: v for k, v in got.items() if k not in ("header", "removedAt")}
    want_memory = {k: (_stamp(v) if k == "policyGoneAt" else v) for k, v in case.memory.items()}
    assert (got["removedAt"], memory) == (told["removedAt"], want_memory)
    # Routes read the serving record: the memory is not in it, so it moves no route.
    record = json.loads(rsp.resources[SERVING_RECORD]["data"]["gateway"])
    assert record["callerAuth"] == {"header": "authorization", "removedAt": told["removedAt"]}
    next_call = rsp.next_call()
    assert next_call is not None
    assert next_call.total_seconds() == case.next_call


def test_the_policys_object_is_required_whenever_auth_is_off_and_auth_on_again_forgets_its_deletion() -> None:
    stale = {"header": "x-old", "removedAt": _stamp(30), "policyDeleting": True, "policyGoneAt": _stamp(3)}
    told = {"gateway": {"callerAuth": stale}}
    on = compose(AUTH_XR | {"status": told}, GATEWAY_INPUT, observed_state("ready"), now=CLOCK)
    never = compose(XR, GATEWAY_INPUT, observed_state("ready"), now=CLOCK)
    off = compose(XR | {"status": told}, GATEWAY_INPUT, observed_state("ready"), now=CLOCK)
    assert (list(on.requirements), list(never.requirements), list(off.requirements)) == (
        [],
        [POLICY_OBJECT_REQUIREMENT],
        [POLICY_OBJECT_REQUIREMENT],
    )
    # Auth on again: the header asked for now, nothing of the deletion before.
    assert on.status["gateway"]["callerAuth"] == {"header": "authorization"}
    assert "callerAuth" not in never.status["gateway"]


def _our_policy_object(*, deleting: bool) -> dict[str, Any]:
    """The gateway's SecurityPolicy Object as Crossplane fetches it by name: controlled by the XR."""
    obj = copy.deepcopy(_policy_accepted_ago(600)[SECURITY_POLICY])
    obj["metadata"] = {"ownerReferences": [controller_reference(XR)]}
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-12-05T06:00:00Z"
    return obj


def test_a_status_that_lost_caller_auth_while_its_policy_is_being_deleted_tells_the_header_again() -> None:
    """Past the hold the policy is no longer observed: read from its Object, fetched by name. Told from
    now, as a status that lost it while the policy was observed is (Envoy still checks keys)."""
    observed = observed_state("ready")
    required = {POLICY_OBJECT_REQUIREMENT: [_our_policy_object(deleting=True)]}
    got = compose(XR, GATEWAY_INPUT, observed, required, now=CLOCK).status["gateway"].get("callerAuth")
    assert got == {"header": "authorization", "removedAt": _stamp(0)}
    gone = compose(XR, GATEWAY_INPUT, observed, {POLICY_OBJECT_REQUIREMENT: []}, now=CLOCK)
    assert "callerAuth" not in gone.status["gateway"]


def test_callers_are_told_from_auth_off_until_15_s_after_a_call_found_the_policys_object_gone() -> None:
    """Call after call, each status fed back, on a clock with fractions of a second (stamps are
    whole seconds): never untold while the Object is there, nor within 15 s of the call that found
    it gone."""
    start = datetime(2026, 12, 5, 12, 0, 0, 400000, tzinfo=UTC)
    xr = copy.deepcopy(XR) | {"status": {"gateway": {"callerAuth": {"header": "authorization"}}}}
    there = {POLICY_OBJECT_REQUIREMENT: [_our_policy_object(deleting=False)]}
    deleting = {POLICY_OBJECT_REQUIREMENT: [_our_policy_object(deleting=True)]}
    gone: dict[str, list[dict[str, Any]]] = {POLICY_OBJECT_REQUIREMENT: []}
    # (seconds after auth was turned off, the Object as fetched, told after this call)
    calls = [
        (0.0, there, True),
        (24.9, there, True),
        (25.0, {}, True),  # a reconcile's first call, before Crossplane has fetched it
        (25.1, deleting, True),
        (60.0, deleting, True),
        (60.7, gone, True),  # found gone at 12:01:01.1, stamped up to 12:01:02
        (75.7, gone, True),  # 15 s after it: still told, the stamp's second not cut
        (76.5, gone, True),
        (76.7, gone, False),  # 12:01:17.1: 15 s after the stamp
    ]
    for after, required, told in calls:
        observed = (
            _policy_accepted_ago(600)
            if after < AUTH_REMOVAL_HOLD.total_seconds()
            else observed_state("ready")
        )
        rsp = compose(xr, GATEWAY_INPUT, observed, required, now=start + timedelta(seconds=after))
        got = rsp.status["gateway"].get("callerAuth")
        assert (got is not None) is told, (after, got)
        xr["status"] = {"gateway": rsp.status["gateway"]}


NOTHING_TO_TELL_CASES = [
    # (name, callerAuth published before, the policy Object: None, "there" or "deleting")
    ("auth never on and no policy: nothing told", None, None),
    ("a header that is no string and no policy: nothing told", {"header": 7}, None),
    (
        "a status that lost callerAuth while its policy's target is gone: nothing checks keys, nothing told",
        None,
        "target gone",
    ),
]


@pytest.mark.parametrize(
    ("name", "previous", "policy"), NOTHING_TO_TELL_CASES, ids=[c[0] for c in NOTHING_TO_TELL_CASES]
)
def test_with_auth_off_callers_are_told_nothing_where_no_policy_makes_envoy_check(
    name: str, previous: dict[str, Any] | None, policy: str | None
) -> None:
    xr = copy.deepcopy(XR)
    if previous is not None:
        xr["status"] = {"gateway": {"callerAuth": previous}}
    observed = _policy_accepted_ago(600)
    if policy is None:
        del observed[SECURITY_POLICY]
    else:
        observed[SECURITY_POLICY]["status"]["conditions"] = [
            {"type": "Synced", "status": "False", "message": f"observe failed: {readiness._TARGET_GONE}"}
        ]
    rsp = compose(xr, GATEWAY_INPUT, observed, {POLICY_OBJECT_REQUIREMENT: []}, now=CLOCK)
    assert "callerAuth" not in rsp.status["gateway"], name
    assert SECURITY_POLICY not in rsp.resources, name
    assert set(rsp.resources) == ALL_NAMES, name


def _policy_object(observed: Any, desired: Any) -> dict[str, Any]:
    """A SecurityPolicy Object whose target has `observed` as its extractFrom (absent: None) and
    which asks for `desired`."""
    policy: dict[str, Any] = {
        "spec": {"forProvider": {"manifest": {"spec": {"apiKeyAuth": {"extractFrom": desired}}}}}
    }
    if observed is not None:
        policy["status"] = {"atProvider": {"manifest": {"spec": {"apiKeyAuth": {"extractFrom": observed}}}}}
    return policy


POLICY_HEADER_CASES = [
    # (name, the target's extractFrom as observed, the Object's as asked for, the header told)
    (
        "the header Envoy Gateway has is told, not the one the Object asks for",
        [{"headers": ["x-api-key"]}],
        [{"headers": ["authorization"]}],
        "x-api-key",
    ),
    (
        "a target not observed yet: the header the Object asks for",
        None,
        [{"headers": ["authorization"]}],
        "authorization",
    ),
    (
        "a headers field that is no list names nothing: the Object's own is read",
        [{"headers": "x-api-key"}],
        [{"headers": ["authorization"]}],
        "authorization",
    ),
    ("a header that is no string is passed over for the next", [{"headers": [7, "x-key"]}], [], "x-key"),
    ("an extractFrom that is no list names nothing", {"headers": ["x-key"]}, "authorization", None),
    ("a policy with no header anywhere: nothing told", [{"params": ["key"]}], [{}], None),
]


@pytest.mark.parametrize(
    ("name", "observed", "desired", "header"), POLICY_HEADER_CASES, ids=[c[0] for c in POLICY_HEADER_CASES]
)
def test_a_status_that_lost_caller_auth_tells_the_header_its_policy_makes_envoy_check(
    name: str, observed: Any, desired: Any, header: str | None
) -> None:
    now = plan()
    got = caller_auth(now, None, _policy_object(observed, desired), None)
    if header is None:
        assert got is None, name
        return
    assert got is not None, name
    assert got["header"] == header, name
    assert readiness.timestamp(got["removedAt"]) == now.now.replace(microsecond=0), name


def test_auth_turned_off_while_envoy_gateway_refused_its_policy_keeps_it_and_says_so() -> None:
    """A refused policy makes Envoy answer every request 500 until it is deleted: kept for the hold
    like any other (fail closed), and GatewayReady False (AuthNotAccepted) while it is there."""
    xr = copy.deepcopy(XR)
    xr["status"] = {"gateway": {"callerAuth": {"header": "authorization", "removedAt": _stamp(2)}}}
    observed = _policy_accepted_ago(600, status="False")
    observed[SECURITY_POLICY]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    rsp = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    # Kept for the hold all the same: dropped, keyless requests would be served while routes
    # that have not followed yet still say a key is needed.
    assert rsp.resources[SECURITY_POLICY]["spec"] == observed[SECURITY_POLICY]["spec"]
    assert set(rsp.resources) == ALL_NAMES | {SECURITY_POLICY}
    verdict = said(rsp, "GatewayReady")
    assert (verdict.ready, verdict.reason) == (False, GatewayReason.AUTH_NOT_ACCEPTED)
    assert "not deleted yet (caller auth was turned off)" in verdict.message
    # Remembered, for when it has left the desired state and is observed no more.
    assert rsp.status["gateway"]["callerAuth"].get("policyRefused") is True
    # Its target deleted (the Object not yet): nothing answers 500, nothing is kept.
    observed[SECURITY_POLICY]["status"]["conditions"] = [
        {"type": "Synced", "status": "False", "message": f"observe failed: {readiness._TARGET_GONE}"}
    ]
    gone = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    assert said(gone, "GatewayReady").ready
    assert SECURITY_POLICY not in gone.resources
    # Once the Object is gone too, nothing holds the gateway.
    del observed[SECURITY_POLICY]
    assert said(compose(xr, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady").ready


@dataclass(frozen=True)
class RefusedRemovalCase:
    """Auth turned off 600 s before (the policy left the desired state long ago); its Object as
    Crossplane fetched it by name, and what callerAuth remembered of it."""

    name: str
    # Fetched: "refused" or "accepted" (its deletion not done), "gone"; None: not fetched this call.
    there: str | None
    # callerAuth's memory before this call.
    memory: dict[str, Any]
    # Then: GatewayReady's reason, and what callerAuth remembers of the refusal.
    reason: GatewayReason
    remembered: bool


_STUCK = {"policyDeleting": True}
REFUSED_REMOVAL_CASES = [
    RefusedRemovalCase(
        "its refused Object still there (provider-kubernetes down): Envoy answers 500, AuthNotAccepted",
        "refused",
        _STUCK,
        GatewayReason.AUTH_NOT_ACCEPTED,
        remembered=True,
    ),
    RefusedRemovalCase(
        "its accepted Object still there: keys checked and callers told to send one, the gateway serves",
        "accepted",
        _STUCK,
        GatewayReason.AVAILABLE,
        remembered=False,
    ),
    RefusedRemovalCase(
        "refused when last seen, not fetched for this call (its first): still AuthNotAccepted",
        None,
        _STUCK | {"policyRefused": True},
        GatewayReason.AUTH_NOT_ACCEPTED,
        remembered=True,
    ),
    RefusedRemovalCase(
        "refused when last seen, its target deleted and its Object not yet: still AuthNotAccepted",
        "target gone",
        _STUCK | {"policyRefused": True},
        GatewayReason.AUTH_NOT_ACCEPTED,
        remembered=True,
    ),
    RefusedRemovalCase(
        "refused when last seen, found gone now: AuthNotAccepted while its deletion reaches Envoy",
        "gone",
        _STUCK | {"policyRefused": True},
        GatewayReason.AUTH_NOT_ACCEPTED,
        remembered=True,
    ),
    RefusedRemovalCase(
        "refused when last seen, found gone 14 s ago: still AuthNotAccepted",
        "gone",
        {"policyGoneAt": 14, "policyRefused": True},
        GatewayReason.AUTH_NOT_ACCEPTED,
        remembered=True,
    ),
    RefusedRemovalCase(
        "refused when last seen, found gone 15 s ago: Envoy has its deletion, the gateway serves",
        "gone",
        {"policyGoneAt": 15, "policyRefused": True},
        GatewayReason.AVAILABLE,
        remembered=False,
    ),
    RefusedRemovalCase(
        "accepted again before it went: not held once gone",
        "gone",
        _STUCK,
        GatewayReason.AVAILABLE,
        remembered=False,
    ),
]


@pytest.mark.parametrize("case", REFUSED_REMOVAL_CASES, ids=[c.name for c in REFUSED_REMOVAL_CASES])
def test_a_refused_policy_holds_the_gateway_until_its_deletion_reaches_envoy(
    case: RefusedRemovalCase,
) -> None:
    """Found in review: once the policy of auth turned off left the desired state, Crossplane no
    longer observed it, and GatewayReady said True while a refused policy, its deletion not done or
    not yet pushed, still made Envoy answer every request 500."""
    xr = copy.deepcopy(XR)
    told: dict[str, Any] = {"header": "authorization", "removedAt": _stamp(600)}
    told |= {k: (_stamp(v) if k == "policyGoneAt" else v) for k, v in case.memory.items()}
    xr["status"] = {"gateway": {"callerAuth": told}}
    fetched = []
    if case.there in {"refused", "accepted", "target gone"}:
        policy = _policy_accepted_ago(600, status="True" if case.there == "accepted" else "False")
        obj = policy[SECURITY_POLICY]
        obj["metadata"]["ownerReferences"] = [controller_reference(XR)]
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Deleting"}]
        if case.there == "target gone":
            obj["status"]["conditions"].append(
                {"type": "Synced", "status": "False", "message": f"observe failed: {readiness._TARGET_GONE}"}
            )
        fetched = [obj]
    required = {} if case.there is None else {POLICY_OBJECT_REQUIREMENT: fetched}
    observed = _policy_accepted_ago(600)
    del observed[SECURITY_POLICY]  # left the desired state: Crossplane observes it no more
    rsp = compose(xr, GATEWAY_INPUT, observed, required, now=CLOCK)
    verdict = said(rsp, "GatewayReady")
    assert verdict.reason == case.reason, verdict.message
    if case.reason == GatewayReason.AUTH_NOT_ACCEPTED:
        # Past the hold it is observed no more: said from what was fetched or remembered.
        assert "was not Accepted when last seen and is being deleted" in verdict.message, verdict.message
    got = rsp.status["gateway"].get("callerAuth") or {}
    assert (got.get("policyRefused") is True) is case.remembered, got
    # Routes read the serving record: they follow the gateway, without the memory.
    record = rsp.resources[SERVING_RECORD]["data"]
    assert "policyRefused" not in record["gateway"]
    assert (record["ready"], record["reason"]) == (str(case.reason == GatewayReason.AVAILABLE), case.reason)


def test_a_refused_policy_whose_header_cannot_be_read_still_holds_the_gateway() -> None:
    """Nothing told to callers (a status that lost callerAuth, and a policy naming no header to
    read), so no memory of the refusal: the policy itself, refused while observed, still says the
    500s (fail closed)."""
    xr = copy.deepcopy(XR)
    observed = _policy_accepted_ago(600, status="False")
    obj = observed[SECURITY_POLICY]
    for manifest in (obj["spec"]["forProvider"]["manifest"], obj["status"]["atProvider"]["manifest"]):
        manifest.setdefault("spec", {})["apiKeyAuth"] = {"credentialRefs": []}
    rsp = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    assert rsp.status["gateway"].get("callerAuth") is None
    verdict = said(rsp, "GatewayReady")
    assert (verdict.ready, verdict.reason) == (False, GatewayReason.AUTH_NOT_ACCEPTED), verdict.message


def test_an_accepted_policy_being_deleted_does_not_hold_the_gateway() -> None:
    """The Object of a policy being deleted says Ready=False (Deleting) while Envoy still serves with
    it: the gateway reads the policy's own Accepted, so it does not go False for those seconds."""
    xr = copy.deepcopy(XR)
    xr["status"] = {"gateway": {"callerAuth": {"header": "authorization", "removedAt": _stamp(30)}}}
    observed = _policy_accepted_ago(600)
    observed[SECURITY_POLICY]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "Deleting"},
        {"type": "Synced", "status": "True"},
    ]
    rsp = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    assert SECURITY_POLICY not in rsp.resources
    assert said(rsp, "GatewayReady").ready


def test_auth_turned_on_again_drops_the_removal_stamp() -> None:
    xr = copy.deepcopy(AUTH_XR)
    xr["status"] = {"gateway": {"callerAuth": {"header": "authorization", "removedAt": _stamp(3)}}}
    rsp = compose(xr, GATEWAY_INPUT, _policy_accepted_ago(60), now=CLOCK)
    assert rsp.status["gateway"]["callerAuth"] == {"header": "authorization"}


def test_the_policy_goes_and_the_key_stops_being_asked_for_exactly_at_their_bounds() -> None:
    """To the second: the policy kept until the hold has passed, the key asked for until the bound
    after it; each call after auth is turned off comes back one second after the next of them."""
    stamp = datetime(2026, 12, 4, 15, 0, 0, tzinfo=UTC)
    previous = {"header": "authorization", "removedAt": "2026-12-04T15:00:00Z"}
    told_for = AUTH_REMOVAL_HOLD + AUTH_REMOVAL_BOUND

    def at(after: timedelta) -> GatewayPlan:
        return dataclasses.replace(plan(), now=stamp + after)

    # Its Object found gone at the hold's end, as provider-kubernetes deletes it.
    gone = previous | {"policyGoneAt": "2026-12-04T15:00:25Z"}
    assert caller_auth(at(told_for), gone, None, []) is None
    assert caller_auth(at(told_for - timedelta(seconds=1)), gone, None, []) == gone
    accepted = _policy_accepted_ago(600)[SECURITY_POLICY]
    assert auth_policy_held(at(AUTH_REMOVAL_HOLD - timedelta(seconds=1)), {"callerAuth": previous}, accepted)
    assert not auth_policy_held(at(AUTH_REMOVAL_HOLD), {"callerAuth": previous}, accepted)
    published = caller_auth(at(timedelta(0)), {"header": "authorization"}, None, None)
    assert published == previous
    assert auth_removed_in(at(timedelta(0)), {"callerAuth": published}) == AUTH_REMOVAL_HOLD + timedelta(
        seconds=1
    )
    assert auth_removed_in(
        at(AUTH_REMOVAL_HOLD), {"callerAuth": published}
    ) == AUTH_REMOVAL_BOUND + timedelta(seconds=1)
    # Auth on again: nothing held, nothing due.
    on = plan({**AUTH_XR["spec"]})
    assert not auth_policy_held(on, {"callerAuth": previous}, accepted)
    assert auth_removed_in(on, {"callerAuth": previous}) is None


# --- a change of the first listener Envoy Gateway has not programmed yet -------------------------


def _edited(**listener: Any) -> dict[str, Any]:
    """The example gateway with its first listener changed, and any listeners given after it."""
    xr = copy.deepcopy(XR)
    first = {"name": "http"} | {k: v for k, v in listener.items() if k != "then"}
    xr["spec"]["listeners"] = [first, *listener.get("then", [])]
    return xr


def _programmed_at(
    xr: dict[str, Any], generation: int | None, judged: int | None, was: dict[str, Any] = XR
) -> dict[str, dict[str, Any]]:
    """The ready state, with `xr`'s spec applied to the Gateway (its generation given), every listener
    Programmed of generation `judged` (None: no observedGeneration), and the serving record as the gateway
    `was` (by default the example), before the edit, published it."""
    before = gateway.compose(
        was,
        InferenceGatewaySpec.model_validate(was["spec"]),
        Input.model_validate(GATEWAY_INPUT),
        observed_state("ready"),
    )
    observed = applied(xr, GATEWAY_INPUT, observed_state("ready"), {})
    manifest = observed[GATEWAY]["status"]["atProvider"]["manifest"]
    if generation is not None:
        manifest["metadata"]["generation"] = float(generation)  # as protobuf hands numbers over
    programmed: dict[str, Any] = {"type": "Programmed", "status": "True", "reason": "Programmed"}
    if judged is not None:
        programmed["observedGeneration"] = float(judged)
    manifest["status"]["listeners"] = [
        {"name": item["name"], "conditions": [programmed]} for item in xr["spec"]["listeners"]
    ]
    observed[SERVING_RECORD] = copy.deepcopy(before.resources[SERVING_RECORD])
    return observed


# (case, the edited gateway, Gateway generation, listeners' Programmed observedGeneration) -> held
LISTENER_HOLD_CASES = [
    (
        "a host name Envoy Gateway has not programmed yet is held",
        _edited(hostname="new.example.com"),
        3,
        2,
        True,
    ),
    ("a host name programmed is published", _edited(hostname="new.example.com"), 3, 3, False),
    ("a port Envoy Gateway has not programmed yet is held", _edited(port=8080), 3, 2, True),
    (
        "allowedRoutes Envoy Gateway has not programmed yet are held",
        _edited(allowedRoutes="Same"),
        3,
        2,
        True,
    ),
    (
        "a listener added changes nothing published: nothing is held while Envoy Gateway catches up",
        _edited(then=[{"name": "extra", "port": 8081}]),
        3,
        2,
        False,
    ),
    (
        "a Programmed that names no generation is judged as it is",
        _edited(hostname="new.example.com"),
        3,
        None,
        False,
    ),
    (
        "a Gateway that names no generation is judged as it is",
        _edited(hostname="new.example.com"),
        None,
        2,
        False,
    ),
]


@pytest.mark.parametrize(
    ("xr", "generation", "judged", "held"),
    [c[1:] for c in LISTENER_HOLD_CASES],
    ids=[c[0] for c in LISTENER_HOLD_CASES],
)
def test_a_first_listener_changed_is_published_once_envoy_gateway_programmed_it(
    xr: dict[str, Any], generation: int | None, judged: int | None, held: bool
) -> None:
    """Found in review: a listener's host name, port or allowedRoutes changed while Envoy Gateway's
    controller was down was published at once, and GatewayReady said True of a URL Envoy did not serve."""
    observed = _programmed_at(xr, generation, judged)
    got = compose(xr, GATEWAY_INPUT, observed)
    ready = said(got, "GatewayReady")
    published = got.status["gateway"]
    record = serving_record.as_gateway(got.resources[SERVING_RECORD])
    assert record is not None
    before = serving_record.as_gateway(observed[SERVING_RECORD])
    assert before is not None
    if held:
        assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message
        assert "has programmed generation 2 only (the Gateway is at 3, or not yet applied" in ready.message
        assert "cannot apply the Gateway" not in ready.message
        for key in ("listener", "allowedRoutes", "hostname", "url", "urls"):
            assert published.get(key) == before["status"]["gateway"].get(key), key
        assert record["status"]["gateway"] == before["status"]["gateway"] | {
            k: v
            for k, v in published.items()
            if k not in ("listener", "allowedRoutes", "hostname", "url", "urls")
        }
    else:
        assert (ready.ready, ready.reason) == (True, GatewayReason.AVAILABLE), ready.message
        spec = xr["spec"]["listeners"][0]
        assert published.get("hostname") == spec.get("hostname")
        assert published["allowedRoutes"] == spec.get("allowedRoutes", "All")


def test_a_listener_change_with_no_record_published_yet_holds_nothing() -> None:
    xr = _edited(hostname="new.example.com")
    observed = _programmed_at(xr, 3, 2)
    del observed[SERVING_RECORD]
    assert said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady").reason == GatewayReason.AVAILABLE


def test_a_listener_change_not_yet_applied_to_the_gateway_is_held() -> None:
    """The first calls after the change: the Gateway still carries the spec before (its Programmed of its
    own generation), and the record, written before the Gateway, would say the change was published
    (found on the real stack: the hold never began)."""
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(_edited(), 2, 2)
    got = compose(xr, GATEWAY_INPUT, observed)
    ready = said(got, "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message
    assert got.status["gateway"]["allowedRoutes"] == "All"


@pytest.mark.parametrize(
    ("written_ago", "held"),
    [
        pytest.param(2, True, id="programmed 2 s ago: Envoy may not have it yet, the change is held"),
        pytest.param(4, True, id="programmed 4 s ago: still within the push bound"),
        pytest.param(5, False, id="programmed 5 s ago: at the push bound, the change is published"),
        pytest.param(6, False, id="programmed 6 s ago: past the push bound, the change is published"),
    ],
)
def test_a_listener_change_envoy_gateway_programmed_is_held_until_envoy_has_it(
    written_ago: int, held: bool
) -> None:
    """Found on the real stack: a request got 404 in the second GatewayReady turned True at Envoy Gateway's
    status write, before Envoy had the xDS that carried the widened listener."""
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(xr, 3, 3)
    manifest = observed[GATEWAY]["status"]["atProvider"]["manifest"]
    manifest["metadata"]["managedFields"] = [
        {
            "manager": "envoy-gateway",
            "operation": "Update",
            "subresource": "status",
            "time": stamp_ago(written_ago),
        }
        | {"fieldsV1": {"f:status": {"f:listeners": {}}}}
    ]
    got = compose(xr, GATEWAY_INPUT, observed, now=CLOCK)
    ready = said(got, "GatewayReady")
    if held:
        assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message
        assert "programmed it moments ago" in ready.message
        assert got.status["gateway"]["allowedRoutes"] == "All"
        # The record goes on naming the spec it was published for, until the bound has passed.
        assert (
            got.resources[SERVING_RECORD]["data"]["listener"] == observed[SERVING_RECORD]["data"]["listener"]
        )
        # Called back once the bound has passed, not a poll later.
        assert got.ttl == timedelta(seconds=5 - written_ago + 1)
    else:
        assert (ready.ready, ready.reason) == (True, GatewayReason.AVAILABLE), ready.message
        assert got.status["gateway"]["allowedRoutes"] == "Same"


def test_the_first_listener_is_judged_by_its_own_status_whatever_order_they_are_reported_in() -> None:
    """Another listener reported first, programmed at the current generation, does not stand for the
    first listener of the spec, whose change Envoy Gateway has not programmed."""
    xr = _edited(hostname="new.example.com", then=[{"name": "extra", "port": 8081}])
    observed = _programmed_at(xr, 3, 2)
    listeners = observed[GATEWAY]["status"]["atProvider"]["manifest"]["status"]["listeners"]
    listeners.reverse()
    listeners[0]["conditions"] = [{"type": "Programmed", "status": "True", "observedGeneration": 3.0}]
    ready = said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message


def _status_written_ago(observed: dict[str, dict[str, Any]], seconds: int) -> None:
    manifest = observed[GATEWAY]["status"]["atProvider"]["manifest"]
    manifest["metadata"]["managedFields"] = [
        {
            "manager": "envoy-gateway",
            "operation": "Update",
            "subresource": "status",
            "time": stamp_ago(seconds),
        }
        | {"fieldsV1": {"f:status": {"f:addresses": {}}}}
    ]


def test_a_url_changed_by_what_envoy_gateway_assigns_is_no_listener_change_and_holds_nothing() -> None:
    """An address or node port Envoy Gateway assigned (a NodePort Service, a load balancer's address)
    changes the URL, not the first listener's spec: published at once, GatewayReady as it was."""
    observed = _programmed_at(_edited(), 3, 3)
    record = observed[SERVING_RECORD]
    published = json.loads(record["data"]["gateway"])
    record["data"]["gateway"] = json.dumps(published | {"url": "http://10.0.0.9:31000"})
    _status_written_ago(observed, 1)
    got = compose(_edited(), GATEWAY_INPUT, observed, now=CLOCK)
    assert said(got, "GatewayReady").reason == GatewayReason.AVAILABLE
    assert got.status["gateway"]["url"] == published["url"]


def test_a_record_of_an_earlier_version_names_no_listener_and_holds_nothing() -> None:
    """Its first listener's spec is unknown: no change can be told, as before this version."""
    xr = _edited(hostname="new.example.com")
    observed = _programmed_at(xr, 3, 2)
    del observed[SERVING_RECORD]["data"]["listener"]
    assert said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady").reason == GatewayReason.AVAILABLE


def test_the_record_goes_on_naming_the_listener_spec_it_was_published_for_while_held() -> None:
    xr = _edited(port=8080)
    observed = _programmed_at(xr, 3, 2)
    got = compose(xr, GATEWAY_INPUT, observed)
    assert got.resources[SERVING_RECORD]["data"]["listener"] == observed[SERVING_RECORD]["data"]["listener"]
    released = compose(xr, GATEWAY_INPUT, _programmed_at(xr, 3, 3))
    assert json.loads(released.resources[SERVING_RECORD]["data"]["listener"])["port"] == 8080


def test_a_programmed_listener_whose_status_write_is_not_on_record_is_published() -> None:
    """Managed fields that hold no status entry (a Gateway written by hand, say) say nothing of when Envoy
    Gateway programmed it: nothing to hold for."""
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(xr, 3, 3)
    observed[GATEWAY]["status"]["atProvider"]["manifest"]["metadata"]["managedFields"] = [
        {"manager": "provider-kubernetes", "operation": "Apply", "time": stamp_ago(1)}
        | {"fieldsV1": {"f:spec": {"f:listeners": {}}}}
    ]
    ready = said(compose(xr, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady")
    assert (ready.ready, ready.reason) == (True, GatewayReason.AVAILABLE), ready.message


@pytest.mark.parametrize(
    "written",
    [
        pytest.param("[1]", id="a listener spec that is no JSON object tells no change"),
        pytest.param("{", id="a listener spec that is no JSON tells no change"),
    ],
)
def test_a_record_whose_listener_spec_cannot_be_read_holds_nothing(written: str) -> None:
    xr = _edited(hostname="new.example.com")
    observed = _programmed_at(xr, 3, 2)
    observed[SERVING_RECORD]["data"]["listener"] = written
    assert serving_record.published_listener(observed[SERVING_RECORD]) is None
    assert said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady").reason == GatewayReason.AVAILABLE


def test_a_host_name_taken_out_is_held_while_the_gateway_still_carries_it() -> None:
    """Found in review: the Gateway still carrying the old host name looked like one carrying the spec (the
    desired as a part of the observed), and the change was published while Envoy served the old host only."""
    was = _edited(hostname="old.example.com")
    observed = _programmed_at(was, 2, 2, was=was)
    ready = said(compose(_edited(), GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message


def test_a_renamed_first_listener_is_held_until_envoy_gateway_reports_it_and_then_for_the_push_bound() -> (
    None
):
    """Found in review: a listener not reported under its new name released the record at once, and the
    push bound never began once Envoy Gateway reported it."""
    renamed = copy.deepcopy(XR)
    renamed["spec"]["listeners"] = [{"name": "web"}]
    unreported = _programmed_at(_edited(), 3, 2)
    got = compose(renamed, GATEWAY_INPUT, unreported, now=CLOCK)
    assert said(got, "GatewayReady").ready is False
    assert got.status["gateway"]["listener"] == "http"
    assert json.loads(got.resources[SERVING_RECORD]["data"]["listener"])["name"] == "http"
    reported = _programmed_at(renamed, 3, 3)
    _status_written_ago(reported, 1)
    ready = said(compose(renamed, GATEWAY_INPUT, reported, now=CLOCK), "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message
    assert "programmed it moments ago" in ready.message


@pytest.mark.parametrize("ahead", [600, 5], ids=["ten minutes ahead", "exactly the push bound ahead"])
def test_a_status_write_stamped_far_ahead_of_our_clock_holds_nothing_back(ahead: int) -> None:
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(xr, 3, 3)
    _status_written_ago(observed, -ahead)
    assert (
        said(compose(xr, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady").reason
        == GatewayReason.AVAILABLE
    )


@pytest.mark.parametrize("odd", [float("nan"), float("inf")], ids=["NaN", "infinity"])
def test_a_generation_that_is_no_number_is_judged_as_it_is_never_a_traceback(odd: float) -> None:
    xr = _edited(hostname="new.example.com")
    observed = _programmed_at(xr, 3, 2)
    observed[GATEWAY]["status"]["atProvider"]["manifest"]["metadata"]["generation"] = odd
    assert said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady").reason == GatewayReason.AVAILABLE


def test_a_gateway_provider_kubernetes_cannot_apply_says_why_while_the_change_is_held() -> None:
    """Found in review: a refused apply held the listener for good, with a message pointing at Envoy Gateway."""
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(_edited(), 2, 2)
    synced = next(c for c in observed[GATEWAY]["status"]["conditions"] if c["type"] == "Synced")
    synced |= {
        "status": "False",
        "reason": "ReconcileError",
        "message": "cannot apply: admission webhook denied",
    }
    ready = said(compose(xr, GATEWAY_INPUT, observed), "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message
    assert (
        "provider-kubernetes cannot apply the Gateway: cannot apply: admission webhook denied"
        in ready.message
    )


def test_a_listener_reported_that_the_gateway_does_not_carry_is_no_change_given_to_envoy() -> None:
    """Envoy Gateway's status names the new listener, programmed, but the Gateway as observed has another:
    what Envoy serves is not known to be the spec, so the change stays held."""
    renamed = copy.deepcopy(XR)
    renamed["spec"]["listeners"] = [{"name": "web"}]
    observed = _programmed_at(renamed, 3, 3)
    observed[GATEWAY]["status"]["atProvider"]["manifest"]["spec"]["listeners"][0]["name"] = "http"
    ready = said(compose(renamed, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady")
    assert (ready.ready, ready.reason) == (False, GatewayReason.LISTENER_NOT_PROGRAMMED), ready.message


def test_the_gateway_s_first_listener_is_found_by_name_whatever_its_place_in_the_gateway() -> None:
    """The Gateway lists another listener first; the first listener of the spec, carried exactly and
    programmed long ago, is given to Envoy: nothing is held."""
    xr = _edited(allowedRoutes="Same")
    observed = _programmed_at(xr, 3, 3)
    listeners = observed[GATEWAY]["status"]["atProvider"]["manifest"]["spec"]["listeners"]
    listeners.insert(0, {"name": "other", "protocol": "HTTP", "port": 8081})
    _status_written_ago(observed, 60)
    ready = said(compose(xr, GATEWAY_INPUT, observed, now=CLOCK), "GatewayReady")
    assert (ready.ready, ready.reason) == (True, GatewayReason.AVAILABLE), ready.message
