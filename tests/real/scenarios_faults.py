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
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus

from tests.real.costs import answered, request_totals
from tests.real.crossplane import FUNCTION_REPLICA_IPS, FUNCTION_REVISION, FUNCTION_SERVICE
from tests.real.harness import (
    CONVERGE_S,
    GATEWAY,
    OBJECT_API,
    POD_HTTP_LISTENER,
    ROUTE,
    VLLM_PORT,
    XR_API,
    Env,
    Report,
    model_route_doc,
    model_server,
    rolled_out,
    route_doc_one_backend,
)
from tests.real.kube import condition, wait
from tests.real.prober import DETECTION_S, Answer, chat, decided, said
from tests.real.processes import Process, free_port, port_open
from tests.real.scenarios_models import WATCH_PATH_S, poll_s
from tests.real.upstreams import Upstream
from tests.support import EXAMPLES

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
# Two reads of the composed Objects this far apart that agree: nothing is being composed or deleted.
SETTLE_S = 2.0
# The model's server the stale scenario stops, and how long the function is down meanwhile.
MODEL_SERVER = "vllm-llama"
STALE_DOWN_S = 20.0
# How long a killed component stays down: long enough that what is in flight (a rollout, a
# route added) moves on without it, and no longer (each second costs CI time).
OUTAGE_S = 10.0
# The longest a wedged Envoy Gateway waits for its liveness probe: three failed
# probes 20 s apart, each waiting up to 1 s, from a round up to 20 s away, then
# the chart's 10 s grace (a stopped process ignores SIGTERM), and a margin.
LIVENESS_BOUND_S = 90.0
# Requests while a pod's container is down: one every BURST_EVERY_S.
BURST_EVERY_S = 0.05

# Crossplane v2.4.0 bounds a whole XR reconcile, the function calls in it
# included, by 2 minutes (`timeout` in
# internal/controller/apiextensions/composite/reconciler.go); v2.2.1 the same.
# A function hung longer than that fails the reconcile: the XR's Synced turns
# False, what a platform team alerts on (docs/operations.md).
CROSSPLANE_RECONCILE_TIMEOUT_S = 120.0
# How long the function hangs past it: the reconcile the fault's rollout starts
# begins a few seconds into the hang, and its failure must be written by the end.
PAST_TIMEOUT_S = CROSSPLANE_RECONCILE_TIMEOUT_S + 25.0

# A fault's ModelRoute, added while the component is down.
FAULT_ROUTE = (ROUTE[0], "fault")


@dataclass(frozen=True)
class Fault:
    """One component, how it fails, for how long, and what is in flight meanwhile."""

    component: str  # the Supervisor's process name, or "pod/<container>" for one Envoy pod's container
    how: str  # "kill" (SIGKILL, then started again) or "hang" (SIGSTOP, then SIGCONT)
    down_s: float  # a pod's container: 0, the data plane starts it again as the kubelet would
    during: str  # "rollout", "route added" or "traffic"
    # Down past Crossplane's reconcile timeout: the XRs must say Synced=False before it is back.
    past_timeout: bool = False
    # Hung until its liveness probe has it restarted (tests/real/processes.py), down_s at most.
    until_restarted: bool = False


def _composed(env: Env) -> dict[str, str]:
    """Every composed Object, by namespace/name, with its UID."""
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["uid"]
        for o in env.kube.list(OBJECT_API, "Object")
        if not o["metadata"].get("deletionTimestamp")
    }


def _object_deletes(env: Env) -> int:
    """DELETE requests on Objects the API server has served since it started (its own counter)."""
    return request_totals(env.kube.raw("/metrics"))["DELETE objects"]


def _deletes_since(env: Env, fault: Fault, before: int) -> int:
    """DELETE requests on Objects since `before` was read; after an API server restart its counter
    starts again at 0, and nothing can be deleted while it is down, so its count since it came back."""
    now = _object_deletes(env)
    return now if fault.component == "kube-apiserver" else now - before


def _synced_false(env: Env) -> list[str]:
    """The XRs whose Synced condition says False, each with its reason and message."""
    found = []
    for xr in (env.gateway(), *env.kube.list(XR_API, "ModelRoute")):
        synced = condition(xr, "Synced") if xr is not None else {}
        if synced.get("status") == "False":
            name = f"{xr['kind']} {xr['metadata']['name']}"  # type: ignore[index]
            message = str(synced.get("message"))
            # Its end says why (a deadline, a refused connection); its start names the step.
            found.append(f"{name}: {synced.get('reason')}: {message[:60]} ... {message[-90:]}")
    return found


