"""Reading observed Objects: what provider-kubernetes reports back, and what it means.

The CEL queries live in function/cel.py; this module reads the same manifests
(from `status.atProvider.manifest`) to explain, with numbers, what a query is
waiting for. The decision itself is the provider's: the Object's Ready
condition.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from function.api import AvailabilityPolicy
from function.cel import REPLICATED
from function.structs import canonical_bytes


def workload_summary(  # noqa: PLR0911 - one return per state, in order
    api_version: str, kind: str, observed: Mapping[str, Any] | None
) -> str:
    """How a workload stands, in words with numbers, for a condition message."""
    if observed is None:
        return "not observed yet"
    if target_gone(observed):
        return f"{kind} not found"
    manifest = observed_manifest(observed)
    if manifest is None:
        # RBAC missing for the workload's kind says Forbidden here, not "not yet".
        error = sync_error(observed)
        return f"provider-kubernetes cannot observe it: {error}" if error else "not observed yet"
    error = read_failed(observed)
    if error is not None:
        # The manifest is an earlier read's: no numbers from it.
        return f"provider-kubernetes cannot read it now (its last read is not current): {error}"
    if (api_version, kind) in REPLICATED:
        desired = _count(get_path(manifest, "spec", "replicas")) or 0
        available = _count(get_path(manifest, "status", "availableReplicas")) or 0
        updated = _count(get_path(manifest, "status", "updatedReplicas")) or 0
        rolling = "" if updated == desired else f", {updated} of {desired} updated"
        return f"{available} of {desired} replicas available{rolling}"
    ready = condition(manifest, "Ready")
    if ready is None:
        return "no Ready condition"
    return f"Ready={ready.get('status')} ({ready.get('reason') or 'no reason'})"


# --- reading observed Objects ---------------------------------------------------


def get_path(obj: Mapping[str, Any] | None, *path: str) -> Any:
    """obj[path[0]][path[1]]..., or None where any step is missing or not a map."""
    current: Any = obj
    for step in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(step)
    return current


def list_at(obj: Mapping[str, Any] | None, *path: str) -> list[Any]:
    """obj[path[0]][path[1]]... when it is a list, else an empty one: absent and malformed alike."""
    value = get_path(obj, *path)
    return value if isinstance(value, list) else []


def controlled_by(obj: Mapping[str, Any], api_version: str, kind: str, name: str) -> bool:
    """Whether the object's controller is the XR of exactly this apiVersion, kind and name: routes
    trust a serving record only so (function/serving_record.py), a gateway an Object it requires.

    The apiVersion exactly: one in the group with a version the API server does
    not serve is never resolved by Kubernetes' garbage collector (it retries
    the mapping forever), so a forged reference to it would last. Crossplane
    writes the XR's apiVersion as it reads it, the version `gatewayType` names
    (an XRD that makes another version referenceable makes routes read the
    InferenceGateway instead, until `gatewayType` follows). The UID is not
    compared (the route does not read its gateway to know it): a reference to
    an XR that does not exist, or to one with another UID, is deleted with its
    object by the garbage collector, seconds later.
    """
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if not isinstance(owners, list):
        return False
    return any(
        isinstance(owner, Mapping)
        and owner.get("controller") is True
        and owner.get("apiVersion") == api_version
        and owner.get("kind") == kind
        and owner.get("name") == name
        for owner in owners
    )


def being_deleted(obj: Mapping[str, Any] | None) -> bool:
    """Whether the object carries a deletionTimestamp."""
    return get_path(obj, "metadata", "deletionTimestamp") is not None


def condition(obj: Mapping[str, Any] | None, condition_type: str) -> Mapping[str, Any] | None:
    """The condition of that type in obj.status.conditions, if well formed."""
    conditions = get_path(obj, "status", "conditions")
    if not isinstance(conditions, list):
        return None
    for item in conditions:
        if isinstance(item, Mapping) and item.get("type") == condition_type:
            return item
    return None


def condition_is_true(obj: Mapping[str, Any] | None, condition_type: str) -> bool:
    found = condition(obj, condition_type)
    return found is not None and found.get("status") == "True"


# crossplane-runtime's managed reconciler (errExternalResourceNotExist) says
# this in Synced when provider-kubernetes reports ResourceExists: false.
_TARGET_GONE = "external resource does not exist"


def target_gone(obj: Mapping[str, Any] | None) -> bool:
    """True when provider-kubernetes looked and the target object is not there.

    When a target disappears after it was observed, provider-kubernetes sets
    Synced=False with "observe failed: external resource does not exist" and
    leaves `status.atProvider.manifest` and the Ready condition as they were
    last observed (provider-kubernetes `internal/controller/object/object.go`
    Observe; crossplane-runtime's managed reconciler). Ready=True then
    describes an object that no longer exists: Synced must be read first.
    """
    synced = condition(obj, "Synced")
    return (
        synced is not None
        and synced.get("status") == "False"
        and _TARGET_GONE in str(synced.get("message", ""))
    )


# crossplane-runtime's Synced reason while the crossplane.io/paused annotation
# stops reconciliation: nothing is observed, every condition is as it was.
_PAUSED = "ReconcilePaused"


def sync_error(obj: Mapping[str, Any] | None) -> str | None:
    """The provider's message while it cannot sync the Object (Synced=False), e.g. a forbidden read."""
    synced = condition(obj, "Synced")
    if synced is None or synced.get("status") != "False":
        return None
    return str(synced.get("message", ""))


# Synced's message when the provider could not read the target this round:
# crossplane-runtime's managed reconciler (v2.0.0-rc.1, which provider-kubernetes
# v1.2.1 builds with; pkg/reconciler/managed/reconciler.go) wraps a failed
# Connect in "connect failed" and a failed Observe in "observe failed", and
# provider-kubernetes' Observe (internal/controller/namespaced/object/object.go)
# wraps its failed GET in "cannot get object" and returns before setAtProvider,
# which writes the manifest and Ready together: both stay an earlier round's.
# Its later failures ("cannot get desired state", a dry-run it may not make)
# come after setAtProvider, on a fresh read, and are not this. Resolving an
# Object's references comes before the GET (none of ours has any).
_NOT_READ = (
    "connect failed",
    "observe failed: cannot get object",
    "observe failed: cannot resolve resource references",
)


def read_failed(obj: Mapping[str, Any] | None) -> str | None:
    """The provider's error while its last attempt to read the target failed, else None.

    A revoked RBAC rule ("forbidden"), a ProviderConfig it cannot use, a
    cluster it cannot reach: Ready=True and the manifest then describe the
    target as it was, and a Deployment that rolled since, or a workload scaled
    to zero, goes unseen. A target that is gone ("observe failed: external
    resource does not exist") is target_gone's, not this.
    """
    error = sync_error(obj)
    return error if error is not None and error.startswith(_NOT_READ) else None


def paused(obj: Mapping[str, Any] | None) -> bool:
    """True while reconciliation of obj is paused, so its conditions are not maintained."""
    synced = condition(obj, "Synced")
    return synced is not None and synced.get("reason") == _PAUSED


def in_effect(obj: Mapping[str, Any] | None) -> bool:
    """The Object's readiness query holds, for a target that still exists, observed now: not
    paused, and the provider's last read of it succeeded (read_failed).

    The gateway's verdict judges its Objects by this alone: a listener added, a
    key or a buffer limit changed leaves the gateway serving what it served, and
    a GatewayReady that went False on every edit would take every route of the
    gateway with it."""
    return (
        condition_is_true(obj, "Ready")
        and not target_gone(obj)
        and not paused(obj)
        and read_failed(obj) is None
    )


def in_effect_as_composed(obj: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """In effect, and carrying the spec this call desires of it (applied), and judged of it
    where its controller says which generation it judged (accepted_of_its_generation).

    A route's model or backends changed in place is what makes requests fail
    while the old status says Accepted, so a route's Objects are judged by this."""
    return in_effect(obj) and applied(obj, desired) and accepted_of_its_generation(obj)


def accepted_of_its_generation(obj: Mapping[str, Any] | None) -> bool:
    """The target's Accepted is of its current generation, where the condition says which.

    Envoy Gateway stamps observedGeneration on a Backend's Accepted (v1.8.3
    `status/backend.go`, `computeBackendAcceptedCondition`; `MergeConditions`
    moves it on each translation). While its controller is down, a Backend
    whose endpoint changed keeps the Accepted of the endpoint before, and
    Envoy keeps sending to the old one (found in review). Envoy AI Gateway's
    conditions carry no observedGeneration: they pass here, and its own
    checks judge them (applied, the spec's write against the stamp)."""
    manifest = observed_manifest(obj)
    # Envoy Gateway's policies report per ancestor, each Accepted stamped with the generation
    # judged (v1.8.3 `status/policy.go`, SetConditionForPolicyAncestor): every one must be current.
    said = [condition(manifest, "Accepted")] + [
        condition({"status": ancestor}, "Accepted")
        for ancestor in list_at(manifest, "status", "ancestors")
        if isinstance(ancestor, Mapping)
    ]
    return all(judged_current(c, manifest) for c in said)


def judged_current(said: Mapping[str, Any] | None, manifest: Mapping[str, Any] | None) -> bool:
    """A condition judged the object's current generation, or does not say which it judged."""
    judged = generation_number(said.get("observedGeneration") if said is not None else None)
    generation = generation_number(get_path(manifest, "metadata", "generation"))
    return judged is None or generation is None or judged >= generation


def generation_number(value: Any) -> int | None:
    """A generation as a number to compare, or None (a NaN or an infinity is none; protobuf hands a
    number over as a double)."""
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else None


def applied(observed: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """The target as last observed carries the spec this call desires of it.

    Until provider-kubernetes has applied a changed spec, the Object's Ready and
    the target's status describe the spec before it: a route whose model was
    just renamed is Accepted for the old model, and the new model's requests
    fail. The target must be the one named (observes), and the API server adds
    defaults, so the desired spec is compared as a part of the observed one.
    Only `spec`: a Secret's `stringData` is stored as `data`, and metadata
    carries what others write. An observe-only Object desires no spec.
    """
    manifest = get_path(desired, "spec", "forProvider", "manifest")
    if not isinstance(manifest, Mapping):
        return True
    want = manifest.get("spec")
    return observes(observed, manifest) and (
        want is None or _within(want, get_path(observed_manifest(observed), "spec"))
    )


def observes(observed: Mapping[str, Any] | None, target: Mapping[str, Any]) -> bool:
    """The Object last observed the target named: its kind, name and namespace, and apiVersion."""
    have = observed_manifest(observed)
    return have is not None and all(
        get_path(have, *path) == want
        for path in (("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"))
        if (want := get_path(target, *path)) is not None
    )


def _within(want: Any, have: Any) -> bool:
    """`want` is a part of `have`: every key it sets has its value there, lists item by item."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_within(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_within, want, have))
    if isinstance(want, bool) or isinstance(have, bool):
        # True == 1 in Python; a JSON boolean is never a number.
        return type(want) is type(have) and want == have
    # Numbers come through protobuf's Struct as doubles: 1 and 1.0 are one number.
    return bool(want == have)


def spec_written_at(obj: Mapping[str, Any] | None) -> datetime | None:
    """When the observed target's spec was last written: the latest managedFields entry (second
    precision) of a manager that owns spec fields.

    A controller that stamps its conditions (Envoy AI Gateway restamps Accepted on
    every reconcile) has not answered the current spec while its stamp is older
    than this.
    """
    return written_at(observed_manifest(obj))


def written_at(manifest: Mapping[str, Any] | None) -> datetime | None:
    """When an object's spec was last written (spec_written_at), read from the object itself."""
    # A status subresource's entry never holds spec fields.
    return _last_written(manifest, "f:spec")


def status_written_at(manifest: Mapping[str, Any] | None) -> datetime | None:
    """When an object's status was last written (its controller's latest status entry in managedFields,
    second precision): a controller writes it after a translation, whose configuration it pushes then."""
    return _last_written(manifest, "f:status")


def data_written_at(obj: Mapping[str, Any] | None) -> datetime | None:
    """When a Secret's data was last written, read from the Secret itself (a required resource, not an
    Object): a client that writes `stringData` may be recorded as owning either field."""
    return _last_written(obj, "f:data", "f:stringData")


def _last_written(manifest: Mapping[str, Any] | None, *fields: str) -> datetime | None:
    """The latest managedFields entry that owns one of `fields`, or None."""
    entries = get_path(manifest, "metadata", "managedFields")
    if not isinstance(entries, list):
        return None
    times = [
        t
        for e in entries
        if isinstance(e, Mapping)
        and isinstance(e.get("fieldsV1"), Mapping)
        and any(f in e["fieldsV1"] for f in fields)
        and (t := timestamp(e.get("time"))) is not None
    ]
    return max(times) if times else None


def condition_time(obj: Mapping[str, Any] | None, condition_type: str) -> datetime | None:
    """When the target's condition of that type was last written, as its controller stamped it."""
    found = condition(observed_manifest(obj), condition_type)
    return timestamp(found.get("lastTransitionTime")) if found is not None else None


def _ancestors_accepted(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The Accepted condition Envoy Gateway reports for the policy to each ancestor that has one."""
    return [
        found
        for a in list_at(observed_manifest(obj), "status", "ancestors")
        if isinstance(a, Mapping) and (found := condition({"status": a}, "Accepted")) is not None
    ]


def policy_accepted_at(obj: Mapping[str, Any] | None) -> datetime | None:
    """When Envoy Gateway last turned the policy Accepted, over every ancestor it reports."""
    stamps = [
        when
        for c in _ancestors_accepted(obj)
        if c.get("status") == "True" and (when := timestamp(c.get("lastTransitionTime"))) is not None
    ]
    return max(stamps) if stamps else None


def policy_refused(obj: Mapping[str, Any] | None) -> bool:
    """Envoy Gateway said Accepted=False for the policy to an ancestor, and the policy still exists."""
    return not target_gone(obj) and any(c.get("status") == "False" for c in _ancestors_accepted(obj))


def timestamp(stamp: Any) -> datetime | None:
    """A Kubernetes time (RFC 3339) as a datetime; None for anything else."""
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    # Kubernetes writes UTC with a Z; a stamp without a zone is read as UTC.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def stamp(when: datetime) -> str:
    """A Kubernetes time, to the second, as the API server writes one."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_up(when: datetime) -> str:
    """A whole-second stamp never earlier than `when`: a bound counted from it is never cut short."""
    whole = when.replace(microsecond=0)
    return stamp(whole if whole == when else whole + timedelta(seconds=1))


def observed_manifest(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The target object as provider-kubernetes last observed it (stale if target_gone)."""
    manifest = get_path(obj, "status", "atProvider", "manifest")
    return manifest if isinstance(manifest, Mapping) else None


def _count(value: Any) -> int | None:
    """A count from JSON, None where absent (Kubernetes omits zeros) or not a number.

    Absent and zero are kept apart because the query tells them apart (`has()`).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def node_port(service: Mapping[str, Any] | None, port: int) -> int | None:
    """The node port of a Service's TCP `port`, None until the API server has assigned one."""
    for entry in list_at(service, "spec", "ports"):
        if (
            isinstance(entry, Mapping)
            and _count(entry.get("port")) == port
            and entry.get("protocol", "TCP") == "TCP"
        ):
            return _count(entry.get("nodePort"))
    return None


def template_id(template: Any) -> str:
    """A short stable digest of a pod template, as it was observed.

    Hashes the Struct encoding: an Envoy pod template carries Envoy's whole
    bootstrap configuration, and converting it to JSON in Python on every
    call cost about 0.3 ms (measured), several times a gateway call.
    """
    return hashlib.sha256(canonical_bytes(template)).hexdigest()[:16]


@dataclass(frozen=True)
class RolloutState:
    """The numbers of an observed Deployment, None where absent."""

    generation: int | None
    observed_generation: int | None
    desired: int | None
    replicas: int | None
    updated: int | None
    available: int | None
    # None where the cluster does not report terminating pods at all
    # (Kubernetes before 1.35, or the DeploymentReplicaSetTerminatingReplicas
    # gate off): the field is a pointer, present (even 0) whenever reported.
    terminating: int | None
    marker_present: bool
    # Identifies the pod template the Deployment rolls out now.
    template: str

    @classmethod
    def read(cls, deployment: Mapping[str, Any], marker_annotation: str) -> RolloutState:
        annotations = get_path(deployment, "spec", "template", "metadata", "annotations")
        marker = (
            bool(marker_annotation) and isinstance(annotations, Mapping) and marker_annotation in annotations
        )
        return cls(
            generation=_count(get_path(deployment, "metadata", "generation")),
            observed_generation=_count(get_path(deployment, "status", "observedGeneration")),
            desired=_count(get_path(deployment, "spec", "replicas")),
            replicas=_count(get_path(deployment, "status", "replicas")),
            updated=_count(get_path(deployment, "status", "updatedReplicas")),
            available=_count(get_path(deployment, "status", "availableReplicas")),
            terminating=_count(get_path(deployment, "status", "terminatingReplicas")),
            marker_present=marker or not marker_annotation,
            template=template_id(get_path(deployment, "spec", "template")),
        )

    def waiting_for(self, policy: AvailabilityPolicy) -> str | None:
        """What the rollout query waits for, in words with numbers; None if nothing.

        Mirrors `deployment_rollout_query` clause by clause, so the message
        names the clause that is false.
        """
        if (
            self.generation is None
            or self.observed_generation is None
            or self.observed_generation < self.generation
        ):
            return (
                f"the Deployment controller has not observed generation {self.generation or 0} "
                f"(observed {self.observed_generation or 0})"
            )
        if self.replicas is None or self.updated != self.replicas:
            return f"{self.updated or 0} of {self.replicas or 0} pods run the current template"
        if self.available is None or self.available < 1:
            return f"0 of {self.replicas} pods are available"
        if policy is AvailabilityPolicy.ALL and (
            self.desired is None or self.updated != self.desired or self.available != self.desired
        ):
            return (
                f"{self.available} of {self.desired or 0} desired pods are available "
                f"({self.updated} run the current template)"
            )
        return None

    def old_pods_may_drain(self, settled_template: str | None) -> str | None:
        """Why pods of a previous template may still be terminating; None if none can be.

        `status.replicas` leaves terminating pods out, so `updatedReplicas ==
        replicas` holds while old pods (without the ext-proc sidecar, in the
        rollout that injects it) still drain open connections. The status
        counts terminating pods of every template together, so it cannot tell
        a drained pod of the current template (the others serve) from an old
        one. What tells them apart is whether the template changed since the
        gateway was last settled: `settled_template` is the template it was
        last ready and fully drained on, remembered in the XR's status.
        """
        if not self.terminating or self.template == settled_template:
            return None
        return (
            f"{self.terminating} terminating pods may still run a previous template "
            "(without the ext-proc sidecar) and serve open connections"
        )

    def summary(self) -> str:
        return f"{self.updated or 0} updated, {self.available or 0} available of {self.desired or 0} desired"
