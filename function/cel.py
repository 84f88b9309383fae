"""The CEL readiness queries this function writes into its Objects.

provider-kubernetes evaluates `spec.readiness.celQuery` with cel-go in an
environment that declares one variable, `object`, of type dyn, after the
observed object went through JSON into a Go map. Three consequences shape
every query here:

- the query must be *statically* boolean, or the Object silently never
  becomes Ready, so every clause is a comparison, `has()` or `in`;
- every number is a double, so numbers are compared field to field, or
  through `int()`, never against an int literal (`1 <= 1.0` errors in cel-go);
- status fields with zero values are omitted and `has()` on a missing
  intermediate map is an error in cel-go, so every step of every path is
  guarded with `has()`.

function/readiness.py reads the same manifests back to explain, with numbers,
what a query is waiting for; function/cel_check.py type-checks a user's query.
"""

from __future__ import annotations

from function.api import AvailabilityPolicy
from function.upstream import ACCEPTED, AIGW_FINALIZER, DEFAULT_EXTPROC_MARKER, NOT_ACCEPTED  # noqa: F401


def _has_path(root: str, path: str) -> str:
    """`has(root.a) && has(root.a.b) && ...` for every step of the path."""
    steps = path.split(".")
    return " && ".join(f"has({'.'.join([root, *steps[: i + 1]])})" for i in range(len(steps)))


def condition_true_query(condition_type: str) -> str:
    """True when the object has condition `condition_type` with status True.

    Used for the Gateway (`Programmed`) and every AI Gateway kind (`Accepted`):
    the controllers set those conditions and nothing else says "in effect".
    """
    return (
        f"{_has_path('object', 'status.conditions')} && "
        f"object.status.conditions.exists(c, has(c.type) && c.type == '{condition_type}' "
        f"&& has(c.status) && c.status == 'True')"
    )


def taken_in_query() -> str:
    """True when Envoy AI Gateway has taken an AIServiceBackend in: Accepted, or, with neither
    Accepted nor NotAccepted written, carrying the finalizer its controller adds just before.

    Envoy AI Gateway v1.1.0 writes that status with five quick retries on a
    conflict and then gives up, and never reconciles the backend again on its
    own: a route whose requests succeed would wait for Accepted forever
    (docs/operations.md). A NotAccepted it did write still says not in effect.
    """
    conditions = _has_path("object", "status.conditions")
    verdict = (
        f"({conditions} && object.status.conditions.exists(c, has(c.type) && "
        f"(c.type == '{ACCEPTED}' || c.type == '{NOT_ACCEPTED}')))"
    )
    # Not while it is being deleted: Envoy AI Gateway is taking it out.
    return (
        f"({condition_true_query(ACCEPTED)}) || (!{verdict} && "
        f"!({_has_path('object', 'metadata.deletionTimestamp')}) && "
        f"{_has_path('object', 'metadata.finalizers')} && '{AIGW_FINALIZER}' in object.metadata.finalizers)"
    )


def _every_holder(holders: str, *condition_types: str) -> str:
    """`status.<holders>` lists one holder at least, and each has every condition type True."""
    var = holders[0]
    conditions = " && ".join(
        f"{var}.conditions.exists(c, has(c.type) && c.type == '{typ}' && has(c.status) && c.status == 'True')"
        for typ in condition_types
    )
    return (
        f"{_has_path('object', f'status.{holders}')} && size(object.status.{holders}) > 0 && "
        f"object.status.{holders}.all({var}, has({var}.conditions) && {conditions})"
    )


def policy_accepted_query() -> str:
    """True when an Envoy Gateway policy is Accepted by every ancestor it names, and by one at least.

    Policies report per ancestor (`status.ancestors[].conditions`), not in
    `status.conditions`.
    """
    return _every_holder("ancestors", ACCEPTED)


def route_accepted_query() -> str:
    """True when a Gateway API route is Accepted, with its references resolved, by every parent it
    names, and by one at least.

    Routes report per parent (`status.parents[].conditions`); a filter it names
    that does not resolve leaves it Accepted and ResolvedRefs False, and Envoy
    answers its requests 500.
    """
    return _every_holder("parents", ACCEPTED, "ResolvedRefs")


def node_port_query(port: int) -> str:
    """True once the Service has a node port for `port`: the port a NodePort gateway's clients use.

    It decides only when the Object is Ready; the watch it brings is what
    matters, so the node port reaches the published URL when it is assigned.
    """
    return (
        f"{_has_path('object', 'spec.ports')} && object.spec.ports.exists(p, has(p.port) "
        f"&& has(p.nodePort) && int(p.port) == {int(port)})"
    )


def deployment_rollout_query(policy: AvailabilityPolicy, marker_annotation: str) -> str:
    """True only when the Envoy Deployment's rollout is finished and serving.

    Each clause guards against one way an unfinished rollout looks finished.
    """
    clauses = [
        # The controller has seen the current spec: status numbers describe
        # the template we care about, not the previous one.
        _has_path("object", "metadata.generation"),
        _has_path("object", "status.observedGeneration"),
        "object.status.observedGeneration >= object.metadata.generation",
        # No pod of an old template is running (they lack the sidecar when the
        # rollout is the one that injects it): every non-terminated pod is an
        # updated one. Zero counts are omitted, hence the has() guards.
        "has(object.status.replicas)",
        "has(object.status.updatedReplicas)",
        "object.status.updatedReplicas == object.status.replicas",
        # Something serves: a gateway with no available pod is not ready.
        "has(object.status.availableReplicas)",
        "int(object.status.availableReplicas) >= 1",
    ]
    if policy is AvailabilityPolicy.ALL:
        # Every desired replica runs the current template and is available,
        # as `kubectl rollout status` waits for.
        clauses += [
            _has_path("object", "spec.replicas"),
            "object.status.updatedReplicas == object.spec.replicas",
            "object.status.availableReplicas == object.spec.replicas",
        ]
    if marker_annotation:
        # Envoy AI Gateway stamped the template when it rolled pods for an
        # effective route: the pods were created with the ext-proc sidecar.
        clauses += [
            _has_path("object", "spec.template.metadata.annotations"),
            f"'{marker_annotation}' in object.spec.template.metadata.annotations",
        ]
    return " && ".join(clauses)


# Workload kinds whose rollout the built-in query reads from replica counts.
REPLICATED = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}


def workload_query(api_version: str, kind: str) -> str:
    """The built-in readiness query of a backend's workload: true while it serves.

    A Deployment or StatefulSet serves while at least one replica is
    available and it is not being scaled to zero. A rollout does not stop it
    serving (the old replicas answer until the new ones are available), so,
    unlike the Envoy Deployment's query, a rollout in progress is not "not
    serving": the BackendsServing message says it is rolling. Anything else
    (a KServe InferenceService, an LLMInferenceService, ...) serves while its
    Ready condition is True.
    """
    if (api_version, kind) not in REPLICATED:
        return condition_true_query("Ready")
    return " && ".join(
        [
            # Zero counts are omitted: none available has no availableReplicas.
            _has_path("object", "status.availableReplicas"),
            "int(object.status.availableReplicas) >= 1",
            # Scaled to zero: the remaining replicas are on their way out.
            "(!has(object.spec) || !has(object.spec.replicas) || int(object.spec.replicas) >= 1)",
        ]
    )