def _say_unsynced(env: Env, r: Report, fault: Fault) -> None:
    """Down past Crossplane's reconcile timeout: some XR must say Synced=False by now."""
    if not fault.past_timeout:
        return
    unsynced = _synced_false(env)
    assert unsynced, (
        f"{fault.component} down {fault.down_s:.0f} s, past Crossplane's "
        f"{CROSSPLANE_RECONCILE_TIMEOUT_S:.0f} s reconcile timeout, and no XR says Synced=False"
    )
    r.notes.append(f"Synced=False before it came back: {unsynced[0]}")


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


def _serving(env: Env, settled_before: str | None = None) -> bool:
    """The truth after a fault: the rollout finished and every XR says, as decided, that it serves.

    After a rollout, status.serving True from before it proves nothing: with
    settled_before (the gateway's status.deployment.settledTemplate when the
    fault began) the function must also have settled on the new template.
    """
    if not rolled_out(env.deployment()):
        return False
    if settled_before is not None and _settled_template(env) in {None, settled_before}:
        return False
    xrs = [env.gateway(), *env.kube.list(XR_API, "ModelRoute")]
    return all(decided(x) for x in xrs)


def _settled_template(env: Env) -> str | None:
    """The pod template the function last settled the gateway on (status.deployment.settledTemplate)."""
    found = (((env.gateway() or {}).get("status") or {}).get("deployment") or {}).get("settledTemplate")
    return str(found) if found else None


def _settled(env: Env) -> dict[str, str]:
    """The composed Objects once no Object is being deleted and two reads SETTLE_S apart agree."""

    def read() -> dict[str, str] | None:
        if any(o["metadata"].get("deletionTimestamp") for o in env.kube.list(OBJECT_API, "Object")):
            return None
        first = _composed(env)
        time.sleep(SETTLE_S)
        return first if _composed(env) == first else None

    return wait("the composed Objects settled", read, CONVERGE_S)  # type: ignore[no-any-return]


def _reconciled_again(env: Env, answered: int) -> None:
    """Until Crossplane calls the function again and no XR says its last reconcile failed.

    Crossplane dials the function waitForReady: a reconcile during the outage
    waits for the connection, and gRPC's reconnect backoff (1 s growing 1.6
    times, to 120 s) can leave the function up and uncalled for many seconds
    (CI: 7 s after a 20 s outage). Until the function has answered a call
    again (`answered`: the calls it had answered at its return; a run with
    fault scenarios logs every call), the reporter is not back.

    A reporter's return is not the XR's: Crossplane requeues a reconcile that
    failed (Synced=False, ReconcileError) with backoff from 1 s to 30 s, and
    nothing can move the XR's conditions before that next reconcile. Up to
    then its seconds are stale, not lies; how long it took is in the recovery.
    An XR whose reconcile never failed (a hung call waits, the API server
    could not record a failure) passes at once: its seconds after the return
    are judged as lies, the strict reading.
    """
    wait(
        "Crossplane calling the function again",
        lambda: _calls(env.sup.find("function")) > answered,
        CONVERGE_S,
        interval=0.1,
    )
    wait(
        "every XR reconciled since the reporter came back",
        lambda: all(
            x is not None and condition(x, "Synced").get("status") == "True"
            for x in (env.gateway(), *env.kube.list(XR_API, "ModelRoute"))
        ),
        CONVERGE_S,
        interval=0.1,
    )


def _in_flight(env: Env, fault: Fault) -> None:
    if fault.during == "rollout":
        _start_rollout(env)
    elif fault.during == "route added":
        _add_route(env)


def _outage(env: Env, fault: Fault, probed_back: int) -> None:
    """The fault's time down: down_s, or until the component's liveness probe has had it restarted."""
    if not fault.until_restarted:
        time.sleep(fault.down_s)
        return
    wait(
        f"{fault.component}'s liveness probe to have it restarted",
        lambda: env.sup.liveness_restarts.get(fault.component, 0) > probed_back,
        fault.down_s,
    )


