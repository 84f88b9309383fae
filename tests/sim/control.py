"""Crossplane and provider-kubernetes, driving the real function over real gRPC.

Crossplane: calls the function with the observed XR, composed resources and
required resources (in rounds, as Crossplane resolves requirements), applies
the desired state, garbage-collects observed composed resources that are no
longer desired, records the XR's conditions, and reconciles an XR when one of
its composed resources changes (realtime compositions, which also turn
Crossplane's own polling off) or when the response TTL runs out (the
function's `meta.ttl`, else 60 s). Required resources are not watched (Crossplane
v2.2), unless a Throughput says they are (v2.4, tests/sim/scale.py).
InferenceGateways are written to the world as they change, so the provider
can observe them (a ModelRoute's gateway observer). A composed resource that
is not an Object (the gateway's serving record, a ConfigMap) is applied to the
world by Crossplane itself, as Crossplane v2 composes any kind.

provider-kubernetes: applies each managed Object's manifest to the world,
never writes an observe-only Object's target, and evaluates the emitted
`celQuery` with cel-expr-python on the target converted as the provider does
(every number a double). It re-reads a watched Object when its target changes
(with --enable-watches), and otherwise every 30 s while not Ready and every
10 min when Ready. A read it is refused (a kind in `forbidden`: its RBAC
revoked) keeps the last manifest and Ready and sets only Synced=False, retried
with crossplane-runtime's backoff, as provider-kubernetes v1.2.1 does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from tests.cel_eval import eval_reference
from tests.cel_eval import ready as ready_of
from tests.sim.world import Key, World
from tests.support import controller_reference

# The SDK's default response TTL, when a response sets none.
XR_TTL_SECONDS = 60
# provider-kubernetes: re-read a not-Ready Object this often, a Ready one this often.
NOT_READY_POLL_SECONDS = 30
READY_POLL_SECONDS = 600
# Seconds from writing a target to reading it back (the requeue after a write).
AFTER_WRITE_SECONDS = 2
# Seconds between a change and the controller acting on its watch event.
WATCH_DELAY_SECONDS = 1
# A failed reconcile is retried after 1 s, doubling to 60 s (crossplane-runtime's
# ratelimiter.NewController: per-item exponential backoff).
RETRY_MAX_SECONDS = 60

RunFunction = Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse]


@dataclass(frozen=True)
class Throughput:
    """How Crossplane's XR controllers behave when many XRs move at once (issue #31).

    The default is the model the scenarios were written for: every due XR reconciled within the
    second, required resources not watched (Crossplane v2.2), no wake from Crossplane's own writes.
    """

    # XR reconciles Crossplane gets through per second on the machine; the rest wait their turn,
    # oldest first (None: unbounded). The API server's CPU is what bounds it on 2 cores.
    reconciles_per_second: int | None = None
    # Crossplane v2.4 watches what a function required: a change wakes the XRs that required it.
    watch_required: bool = False
    # Seconds after a reconcile that changed the XR's status at which its own writes wake it
    # again: v2.4's watch on an XR has no predicate, and a changed status is written twice
    # (server-side apply of the function's status, then Update of the conditions:
    # composition_functions.go and reconciler.go), each an event of its own.
    self_wakes: tuple[int, ...] = ()
    # Crossplane v2.4 fetches what the function required in the XR's last reconcile before the
    # first call (internal/xfn/required_resources.go, the dependency tracker): one call a
    # reconcile while the requirements hold, where v2.2 calls twice.
    carries_requirements: bool = False


UNBOUNDED = Throughput()


class Ablation:
    """A design element taken away: it may rewrite the request and the answer."""

    name = "real design"

    def before(self, xr: XR, req: fnv1.RunFunctionRequest, crossplane: Crossplane) -> None:
        """Change what the function is asked."""

    def after(self, xr: XR, rsp: fnv1.RunFunctionResponse, crossplane: Crossplane) -> None:
        """Change what the function answered, before Crossplane applies it."""


def production_json(obj: Any) -> Any:
    """JSON through a Go map: every number a double."""
    return json.loads(json.dumps(obj), parse_int=float, parse_float=float)


@dataclass
class ObjectState:
    """A provider-kubernetes Object: what Crossplane applied, what the provider saw."""

    body: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    next_read: int = 0
    applied_spec: Any = None
    # Reads refused in a row: the retry backoff's exponent.
    failures: int = 0

    @property
    def observe_only(self) -> bool:
        return self.body["spec"].get("managementPolicies") == ["Observe"]

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = self.body["spec"]["forProvider"]["manifest"]
        return manifest

    @property
    def target(self) -> Key:
        meta = self.manifest["metadata"]
        return (self.manifest["kind"], meta.get("namespace", ""), meta["name"])

    def ready(self) -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True" for c in self.status.get("conditions", []))

    def observed(self) -> dict[str, Any]:
        return {**copy.deepcopy(self.body), "status": copy.deepcopy(self.status)}


class Provider:
    """provider-kubernetes with --enable-watches (unless told otherwise)."""

    def __init__(self, world: World, *, watches: bool = True) -> None:
        self.world = world
        self.objects: dict[tuple[str, str], ObjectState] = {}  # (namespace, name)
        self.watches = watches
        self.stopped = False
        self.changed: set[tuple[str, str]] = set()  # Objects whose status changed
        # Kinds of target it may not get (its ClusterRole lost the verb; list and watch kept).
        self.forbidden: set[str] = set()

    @property
    def blind(self) -> bool:
        """Nothing it reports is current: stopped, or a read of some target refused and not yet
        retried with success (its backoff runs up to a minute past the refusal's end)."""
        return self.stopped or any(state.failures for state in self.objects.values())

    def upsert(self, body: dict[str, Any]) -> None:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        state = self.objects.get(key)
        if state is None:
            self.objects[key] = ObjectState(copy.deepcopy(body), next_read=self.world.now)
        elif state.body != body:
            state.body = copy.deepcopy(body)
            state.next_read = self.world.now

    def remove(self, key: tuple[str, str]) -> None:
        state = self.objects.pop(key, None)
        if state is not None and not state.observe_only:
            self.world.delete(state.target)

    def step(self, target_changes: set[Key]) -> None:
        if self.stopped:
            return
        now = self.world.now
        for key, state in sorted(self.objects.items()):
            watched = self.watches and state.body["spec"].get("watch") is True
            if watched and state.target in target_changes:
                state.next_read = min(state.next_read, now + WATCH_DELAY_SECONDS)
            if now < state.next_read:
                continue
            self._reconcile(key, state)

    def _reconcile(self, key: tuple[str, str], state: ObjectState) -> None:
        now = self.world.now
        if state.target[0] in self.forbidden:
            self._refused(key, state)
            return
        state.failures = 0
        wrote = False
        if not state.observe_only and state.applied_spec != state.manifest:
            self.world.apply(copy.deepcopy(state.manifest))
            state.applied_spec = copy.deepcopy(state.manifest)
            wrote = True
        target = self.world.get(*state.target)
        if target is None:
            # Only Synced changes: the last observed manifest and Ready stay
            # (provider-kubernetes object.go Observe returns ResourceExists:
            # false; crossplane-runtime sets only the Synced condition).
            status = _sync_failed(state.status, "observe failed: external resource does not exist")
            ready = False
        else:
            readiness = state.body["spec"].get("readiness", {})
            if readiness.get("policy") == "DeriveFromCelQuery":
                ready = ready_of(eval_reference(readiness["celQuery"], production_json(target)))
            else:
                ready = True
            status = {
                "atProvider": {"manifest": copy.deepcopy(target)},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "Available" if ready else "Unavailable",
                    },
                    {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
                ],
            }
        if status != state.status:
            state.status = status
            self.changed.add(key)
        state.next_read = now + (READY_POLL_SECONDS if ready else NOT_READY_POLL_SECONDS)
        if wrote:
            # After a create or update the managed reconciler requeues at once
            # and observes the result a moment later.
            state.next_read = now + AFTER_WRITE_SECONDS

    def _refused(self, key: tuple[str, str], state: ObjectState) -> None:
        """The GET of the target was forbidden: Observe returns before setAtProvider (object.go), so
        the manifest and Ready stay the last read's; crossplane-runtime sets Synced=False with the
        error and requeues with backoff."""
        kind, namespace, name = state.target
        status = _sync_failed(
            state.status,
            f'observe failed: cannot get object: {kind.lower()}s "{name}" is forbidden: '
            f'cannot get resource in the namespace "{namespace}"',
        )
        if status != state.status:
            state.status = status
            self.changed.add(key)
        state.failures += 1
        state.next_read = self.world.now + min(RETRY_MAX_SECONDS, 2 ** (state.failures - 1))


