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

import copy
import datetime
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.real import toolchain
from tests.real.controlplane import NODES, ControlPlane
from tests.real.crossplane import CrossplaneStack
from tests.real.envoy import EG_NS, EnvoyStack
from tests.real.kube import Kube, condition, wait
from tests.real.network import Lab
from tests.real.processes import Supervisor
from tests.real.versions import (
    CROSSPLANE,
    ENVOY_AI_GATEWAY,
    ENVOY_GATEWAY,
    ETCD,
    KUBERNETES,
    KWOK,
    PROVIDER_KUBERNETES,
)
from tests.support import EXAMPLES

XR_API = "ai.example.org/v1alpha1"
OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
AIGW_API = "aigateway.envoyproxy.io/v1beta1"
GATEWAY = ("platform", "inference")
ROUTE = ("team-a", "llama")
EXTPROC = "ai-gateway-extproc"
# Generous bounds: the provider re-reads a not-Ready unwatched Object every
# 30 s and a ModelRoute reads its gateway every 60 s (the response TTL).
CONVERGE_S = 300


@dataclass
class Report:
    name: str
    ok: bool = False
    lags: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""


def ts(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


class Env:
    """The running stack, and what scenarios need to read and change it."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def xr(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.kube.get(XR_API, kind, name, ns)

    def gateway(self) -> dict[str, Any] | None:
        return self.xr("InferenceGateway", *GATEWAY)

    def route(self, ns: str = ROUTE[0], name: str = ROUTE[1]) -> dict[str, Any] | None:
        return self.xr("ModelRoute", ns, name)

    def deployment(self) -> dict[str, Any] | None:
        ref = ((self.gateway() or {}).get("status") or {}).get("deployment") or {}
        if not ref.get("name"):
            return None
        return self.kube.get("apps/v1", "Deployment", ref["name"], ref["namespace"])

    def live_pods(self) -> list[dict[str, Any]]:
        pods = self.kube.list(
            "v1",
            "Pod",
            EG_NS,
            label_selector=f"gateway.envoyproxy.io/owning-gateway-name={GATEWAY[1]},"
            f"gateway.envoyproxy.io/owning-gateway-namespace={GATEWAY[0]}",
        )
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def objects(self, ns: str) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.kube.list(OBJECT_API, "Object", ns)}


def has_extproc(pod: dict[str, Any]) -> bool:
    spec = pod["spec"]
    return any(
        c["name"] == EXTPROC for c in [*spec.get("containers", []), *(spec.get("initContainers") or [])]
    )


def rolled_out(dep: dict[str, Any] | None) -> bool:
    if dep is None:
        return False
    st = dep.get("status") or {}
    return (
        st.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and st.get("replicas") == st.get("updatedReplicas")
        and not st.get("terminatingReplicas")
    )


def true(obj: dict[str, Any] | None, typ: str) -> bool:
    return condition(obj, typ).get("status") == "True"


def pod_ready_at(pod: dict[str, Any]) -> float:
    return ts(condition(pod, "Ready").get("lastTransitionTime"))


# --- scenarios ---------------------------------------------------------------------------


def new_gateway(env: Env, r: Report) -> None:
    """A new InferenceGateway: GatewayReady turns True only after the sidecar rollout; pods carry the ext-proc."""
    xr = yaml.safe_load((EXAMPLES / "inference-gateway" / "xr.yaml").read_text())
    # kwok and kind have no load-balancer controller: ClusterIP, as the README says.
    xr["spec"]["envoy"] = {"serviceType": "ClusterIP"}
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY[0]}})
    env.kube.apply(xr)
    # Sample until True: every sample where GatewayReady is True must see a
    # finished rollout whose live pods all carry the injected container.
    deadline = time.monotonic() + CONVERGE_S
    while time.monotonic() < deadline:
        gw = env.gateway()
        if true(gw, "GatewayReady"):
            dep = env.deployment()
            pods = env.live_pods()
            assert rolled_out(dep), (
                f"GatewayReady True while the Deployment rolls: {dep and dep.get('status')}"
            )
            assert pods, "GatewayReady True with no live Envoy pod"
            assert all(has_extproc(p) for p in pods), "GatewayReady True with a pod lacking the ext-proc"
            became = ts(condition(gw, "GatewayReady")["lastTransitionTime"])
            r.lags.append(became - max(pod_ready_at(p) for p in pods))
            r.notes.append(
                f"{len(pods)} pods with {EXTPROC}, Deployment generation {dep['metadata']['generation']}"
            )  # type: ignore[index]
            return
        time.sleep(0.25)
    raise AssertionError(f"GatewayReady never True: {condition(env.gateway(), 'GatewayReady')}")


def _route_doc() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "model-route" / "xr.yaml").read_text())


def model_route(env: Env, r: Report) -> None:
    """A ModelRoute: route and backends Accepted by the real controller; RoutingReady True after GatewayReady."""
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ROUTE[0]}})
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hosted-api-key", "namespace": ROUTE[0]},
            "stringData": {"apiKey": "sk-test"},
        }
    )
    env.kube.apply(_route_doc())
    route = wait(
        "RoutingReady=True", lambda: (rt := env.route()) and true(rt, "RoutingReady") and rt, CONVERGE_S
    )
    gw = env.gateway()
    routing_at = ts(condition(route, "RoutingReady")["lastTransitionTime"])
    gateway_at = ts(condition(gw, "GatewayReady")["lastTransitionTime"])
    assert routing_at >= gateway_at, "RoutingReady turned True before GatewayReady"
    accepted = []
    for kind in ("AIGatewayRoute", "AIServiceBackend"):
        for obj in env.kube.list(AIGW_API, kind, ROUTE[0]):
            assert true(obj, "Accepted"), (
                f"{kind} {obj['metadata']['name']} not Accepted: {obj.get('status')}"
            )
            accepted.append(ts(condition(obj, "Accepted")["lastTransitionTime"]))
    r.lags.append(routing_at - max([gateway_at, *accepted]))
    r.notes.append(f"{len(accepted)} route and backend objects Accepted by Envoy AI Gateway")


def drain(env: Env, r: Report) -> None:
    """Delete one Envoy pod of two: GatewayReady (AtLeastOne) and RoutingReady stay True meanwhile."""
    pods = env.live_pods()
    assert len(pods) == 2, f"want 2 live pods, have {len(pods)}"
    env.kube.core.delete_namespaced_pod(name=pods[0]["metadata"]["name"], namespace=EG_NS)
    # The deleted pod drains (kwok: POD_DRAIN_MS) while its replacement starts.
    deadline = time.monotonic() + 20
    samples = 0
    while time.monotonic() < deadline:
        gw, route = env.gateway(), env.route()
        assert true(gw, "GatewayReady"), f"GatewayReady flipped on a drain: {condition(gw, 'GatewayReady')}"
        assert true(route, "RoutingReady"), (
            f"RoutingReady flipped on a drain: {condition(route, 'RoutingReady')}"
        )
        samples += 1
        time.sleep(0.25)
    wait("the replacement pod", lambda: len(env.live_pods()) == 2 and rolled_out(env.deployment()), 60)
    r.notes.append(f"{samples} samples over 20 s, both conditions True throughout")


def _patch_gateway(env: Env, envoy: dict[str, Any]) -> None:
    xr = copy.deepcopy(env.gateway())
    assert xr is not None
    doc = {
        "apiVersion": XR_API,
        "kind": "InferenceGateway",
        "metadata": {"name": GATEWAY[1], "namespace": GATEWAY[0]},
    }
    doc["spec"] = {
        **{k: v for k, v in xr["spec"].items() if k != "crossplane"},
        "envoy": {**xr["spec"]["envoy"], **envoy},
    }
    env.kube.apply(doc)


def deployment_not_found(env: Env, r: Report) -> None:
    """Point the observer where no Deployment is (wrong deploy mode): DeploymentNotFound, then recovery."""
    _patch_gateway(env, {"deployMode": "GatewayNamespace"})
    changed = time.time()
    gw = wait(
        "GatewayReady=False DeploymentNotFound",
        lambda: (
            (g := env.gateway()) and condition(g, "GatewayReady").get("reason") == "DeploymentNotFound" and g
        ),
        CONVERGE_S,
    )
    r.lags.append(ts(condition(gw, "GatewayReady")["lastTransitionTime"]) - int(changed))
    _patch_gateway(env, {"deployMode": "ControllerNamespace"})
    changed = time.time()
    gw = wait(
        "GatewayReady=True again", lambda: (g := env.gateway()) and true(g, "GatewayReady") and g, CONVERGE_S
    )
    r.lags.append(ts(condition(gw, "GatewayReady")["lastTransitionTime"]) - int(changed))
    wait("RoutingReady=True again", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)


def remove_backend(env: Env, r: Report) -> None:
    """Remove one backend: garbage collection deletes exactly its resources; delete the route: all of it goes."""
    before = env.objects(ROUTE[0])
    hosted = {n for n in before if "hosted" in n}
    assert len(hosted) == 3, f"want the hosted backend's 3 Objects, have {sorted(hosted)}"
    doc = _route_doc()
    doc["spec"]["backends"] = [b for b in doc["spec"]["backends"] if b["name"] != "hosted"]
    env.kube.apply(doc)
    after = wait(
        "the hosted backend's Objects deleted",
        lambda: (o := env.objects(ROUTE[0])) and not (set(o) & hosted) and o,
        120,
    )
    assert set(after) == set(before) - hosted, f"kept {sorted(after)}, want {sorted(set(before) - hosted)}"
    backends = [b["metadata"]["name"] for b in env.kube.list(AIGW_API, "AIServiceBackend", ROUTE[0])]
    assert all("hosted" not in b for b in backends), backends
    env.kube.delete(XR_API, "ModelRoute", ROUTE[1], ROUTE[0])
    wait("every Object of the route deleted", lambda: not env.objects(ROUTE[0]), 120)
    wait("the AIGatewayRoute deleted", lambda: not env.kube.list(AIGW_API, "AIGatewayRoute", ROUTE[0]), 120)
    r.notes.append(f"{len(hosted)} Objects of one backend deleted, {len(after)} kept, then all deleted")


def last_route_removed(env: Env, r: Report) -> None:
    """With the last model route gone the anchor holds: the Envoy Deployment keeps its template and ReplicaSet."""
    dep = env.deployment()
    assert dep is not None
    generation = dep["metadata"]["generation"]
    replica_sets = {
        rs["metadata"]["name"]
        for rs in env.kube.list("apps/v1", "ReplicaSet", EG_NS)
        if (rs["spec"].get("replicas") or 0) > 0
    }
    time.sleep(20)  # Envoy AI Gateway would roll within seconds without the anchor
    dep = env.deployment()
    assert dep is not None
    assert dep["metadata"]["generation"] == generation, "the Envoy Deployment was rolled"
    now = {
        rs["metadata"]["name"]
        for rs in env.kube.list("apps/v1", "ReplicaSet", EG_NS)
        if (rs["spec"].get("replicas") or 0) > 0
    }
    assert now == replica_sets, f"ReplicaSets changed: {replica_sets} -> {now}"
    assert true(env.gateway(), "GatewayReady")
    r.notes.append(f"generation {generation} and ReplicaSets unchanged for 20 s")


SCENARIOS: list[Callable[[Env, Report], None]] = [
    new_gateway,
    model_route,
    drain,
    deployment_not_found,
    remove_backend,
    last_route_removed,
]


# --- the run -----------------------------------------------------------------------------


@contextmanager
def environment(workdir: Path) -> Iterator[Env]:
    sup = Supervisor(workdir / "logs")
    lab = Lab(("provider-kubernetes", "envoy-gateway"))
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
        CrossplaneStack(cp, kube, sup, workdir, lab).start()
        # Envoy AI Gateway v1.0.0 writes no extproc-config-hash marker (v1.1.0
        # does): the Input's documented setting for versions before v1.1.0.
        kube.apply_file(
            EXAMPLES / "configuration" / "inferencegateway-composition.yaml",
            lambda doc: doc["spec"]["pipeline"][0]["input"].__setitem__("extProcMarkerAnnotation", ""),
        )
        EnvoyStack(kube, sup, workdir, cp.kubeconfig, lab).start()
        yield Env(kube)
    finally:
        left = sup.stop_all()
        lab.down()
        if left:
            print(f"integration: ports still open after teardown: {left}", file=sys.stderr)


def versions_line() -> str:
    return (
        f"Kubernetes {KUBERNETES.version}, Crossplane {CROSSPLANE.version}, provider-kubernetes "
        f"{PROVIDER_KUBERNETES.version}, Envoy Gateway {ENVOY_GATEWAY.version}, Envoy AI Gateway {ENVOY_AI_GATEWAY.version}"
    )


def main() -> int:
    why = Lab.why_not()
    if why:
        print(f"integration: NOT RUN: {why}", file=sys.stderr)
        return 1
    try:
        for component in (
            ETCD,
            KUBERNETES,
            KWOK,
            CROSSPLANE,
            PROVIDER_KUBERNETES,
            ENVOY_GATEWAY,
            ENVOY_AI_GATEWAY,
        ):
            for binary in component.binaries:
                toolchain.ensure(component, binary)
    except toolchain.ToolchainError as e:
        print(f"integration: NOT RUN: a component could not be built: {e}", file=sys.stderr)
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="fgr-integration-"))
    reports: list[Report] = []
    started = time.monotonic()
    try:
        with environment(workdir) as env:
            print(f"integration: environment up in {time.monotonic() - started:.0f} s", file=sys.stderr)
            for scenario in SCENARIOS:
                report = Report(scenario.__name__)
                t0 = time.monotonic()
                try:
                    scenario(env, report)
                    report.ok = True
                except Exception as e:
                    report.error = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                reports.append(report)
                status = "ok" if report.ok else f"FAILED: {report.error}"
                lags = ", ".join(f"{x:.0f} s" for x in report.lags)
                print(
                    f"integration: {scenario.__name__}: {status} ({time.monotonic() - t0:.0f} s; "
                    f"time to truth {lags or '-'}; {'; '.join(report.notes)})",
                    file=sys.stderr,
                )
                if not report.ok:
                    break  # later scenarios build on earlier ones
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
    print(f"integration: {passed} of {len(SCENARIOS)} scenarios passed on {versions_line()}; {truth}")
    return 0 if passed == len(SCENARIOS) else 1


if __name__ == "__main__":
    sys.exit(main())