def _survive(env: Env, r: Report, fault: Fault) -> None:
    wait("every XR serving before the fault", lambda: _serving(env), CONVERGE_S)
    before = _settled(env)
    deletes = _object_deletes(env)
    if fault.component.startswith("pod/"):
        _survive_in_pod(env, r, fault.component.removeprefix("pod/"))
        _check_kept(env, r, before, _deletes_since(env, fault, deletes))
        return
    proc = env.sup.find(fault.component)
    probed_back = env.sup.liveness_restarts.get(fault.component, 0)
    template = _settled_template(env) if fault.during == "rollout" else None
    reporter = fault.component in REPORTERS
    down = env.prober.reporter_down() if reporter else contextlib.nullcontext()
    try:
        with down:
            if fault.component in API:
                _in_flight(env, fault)
            # Detection starts before the fault lands: a probe answered between the two
            # is detection, not a lie (CI counted one such request against envoy_killed).
            env.prober.fault()
            started = time.time()
            if fault.how == "kill":
                env.sup.kill(proc)
            else:
                env.sup.hang(proc)
            try:
                if fault.component not in API:
                    _in_flight(env, fault)
                _outage(env, fault, probed_back)
                _say_unsynced(env, r, fault)
                # The calls answered by the component's return (none while the function is down).
                answered = _calls(env.sup.find("function"))
            finally:
                # Back whatever happened meanwhile: a fault that failed half-way leaves no
                # component held down or hung (a hung one ignores the teardown's SIGTERM).
                # A hung one its liveness probe had restarted is gone: resuming it is a no-op.
                if fault.how == "kill":
                    env.sup.restart(proc)
                else:
                    env.sup.resume(proc)
            back = time.time()
            outage_s = back - started
            if reporter:
                _reconciled_again(env, answered)
        env.prober.fault()
        wait(
            f"every XR serving after {fault.component} came back", lambda: _serving(env, template), CONVERGE_S
        )
        r.recovery = time.time() - back
        restarted = (
            f", restarted by its liveness probe ({env.sup.liveness_restarts[fault.component] - probed_back})"
            if fault.until_restarted
            else ""
        )
        r.notes.append(
            f"{fault.component} {'killed' if fault.how == 'kill' else 'hung'} {outage_s:.0f} s{restarted} "
            f"during a {fault.during}; truth {r.recovery:.0f} s after it came back"
        )
    except BaseException:
        # The route the fault added goes whatever failed, without masking what did.
        if fault.during == "route added":
            with contextlib.suppress(Exception):
                env.kube.delete(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0])
                _wait_route_gone(env)
        raise
    # Counted before the fault's own route is deleted on purpose.
    deleted = _deletes_since(env, fault, deletes)
    if fault.during == "route added":
        env.kube.delete(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0])
        _wait_route_gone(env)
    _check_kept(env, r, before, deleted)


def _wait_route_gone(env: Env) -> None:
    """The fault's route and every Object it composed gone: the garbage collector's DELETEs of them
    come after the route's, and must not land in the next fault's count."""
    wait(
        "the fault's route and its Objects gone",
        lambda: (
            env.kube.get(XR_API, "ModelRoute", FAULT_ROUTE[1], FAULT_ROUTE[0]) is None
            and not any(
                (o["metadata"].get("labels") or {}).get("crossplane.io/composite") == FAULT_ROUTE[1]
                for o in env.objects(FAULT_ROUTE[0]).values()
            )
        ),
        CONVERGE_S,
    )


def _check_kept(env: Env, r: Report, before: dict[str, str], deleted: int) -> None:
    """Every Object from before the fault still there with its UID, and no DELETE of an Object meanwhile
    (the API server's count: one refused or undone would leave the UIDs alone)."""
    after = _composed(env)
    lost = sorted(n for n, uid in before.items() if after.get(n) != uid)
    r.lost = len(lost)
    r.deletes = deleted
    r.notes.append(
        f"{len(before)} composed Objects before, lost {len(lost)}, DELETE requests on Objects {deleted}"
    )
    assert not lost, f"composed Objects lost or re-created: {lost}"
    assert not deleted, f"{deleted} DELETE requests on Objects during the fault"


