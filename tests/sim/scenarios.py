"""Scenarios, ablations and the invariants checked at every simulated second.

The invariants are what users see, never what an ablation does:

1. a model's requests fail while its RoutingReady says True (after the lag bound);
2. `/v1/models` lists the anchor;
3. a model that was served stops being served while its gateway's pods serve
   with the sidecar and nothing rejected its route: an outage the world did
   not cause;
4. once faults stop, everything is ready within the convergence bound;
5. GatewayReady turns False for a drain alone;
6. a condition still disagrees with the truth it promises more than the lag
   bound after that truth changed (both directions);
7. requests fail at the gateway (500, 503) while GatewayReady says True
   (after the lag bound);
8. a model added to a gateway that is GatewayReady waits for an Envoy pod to
   start before it is served (adding a model must never need a rollout).

A fault the control plane cannot know of in advance (a route rejected, a
listener broken, every pod crashing) fails requests at once; no design can
say so before it is observed. Failures in the first LAG_BOUND_SECONDS after
requests start failing are "detection" seconds, counted apart; invariants 1
and 7 hold from then on, and invariant 6 bounds the detection.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn, readiness
from tests.sim import world as world_model
from tests.sim.control import UNBOUNDED, XR, Ablation, Crossplane, Provider, RunFunction, Throughput
from tests.sim.provider_http import POLL_SECONDS, ProviderHTTP
from tests.sim.world import Traffic, World
from tests.support import EXAMPLES, GATEWAY_INPUT, ROUTE_INPUT, load_yaml

GATEWAY_XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
ROUTE_XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
GATEWAY = ("platform", "inference")


def converge_bound() -> int:
    """Once faults stop, everything is ready within this many seconds: two
    rollouts' worth of pod starts and drains, then the watches (150 s at the
    default timings; the timing sweep moves it with them)."""
    return 4 * world_model.POD_START_SECONDS + 2 * world_model.DRAIN_SECONDS + 40


# Every condition follows the truth it promises within this many seconds.
LAG_BOUND_SECONDS = 5


# --- ablations -----------------------------------------------------------------------------


class NoAnchor(Ablation):
    """(a) No anchor route: the gateway is composed without it (and never waits for it)."""

    name = "(a) no anchor"

    def before(self, xr: XR, req: fnv1.RunFunctionRequest, crossplane: Crossplane) -> None:  # noqa: ARG002
        if xr.kind == "InferenceGateway":
            # The function believes an anchor is in effect, applied as it composes
            # it, so GatewayReady is what it would be in a design without one.
            anchor = fn.run(req).resources["anchor-route"]
            req.observed.resources["anchor-route"].resource.update(
                anchor
                | {
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "atProvider": {"manifest": anchor["spec"]["forProvider"]["manifest"]},
                    }
                }
            )

    def after(self, xr: XR, rsp: fnv1.RunFunctionResponse, crossplane: Crossplane) -> None:  # noqa: ARG002
        if xr.kind == "InferenceGateway":
            del rsp.desired.resources["anchor-route"]


class AcceptanceOnly(Ablation):
    """(b) RoutingReady from the route's and backends' acceptance alone."""

    name = "(b) acceptance only"

    def after(self, xr: XR, rsp: fnv1.RunFunctionResponse, crossplane: Crossplane) -> None:
        if xr.kind != "ModelRoute":
            return
        names = set(rsp.desired.resources) - {"gateway-observer"}
        objects = [crossplane.provider.objects.get(xr.composed[n]) for n in names if n in xr.composed]
        accepted = (
            bool(names) and len(objects) == len(names) and all(o is not None and o.ready() for o in objects)
        )
        for c in rsp.conditions:
            if c.type == "RoutingReady":
                c.status = fnv1.STATUS_CONDITION_TRUE if accepted else fnv1.STATUS_CONDITION_FALSE
                c.reason = "Available" if accepted else "RouteNotAccepted"
        rsp.desired.composite.ready = fnv1.READY_TRUE if accepted else fnv1.READY_FALSE


class _ReasonCalledAvailable(Ablation):
    """RoutingReady True (Available) wherever the function said `reason`: the check behind it taken away."""

    reason = ""

    def after(self, xr: XR, rsp: fnv1.RunFunctionResponse, crossplane: Crossplane) -> None:  # noqa: ARG002
        if xr.kind != "ModelRoute":
            return
        for c in rsp.conditions:
            if c.type == "RoutingReady" and c.reason == self.reason:
                c.status = fnv1.STATUS_CONDITION_TRUE
                c.reason = "Available"
                rsp.desired.composite.ready = fnv1.READY_TRUE


class IgnoreWorkloads(_ReasonCalledAvailable):
    """(d) RoutingReady as if no backend named its workload (today's upstream behaviour)."""

    name = "(d) ignore workloads"
    reason = "BackendNotServing"


class NoModelCheck(_ReasonCalledAvailable):
    """(e) RoutingReady as if no backend checked its loaded model (a workload Available is enough)."""

    name = "(e) no model check"
    reason = "ModelNotLoaded"


class TrustFailedReads(Ablation):
    """(f) An Object whose last read was refused judged by that earlier read: the provider's
    Synced=False taken away, so its stale Ready and manifest stand (function/readiness.read_failed)."""

    name = "(f) trust failed reads"

    def before(self, xr: XR, req: fnv1.RunFunctionRequest, crossplane: Crossplane) -> None:  # noqa: ARG002
        for observed in req.observed.resources.values():
            body = resource.struct_to_dict(observed.resource)
            conditions = (body.get("status") or {}).get("conditions") or []
            if not any(readiness.read_failed({"status": {"conditions": [c]}}) for c in conditions):
                continue
            body["status"]["conditions"] = [
                c
                if c["type"] != "Synced"
                else {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
                for c in conditions
            ]
            observed.resource.Clear()
            observed.resource.update(body)


class WithholdRoutes(Ablation):
    """(c) Compose routes only while the gateway is ready."""

    name = "(c) withhold routes"

    def after(self, xr: XR, rsp: fnv1.RunFunctionResponse, crossplane: Crossplane) -> None:
        if xr.kind != "ModelRoute":
            return
        ref = xr.body["spec"]["gatewayRef"]
        gw = crossplane.gateway_xr(ref.get("namespace", xr.body["metadata"]["namespace"]), ref["name"])
        if gw is None or not gw.is_true("GatewayReady"):
            for name in list(rsp.desired.resources):
                del rsp.desired.resources[name]


REAL = Ablation()
VARIANTS: list[Ablation] = [
    REAL,
    NoAnchor(),
    AcceptanceOnly(),
    WithholdRoutes(),
    IgnoreWorkloads(),
    NoModelCheck(),
    TrustFailedReads(),
]


# --- the simulation -------------------------------------------------------------------------


@dataclass
class Metrics:
    requests: int = 0
    errors_500: int = 0
    failed: int = 0
    lying_seconds: int = 0
    detection_seconds: int = 0
    gc_deletions: int = 0
    rollouts: int = 0
    converge_seconds: int | None = None
    steps: int = 0
    # Seconds from a change of the truth to the condition following it.
    lags: list[int] = field(default_factory=list)
    # Lower bounds: the run ended (or the XR went) before the condition followed.
    unfollowed: list[int] = field(default_factory=list)
    # Seconds a condition disagreed with an unchanged world (it flipped on its own).
    flips: list[int] = field(default_factory=list)
    # Function calls and API objects per ModelRoute, counted from the end of the run's setup.
    calls: dict[tuple[str, str, str], int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def violate(self, invariant: int, at: int, what: str) -> None:
        self.violations.append(f"invariant {invariant} at t={at}s: {what}")

    @property
    def worst_lag(self) -> int:
        return max([*self.lags, *self.unfollowed, *self.flips], default=0)


@dataclass
class Follower:
    """One condition of one XR against the truth it promises.

    A disagreement is every run of seconds in which the condition is not the
    truth: begun by the world changing (a lag) or by the condition changing
    on its own (a flip the world did not make). Either way it must end within
    LAG_BOUND_SECONDS (invariant 6).
    """

    truth: bool = False
    disagree_since: int | None = None
    began_with_the_world: bool = False
    reported: bool = False
    failing_since: int | None = None

    def step(
        self, now: int, truth: bool, shown: bool, m: Metrics, what: str, *, blind: bool, bound: int
    ) -> None:
        """`blind`: nothing can observe the world now (provider-kubernetes is down), so
        the clock starts when it is back. `bound`: the lag allowed (LAG_BOUND_SECONDS, or a
        probe's interval more where only a poll can see the change)."""
        world_changed = truth != self.truth
        self.truth = truth
        if shown == truth:
            if self.disagree_since is not None:
                ended = m.lags if self.began_with_the_world else m.flips
                ended.append(now - self.disagree_since)
                self.disagree_since = None
            elif world_changed:
                m.lags.append(0)  # the condition had already said so
            return
        if self.disagree_since is None:
            self.disagree_since, self.began_with_the_world, self.reported = now, world_changed, False
        if blind:
            self.disagree_since = now
        if not self.reported and now - self.disagree_since > bound:
            self.reported = True
            m.violate(6, now, f"{what} says {shown}, not {truth}, for {now - self.disagree_since}s")

    def close(self, now: int, m: Metrics) -> None:
        if self.disagree_since is not None:
            m.unfollowed.append(now - self.disagree_since)
            self.disagree_since = None

    def failing(self, now: int, failed: bool) -> int:
        """Seconds requests have been failing, counting this one (0 when they succeed)."""
        if not failed:
            self.failing_since = None
            return 0
        if self.failing_since is None:
            self.failing_since = now
        return now - self.failing_since + 1


class Simulation:
    def __init__(
        self,
        run_function: RunFunction,
        ablation: Ablation,
        *,
        gateway_namespace_mode: bool = False,
        watches: bool = True,
        lag_bound: int = LAG_BOUND_SECONDS,
        throughput: Throughput = UNBOUNDED,
        route_input: dict[str, Any] = ROUTE_INPUT,
    ) -> None:
        self.world = World(gateway_namespace_mode=gateway_namespace_mode)
        self.lag_bound = lag_bound
        self.route_input = route_input
        self.provider = Provider(self.world, watches=watches)
        self.provider_http = ProviderHTTP(self.world)
        self.crossplane = Crossplane(self.world, self.provider, run_function, ablation, throughput)
        self.metrics = Metrics()
        self.traffic: dict[str, Traffic] = {}
        self.last_fault = 0
        self.check_drain = False  # invariant 5, from a drain on
        self._gc_seen = 0
        self._ready_since: int | None = None
        # (XR key, condition type) -> the follower of that condition.
        self._followers: dict[tuple[tuple[str, str, str], str], Follower] = {}
        self._served_once: set[str] = set()
        # Models added while the gateway was GatewayReady: the second they were added.
        self._added_to_ready: dict[str, int] = {}
        # The InferenceGateway names a Deployment that is not where Envoy
        # Gateway put it: GatewayReady cannot be promised until that is fixed.
        self.misconfigured = False

    # --- what users and operators do ---------------------------------------------------------

    def fault(self) -> None:
        self.last_fault = self.world.now

    def add_gateway(self, **envoy: Any) -> None:
        body = copy.deepcopy(GATEWAY_XR)
        body["spec"]["envoy"] = dict(envoy)
        self.crossplane.create(XR("InferenceGateway", body, GATEWAY_INPUT))
        self.fault()

    def misconfigure(self, **envoy: Any) -> None:
        self.misconfigured = True
        self.add_gateway(**envoy)

    def set_gateway_envoy(self, **envoy: Any) -> None:
        self.misconfigured = False
        spec = copy.deepcopy(self.crossplane.xrs[("InferenceGateway", *GATEWAY)].body["spec"])
        spec["envoy"] = dict(envoy)
        self.crossplane.update_spec(("InferenceGateway", *GATEWAY), spec)
        self.fault()

    def delete_gateway(self) -> None:
        self.crossplane.delete(("InferenceGateway", *GATEWAY))
        self.fault()

    def add_route(self, name: str, *, workload: bool = False, model_check: bool = False) -> None:
        body = copy.deepcopy(ROUTE_XR)
        body["metadata"]["name"] = name
        body["spec"]["model"] = f"team-a/{name}"
        host = f"{name}.team-a.svc"
        backend: dict[str, Any] = {"name": "vllm", "endpoint": {"hostname": host, "port": 8000}}
        if workload:
            self.world.serve_model(body["spec"]["model"], "team-a", f"{name}-vllm", host)
            backend["workloadRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-vllm"}
        if model_check:
            backend["modelCheck"] = {}
        body["spec"]["backends"] = [backend]
        self.crossplane.create(XR("ModelRoute", body, self.route_input))
        gw = self.gateway()
        # Only a gateway that says ready and is (its pods serve with the
        # sidecar, and the provider is there to create the route).
        if (
            gw is not None
            and gw.is_true("GatewayReady")
            and self.world.gateway_serves(GATEWAY)
            and not self.provider.stopped
        ):
            self._added_to_ready[body["spec"]["model"]] = self.world.now
        self.fault()

    def remove_route(self, name: str) -> None:
        self.crossplane.delete(("ModelRoute", "team-a", name))
        # A model taken away is not expected to be served, nor when it comes back new.
        self._served_once.discard(f"team-a/{name}")
        self._added_to_ready.pop(f"team-a/{name}", None)
        self.fault()

    def drain_one(self) -> None:
        self.world.evict_one(GATEWAY, min_available=1)
        self.fault()

    def upgrade(self, image: str) -> None:
        self.world.upgrade_envoy(GATEWAY, image)
        self.fault()

    def stop_provider(self) -> None:
        self.provider.stopped = True
        # Nothing is created while the provider is down: no promise of a quick model.
        self._added_to_ready.clear()
        self.fault()

    def start_provider(self) -> None:
        self.provider.stopped = False
        for state in self.provider.objects.values():
            state.next_read = self.world.now
        self.fault()

    def revoke_reads(self, kind: str) -> None:
        """provider-kubernetes loses `get` on a kind of target (list and watch kept)."""
        self.provider.forbidden.add(kind)
        self.fault()

    def restore_reads(self, kind: str) -> None:
        self.provider.forbidden.discard(kind)
        self.fault()

    def _route_target(self, name: str) -> tuple[str, str, str]:
        route = self.crossplane.xrs[("ModelRoute", "team-a", name)]
        obj = self.provider.objects[route.composed["route"]]
        return obj.target

    def reject_route(self, name: str) -> None:
        self.world.rejected.add(self._route_target(name))
        self.fault()

    def accept_route(self, name: str) -> None:
        self.world.rejected.discard(self._route_target(name))
        self.fault()

    def break_listener(self) -> None:
        self.world.broken_listeners.add(GATEWAY)
        self.fault()

    def fix_listener(self) -> None:
        self.world.broken_listeners.discard(GATEWAY)
        self.fault()

    def scale_model_server(self, name: str, replicas: int) -> None:
        self.world.scale_workload("team-a", f"{name}-vllm", replicas)
        self.fault()

    def load_model(self, name: str, *models: str) -> None:
        """The route's model server swaps what it has loaded: only its `/v1/models` says so."""
        self.world.load("team-a", f"{name}-vllm", models)
        self.fault()

    def crash_envoy(self, seconds: int) -> None:
        self.world.crash_pods(GATEWAY, seconds)
        self.fault()

    def envoy_recovered(self) -> None:
        """The crashed pods are ready again (the moment crash_envoy scheduled)."""
        self.fault()

    # --- time ------------------------------------------------------------------------------------

    def tick(self) -> None:
        self.world.step()
        changed, self.world.changed = self.world.changed, set()
        self.provider.step(changed)
        self.provider_http.step()
        probed, self.provider_http.changed = self.provider_http.changed, set()
        self.crossplane.step(probed, changed)
        self._serve_and_check()
        self.metrics.steps += 1

    def run_until(self, t: int) -> None:
        while self.world.now < t:
            self.tick()

    def finish(self) -> None:
        for follower in self._followers.values():
            follower.close(self.world.now, self.metrics)
        self.metrics.calls = dict(self.crossplane.calls_by_xr)

    # --- the invariants ----------------------------------------------------------------------

    def routes(self) -> list[XR]:
        return [xr for xr in self.crossplane.xrs.values() if xr.kind == "ModelRoute"]

    def gateway(self) -> XR | None:
        return self.crossplane.gateway_xr(*GATEWAY)

    def _follower(self, xr: XR, condition: str) -> Follower:
        return self._followers.setdefault((xr.key, condition), Follower())

    def _forget_deleted(self) -> None:
        for key in [k for k in self._followers if k[0] not in self.crossplane.xrs]:
            self._followers.pop(key).close(self.world.now, self.metrics)

    def _sidecar_pods_serve(self) -> bool:
        """Some Envoy pod of the gateway is available, every available one has the sidecar."""
        pods = [
            p
            for dep in self.world.deployments.values()
            if dep.gateway == GATEWAY
            for p in [*dep.pods, *(pod for pod, _ in dep.terminating)]
            if p.available(self.world.now)
        ]
        return bool(pods) and all(p.sidecar for p in pods) and GATEWAY not in self.world.broken_listeners

    def _serve_and_check(self) -> None:
        now = self.world.now
        m = self.metrics
        self._forget_deleted()
        gateway_serves = self.world.gateway_serves(GATEWAY) and not self.misconfigured
        blind = self.provider.blind
        gateway_failed, lying, detecting = self._check_routes(gateway_serves, blind=blind)
        gw = self.gateway()
        if gw is not None:
            follower = self._follower(gw, "GatewayReady")
            failing = follower.failing(now, gateway_failed)
            if failing and gw.is_true("GatewayReady"):
                if failing > self.lag_bound:
                    lying = True
                    m.violate(7, now, "requests failed at the gateway while GatewayReady=True")
                else:
                    detecting = True
            follower.step(
                now,
                gateway_serves,
                gw.is_true("GatewayReady"),
                m,
                "GatewayReady",
                blind=blind,
                bound=self.lag_bound,
            )
        m.lying_seconds += lying
        m.detection_seconds += detecting and not lying
        self._check_control_plane(gw)

    def _rejected_models(self) -> set[str]:
        return {
            h["value"]
            for key in self.world.rejected
            if key in self.world.objects
            for rule in self.world.objects[key]["spec"].get("rules", [])
            for match in rule.get("matches", [])
            for h in match.get("headers", [])
        }

    def _check_routes(self, gateway_serves: bool, *, blind: bool) -> tuple[bool, bool, bool]:
        """Serve one request per pod for every model; returns (gateway failed, lying, detecting)."""
        now = self.world.now
        m = self.metrics
        gateway_failed = lying = detecting = False
        rejected_models = self._rejected_models()
        for route in self.routes():
            model = route.body["spec"]["model"]
            traffic = self.traffic.setdefault(model, Traffic())
            before = (traffic.requests, traffic.errors_500, traffic.unavailable)
            served = self.world.request(GATEWAY, model, traffic)
            m.requests += traffic.requests - before[0]
            m.errors_500 += traffic.errors_500 - before[1]
            m.failed += served.failed
            gateway_failed |= traffic.errors_500 > before[1] or traffic.unavailable > before[2]
            follower = self._follower(route, "RoutingReady")
            failing = follower.failing(now, served.failed > 0)
            if failing and route.is_true("RoutingReady"):
                if failing > self.lag_bound:
                    lying = True
                    m.violate(1, now, f"{served.failed} requests for {model} failed while RoutingReady=True")
                else:
                    detecting = True
            added = self._added_to_ready.get(model)
            if added is not None and (served.failed == 0 or now - added >= world_model.POD_START_SECONDS):
                del self._added_to_ready[model]
                if served.failed:
                    m.violate(8, now, f"{model}, added to a ready gateway, not served {now - added}s later")
            if served.failed == 0:
                self._served_once.add(model)
            elif (
                model in self._served_once
                and self._sidecar_pods_serve()
                and model not in rejected_models
                and not self.world.model_server_down(model)
            ):
                m.violate(3, now, f"{model} was served and is not, while its gateway's pods serve")
            follower.step(
                now,
                gateway_serves and served.failed == 0,
                route.is_true("RoutingReady"),
                m,
                f"RoutingReady of {route.key[2]}",
                blind=blind,
                bound=self.lag_bound,
            )
        return gateway_failed, lying, detecting

    def _check_control_plane(self, gw: XR | None) -> None:
        now = self.world.now
        m = self.metrics
        anchors = {
            h["value"]
            for (kind, _, _), obj in self.world.objects.items()
            if kind == "AIGatewayRoute"
            for rule in obj["spec"].get("rules", [])
            for match in rule.get("matches", [])
            for h in match.get("headers", [])
            if h["name"] != "x-ai-eg-model"
        }
        if anchors & set(self.world.models(GATEWAY)):
            m.violate(2, now, "/v1/models lists the anchor")
        new = self.crossplane.gc_deletions[self._gc_seen :]
        self._gc_seen = len(self.crossplane.gc_deletions)
        m.gc_deletions += len(new)
        if self.check_drain and gw is not None and gw.condition("GatewayReady").get("status") == "False":
            m.violate(
                5, now, f"GatewayReady=False during a drain: {gw.condition('GatewayReady').get('message')}"
            )
        everything_ready = (
            gw is not None
            and gw.is_true("GatewayReady")
            and all(r.is_true("RoutingReady") for r in self.routes())
        )
        if everything_ready and self._ready_since is None:
            self._ready_since = now
        elif not everything_ready:
            self._ready_since = None
        m.rollouts = self.world.rollouts

    def check_convergence(self) -> None:
        """Invariant 4: once faults stop, everything is ready within the bound."""
        m = self.metrics
        if self._ready_since is None:
            m.violate(
                4, self.world.now, f"not ready {self.world.now - self.last_fault}s after the last fault"
            )
            return
        m.converge_seconds = max(0, self._ready_since - self.last_fault)
        if m.converge_seconds > converge_bound():
            m.violate(4, self._ready_since, f"ready only {m.converge_seconds}s after the last fault")


# --- the scenarios -------------------------------------------------------------------------------

Step = tuple[int, Callable[[Simulation], None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: list[Step]
    end: int
    converges: bool = True
    gateway_namespace_mode: bool = False
    drain: bool = False
    # provider-kubernetes with --enable-watches. Without, the run measures
    # what watches buy; the truth bounds are promised only with them.
    watches: bool = True
    # How late a condition may follow the truth: a change only a probe sees is seen a poll late.
    lag_bound: int = LAG_BOUND_SECONDS

    @property
    def title(self) -> str:
        return self.name if self.watches else f"{self.name} (watches off)"


def _base(sim: Simulation) -> None:
    sim.add_gateway()


def _with_route(sim: Simulation) -> None:
    sim.add_gateway()
    sim.add_route("llama")


def _with_served_route(sim: Simulation) -> None:
    sim.add_gateway()
    sim.add_route("llama", workload=True)


def _with_checked_route(sim: Simulation) -> None:
    sim.add_gateway()
    sim.add_route("llama", workload=True, model_check=True)


# Faults the control plane learns of only by watching, each lasting longer
# than provider-kubernetes' 10-minute poll of a Ready Object, so that the
# runs without watches show how late they are noticed.
WATCHED_FAULTS = [
    Scenario(
        "a route loses acceptance after being Ready, then regains it",
        [
            (0, _with_route),
            (200, lambda s: s.reject_route("llama")),
            (900, lambda s: s.accept_route("llama")),
        ],
        end=1150,
    ),
    Scenario(
        "a listener loses its certificate (the Gateway stays Programmed), then is fixed",
        [(0, _with_route), (200, lambda s: s.break_listener()), (900, lambda s: s.fix_listener())],
        end=1150,
    ),
    Scenario(
        "every Envoy pod crashes while its routes are Ready, then recovers",
        [(0, _with_route), (200, lambda s: s.crash_envoy(700)), (900, lambda s: s.envoy_recovered())],
        end=1150,
    ),
]

SCENARIOS = [
    Scenario(
        "first gateway and first model",
        [(0, _base), (5, lambda s: s.add_route("llama"))],
        end=300,
    ),
    Scenario(
        "the last model removed, then a new one added",
        [
            (0, _base),
            (5, lambda s: s.add_route("llama")),
            (150, lambda s: s.remove_route("llama")),
            (240, lambda s: s.add_route("mistral")),
        ],
        end=480,
    ),
    Scenario(
        "an Envoy upgrade rollout",
        [(0, _base), (5, lambda s: s.add_route("llama")), (200, lambda s: s.upgrade("envoy:v2"))],
        end=450,
    ),
    Scenario(
        "draining one of two Envoy pods",
        [(0, _base), (5, lambda s: s.add_route("llama")), (200, lambda s: s.drain_one())],
        end=450,
        drain=True,
    ),
    Scenario(
        "the Deployment missing (a wrong name), then fixed",
        [
            (0, lambda s: s.misconfigure(deployMode="GatewayNamespace")),
            (5, lambda s: s.add_route("llama")),
            (200, lambda s: s.set_gateway_envoy(deployMode="ControllerNamespace")),
        ],
        end=500,
    ),
    Scenario(
        "provider-kubernetes stopped for five minutes, with an upgrade meanwhile",
        [
            (0, _base),
            (5, lambda s: s.add_route("llama")),
            (150, lambda s: s.stop_provider()),
            (200, lambda s: s.upgrade("envoy:v2")),
            (450, lambda s: s.start_provider()),
        ],
        end=750,
    ),
    Scenario(
        "the gateway deleted while routes exist",
        [
            (0, _base),
            (5, lambda s: s.add_route("llama")),
            (5, lambda s: s.add_route("mistral")),
            (200, lambda s: s.delete_gateway()),
        ],
        end=400,
        converges=False,
    ),
    Scenario(
        "a model's server scaled to zero and back, then to two",
        [
            (0, _with_served_route),
            (200, lambda s: s.scale_model_server("llama", 0)),
            (320, lambda s: s.scale_model_server("llama", 1)),
            (440, lambda s: s.scale_model_server("llama", 2)),
        ],
        end=600,
    ),
    Scenario(
        "a model's server loads another model, then nothing, then the model again",
        [
            (0, _with_checked_route),
            (200, lambda s: s.load_model("llama", "team-a/mistral")),
            (320, lambda s: s.load_model("llama")),
            (440, lambda s: s.load_model("llama", "team-a/llama")),
        ],
        end=600,
        # Only the next poll sees a swap; the Request's change then wakes the route.
        lag_bound=POLL_SECONDS + LAG_BOUND_SECONDS,
    ),
    Scenario(
        "provider-kubernetes refused reads of Deployments, then a model's server scaled to zero, "
        "then both undone",
        [
            (0, _with_served_route),
            (200, lambda s: s.revoke_reads("Deployment")),
            (220, lambda s: s.scale_model_server("llama", 0)),
            (400, lambda s: s.restore_reads("Deployment")),
            # After the provider's retry backoff (at most 60 s) has read it again.
            (500, lambda s: s.scale_model_server("llama", 1)),
        ],
        end=700,
    ),
    *WATCHED_FAULTS,
    *(
        Scenario(s.name, s.steps, s.end, s.converges, s.gateway_namespace_mode, s.drain, watches=False)
        for s in WATCHED_FAULTS
    ),
]

# The steady state: one gateway, one ModelRoute with one backend, nothing changing.
STEADY = Scenario("steady state", [(0, _with_route)], end=1500)
STEADY_FROM = 300  # settled well before this second


def run_scenario(scenario: Scenario, run_function: RunFunction, ablation: Ablation) -> Metrics:
    sim = Simulation(
        run_function,
        ablation,
        gateway_namespace_mode=scenario.gateway_namespace_mode,
        watches=scenario.watches,
        lag_bound=scenario.lag_bound,
    )
    # Scenarios are timed for the default pod start and drain; slower pods
    # stretch every step, so each fault still lands where it was meant to.
    stretch = max(1.0, world_model.POD_START_SECONDS / 20, world_model.DRAIN_SECONDS / 15)
    pending = sorted(scenario.steps, key=lambda s: s[0])
    for at, action in pending:
        sim.run_until(round(at * stretch))
        action(sim)
        if scenario.drain and action is pending[-1][1]:
            sim.check_drain = True
    sim.run_until(round(scenario.end * stretch))
    if scenario.converges:
        sim.check_convergence()
    sim.finish()
    return sim.metrics


@dataclass(frozen=True)
class SteadyCost:
    calls_per_minute: float
    objects: int


def steady_cost(run_function: RunFunction) -> SteadyCost:
    """Function calls per minute and API objects of one settled ModelRoute with one backend."""
    sim = Simulation(run_function, REAL)
    _with_route(sim)
    sim.run_until(STEADY_FROM)
    route = sim.crossplane.xrs[("ModelRoute", "team-a", "llama")]
    before = sim.crossplane.calls_by_xr.get(route.key, 0)
    sim.run_until(STEADY.end)
    calls = sim.crossplane.calls_by_xr[route.key] - before
    managed = [sim.provider.objects[k] for k in route.composed.values()]
    # The XR, its Objects, and the targets the managed ones create.
    objects = 1 + len(managed) + sum(not o.observe_only for o in managed)
    return SteadyCost(calls * 60 / (STEADY.end - STEADY_FROM), objects)
