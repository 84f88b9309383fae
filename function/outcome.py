"""What a composer decided, as plain data, and how it becomes a response.

Composers are pure: they read plain dicts and return an Outcome. Only this
module touches the protobuf response, so composer tests call `fn.compose` and
compare plain data (tests/support.py), and the gRPC path is exercised by a small
set (tests/test_fn.py), the same way for both composers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import readiness, structs
from function.conditions import SERVING, Verdict, event

# How soon Crossplane calls again when nothing it watches changes (it takes
# the smallest TTL of the pipeline). Every change that feeds a condition
# arrives as a watch event (watched Objects, realtime compositions), so the
# TTL is only the fallback for a provider running without --enable-watches.
# A reconcile of a ModelRoute is two calls (the second carries the required
# InferenceGateway), so a settled XR's 2 minutes keep the steady-state cost at
# one call per minute; an XR still waiting is called again after 15 s, which
# bounds how late it turns True when no watch event comes.
SETTLED_TTL = timedelta(minutes=2)
WAITING_TTL = timedelta(seconds=15)

_SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
}


@dataclass(frozen=True)
class Requirement:
    """A required resource, fetched by Crossplane before the next call.

    By name, or, with `labels` (and no name), every object of the kind
    carrying them: in `namespace`, or in every namespace when it is "".
    """

    api_version: str
    kind: str
    name: str
    namespace: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass
class Outcome:
    # composition-resource-name -> the desired composed resource.
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    # composition-resource-name -> whether that resource is ready.
    ready: dict[str, bool] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    # Further conditions, informational: they do not decide the XR's Ready.
    extra: list[Verdict] = field(default_factory=list)
    # (severity, reason, message) of events to emit.
    results: list[tuple[str, str, str]] = field(default_factory=list)
    # The main verdict differs from what the XR says was last decided (announce): the transition the
    # function logs. An event of another condition alone is none (issue #32: after a fatal error
    # Crossplane marks every function condition Unknown, and BackendsServing's return named
    # RoutingReady in a "condition changed" line while RoutingReady had not changed).
    transition: bool = False
    requirements: dict[str, Requirement] = field(default_factory=dict)
    # How soon to be called again, where sooner than the verdict's usual TTL.
    ttl: timedelta | None = None
    # The resourceVersion of the XR this call decided from. Written into the
    # desired XR, it makes Crossplane's server-side apply of the XR's status
    # conditional on it: Crossplane reads the XR from its informer cache, and a
    # reconcile that started from a stale copy would put that copy's conditions
    # (and an answer made from them) back over newer ones (crossplane/crossplane#7062,
    # issue #32). With it, the API server refuses that apply with a conflict and
    # Crossplane requeues the XR without writing its status.
    xr_version: str | None = None
    # The XR's metadata.generation this call decided for, published beside the
    # verdict (status.serving.observedGeneration): Crossplane stamps no
    # generation on a function's conditions, so without it a reader cannot tell
    # a decision about the spec before (a model just renamed) from one about this.
    xr_generation: int | None = None

    def desired_status(self) -> dict[str, Any]:
        """The XR status this call writes: the composer's, and the verdict mirrored in `status.serving`."""
        if self.verdict is None:
            return dict(self.status)
        serving = self.verdict.published()
        if self.xr_generation is not None:
            serving["observedGeneration"] = self.xr_generation
        return self.status | {SERVING: serving}

    @property
    def conditions(self) -> list[Verdict]:
        """Every condition this call sets, the main one first."""
        return [v for v in (self.verdict, *self.extra) if v is not None]

    def next_call(self) -> timedelta | None:
        """How soon Crossplane calls again: the verdict's usual TTL, or sooner where the composer
        asked; no verdict, no TTL of this function's."""
        if self.verdict is None:
            return None
        usual = SETTLED_TTL if self.verdict.ready else WAITING_TTL
        return min(usual, self.ttl) if self.ttl is not None else usual

    def judge_ready(self, observed: Mapping[str, Mapping[str, Any]]) -> None:
        """Each composed Object is ready exactly while it says it is in effect with the spec desired
        of it now. A ConfigMap, which
        Crossplane composes directly (the gateway's serving record), has no status to judge: it is
        ready once it exists."""
        self.ready = {
            name: name in observed
            if (body.get("apiVersion"), body.get("kind")) == ("v1", "ConfigMap")
            else readiness.in_effect_as_composed(observed.get(name), body)
            for name, body in self.resources.items()
        }

    def announce(self, xr: Mapping[str, Any]) -> None:
        """An event for each condition this call changes on the XR, and none for the others."""
        changed = [v for v in self.conditions if v.changed_from(xr)]
        self.results.extend(event(v) for v in changed)
        self.transition = any(v is self.verdict for v in changed)

    def keep(self, name: str, observed: Mapping[str, Any]) -> None:
        """Emit an observed composed resource again, as it was desired before.

        Only what a function may desire (apiVersion, kind, metadata name and
        namespace, spec, and a ConfigMap's data) is carried over; status belongs
        to the provider.
        """
        # Whatever shape the observed object has, it is re-emitted, never dropped
        # and never a crash: a malformed field is left out, not "repaired".
        kept: dict[str, Any] = {
            k: structs.plain(observed[k]) for k in ("apiVersion", "kind", "spec", "data") if k in observed
        }
        metadata = observed.get("metadata")
        if isinstance(metadata, Mapping):
            kept["metadata"] = {
                k: metadata[k] for k in ("name", "namespace") if isinstance(metadata.get(k), str)
            }
        self.resources[name] = kept