def _survive_in_pod(env: Env, r: Report, container: str) -> None:
    """One Envoy pod's container killed under traffic; the data plane starts it again as the kubelet would.

    GatewayReady is not asked to move: the other pod serves, and a container
    that restarts makes its pod leave the Service (ContainersReady false).
    Requests every BURST_EVERY_S from the kill until DETECTION_S after the pod
    is back, through the Service and straight to the pod, say what a client
    gets: through the Service, a failure after the detection allowance while
    the conditions say serving is a lie. GatewayReady is read meanwhile.
    """
    sandboxes = env.plane.serving()
    assert len(sandboxes) >= 2, f"want two serving Envoy pods, have {[sb.key for sb in sandboxes]}"
    sb = sandboxes[0]
    index = next((i for i, c in enumerate(sb.containers) if c["name"] == container), None)
    assert index is not None, f"no container {container} in {sb.key}: {[c['name'] for c in sb.containers]}"
    route = env.route()
    assert route is not None, "want the example ModelRoute"
    model = route["spec"]["model"]
    service = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    restarts = sb.restarts
    bursts: dict[str, list[tuple[float, int]]] = {"service": [], "pod": []}
    gateway_said: set[bool] = set()
    done = threading.Event()
    killed = time.time()
    workers = [
        threading.Thread(
            target=_burst, args=(bursts["service"], killed, done, ("127.0.0.1", service), model)
        ),
        threading.Thread(
            target=_burst, args=(bursts["pod"], killed, done, (sb.ip, POD_HTTP_LISTENER), model)
        ),
        threading.Thread(target=_read_gateway, args=(env, gateway_said, done)),
    ]
    env.prober.fault()  # before the kill: a probe answered between the two is detection
    env.sup.kill(sb.processes[index], hold=False)
    for w in workers:
        w.start()
    try:
        wait(
            f"{sb.key}'s {container} started again and the pod ready",
            lambda: sb.restarts > restarts and sb.ready and all(p.alive() for p in sb.processes),
            POD_RECOVERY_S,
        )
        r.recovery = time.time() - killed
        time.sleep(DETECTION_S + 2)  # requests go on past the allowance, with the pod back
    finally:
        done.set()
        for w in workers:
            w.join()
    wait("every XR serving after the pod came back", lambda: _serving(env), CONVERGE_S)
    late = [(t, status) for t, status in bursts["service"] if t >= DETECTION_S and not 200 <= status < 300]
    r.notes.append(
        f"{sb.key}'s {container} killed under traffic, serving again {r.recovery:.0f} s after; "
        f"GatewayReady said {' and '.join(map(str, sorted(gateway_said)))} meanwhile; "
        f"through the Service {_summary(bursts['service'])}; straight to the pod {_summary(bursts['pod'])}"
    )
    assert not late, f"requests through the Service failed after the detection allowance: {late[:5]}"


def _burst(
    out: list[tuple[float, int]], since: float, done: threading.Event, to: tuple[str, int], model: str
) -> None:
    """A request every BURST_EVERY_S until done: (seconds since `since`, status; 0 when refused)."""
    while not done.is_set():
        answer = chat(to[1], model, host=to[0])
        out.append((time.time() - since, answer.status))
        done.wait(BURST_EVERY_S)


def _read_gateway(env: Env, said_values: set[bool], done: threading.Event) -> None:
    """What the gateway says it decided, read every half second until done."""
    while not done.is_set():
        gw = env.gateway()
        if gw is not None:
            said_values.add(said(gw, "GatewayReady")[0])
        done.wait(0.5)


def _summary(answers: list[tuple[float, int]]) -> str:
    failed = [t for t, status in answers if not 200 <= status < 300]
    statuses = sorted({status for _, status in answers if not 200 <= status < 300})
    if not failed:
        return f"{len(answers)} requests, none failed"
    return (
        f"{len(answers)} requests, {len(failed)} failed ({', '.join(map(str, statuses))}) "
        f"from {min(failed):.1f} s to {max(failed):.1f} s after the kill"
    )


