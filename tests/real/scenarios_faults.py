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

The API server and etcd go down after the thing in flight has started (while
they are down nothing can be started). The data plane's faults (an Envoy pod's
Envoy or ext-proc killed) come back as the kubelet brings a container back:
at once, by the data plane's own restart; their recovery is from the kill to
the pod serving again, and every request that failed meanwhile is judged.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.real.crossplane import FUNCTION_REPLICA_IPS, FUNCTION_REVISION, FUNCTION_SERVICE
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
from tests.real.processes import Process, port_open

# The components whose conditions stop moving while they are down: the
# function decides them, Crossplane and the provider carry what it reads and
# writes, the API server and etcd hold both.
REPORTERS = frozenset({"function", "crossplane", "provider-kubernetes", "kube-apiserver", "etcd"})

# Components that must be down after what is in flight has started: nothing
# can be started through the API while they are.
API = frozenset({"kube-apiserver", "etcd"})

# How long a killed data-plane container may take to serve again: the kubelet's
# first restart is immediate, Envoy then takes its configuration over xDS.
POD_RECOVERY_S = 60

# A fault's ModelRoute, added while the component is down.
FAULT_ROUTE = (ROUTE[0], "fault")


@dataclass(frozen=True)
class Fault:
    """One component, how it fails, for how long, and what is in flight meanwhile."""

    component: str  # the Supervisor's process name, or "pod/<container>" for one Envoy pod's container
    how: str  # "kill" (SIGKILL, then started again) or "hang" (SIGSTOP, then SIGCONT)
    down_s: float  # a pod's container: 0, the data plane starts it again as the kubelet would
    during: str  # "rollout", "route added" or "traffic"


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


def _in_flight(env: Env, fault: Fault) -> None:
    if fault.during == "rollout":
        _start_rollout(env)
    elif fault.during == "route added":
        _add_route(env)


def _survive(env: Env, r: Report, fault: Fault) -> None:
    wait("every XR serving before the fault", lambda: _serving(env), CONVERGE_S)
    before = _composed(env)
    if fault.component.startswith("pod/"):
        _survive_in_pod(env, r, fault.component.removeprefix("pod/"))
        _check_kept(env, r, before)
        return
    proc = env.sup.find(fault.component)
    reporter = fault.component in REPORTERS
    down = env.prober.reporter_down() if reporter else contextlib.nullcontext()
    with down:
        if fault.component in API:
            _in_flight(env, fault)
        if fault.how == "kill":
            env.sup.kill(proc)
        else:
            env.sup.hang(proc)
        env.prober.fault()
        if fault.component not in API:
            _in_flight(env, fault)
        time.sleep(fault.down_s)
        if fault.how == "kill":
            env.sup.restart(proc)
        else:
            env.sup.resume(proc)
        back = time.time()
    env.prober.fault()
    wait(f"every XR serving after {fault.component} came back", lambda: _serving(env), CONVERGE_S)
    r.recovery = time.time() - back
    r.notes.append(
        f"{fault.component} {'killed' if fault.how == 'kill' else 'hung'} {fault.down_s:.0f} s "
        f"during a {fault.during}; truth {r.recovery:.0f} s after it came back"
    )
    if fault.during == "route added":
        env.kube.delete(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0])
        wait(
            "the fault's route gone",
            lambda: env.kube.get(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0]) is None,
            CONVERGE_S,
        )
    _check_kept(env, r, before)


def _check_kept(env: Env, r: Report, before: dict[str, str]) -> None:
    after = _composed(env)
    lost = sorted(n for n, uid in before.items() if after.get(n) != uid)
    r.lost = len(lost)
    r.notes.append(f"{len(before)} composed Objects before, lost {len(lost)}")
    assert not lost, f"composed Objects lost or re-created: {lost}"


def _survive_in_pod(env: Env, r: Report, container: str) -> None:
    """One Envoy pod's container killed under traffic; the data plane starts it again as the kubelet would.

    GatewayReady is not asked to move: the other pod serves, and a container
    that restarts makes its pod leave the Service (ContainersReady false).
    What is judged is every request meanwhile: a failure after the detection
    allowance while the conditions say serving is a lie.
    """
    sandboxes = sorted(env.plane.sandboxes.values(), key=lambda sb: sb.key)
    assert len(sandboxes) >= 2, f"want two Envoy pods, have {[sb.key for sb in sandboxes]}"
    sb = sandboxes[0]
    index = next((i for i, c in enumerate(sb.containers) if c["name"] == container), None)
    assert index is not None, f"no container {container} in {sb.key}: {[c['name'] for c in sb.containers]}"
    restarts = sb.restarts
    env.sup.kill(sb.processes[index], hold=False)
    killed = time.time()
    env.prober.fault()
    wait(
        f"{sb.key}'s {container} started again and the pod ready",
        lambda: sb.restarts > restarts and sb.ready and all(p.alive() for p in sb.processes),
        POD_RECOVERY_S,
    )
    wait("every XR serving after the pod came back", lambda: _serving(env), CONVERGE_S)
    r.recovery = time.time() - killed
    r.notes.append(f"{sb.key}'s {container} killed under traffic; serving again {r.recovery:.0f} s after")