def _sync_failed(previous: dict[str, Any], message: str) -> dict[str, Any]:
    """An Observe that failed before setAtProvider: the last manifest and Ready stay, and
    crossplane-runtime sets only Synced=False with the error."""
    status: dict[str, Any] = {k: v for k, v in previous.items() if k != "conditions"}
    status["conditions"] = [
        *(c for c in previous.get("conditions", []) if c["type"] != "Synced"),
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
    ]
    return status


@dataclass
class XR:
    kind: str  # "InferenceGateway" or "ModelRoute"
    body: dict[str, Any]
    composition_input: dict[str, Any]
    composed: dict[str, tuple[str, str]] = field(default_factory=dict)  # resource name -> Object key
    # What the function required in the last reconcile (world keys): watched under watch_required.
    required: set[Key] = field(default_factory=set)
    # When the XR's own writes wake it next (Throughput.self_wakes), earliest first.
    wakes: list[int] = field(default_factory=list)
    # What the function asked for last (Throughput.carries_requirements).
    requirements: fnv1.Requirements | None = None
    # resource name -> world key of a composed resource that is not an Object (Crossplane applies it).
    direct: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    next_reconcile: int = 0
    deleted: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.body["metadata"]["namespace"], self.body["metadata"]["name"])

    def condition(self, typ: str) -> dict[str, Any]:
        for c in self.body.get("status", {}).get("conditions", []):
            if c["type"] == typ:
                return dict(c)
        return {}

    def is_true(self, typ: str) -> bool:
        return self.condition(typ).get("status") == "True"


