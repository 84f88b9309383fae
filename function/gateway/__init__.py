"""Compose an InferenceGateway: Gateway, EnvoyProxy, anchor route and observer.

Why each piece exists:

- The **EnvoyProxy** carries replicas and the PodDisruptionBudget, and in
  Pinned mode the Deployment's name, so the observer knows what to watch
  without guessing Envoy Gateway's hash.
- The **Gateway** is what model routes attach to.
- The **anchor** AIGatewayRoute keeps one effective route attached for the
  gateway's whole life. Without it, removing the last model route makes Envoy
  AI Gateway roll the Envoy pods to drop the ext-proc sidecar, and the next
  model route is served by sidecar-less pods (HTTP 500) until a second rollout
  finishes. It matches one exact header that is not the model header, so it
  never appears in `/v1/models`, and a value no client sends.
- The **observer** is an observe-only, watched Object on the Envoy Deployment
  whose CEL query says when the rollout is finished with the sidecar in.
- The **ClientTrafficPolicy** raises Envoy's request buffer: its 32 KiB
  default rejects ordinary AI request bodies.
- The **serving record**, a ConfigMap composed directly, holds what the
  gateway's routes act on (where they attach, GatewayReady as decided) and
  changes only when that does (function/serving_record.py says why).

GatewayReady is True only when all of these are in effect. Every composed
resource is emitted on every call, whatever is missing or unready: a missing
resource changes the condition, never the desired state.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from function import cel, readiness, serving_record
from function.api import InferenceGatewaySpec, Input, InvalidError, ServiceType
from function.gateway.anchor import build_anchor
from function.gateway.manifests import (
    build_client_traffic_policy,
    build_envoy_proxy,
    build_gateway,
    build_https_redirect,
    build_security_policy,
)
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
    held_deployment,
    moved_from,
)
from function.gateway.verdict import (
    auth_policy_held,
    auth_removed_in,
    caller_auth,
    derive_verdict,
    for_routes,
    listener_change_held,
    listener_pushed_in,
    listener_spec,
    published_status,
    settle,
)
from function.objects import OBJECT_API_VERSION, plan_basis, target_ref, wrap
from function.outcome import Outcome, Requirement, keep_observed
from function.upstream import ACCEPTED, PROGRAMMED


def build_observer_target(plan: GatewayPlan) -> dict[str, Any]:
    """The Envoy Deployment the observer observes; the verdict checks the observer reports it."""
    return plan.observer_target


def build_service_target(plan: GatewayPlan) -> dict[str, Any]:
    namespace, name = plan.service
    return target_ref("v1", "Service", name, namespace)


def build_objects(plan: GatewayPlan) -> dict[str, dict[str, Any]]:
    """Every composed resource of the gateway, keyed by composition-resource-name."""
    provider = plan.spec.provider_config_ref
    ns = plan.xr_namespace
    objects = {
        ENVOY_PROXY: wrap(
            name=plan.object_name("envoyproxy"),
            namespace=ns,
            manifest=build_envoy_proxy(plan),
            provider_config=provider,
        ),
        GATEWAY: wrap(
            name=plan.object_name("gateway"),
            namespace=ns,
            manifest=build_gateway(plan),
            provider_config=provider,
            cel_query=cel.condition_true_query(PROGRAMMED),
        ),
        ANCHOR: wrap(
            name=plan.object_name("anchor"),
            namespace=ns,
            manifest=build_anchor(plan),
            provider_config=provider,
            cel_query=cel.condition_true_query(ACCEPTED),
        ),
        OBSERVER: wrap(
            name=plan.object_name("envoy-deployment"),
            namespace=ns,
            manifest=build_observer_target(plan),
            provider_config=provider,
            cel_query=cel.deployment_rollout_query(
                plan.spec.envoy.availability_policy, plan.inp.ext_proc_marker_annotation
            ),
            observe_only=True,
        ),
        # Judged and watched: Conflicted (an older policy on the Gateway) or
        # Invalid, Envoy keeps its 32 KiB buffer and answers 413 to AI bodies.
        CLIENT_TRAFFIC_POLICY: wrap(
            name=plan.object_name("client-traffic-policy"),
            namespace=ns,
            manifest=build_client_traffic_policy(plan),
            provider_config=provider,
            cel_query=cel.policy_accepted_query(),
        ),
    }
    if plan.spec.envoy.service_type is ServiceType.NODE_PORT:
        # Watched for the node port the API server assigns: the published URL
        # carries it. It judges nothing: requests do not wait for our URL.
        objects[ENVOY_SERVICE] = wrap(
            name=plan.object_name("envoy-service"),
            namespace=ns,
            manifest=build_service_target(plan),
            provider_config=provider,
            cel_query=cel.node_port_query(plan.spec.listeners[0].port),
            observe_only=True,
        )
    if plan.spec.redirecting:
        # Watched and judged on its own Object (Ready once Envoy Gateway accepts it),
        # not in GatewayReady (nor so the XR's Ready): inference is on HTTPS, and a
        # redirect refused costs plain-HTTP clients their 301, not a model.
        objects[HTTPS_REDIRECT] = wrap(
            name=plan.object_name("https-redirect"),
            namespace=ns,
            manifest=build_https_redirect(plan),
            provider_config=provider,
            cel_query=cel.route_accepted_query(),
        )
    auth = plan.spec.auth.api_keys
    if auth is not None:
        # Judged and watched: while it is not Accepted, every request fails.
        objects[SECURITY_POLICY] = wrap(
            name=plan.object_name("security-policy"),
            namespace=ns,
            manifest=build_security_policy(plan, auth),
            provider_config=provider,
            cel_query=cel.policy_accepted_query(),
        )
    return objects


def removed_by_spec(name: str, *, policy_held: bool) -> bool:
    """True for an observed resource the spec no longer composes.

    The SecurityPolicy of auth turned off once its removal hold has passed
    (`policy_held`: verdict.auth_policy_held), the Service observer of a gateway
    that is no longer NodePort, the redirect of a gateway none of whose
    listeners redirects. Asked only of observed names this call did
    not compose, so what the spec still asks for is never dropped.
    `policy_held` has no default: every caller decides the hold.
    """
    if name == SECURITY_POLICY:
        return not policy_held
    return name in (ENVOY_SERVICE, HTTPS_REDIRECT)


# The SecurityPolicy's Object, required by name while auth is off (verdict.caller_auth).
POLICY_OBJECT_REQUIREMENT = "security-policy-object"


def policy_object_requirements(plan: GatewayPlan) -> dict[str, Requirement]:
    """The SecurityPolicy's Object, while auth is off: once it leaves the desired state Crossplane
    no longer observes it, and Envoy checks keys until it is gone (a status that lost callerAuth
    meanwhile is told the header again from it). Decided from the spec alone, so every call of a
    reconcile asks the same."""
    if plan.spec.auth.api_keys is not None:
        return {}
    return {
        POLICY_OBJECT_REQUIREMENT: Requirement(
            api_version=OBJECT_API_VERSION,
            kind="Object",
            name=plan.object_name("security-policy"),
            namespace=plan.xr_namespace,
        )
    }


def _policy_objects(
    xr: Mapping[str, Any], required: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[Mapping[str, Any]] | None:
    """The SecurityPolicy's Object as Crossplane fetched it for this call, if this XR controls it (one
    of that name composed by another would keep callers told a header for good); None where it has
    not fetched it yet."""
    if POLICY_OBJECT_REQUIREMENT not in required:
        return None
    api_version, kind, name = xr.get("apiVersion"), xr.get("kind"), readiness.get_path(xr, "metadata", "name")
    return [
        o
        for o in required[POLICY_OBJECT_REQUIREMENT]
        if readiness.controlled_by(o, str(api_version), str(kind), str(name))
    ]


def compose(
    xr: Mapping[str, Any],
    spec: InferenceGatewaySpec,
    inp: Input,
    observed: Mapping[str, Mapping[str, Any]],
    required: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    *,
    now: datetime | None = None,
) -> Outcome:
    """The whole InferenceGateway composition for one call; `now` is the call's clock."""
    plan = GatewayPlan(
        **plan_basis(xr, observed, now),
        spec=spec,
        inp=inp,
        held_deployment=held_deployment(observed.get(ENVOY_PROXY)),
    )
    moved = moved_from(plan)
    if moved is not None:
        raise InvalidError(
            f"spec.namespace: this gateway's resources are in namespace {moved.namespace!r} "
            f"({moved.name}); a gateway cannot move: create a new InferenceGateway in {plan.namespace!r} "
            "and delete this one"
        )
    previous = readiness.get_path(xr, "status", "deployment", "settledTemplate")
    previous = previous if isinstance(previous, str) else None
    composed = build_objects(plan)
    told = caller_auth(
        plan,
        readiness.get_path(xr, "status", "gateway", "callerAuth"),
        observed.get(SECURITY_POLICY),
        _policy_objects(xr, required or {}),
    )
    listener_held = listener_change_held(plan, observed)
    verdict = derive_verdict(plan, observed, composed, previous, told, held=listener_held)
    wanted = policy_object_requirements(plan)
    status = published_status(
        plan, observed, settle(plan, verdict, observed.get(OBSERVER), previous), told, held=listener_held
    )
    outcome = Outcome(
        resources=composed
        | {
            # Built from what this call publishes and decides, so it says exactly
            # what the XR's status.gateway and status.serving say, without the message
            # and callerAuth's memory of the policy's deletion (for_routes).
            SERVING_RECORD: serving_record.build(
                serving_record.record_name(plan.xr_name),
                plan.xr_namespace,
                for_routes(status["gateway"]),
                ready=verdict.ready,
                reason=verdict.reason,
                listener=listener_held.spec if listener_held is not None else listener_spec(plan),
                extproc_config=plan.extproc_config,
            )
        },
        status=status,
        verdict=verdict,
        requirements=wanted,
        ttl=min(
            (
                t
                for t in (
                    verdict.recheck_in,
                    auth_removed_in(plan, status["gateway"]),
                    listener_pushed_in(plan, listener_held),
                )
                if t
            ),
            default=None,
        ),
    )
    # Only what the spec took out may leave; anything else observed and not
    # composed now is kept.
    held = auth_policy_held(plan, status["gateway"], observed.get(SECURITY_POLICY))
    keep_observed(outcome, observed, functools.partial(removed_by_spec, policy_held=held))
    outcome.judge_ready(observed)
    outcome.announce(xr)
    return outcome