def keep_observed(
    outcome: Outcome,
    observed: Mapping[str, Mapping[str, Any]],
    may_drop: Callable[[str], bool] = lambda _: False,
) -> None:
    """Emit again every observed composed resource this call did not compose.

    Crossplane deletes whatever is observed but not desired. Only what
    `may_drop` names may go: what the spec deliberately took out, and what an
    older version composed that must not survive (route.never_kept); anything
    else, including other names an older version composed, is kept as observed.
    """
    for name in sorted(observed):
        if name not in outcome.resources and not may_drop(name):
            outcome.keep(name, observed[name])


def selects(selector: fnv1.ResourceSelector, doc: Mapping[str, Any]) -> bool:
    """Whether a requirement's selector, as `write` puts it in a response, selects the object: its
    apiVersion and kind, its namespace where one is named, then its name or labels."""
    metadata = doc.get("metadata") or {}
    if doc.get("apiVersion") != selector.api_version or doc.get("kind") != selector.kind:
        return False
    if selector.HasField("namespace") and metadata.get("namespace") != selector.namespace:
        return False
    if selector.WhichOneof("match") == "match_name":
        return bool(metadata.get("name") == selector.match_name)
    labels = metadata.get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.match_labels.labels.items())


def write(outcome: Outcome, rsp: fnv1.RunFunctionResponse) -> None:
    """Write an Outcome into a response that already carries the request's desired state."""
    for name in sorted(outcome.resources):
        entry = rsp.desired.resources[name]
        structs.fill(entry.resource, outcome.resources[name])
        entry.ready = fnv1.READY_TRUE if outcome.ready.get(name) else fnv1.READY_FALSE
    if outcome.xr_version:
        rsp.desired.composite.resource.get_or_create_struct("metadata")["resourceVersion"] = (
            outcome.xr_version
        )
    status = outcome.desired_status()
    if status:
        # Merged into what earlier pipeline steps put in the XR's status.
        rsp.desired.composite.resource.get_or_create_struct("status").update(status)
    for verdict in outcome.conditions:
        response.set_conditions(
            rsp,
            resource.Condition(
                typ=verdict.type, status=verdict.status, reason=verdict.reason, message=verdict.message
            ),
        )
    if outcome.verdict is not None:
        # The XR's Ready follows the main condition, whatever the composed
        # resources' own readiness says.
        rsp.desired.composite.ready = fnv1.READY_TRUE if outcome.verdict.ready else fnv1.READY_FALSE
    ttl = outcome.next_call()
    if ttl is not None:
        rsp.meta.ttl.FromTimedelta(ttl)
    for severity, reason, message in outcome.results:
        rsp.results.append(fnv1.Result(severity=_SEVERITY[severity], reason=reason, message=message))
    for key in sorted(outcome.requirements):
        req = outcome.requirements[key]
        if req.labels:
            response.require_resources(
                rsp,
                key,
                req.api_version,
                req.kind,
                match_labels=dict(req.labels),
                namespace=req.namespace or None,
            )
        else:
            response.require_resources(
                rsp, key, req.api_version, req.kind, match_name=req.name, namespace=req.namespace
            )
