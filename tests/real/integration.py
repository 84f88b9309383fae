"""`make integration`: the function against real Crossplane, provider-kubernetes, Envoy Gateway and Envoy AI Gateway.

Everything runs as local processes (tests/real/controlplane.py,
crossplane.py, envoy.py), built from the Go module proxy at the versions in
tests/real/versions.py. Each scenario asserts on the real objects and
records, for every condition transition, the time from the change in the
world to the condition's change, both read from the API server's own
timestamps (one-second resolution). Logs of every process are kept in the
run's folder, printed at the end, so a red run explains itself.

Ends with one line:
`integration: S of S scenarios passed on Kubernetes vA, Crossplane vB, provider-kubernetes vC, Envoy Gateway vD, Envoy AI Gateway vE; time to truth p50 X s, max Y s`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.real import install, toolchain, versions
from tests.real.controlplane import NODES, ControlPlane
from tests.real.crossplane import CLIENT_CERTS, CROSSPLANE_NS, FUNCTION, FUNCTION_SERVICE, CrossplaneStack
from tests.real.dataplane import POD_PROCESS_PREFIX, Binaries, DataPlane, envoy_binary
from tests.real.dns import ClusterDNS
from tests.real.envoy import EG_NS, EnvoyStack, extproc_image
from tests.real.harness import (
    AI_GATEWAY,
    MARKER,
    VLLM_PORT,
    Env,
    Report,
)
from tests.real.kube import Kube
from tests.real.network import Lab
from tests.real.prober import Prober, Totals
from tests.real.processes import Supervisor, stop_cleanly_on_sigterm
from tests.real.report import Installed, faults_line, proven, release_line, versions_line
from tests.real.scenarios_auth import auth_removal_refused_stuck, auth_removal_stuck, caller_auth
from tests.real.scenarios_creation_order import backend_created_late
from tests.real.scenarios_faults import FAULTS as COMPONENT_FAULTS
from tests.real.scenarios_gateway import (
    ai_gateway_upgraded,
    anchor_ablation,
    bad_input,
    deployment_not_found,
    drain,
    https_only,
    last_route_removed,
    listener_not_programmed,
    listener_widened_while_envoy_gateway_down,
    new_gateway,
    node_port,
    route_not_allowed,
)
from tests.real.scenarios_install import (
    examples_rendered_through_the_installed_pod,
    release_upgraded,
)
from tests.real.scenarios_models import (
    model_renamed,
    model_swapped,
    provider_http_stopped,
    server_error_not_retried,
)
from tests.real.scenarios_route import (
    backend_removed_while_ai_gateway_stopped,
    backend_scaled_to_zero,
    endpoint_moved_while_envoy_gateway_down,
    gateway_rate_limit,
    missing_secret,
    model_claim_httproute_remade,
    model_claimed,
    model_renamed_while_ai_gateway_stopped,
    model_renamed_while_envoy_gateway_down,
    model_route,
    model_taken_over,
    observer_ablation,
    remove_backend,
    rollout_at_scale,
    route_before_gateway_ready,
    route_follows_gateway,
    service_backend_status_dropped,
    traffic_policy_conflicted,
    upgraded_from_v0_1_0,
    workload_unreadable,
)
from tests.real.upstreams import Upstream
from tests.support import EXAMPLES

# make faults: the components' faults, and caller auth removed while provider-kubernetes is hung,
# with a policy Envoy Gateway refused: it checks what the accepted one does (callers told to send a
# key until the deletion reaches Envoy) and GatewayReady besides. The accepted one
# (auth_removal_stuck) runs when named: 75 s more, where `.ci/run` has no room.
FAULTS: list[Callable[[Env, Report], None]] = [*COMPONENT_FAULTS, auth_removal_refused_stuck]

SCENARIOS: list[Callable[[Env, Report], None]] = [
    new_gateway,
    model_route,
    drain,
    deployment_not_found,
    remove_backend,
    last_route_removed,
    anchor_ablation,
    route_before_gateway_ready,
    route_follows_gateway,
    observer_ablation,
    listener_not_programmed,
    route_not_allowed,
    https_only,
    node_port,
    backend_scaled_to_zero,
    workload_unreadable,
    caller_auth,
    bad_input,
    missing_secret,
    service_backend_status_dropped,
    traffic_policy_conflicted,
    gateway_rate_limit,
    # Security: who holds a model, as Envoy decides it (it also runs model_claimed's checks).
    model_claim_httproute_remade,
    upgraded_from_v0_1_0,
    model_swapped,
    model_renamed,
    backend_created_late,
]

# FGR_INSTALL=package (make release-check): Crossplane's package manager installs
# the Configuration, the Function and the provider from a local registry, and
# the function Crossplane calls is the Function package's image, run as its
# pod's container (tests/real/install.py).
PACKAGE_INSTALL = os.environ.get("FGR_INSTALL") == "package"

# Run only when named in FGR_SCENARIOS: minutes each (make scale, make faults).
ON_REQUEST: list[Callable[[Env, Report], None]] = [
    rollout_at_scale,
    ai_gateway_upgraded,
    examples_rendered_through_the_installed_pod,
    release_upgraded,
    *FAULTS,
    auth_removal_stuck,
    # Review's question of a takeover, answered on the real stack: no lie without a hold.
    model_taken_over,
    # The squat with nothing behind it: model_claim_httproute_remade checks the same claim first.
    model_claimed,
    # Envoy AI Gateway hung through a rename: 70 s where `.ci/run` has no room.
    model_renamed_while_ai_gateway_stopped,
    # Envoy AI Gateway hung through a backend taken out: 100 s where `.ci/run` has no room.
    backend_removed_while_ai_gateway_stopped,
    # Envoy Gateway down through a backend's endpoint moved: 60 s and more, where `.ci/run` has no room.
    endpoint_moved_while_envoy_gateway_down,
    # Envoy Gateway down through a model renamed: 80 s and more, where `.ci/run` has no room.
    model_renamed_while_envoy_gateway_down,
    # A reporter hung: 60 s and more, where `.ci/run` has no room.
    provider_http_stopped,
    # A first backend answering a 500 nothing moves on: 50 s, where `.ci/run` has no room.
    server_error_not_retried,
    # Envoy Gateway down through the first listener widened: 60 s and more, where `.ci/run` has no room.
    listener_widened_while_envoy_gateway_down,
]


@contextmanager
def environment(workdir: Path, *, log_calls: bool = False) -> Iterator[Env]:
    sup = Supervisor(workdir / "logs")
    # provider-http in a namespace of its own: its metrics server takes :8080, as Envoy AI Gateway's does.
    lab = Lab(("provider-kubernetes", "envoy-gateway", "provider-http"))
    env: Env | None = None
    vllm: Upstream | None = None
    dns: ClusterDNS | None = None
    # Stopped in teardown even when the run fails before Env exists (the package install).
    plane: DataPlane | None = None
    try:
        lab.up()
        cp = ControlPlane(workdir / "cluster", sup, host=lab.host_ip)
        cp.start()
        kube = Kube(cp.kubeconfig)
        for node in NODES:
            kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": node,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {"type": "kwok", "kubernetes.io/hostname": node},
                    },
                }
            )
        CrossplaneStack(cp, kube, sup, workdir, lab, log_calls=log_calls, package=PACKAGE_INSTALL).start()
        if not PACKAGE_INSTALL:
            # The Input's marker for the release that runs (MARKER above); the
            # package's Composition has the default, the newest release's.
            kube.apply_file(
                EXAMPLES / "configuration" / "inferencegateway-composition.yaml",
                lambda doc: doc["spec"]["pipeline"][0]["input"].__setitem__(
                    "extProcMarkerAnnotation", MARKER
                ),
            )
        envoy_stack = EnvoyStack(kube, sup, workdir, cp.kubeconfig, lab, ai_gateway=AI_GATEWAY)
        envoy_stack.start()
        envoy, _ = envoy_binary()
        vllm = Upstream("vllm", "openai", host="0.0.0.0", bind_port=VLLM_PORT).start()
        names = {
            # Envoy Gateway's xDS Service, as its bootstrap names it.
            f"envoy-gateway.{EG_NS}.svc.cluster.local": lab.ip("envoy-gateway"),
            # The example route's backends: the fake vLLM on a host address.
            "vllm.team-a.svc.cluster.local": lab.host_ip,
            "api.models.example.com": lab.host_ip,
        }
        function_pods = {install.FUNCTION_LABEL: FUNCTION}
        dns = ClusterDNS(
            lab.host_ip,
            names,
            # The Function's headless Service: its runtime pods' addresses (package installs only).
            services={FUNCTION_SERVICE: lambda: plane.endpoints(function_pods) if plane else []}
            if PACKAGE_INSTALL
            else None,
        ).start()
        plane = DataPlane(
            Kube(cp.kubeconfig),
            sup,
            workdir=workdir,
            # Each pod runs the ext-proc of the release its image names: the one that runs,
            # and the newest one the upgrade scenario moves the oldest stack to.
            binaries=Binaries(
                envoy=envoy,
                extprocs={
                    extproc_image(c): toolchain.ensure(c, "extproc")
                    for c in (AI_GATEWAY, versions.ENVOY_AI_GATEWAY)
                },
            ),
            hosts=names,
            namespaces=(EG_NS,),
            nameserver=lab.host_ip,
            image_pods=((CROSSPLANE_NS, f"{install.FUNCTION_LABEL}={FUNCTION}"),) if PACKAGE_INSTALL else (),
        )
        plane.start()
        installed = None
        if PACKAGE_INSTALL:
            registry = install.Registry(sup).start()
            provider_image = install.publish(registry, workdir)
            installed = install.install(kube, cp.kubeconfig, registry, workdir / CLIENT_CERTS, provider_image)
        # Every component (not the pods' containers: the data plane is their
        # kubelet) is started again when it exits on its own.
        sup.keep_running(lambda p: not p.name.startswith(POD_PROCESS_PREFIX))
        prober = Prober(Kube(cp.kubeconfig), plane.gateway_port, lambda: env.keys)
        # The harness's deletes, which the prober tells apart (a route deleted between its read and
        # its answer): its own client records none (found in review, the excuse never applied).
        prober.kube.deleted_at = kube.deleted_at
        prober.kube.deleting_since = kube.deleting_since
        env = Env(kube, prober, plane, vllm, sup, envoy=envoy_stack, etcd_url=cp.etcd_url)
        env.installed = installed
        env.dns = dns
        env.prober.start()
        env.start_releasing()
        yield env
    finally:
        if env is not None:
            env.stop()
            env.prober.stop()
        if plane is not None:
            plane.stop()
        if vllm is not None:
            vllm.stop()
        if dns is not None:
            dns.stop()
        left = sup.stop_all()
        lab.down()
        if left:
            print(f"integration: ports still open after teardown: {left}", file=sys.stderr)


def _print_restarts(env: Env) -> None:
    """What restarted on its own during the run: a pod's container, a component, and the data plane's errors."""
    restarted = {sb.key: sb.restarts for sb in env.plane.sandboxes.values() if sb.restarts}
    if restarted:
        print(f"integration: containers restarted after they exited: {restarted}", file=sys.stderr)
    if env.sup.failed_restarts:
        print(
            f"integration: components that could not be started again: {env.sup.failed_restarts}",
            file=sys.stderr,
        )
    if env.sup.restarts:
        print(
            f"integration: components started again after they exited on their own: {env.sup.restarts}",
            file=sys.stderr,
        )
    if env.sup.liveness_restarts:
        print(
            f"integration: components restarted after their liveness probe failed: {env.sup.liveness_restarts}",
            file=sys.stderr,
        )
    if env.plane.errors:
        print(f"integration: data plane errors: {env.plane.errors[-5:]}", file=sys.stderr)


def _liveness_restarts(before: dict[str, int], after: dict[str, int]) -> str:
    """A clause for a scenario's notes: the components a liveness probe restarted during it."""
    restarted = {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}
    return f", restarted by a liveness probe: {restarted}" if restarted else ""


