"""Faults survived (issue #28): a component killed or hung in the middle of something, then back.

Each fault starts something in flight (an Envoy rollout, a ModelRoute being
added), kills (SIGKILL) or hangs (SIGSTOP) one component, starts it again
after a while, and waits for the truth. What each must show:

- nothing lost: every composed Object that existed before still exists after,
  with the same UID (a delete and re-create is a loss: Envoy drops the route);
- no lying second while every component that reports is up; while one is
  down (the function, Crossplane, provider-kubernetes), the prober counts
  the seconds a request failed while a condition said it serves apart
  (`stale_down`): a condition cannot move while its reporter is down;
- recovery: the seconds from the component's return to the truth (the
  rollout finished and every XR's status.serving ready).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.real.harness import (
    CONVERGE_S,
    OBJECT_API,
    ROUTE,
    XR_API,
    Env,
    Report,
    model_route_doc,
    rolled_out,
    route_doc_one_backend,
)
from tests.real.kube import wait
from tests.real.prober import said

# The components whose conditions stop moving while they are down.
REPORTERS = frozenset({"function", "crossplane", "provider-kubernetes"})

# A fault's ModelRoute, added while the component is down.
FAULT_ROUTE = (ROUTE[0], "fault")


@dataclass(frozen=True)
class Fault:
    """One component, how it fails, for how long, and what is in flight meanwhile."""

    component: str  # the Supervisor's process name
    how: str  # "kill" (SIGKILL, then started again) or "hang" (SIGSTOP, then SIGCONT)
    down_s: float
    during: str  # "rollout" or "route added"


def _composed(env: Env) -> dict[str, str]:
    """Every composed Object, by namespace/name, with its UID."""
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["uid"]
        for o in env.kube.list(OBJECT_API, "Object")
        if not o["metadata"].get("deletionTimestamp")
    }


def _start_rollout(env: Env) -> None:
    dep = env.deployment()
    assert dep is not None, "want the Envoy Deployment"
    env.kube.merge_patch(
        "apps/v1",
        "Deployment",
        dep["metadata"]["name"],
        dep["metadata"]["namespace"],
        {"spec": {"template": {"metadata": {"annotations": {"example.org/fault-at": str(time.time())}}}}},
    )


def _add_route(env: Env) -> None:
    backends = route_doc_one_backend()["spec"]["backends"]
    env.kube.apply(model_route_doc(FAULT_ROUTE, f"fault/model-{time.time():.0f}", backends))


def _serving(env: Env) -> bool:
    """The truth after a fault: the rollout finished and every XR says, as decided, that it serves."""
    if not rolled_out(env.deployment()):
        return False
    xrs = [env.gateway(), *env.kube.list(XR_API, "ModelRoute")]
    return all(
        x is not None and said(x, "GatewayReady" if x["kind"] == "InferenceGateway" else "RoutingReady")[0]
        for x in xrs
    )


def _survive(env: Env, r: Report, fault: Fault) -> None:
    wait("every XR serving before the fault", lambda: _serving(env), CONVERGE_S)
    before = _composed(env)
    proc = env.sup.find(fault.component)
    reporter = fault.component in REPORTERS
    down = env.prober.reporter_down() if reporter else contextlib.nullcontext()
    with down:
        if fault.how == "kill":
            env.sup.kill(proc)
        else:
            env.sup.hang(proc)
        env.prober.fault()
        (_start_rollout if fault.during == "rollout" else _add_route)(env)
        time.sleep(fault.down_s)
        if fault.how == "kill":
            env.sup.restart(proc)
        else:
            env.sup.resume(proc)
        back = time.time()
    env.prober.fault()
    wait(f"every XR serving after {fault.component} came back", lambda: _serving(env), CONVERGE_S)
    r.recovery = time.time() - back
    after = _composed(env)
    lost = sorted(n for n, uid in before.items() if after.get(n) != uid)
    r.lost = len(lost)
    r.notes.append(
        f"{fault.component} {'killed' if fault.how == 'kill' else 'hung'} {fault.down_s:.0f} s "
        f"during a {fault.during}; truth {r.recovery:.0f} s after it came back; "
        f"{len(before)} composed Objects before, lost {len(lost)}"
    )
    if fault.during == "route added":
        env.kube.delete(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0])
        wait(
            "the fault's route gone",
            lambda: env.kube.get(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0]) is None,
            CONVERGE_S,
        )
    assert not lost, f"composed Objects lost or re-created: {lost}"


def _scenario(name: str, fault: Fault) -> Callable[[Env, Report], None]:
    def run(env: Env, r: Report) -> None:
        r.fault = True
        _survive(env, r, fault)

    run.__name__ = name
    run.__doc__ = (
        f"Issue #28: {fault.component} {fault.how} for {fault.down_s:.0f} s during a {fault.during}."
    )
    return run


FAULTS: list[Callable[[Env, Report], None]] = [
    _scenario("function_killed", Fault("function", "kill", 20, "rollout")),
    _scenario("function_hung", Fault("function", "hang", 30, "rollout")),
    _scenario("crossplane_killed", Fault("crossplane", "kill", 15, "route added")),
    _scenario("provider_killed", Fault("provider-kubernetes", "kill", 15, "rollout")),
    _scenario("envoy_gateway_killed", Fault("envoy-gateway", "kill", 15, "route added")),
    _scenario(
        "ai_gateway_controller_killed", Fault("envoy-ai-gateway-controller", "kill", 15, "route added")
    ),
]
