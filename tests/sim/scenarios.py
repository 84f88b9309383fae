"""Scenarios, ablations and the invariants checked at every simulated second."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from tests.sim.control import XR, Ablation, Crossplane, Provider, RunFunction
from tests.sim.world import Traffic, World
from tests.support import EXAMPLES, GATEWAY_INPUT, ROUTE_INPUT, load_yaml

GATEWAY_XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
ROUTE_XR = load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0]
GATEWAY = ("platform", "inference")
# Once faults stop, everything is ready within this many seconds: a rollout
# (two pods, 12 s each), the provider's watch, and a route XR's TTL of 60 s.
CONVERGE_BOUND_SECONDS = 150


# --- ablations -----------------------------------------------------------------------------


class NoAnchor(Ablation):
    """(a) No anchor route: the gateway is composed without it (and never waits for it)."""

    name = "(a) no anchor"

    def before(self, xr: XR, req: fnv1.RunFunctionRequest, crossplane: Crossplane) -> None:  # noqa: ARG002
        if xr.kind == "InferenceGateway":
            # The function believes an anchor is in effect, so GatewayReady is
            # what it would be in a design without one.
            req.observed.resources["anchor-route"].resource.update(
                {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
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
        names = set(rsp.desired.resources)
        objects = [crossplane.provider.objects.get(xr.composed[n]) for n in names if n in xr.composed]
        accepted = (
            bool(names) and len(objects) == len(names) and all(o is not None and o.ready() for o in objects)
        )
        for c in rsp.conditions:
            if c.type == "RoutingReady":
                c.status = fnv1.STATUS_CONDITION_TRUE if accepted else fnv1.STATUS_CONDITION_FALSE
                c.reason = "Available" if accepted else "RouteNotAccepted"
        rsp.desired.composite.ready = fnv1.READY_TRUE if accepted else fnv1.READY_FALSE


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
VARIANTS: list[Ablation] = [REAL, NoAnchor(), AcceptanceOnly(), WithholdRoutes()]


# --- the simulation -------------------------------------------------------------------------


@dataclass
class Metrics:
    requests: int = 0
    errors_500: int = 0
    lying_seconds: int = 0
    gc_deletions: int = 0
    rollouts: int = 0
    converge_seconds: int | None = None
    steps: int = 0
    violations: list[str] = field(default_factory=list)

    def violate(self, invariant: int, at: int, what: str) -> None:
        self.violations.append(f"invariant {invariant} at t={at}s: {what}")


class Simulation:
    def __init__(
        self,
        run_function: RunFunction,
        ablation: Ablation,
        *,
        gateway_namespace_mode: bool = False,
        watches: bool = True,
    ) -> None:
        self.world = World(gateway_namespace_mode=gateway_namespace_mode)
        self.provider = Provider(self.world, watches=watches)
        self.crossplane = Crossplane(self.world, self.provider, run_function, ablation)
        self.metrics = Metrics()
        self.traffic: dict[str, Traffic] = {}
        self.last_fault = 0
        self.check_drain = False  # invariant 5, from a drain on
        self._gc_seen = 0
        self._ready_since: int | None = None

    # --- what users and operators do ---------------------------------------------------------

    def fault(self) -> None:
        self.last_fault = self.world.now

    def add_gateway(self, **envoy: Any) -> None:
        body = copy.deepcopy(GATEWAY_XR)
        body["spec"]["envoy"] = dict(envoy)
        self.crossplane.create(XR("InferenceGateway", body, GATEWAY_INPUT))
        self.fault()

    def set_gateway_envoy(self, **envoy: Any) -> None:
        spec = copy.deepcopy(self.crossplane.xrs[("InferenceGateway", *GATEWAY)].body["spec"])
        spec["envoy"] = dict(envoy)
        self.crossplane.update_spec(("InferenceGateway", *GATEWAY), spec)
        self.fault()

    def delete_gateway(self) -> None:
        self.crossplane.delete(("InferenceGateway", *GATEWAY))
        self.fault()

    def add_route(self, name: str) -> None:
        body = copy.deepcopy(ROUTE_XR)
        body["metadata"]["name"] = name
        body["spec"]["model"] = f"team-a/{name}"
        body["spec"]["backends"] = [
            {"name": "vllm", "endpoint": {"hostname": f"{name}.team-a.svc", "port": 8000}}
        ]
        self.crossplane.create(XR("ModelRoute", body, ROUTE_INPUT))
        self.fault()

    def remove_route(self, name: str) -> None:
        self.crossplane.delete(("ModelRoute", "team-a", name))
        self.fault()

    def drain_one(self) -> None:
        self.world.evict_one(GATEWAY, min_available=1)
        self.fault()

    def upgrade(self, image: str) -> None:
        self.world.upgrade_envoy(GATEWAY, image)
        self.fault()

    def stop_provider(self) -> None:
        self.provider.stopped = True
        self.fault()

    def start_provider(self) -> None:
        self.provider.stopped = False
        for state in self.provider.objects.values():
            state.next_read = self.world.now
        self.fault()

    # --- time ------------------------------------------------------------------------------------

    def tick(self) -> None:
        self.world.step()
        changed, self.world.changed = self.world.changed, set()
        self.provider.step(changed)
        self.crossplane.step()
        self._serve_and_check()
        self.metrics.steps += 1

    def run_until(self, t: int) -> None:
        while self.world.now < t:
            self.tick()

    # --- the invariants ----------------------------------------------------------------------

    def routes(self) -> list[XR]:
        return [xr for xr in self.crossplane.xrs.values() if xr.kind == "ModelRoute"]

    def gateway(self) -> XR | None:
        return self.crossplane.gateway_xr(*GATEWAY)

    def _serve_and_check(self) -> None:
        now = self.world.now
        m = self.metrics
        lying = False
        for route in self.routes():
            model = route.body["spec"]["model"]
            traffic = self.traffic.setdefault(model, Traffic())
            before = traffic.requests
            failed = self.world.request(GATEWAY, model, traffic)
            m.requests += traffic.requests - before
            m.errors_500 += failed
            if failed and route.is_true("RoutingReady"):
                lying = True
                m.violate(1, now, f"{failed} requests for {model} failed with 500 while RoutingReady=True")
        m.lying_seconds += lying
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
        for d in new:
            m.gc_deletions += 1
            m.violate(3, now, f"garbage collection deleted {d.resource} of {d.xr[0]} {d.xr[2]}")
        gw = self.gateway()
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
        if m.converge_seconds > CONVERGE_BOUND_SECONDS:
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


def _base(sim: Simulation) -> None:
    sim.add_gateway()


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
            (0, lambda s: s.add_gateway(deployMode="GatewayNamespace")),
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
]


def run_scenario(scenario: Scenario, run_function: RunFunction, ablation: Ablation) -> Metrics:
    sim = Simulation(run_function, ablation, gateway_namespace_mode=scenario.gateway_namespace_mode)
    pending = sorted(scenario.steps, key=lambda s: s[0])
    for at, action in pending:
        sim.run_until(at)
        action(sim)
        if scenario.drain and action is pending[-1][1]:
            sim.check_drain = True
    sim.run_until(scenario.end)
    if scenario.converges:
        sim.check_convergence()
    return sim.metrics