def _print_unrun(unrun: list[Callable[..., None]]) -> None:
    """A failure stops the run (later scenarios build on earlier ones): say which never ran."""
    if unrun:
        print(
            f"integration: not run after the failure: {', '.join(s.__name__ for s in unrun)}", file=sys.stderr
        )


def main() -> int:
    stop_cleanly_on_sigterm()
    why = Lab.why_not()
    if why:
        print(f"integration: NOT RUN: {why}", file=sys.stderr)
        return 1
    try:
        # What runs: the chosen stack's Crossplane, provider and Envoy AI Gateway (and the newest
        # Envoy AI Gateway, which the oldest stack upgrades to), and the rest.
        chosen_stack = (
            versions.RUNNING_CROSSPLANE,
            versions.RUNNING_PROVIDER,
            AI_GATEWAY,
            versions.ENVOY_AI_GATEWAY,
        )
        others = (
            versions.CROSSPLANE,
            versions.CROSSPLANE_OLDEST,
            versions.CROSSPLANE_CLI,
            versions.PROVIDER_KUBERNETES,
            versions.PROVIDER_KUBERNETES_OLDEST,
            AI_GATEWAY,
        )
        stack = [c for c in toolchain.COMPONENTS.values() if c.name not in {o.name for o in others}]
        stack += list({(c.name, c.version): c for c in chosen_stack}.values())
        for component in stack:
            # aigw is make traffic's, built here too (the one it runs): .ci/run runs make traffic
            # beside make release-check, where its first build (about 4 minutes of both cores on a
            # fresh machine) would slow a run that counts lying seconds.
            for binary in (
                b for b in component.binaries if b != "aigw" or component == versions.ENVOY_AI_GATEWAY
            ):
                toolchain.ensure(component, binary)
    except toolchain.ToolchainError as e:
        print(f"integration: NOT RUN: a component could not be built: {e}", file=sys.stderr)
        return 1
    # FGR_SCENARIOS=new_gateway,caller_auth runs a subset while developing;
    # CI runs them all.
    # A group's name stands for its scenarios: faults (make faults).
    groups = {"faults": [f.__name__ for f in FAULTS]}
    only = [m for n in os.environ.get("FGR_SCENARIOS", "").split(",") if n for m in groups.get(n, [n])]
    chosen = [s for s in (*SCENARIOS, *ON_REQUEST) if (not only and s in SCENARIOS) or s.__name__ in only]
    workdir = Path(tempfile.mkdtemp(prefix="fgr-integration-"))
    reports: list[Report] = []
    totals: list[Totals] = []
    released = 0
    installed: Installed | None = None
    started = time.monotonic()
    try:
        # The function logs every call where calls are counted: faults, and make scale's costs.
        # FGR_LOG_CALLS=1 logs every call elsewhere too: where a scenario's timing is in question.
        log_calls = os.environ.get("FGR_LOG_CALLS") == "1" or any(
            s in [*FAULTS, rollout_at_scale] for s in chosen
        )
        with environment(workdir, log_calls=log_calls) as env:
            print(f"integration: environment up in {time.monotonic() - started:.0f} s", file=sys.stderr)
            for scenario in chosen:
                report = Report(scenario.__name__)
                env.prober.scenario = scenario.__name__
                since = int(time.time())
                t0 = time.monotonic()
                released_before = len(env.released)
                probed_back = dict(env.sup.liveness_restarts)
                try:
                    scenario(env, report)
                    report.ok = True
                except Exception as e:
                    report.error = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                judged = env.prober.totals(since)
                report.stale_down = judged.stale_down
                report.notes.append(
                    f"requests {judged.requests}, failed {judged.failed}, lying {judged.lying}, "
                    f"leaks {judged.leaks}, written back {judged.written_back}"
                    + (f", stale while a reporter was down {judged.stale_down}" if report.fault else "")
                    + (f", ablation lying {judged.ablation_lying}" if judged.ablation_lying else "")
                    + (f", failed after their route was deleted {judged.deleted}" if judged.deleted else "")
                    + (
                        f", Envoy AI Gateway finalizers released (#2565): {', '.join(env.released[released_before:])}"
                        if len(env.released) > released_before
                        else ""
                    )
                    + _liveness_restarts(probed_back, env.sup.liveness_restarts)
                )
                if report.ok and (judged.lying or judged.leaks):
                    report.ok = False
                    lies = sorted(judged.lies, key=lambda s: (s.second, s.subject))
                    report.error = (
                        "requests disagree with the conditions: "
                        + "; ".join(
                            f"{s.second} {s.subject} {s.status} ready={s.ready}{' LEAK' if s.leak else ''} "
                            f"({s.why}; {_since_fault(s.after_fault)})"
                            for s in lies[:8]
                        )
                        + f"; {lies[0].subject} before the first: {env.prober.history(lies[0])}"
                    )
                reports.append(report)
                # After each scenario: a run stopped at CI's limit keeps what it probed so far.
                env.prober.dump(workdir / "logs" / "prober.jsonl")
                status = "ok" if report.ok else f"FAILED: {report.error}"
                lags = ", ".join(f"{x:.0f} s" for x in report.lags)
                print(
                    f"integration: {scenario.__name__}: {status} ({time.monotonic() - t0:.0f} s; "
                    f"time to truth {lags or '-'}; {'; '.join(report.notes)})",
                    file=sys.stderr,
                )
                if report.line:
                    print(report.line, file=sys.stderr)
                if not report.ok:
                    break  # later scenarios build on earlier ones
            totals.append(env.prober.totals())
            released = len(env.released)
            installed = install.with_served(env.installed, env.plane)
            _print_restarts(env)
    except Exception as e:
        print(f"integration: FAILED to bring the environment up: {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exc()
    print(f"integration: logs of every process in {workdir / 'logs'}", file=sys.stderr)
    passed = sum(r.ok for r in reports)
    lags = [x for r in reports for x in r.lags]
    truth = (
        f"time to truth p50 {statistics.median(lags):.0f} s, max {max(lags):.0f} s"
        if lags
        else "no transitions timed"
    )
    t = totals[0] if totals else Totals()
    late = (
        f"late seconds p50 {statistics.median(t.late):.0f} max {max(t.late)}"
        if t.late
        else "late seconds none"
    )
    _print_unrun(chosen[len(reports) :])
    print(
        f"integration: {passed} of {len(chosen)} scenarios passed on {versions_line()}; "
        f"requests {t.requests}, failed {t.failed}, lying seconds {t.lying}, {late}, leaks {t.leaks}, "
        f"written-back seconds {t.written_back} (Crossplane #7062, counted apart); "
        f"finalizers released {released} (envoyproxy/ai-gateway#2565); {truth}"
    )
    if PACKAGE_INSTALL:
        print(release_line(installed, passed, len(chosen)))
    faults = [r for r in reports if r.fault]
    wanted = [s for s in chosen if s in FAULTS]
    if wanted:
        print(faults_line(faults, len(wanted), t.lying))
    return 0 if passed == len(chosen) and (proven(installed) or not PACKAGE_INSTALL) else 1


def _since_fault(after: float | None) -> str:
    return "before any fault or change" if after is None else f"{after:.1f} s after the last fault or change"


if __name__ == "__main__":
    sys.exit(main())