def _scenario(name: str, fault: Fault) -> Callable[[Env, Report], None]:
    def run(env: Env, r: Report) -> None:
        r.fault = True
        _survive(env, r, fault)

    run.__name__ = name
    run.__doc__ = (
        f"Issue #28: {fault.component} {fault.how} "
        + ("until its liveness probe restarts it" if fault.until_restarted else f"for {fault.down_s:.0f} s")
        + f" during {fault.during}."
    )
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
    port = free_port()
    # free_port() asked 127.0.0.1; the replicas listen on other loopback addresses.
    taken = [ip for ip in FUNCTION_REPLICA_IPS if port_open(port, ip)]
    assert not taken, f"port {port} already answers on {taken}"
    started = [
        # DEBUG: a line per call, to count which replica answered.
        env.sup.start(
            f"function-{i}", single.cmd, env={**single.env, "ADDRESS": f"{ip}:{port}", "DEBUG": "true"}
        )
        for i, ip in enumerate(FUNCTION_REPLICA_IPS)
    ]
    for proc, ip in zip(started, FUNCTION_REPLICA_IPS, strict=True):
        env.sup.wait_until(proc, f"{proc.name} listening", functools.partial(port_open, port, ip))
    return started, port


def _calls(proc: Process) -> int:
    """The calls a function replica answered: its debug log has a `composed` line for each."""
    return len(answered(proc.log.read_text(errors="replace")))


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
    before = _settled(env)
    deletes = _object_deletes(env)
    single = env.sup.find("function")
    alone = _endpoint(env)
    replicas, port = _replicas(env, single)
    try:
        _point_crossplane_at(env, f"dns:///{FUNCTION_SERVICE}:{port}")
        env.sup.stop(single)  # every call now goes to the two replicas
        template = _settled_template(env)
        _start_rollout(env)
        wait("every XR serving through two replicas", lambda: _serving(env, template), CONVERGE_S)
        before_kill = {p.name: _calls(p) for p in replicas}
        assert all(before_kill.values()), f"want both replicas answering calls: {before_kill}"
        env.prober.fault()  # before the kill: a probe answered between the two is detection
        env.sup.kill(replicas[0])
        killed = time.time()
        template = _settled_template(env)
        _start_rollout(env)
        wait("every XR serving with one replica down", lambda: _serving(env, template), CONVERGE_S)
        r.recovery = time.time() - killed
        answered = _calls(replicas[1]) - before_kill[replicas[1].name]
        r.notes.append(
            f"two replicas answered {sum(before_kill.values())} calls; {replicas[0].name} killed during a rollout; "
            f"truth {r.recovery:.0f} s after the kill with it still down, {answered} calls answered by "
            f"{replicas[1].name} meanwhile"
        )
        assert answered, f"{replicas[1].name} answered no call while {replicas[0].name} was down"
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
    _check_kept(env, r, before, _object_deletes(env) - deletes)


def function_down_while_a_model_stops(env: Env, r: Report) -> None:
    """Issue #28: stale while the reporter is down. The function killed, then the model's server
    scaled to zero: no condition can move, so RoutingReady says True while every request fails
    (counted apart, as stale); the function back, the truth follows. How long it stayed stale is
    the outage plus the recovery: what a platform team must alert on (docs/operations.md)."""
    r.fault = True
    env.kube.apply(model_server(MODEL_SERVER, 1))
    env.kube.apply_file(EXAMPLES / "install" / "workload-rbac.yaml")
    doc = route_doc_one_backend()
    doc["spec"]["backends"][0]["workloadRef"] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": MODEL_SERVER,
    }
    env.kube.apply(doc)
    # status.serving says True from before the change until the function has seen it: wait for
    # the route's answer about this server, and for the other backend's Objects to be gone.
    wait(
        "RoutingReady with the model's server observed serving",
        lambda: (
            (rt := env.route()) is not None
            and said(rt, "RoutingReady")[0]
            and f"{doc['spec']['backends'][0]['name']}: 1 of 1 replicas available"
            in str(condition(rt, "BackendsServing").get("message"))
        ),
        CONVERGE_S,
    )
    wait("every XR serving", lambda: _serving(env), CONVERGE_S)
    before = _settled(env)
    deletes = _object_deletes(env)
    proc = env.sup.find("function")

    def scale(replicas: int) -> None:
        env.kube.merge_patch(
            "apps/v1", "Deployment", MODEL_SERVER, ROUTE[0], {"spec": {"replicas": replicas}}
        )

    with env.prober.reporter_down():
        env.prober.fault()  # before the kill: a probe answered between the two is detection
        env.sup.kill(proc)
        env.vllm.down = True
        scale(0)
        stopped = time.time()
        time.sleep(STALE_DOWN_S)
        answered = _calls(proc)
        env.sup.restart(proc)
        back = time.time()
        _reconciled_again(env, answered)
    wait(
        "RoutingReady False as decided after the function came back",
        lambda: (rt := env.route()) is not None and not said(rt, "RoutingReady")[0],
        CONVERGE_S,
        interval=0.1,
    )
    r.recovery = time.time() - back
    stale = time.time() - stopped
    env.vllm.down = False
    scale(1)
    wait("every XR serving again", lambda: _serving(env), CONVERGE_S)
    r.notes.append(
        f"the function down {STALE_DOWN_S:.0f} s while the model's server went to zero: RoutingReady True "
        f"(stale) for {stale:.0f} s, False {r.recovery:.0f} s after the function came back"
    )
    _check_kept(env, r, before, _object_deletes(env) - deletes)