def _scenario(name: str, fault: Fault) -> Callable[[Env, Report], None]:
    def run(env: Env, r: Report) -> None:
        r.fault = True
        _survive(env, r, fault)

    run.__name__ = name
    run.__doc__ = f"Issue #28: {fault.component} {fault.how} for {fault.down_s:.0f} s during {fault.during}."
    return run


def _point_crossplane_at(env: Env, endpoint: str) -> None:
    """Where Crossplane dials the function: the FunctionRevision's status, as the package manager writes it."""
    env.kube.patch_status(
        "pkg.crossplane.io/v1", "FunctionRevision", FUNCTION_REVISION, {"endpoint": endpoint}
    )


def _endpoint(env: Env) -> str:
    rev = env.kube.get("pkg.crossplane.io/v1", "FunctionRevision", FUNCTION_REVISION)
    assert rev is not None, f"want the FunctionRevision {FUNCTION_REVISION}"
    return str(rev["status"]["endpoint"])


def _replicas(env: Env, single: Process) -> tuple[list[Process], int]:
    """Two replicas of the function on one port, behind FUNCTION_SERVICE (Crossplane's hosts file)."""
    port = int(single.env["ADDRESS"].rsplit(":", 1)[1]) + 1
    started = [
        env.sup.start(f"function-{i}", single.cmd, env={**single.env, "ADDRESS": f"{ip}:{port}"})
        for i, ip in enumerate(FUNCTION_REPLICA_IPS)
    ]
    for proc, ip in zip(started, FUNCTION_REPLICA_IPS, strict=True):
        env.sup.wait_until(proc, f"{proc.name} listening", lambda ip=ip: port_open(port, ip))
    return started, port


def function_replica_killed(env: Env, r: Report) -> None:
    """Issue #28: the function run as a platform team should, two replicas, one killed during a rollout.

    Crossplane dials the function's headless Service round_robin (v2.4.0
    internal/xfn/function_runner.go); a killed replica's calls fail, Crossplane
    requeues them, and the other replica answers. The truth must come while
    the replica is still down: recovery is timed from the kill, and every
    second is judged (the function is up: no reporter is down).
    """
    r.fault = True
    wait("every XR serving before the fault", lambda: _serving(env), CONVERGE_S)
    before = _composed(env)
    single = env.sup.find("function")
    alone = _endpoint(env)
    replicas, port = _replicas(env, single)
    try:
        _point_crossplane_at(env, f"dns:///{FUNCTION_SERVICE}:{port}")
        env.sup.stop(single)  # every call now goes to the two replicas
        _start_rollout(env)
        wait("every XR serving through two replicas", lambda: _serving(env), CONVERGE_S)
        served = {p.name: p.log.stat().st_size for p in replicas}
        env.sup.kill(replicas[0])
        killed = time.time()
        env.prober.fault()
        _start_rollout(env)
        wait("every XR serving with one replica down", lambda: _serving(env), CONVERGE_S)
        r.recovery = time.time() - killed
        grew = sorted(p.name for p in replicas if p.log.stat().st_size > served[p.name])
        r.notes.append(
            f"two replicas, {replicas[0].name} killed during a rollout; truth {r.recovery:.0f} s after the kill "
            f"with it still down; replicas that logged calls meanwhile: {grew}"
        )
        env.sup.restart(replicas[0])
    finally:
        # Back to one replica on its own address, for the scenarios that follow.
        restarted = (
            env.sup.restart(single) if not single.alive() and single not in env.sup.processes else None
        )
        if restarted is not None:
            env.sup.wait_until(
                restarted,
                "the function listening",
                lambda: port_open(int(single.env["ADDRESS"].rsplit(":", 1)[1])),
            )
        _point_crossplane_at(env, alone)
        for proc in (env.sup.find(p.name) for p in replicas):
            env.sup.stop(proc)
    wait("every XR serving on one replica again", lambda: _serving(env), CONVERGE_S)
    _check_kept(env, r, before)


FAULTS: list[Callable[[Env, Report], None]] = [
    _scenario("function_killed", Fault("function", "kill", 20, "rollout")),
    _scenario("function_hung", Fault("function", "hang", 30, "rollout")),
    function_replica_killed,
    _scenario("crossplane_killed", Fault("crossplane", "kill", 15, "route added")),
    _scenario("provider_killed", Fault("provider-kubernetes", "kill", 15, "rollout")),
    _scenario("envoy_gateway_killed", Fault("envoy-gateway", "kill", 15, "route added")),
    _scenario(
        "ai_gateway_controller_killed", Fault("envoy-ai-gateway-controller", "kill", 15, "route added")
    ),
    # Its webhook injects the ext-proc (failurePolicy Fail): the rollout's new pod cannot be created.
    _scenario("ai_gateway_webhook_killed", Fault("envoy-ai-gateway-controller", "kill", 15, "rollout")),
    _scenario("kube_apiserver_killed", Fault("kube-apiserver", "kill", 15, "rollout")),
    _scenario("etcd_killed", Fault("etcd", "kill", 15, "rollout")),
    _scenario("envoy_killed", Fault("pod/envoy", "kill", 0, "traffic")),
    _scenario("extproc_killed", Fault("pod/ai-gateway-extproc", "kill", 0, "traffic")),
]