@dataclass
class GCDeletion:
    at: int
    xr: tuple[str, str, str]
    resource: str


class Crossplane:
    def __init__(
        self,
        world: World,
        provider: Provider,
        run_function: RunFunction,
        ablation: Ablation,
        throughput: Throughput = UNBOUNDED,
    ) -> None:
        self.world = world
        self.throughput = throughput
        self.provider = provider
        self.run_function = run_function
        self.ablation = ablation
        self.xrs: dict[tuple[str, str, str], XR] = {}
        # Composed resources of XRs that still exist, deleted by garbage collection.
        self.gc_deletions: list[GCDeletion] = []
        self.calls = 0
        self.calls_by_xr: dict[tuple[str, str, str], int] = {}

    def create(self, xr: XR) -> None:
        xr.next_reconcile = self.world.now
        self.xrs[xr.key] = xr

    def update_spec(self, key: tuple[str, str, str], spec: dict[str, Any]) -> None:
        xr = self.xrs[key]
        xr.body["spec"] = spec
        xr.next_reconcile = self.world.now

    def delete(self, key: tuple[str, str, str]) -> None:
        xr = self.xrs.pop(key)
        xr.deleted = True
        self.world.delete(key)
        for obj in xr.composed.values():
            self.provider.remove(obj)
        for target in xr.direct.values():
            self.world.delete(target)

    def gateway_xr(self, namespace: str, name: str) -> XR | None:
        return self.xrs.get(("InferenceGateway", namespace, name))

    def step(self, direct_changed: set[Key] | None = None, world_changed: set[Key] | None = None) -> None:
        """`direct_changed`: composed resources Crossplane writes itself whose status another
        controller changed (a model check's Request): watched, as every composed resource is.
        `world_changed`: every object that changed, for the required-resource watch."""
        now = self.world.now
        changed = self.provider.changed
        self.provider.changed = set()
        required_changed = (world_changed or set()) if self.throughput.watch_required else set()
        for xr in list(self.xrs.values()):
            if (
                any(obj in changed for obj in xr.composed.values())
                or any(key in (direct_changed or ()) for key in xr.direct.values())
                or xr.required & required_changed
            ):
                xr.next_reconcile = min(xr.next_reconcile, now + WATCH_DELAY_SECONDS)
        due = sorted((self._due(xr), key) for key, xr in self.xrs.items() if now >= self._due(xr))
        for _, key in due[: self.throughput.reconciles_per_second]:
            self.reconcile(self.xrs[key])

    @staticmethod
    def _due(xr: XR) -> int:
        return min(xr.next_reconcile, *xr.wakes) if xr.wakes else xr.next_reconcile

    def _request(self, xr: XR) -> fnv1.RunFunctionRequest:
        req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=f"{xr.key}"))
        req.observed.composite.resource.update(copy.deepcopy(xr.body))
        for name, obj in sorted(xr.composed.items()):
            state = self.provider.objects.get(obj)
            if state is not None:
                observed = state.observed()
                observed["metadata"]["annotations"] = {"crossplane.io/composition-resource-name": name}
                req.observed.resources[name].resource.update(observed)
        for name, key in sorted(xr.direct.items()):
            body = self.world.get(*key)
            if body is not None:
                observed = copy.deepcopy(body)
                observed["metadata"]["annotations"] = {"crossplane.io/composition-resource-name": name}
                req.observed.resources[name].resource.update(observed)
        req.input.update(xr.composition_input)
        return req

    def _resolve(self, req: fnv1.RunFunctionRequest, requirements: fnv1.Requirements, xr: XR) -> None:
        req.required_resources.clear()
        xr.required = set()
        for name, selector in requirements.resources.items():
            xr.required.add((selector.kind, selector.namespace, selector.match_name))
            items = req.required_resources[name]
            found = self.xrs.get((selector.kind, selector.namespace, selector.match_name))
            body = (
                found.body
                if found is not None
                else self.world.get(selector.kind, selector.namespace, selector.match_name)
            )
            if body is not None:
                items.items.add().resource.update(copy.deepcopy(body))

    def reconcile(self, xr: XR) -> None:
        req = self._request(xr)
        carried = xr.requirements if self.throughput.carries_requirements else None
        if carried is not None:
            self._resolve(req, carried, xr)
        self.ablation.before(xr, req, self)
        rsp = self.run_function(req)
        calls = 1
        for _ in range(4):  # Crossplane stops after five rounds
            if not rsp.requirements.resources or rsp.requirements == carried:
                break
            before = rsp.requirements
            self._resolve(req, rsp.requirements, xr)
            rsp = self.run_function(req)
            calls += 1
            if rsp.requirements == before:
                break
        self.calls += calls
        self.calls_by_xr[xr.key] = self.calls_by_xr.get(xr.key, 0) + calls
        xr.requirements = fnv1.Requirements()
        xr.requirements.CopyFrom(rsp.requirements)
        now = self.world.now
        xr.next_reconcile = now + (rsp.meta.ttl.seconds or XR_TTL_SECONDS)
        # Wakes that were due are served by this reconcile, as a work queue coalesces them.
        xr.wakes = [t for t in xr.wakes if t > now]
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return  # a fatal result: nothing applied, nothing deleted
        self.ablation.after(xr, rsp, self)
        desired = {name: resource.struct_to_dict(r.resource) for name, r in rsp.desired.resources.items()}
        for name in sorted(set(xr.composed) - set(desired)):
            self.gc_deletions.append(GCDeletion(self.world.now, xr.key, name))
            self.provider.remove(xr.composed.pop(name))
        for name in sorted(set(xr.direct) - set(desired)):
            self.gc_deletions.append(GCDeletion(self.world.now, xr.key, name))
            self.world.delete(xr.direct.pop(name))
        for name, raw in sorted(desired.items()):
            body = _ints(raw)
            # Crossplane puts a namespaced XR's composed resources in its namespace.
            body["metadata"]["namespace"] = xr.body["metadata"]["namespace"]
            # And makes the XR their controller (what a route checks of a serving record).
            body["metadata"]["ownerReferences"] = [controller_reference(xr.body)]
            if body["kind"] != "Object":
                key = (body["kind"], body["metadata"]["namespace"], body["metadata"]["name"])
                self.world.compose(key, body)
                xr.direct[name] = key
                continue
            self.provider.upsert(body)
            xr.composed[name] = (body["metadata"]["namespace"], body["metadata"]["name"])
        status = dict(resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {})
        conditions = {c["type"]: c for c in xr.body.get("status", {}).get("conditions", [])}
        for c in rsp.conditions:
            conditions[c.type] = {
                "type": c.type,
                "status": {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}.get(
                    c.status, "Unknown"
                ),
                "reason": c.reason,
                "message": c.message,
            }
        ready = rsp.desired.composite.ready == fnv1.READY_TRUE
        conditions["Ready"] = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "Available" if ready else "Creating",
        }
        status["conditions"] = sorted(conditions.values(), key=lambda c: c["type"])
        status = _ints(status)
        if status != xr.body.get("status"):
            xr.wakes = sorted({*xr.wakes, *(now + s for s in self.throughput.self_wakes)})
        xr.body["status"] = status
        if xr.kind == "InferenceGateway":
            self.world.put(xr.key, copy.deepcopy(xr.body))


def _ints(node: Any) -> Any:
    """Whole floats back to ints, as the API server stores integers."""
    if isinstance(node, dict):
        return {k: _ints(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_ints(v) for v in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)
    return node