# A model server of its own for the backend faults, on the example backend's host: killing the
# shared one would fail the other scenarios' routes, which check no model and cannot know.
OWN_SERVER_PORT = VLLM_PORT + 1
OWN_MODEL = "faults/own-model"
OWN_ROUTE = (ROUTE[0], "own-server")
# The server slowed by this much: well inside the prober's 5 s and provider-http's 5 s probe timeout.
SLOWED_S = 2.0


@contextlib.contextmanager
def _own_server(env: Env) -> Iterator[Upstream]:
    """A ModelRoute whose one backend is a server of its own that lists its model, checked with
    failureThreshold 1 (the first refused probe says it), serving when this yields."""
    server = Upstream("own", "openai", host="0.0.0.0", bind_port=OWN_SERVER_PORT, models=[OWN_MODEL]).start()
    backends = route_doc_one_backend()["spec"]["backends"]
    backends[0]["endpoint"] = {**backends[0]["endpoint"], "port": OWN_SERVER_PORT}
    backends[0]["modelCheck"] = {"failureThreshold": 1}
    try:
        env.kube.apply(model_route_doc(OWN_ROUTE, OWN_MODEL, backends))
        wait(
            "the route to its own server serving",
            lambda: said(env.route(*OWN_ROUTE) or {}, "RoutingReady")[0],
            CONVERGE_S,
        )
        yield server
    finally:
        # The route first: its requests are judged while it exists, and its server must answer them.
        env.kube.delete(XR_API, "ModelRoute", OWN_ROUTE[1], OWN_ROUTE[0])
        wait("the route to its own server gone", lambda: env.route(*OWN_ROUTE) is None, CONVERGE_S)
        server.stop()


def backend_killed(env: Env, r: Report) -> None:
    """Issue #28: a model's server killed (its connections reset, its port refusing), then back.
    Envoy answers every request 503 at once; only provider-http's next probe can see it, so the
    route must say False within a poll and the watch path, and True again within as much once the
    server is back. Nothing composed is lost."""
    r.fault = True
    bound = poll_s() + WATCH_PATH_S
    with _own_server(env) as server:
        before = _settled(env)
        deletes = _object_deletes(env)
        env.prober.fault(detection_s=bound)
        server.kill()
        killed = time.time()
        wait(
            "RoutingReady False for the killed server",
            lambda: not said(env.route(*OWN_ROUTE) or {}, "RoutingReady")[0],
            bound,
            interval=0.1,
        )
        said_false = condition(env.route(*OWN_ROUTE), "RoutingReady")
        down_in = time.time() - killed
        answer = chat(env.plane.gateway_port(GATEWAY[0], GATEWAY[1]), OWN_MODEL)
        # Envoy has no answer for it: no healthy upstream, or the connection reset.
        assert answer.status == HTTPStatus.SERVICE_UNAVAILABLE, answer
        env.prober.fault(detection_s=bound)
        server.revive()
        back = time.time()
        wait(
            "RoutingReady True with the server back",
            lambda: said(env.route(*OWN_ROUTE) or {}, "RoutingReady")[0],
            bound,
        )
        r.recovery = time.time() - back
        r.lags += [down_in, r.recovery]
        r.notes.append(
            f"the model's server killed: requests answered {answer.status}, RoutingReady False "
            f"({said_false.get('reason')}) {down_in:.0f} s later, True {r.recovery:.0f} s after it was back "
            f"(bound {bound:.0f} s: provider-http --poll {poll_s():.0f} s and the watch path)"
        )
        _check_kept(env, r, before, _object_deletes(env) - deletes)


def backend_slowed(env: Env, r: Report) -> None:
    """Issue #28: a model's server slowed by SLOWED_S, then not. Its requests still succeed, later:
    RoutingReady must stay True (a slow server serves), across a probe of the slowed server too,
    and every request the prober sends meanwhile is judged."""
    r.fault = True
    with _own_server(env) as server:
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        quick = _timed(lambda: chat(port, OWN_MODEL))
        server.delay_s = SLOWED_S
        slowed = time.time()
        said_values: set[bool] = set()
        answers: list[tuple[float, int]] = []
        # Past one probe of the slowed server and the watch path: any flip would show.
        while time.time() - slowed < poll_s() + WATCH_PATH_S:
            took, answer = _timed(lambda: chat(port, OWN_MODEL))
            answers.append((took, answer.status))
            said_values.add(said(env.route(*OWN_ROUTE) or {}, "RoutingReady")[0])
        server.delay_s = 0.0
        assert said_values == {True}, f"RoutingReady moved while the slowed server served: {said_values}"
        assert all(status == HTTPStatus.OK for _, status in answers), answers
        r.recovery = 0.0
        slowest = max(t for t, _ in answers)
        r.notes.append(
            f"the model's server slowed by {SLOWED_S:.0f} s: {len(answers)} requests all answered 200 in "
            f"{min(t for t, _ in answers):.1f} to {slowest:.1f} s (before: {quick[0]:.2f} s); RoutingReady "
            "stayed True across a probe of the slowed server"
        )


def _timed(ask: Callable[[], Answer]) -> tuple[float, Answer]:
    start = time.monotonic()
    answer = ask()
    return time.monotonic() - start, answer


FAULTS: list[Callable[[Env, Report], None]] = [
    _scenario("function_killed", Fault("function", "kill", 20, "rollout")),
    _scenario("function_hung", Fault("function", "hang", 30, "rollout")),
    _scenario(
        "function_hung_past_timeout", Fault("function", "hang", PAST_TIMEOUT_S, "rollout", past_timeout=True)
    ),
    function_replica_killed,
    function_down_while_a_model_stops,
    # Before the API server and etcd go down: Envoy Gateway v1.8.3 lost its leader lease in
    # etcd_killed and stopped reconciling without exiting (internal/provider/runner/runner.go
    # logs the provider's error and goes on), so a route created after it was never Accepted
    # (fresh-clone CI of b2d9fc7). Its liveness probe now has it restarted 40 to 60 s later
    # (envoy_gateway_wedged); the order stays, so no backend fault waits out that minute.
    backend_killed,
    backend_slowed,
    _scenario("crossplane_killed", Fault("crossplane", "kill", OUTAGE_S, "route added")),
    _scenario("provider_killed", Fault("provider-kubernetes", "kill", OUTAGE_S, "rollout")),
    _scenario("envoy_gateway_killed", Fault("envoy-gateway", "kill", OUTAGE_S, "route added")),
    # Hung: alive, reconciling nothing, its /healthz unanswered, as after losing its leader lease
    # (above) to a kubelet, until its liveness probe has it restarted (20 s apart, 3 failures).
    _scenario(
        "envoy_gateway_wedged",
        Fault("envoy-gateway", "hang", LIVENESS_BOUND_S, "route added", until_restarted=True),
    ),
    _scenario(
        "ai_gateway_controller_killed", Fault("envoy-ai-gateway-controller", "kill", OUTAGE_S, "route added")
    ),
    # Its webhook injects the ext-proc (failurePolicy Fail): the rollout's new pod cannot be created.
    _scenario("ai_gateway_webhook_killed", Fault("envoy-ai-gateway-controller", "kill", OUTAGE_S, "rollout")),
    _scenario("kube_apiserver_killed", Fault("kube-apiserver", "kill", OUTAGE_S, "rollout")),
    _scenario("etcd_killed", Fault("etcd", "kill", OUTAGE_S, "rollout")),
    _scenario("envoy_killed", Fault("pod/envoy", "kill", 0, "traffic")),
    _scenario("extproc_killed", Fault("pod/ai-gateway-extproc", "kill", 0, "traffic")),
]
