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
import os
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

from tests.real import toolchain, versions
from tests.real.controlplane import NODES, ControlPlane
from tests.real.crossplane import CrossplaneStack
from tests.real.envoy import EG_NS, EnvoyStack
from tests.real.kube import Kube, condition, wait
from tests.real.network import Lab
from tests.real.processes import Supervisor
from tests.support import EXAMPLES

XR_API = "ai.example.org/v1alpha1"
OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
AIGW_API = "aigateway.envoyproxy.io/v1beta1"
GATEWAY = ("platform", "inference")
ROUTE = ("team-a", "llama")
EXTPROC = "ai-gateway-extproc"
# The Input's extProcMarkerAnnotation on this stack: Envoy AI Gateway v1.0.0
# writes none (v1.1.0 writes aigateway.envoyproxy.io/extproc-config-hash).
MARKER = ""
# Generous bounds for what is not measured against the truth bound: a new
# gateway's first rollout, the provider's 30 s re-read of a not-Ready Object.
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
        return [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]

    def pods(self) -> list[dict[str, Any]]:
        """The gateway's Envoy pods, terminating ones included."""
        return self.kube.list(
            "v1",
            "Pod",
            EG_NS,
            label_selector=f"gateway.envoyproxy.io/owning-gateway-name={GATEWAY[1]},"
            f"gateway.envoyproxy.io/owning-gateway-namespace={GATEWAY[0]}",
        )

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
    # Sample until GatewayReady is True over a finished rollout whose live pods
    # all carry the injected container. Envoy AI Gateway v1.0.0 writes no
    # marker on the pod template (MARKER below is ""), so the function cannot
    # see whether pods created before the webhook saw the anchor lack the
    # sidecar: GatewayReady may then say True until Envoy AI Gateway's first
    # rollout. Those samples are counted and printed; with a marker they fail.
    deadline = time.monotonic() + CONVERGE_S
    # The world is ready when the last old pod is gone, not when the last new
    # one is Ready (old pods drain for kwok's POD_DRAIN_MS): sampled here.
    old_pod_seen = 0.0
    early = 0
    while time.monotonic() < deadline:
        if any(p["metadata"].get("deletionTimestamp") for p in env.pods()):
            old_pod_seen = time.time()
        gw = env.gateway()
        if true(gw, "GatewayReady"):
            dep = env.deployment()
            pods = env.live_pods()
            if not (rolled_out(dep) and pods and all(has_extproc(p) for p in pods)):
                early += 1
                assert not MARKER, (
                    f"GatewayReady True before the pods carry the ext-proc: {dep and dep.get('status')}"
                )
                time.sleep(0.25)
                continue
            became = ts(condition(gw, "GatewayReady")["lastTransitionTime"])
            r.lags.append(became - max([*(pod_ready_at(p) for p in pods), int(old_pod_seen)]))
            r.notes.append(
                f"{len(pods)} pods with {EXTPROC}, Deployment generation {dep['metadata']['generation']}"
            )  # type: ignore[index]
            r.notes.append(availability(dep))
            if early:
                r.notes.append(
                    f"!!! GatewayReady True in {early} samples before the pods carried the ext-proc "
                    "(Envoy AI Gateway v1.0.0 writes no template marker: README, Limitations)"
                )
            return
        time.sleep(0.25)
    raise AssertionError(f"GatewayReady never True: {condition(env.gateway(), 'GatewayReady')}")


def availability(dep: dict[str, Any]) -> str:
    """The EnvoyProxy's spread and drain, as Envoy Gateway rendered them into the real Deployment."""
    template = dep["spec"]["template"]
    constraints = template["spec"].get("topologySpreadConstraints") or []
    assert len(constraints) == 1, f"want one spread constraint in the Envoy pods, got {constraints}"
    selector = constraints[0]["labelSelector"]["matchLabels"]
    labels = template["metadata"]["labels"]
    # A selector that names no pod spreads nothing: it must match Envoy Gateway's own labels.
    assert selector.items() <= labels.items(), (
        f"spread selector {selector} does not match pod labels {labels}"
    )
    grace = template["spec"]["terminationGracePeriodSeconds"]
    # Envoy Gateway gives the pod the drain timeout (120 s by default) plus 5 minutes.
    assert grace == 420, f"terminationGracePeriodSeconds {grace}, want 420 for a 120 s drain"
    return f"spread {constraints[0]['whenUnsatisfiable']} over {constraints[0]['topologyKey']} selects the pods, grace {grace} s"


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


def _gateway_follows(env: Env, r: Report, reason: str) -> dict[str, Any]:
    """After a change made just now: wait for GatewayReady's `reason` (True for Available), record the lag."""
    changed = time.time()
    gw = wait(
        f"GatewayReady {reason}",
        lambda: (g := env.gateway()) and condition(g, "GatewayReady").get("reason") == reason and g,
        CONVERGE_S,
    )
    r.lags.append(ts(condition(gw, "GatewayReady")["lastTransitionTime"]) - int(changed))
    return gw


def deployment_not_found(env: Env, r: Report) -> None:
    """Point the observer where no Deployment is (wrong deploy mode): DeploymentNotFound, then recovery."""
    _patch_gateway(env, {"deployMode": "GatewayNamespace"})
    _gateway_follows(env, r, "DeploymentNotFound")
    _patch_gateway(env, {"deployMode": "ControllerNamespace"})
    assert true(_gateway_follows(env, r, "Available"), "GatewayReady")
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


def _paused(env: Env, api: str, kind: str, name: str, ns: str, *, paused: bool) -> None:
    obj = env.kube.get(api, kind, name, ns)
    assert obj is not None, f"{kind} {ns}/{name} not found"
    annotations = {"crossplane.io/paused": "true"} if paused else {"crossplane.io/paused": None}
    env.kube.merge_patch(api, kind, name, ns, {"metadata": {"annotations": annotations}})


def anchor_ablation(env: Env, r: Report) -> None:
    """Take the anchor away (an ablation): the real controller rolls the Deployment to drop the
    sidecar, and a ModelRoute added during that rollout never says RoutingReady while pods lack it."""
    dep = env.deployment()
    assert dep is not None
    generation = dep["metadata"]["generation"]
    anchor = next(n for n in env.objects(GATEWAY[0]) if "anchor" in n)
    # Pausing the anchor's Object keeps the provider from re-creating it.
    _paused(env, OBJECT_API, "Object", anchor, GATEWAY[0], paused=True)
    target = next(iter(env.kube.list(AIGW_API, "AIGatewayRoute", GATEWAY[0])))
    env.kube.delete(AIGW_API, "AIGatewayRoute", target["metadata"]["name"], GATEWAY[0])
    wait(
        "Envoy AI Gateway rolling the Deployment without the anchor",
        lambda: (d := env.deployment()) is not None and d["metadata"]["generation"] > generation,
        120,
    )
    r.notes.append(f"without the anchor the Deployment rolled (generation {generation} -> more)")
    env.kube.apply(_route_doc_one_backend())
    # Through the rollouts that follow (sidecar out, then in again for the new
    # route), every sample where RoutingReady is True must see pods that all
    # carry the sidecar and a finished rollout.
    deadline = time.monotonic() + 60
    samples = lying = 0
    while time.monotonic() < deadline:
        if true(env.route(), "RoutingReady"):
            pods = env.live_pods()
            if not (rolled_out(env.deployment()) and pods and all(has_extproc(p) for p in pods)):
                lying += 1
        samples += 1
        time.sleep(0.25)
    assert lying == 0, (
        f"RoutingReady True in {lying} samples while pods lacked the ext-proc or the Deployment rolled"
    )
    r.notes.append(f"{samples} samples over 60 s without the anchor, none lying")
    # Put the anchor back: unpause; the provider recreates it.
    _paused(env, OBJECT_API, "Object", anchor, GATEWAY[0], paused=False)
    anchor_back = wait(
        "the anchor back and Accepted",
        lambda: [a for a in env.kube.list(AIGW_API, "AIGatewayRoute", GATEWAY[0]) if true(a, "Accepted")],
        120,
    )
    route = wait(
        "RoutingReady=True", lambda: (rt := env.route()) and true(rt, "RoutingReady") and rt, CONVERGE_S
    )
    pods = env.live_pods()
    assert all(has_extproc(p) for p in pods), "RoutingReady True with a pod lacking the ext-proc"
    served_since = max(
        [*(pod_ready_at(p) for p in pods), ts(condition(anchor_back[0], "Accepted")["lastTransitionTime"])]
    )
    r.lags.append(ts(condition(route, "RoutingReady")["lastTransitionTime"]) - served_since)


def _route_doc_one_backend() -> dict[str, Any]:
    doc = _route_doc()
    doc["spec"]["backends"] = [b for b in doc["spec"]["backends"] if b["name"] != "hosted"]
    return doc


def route_before_gateway_ready(env: Env, r: Report) -> None:
    """A ModelRoute whose gateway is not ready yet: everything composed, RoutingReady False
    with GatewayNotReady, then True once the gateway is."""
    gw = yaml.safe_load((EXAMPLES / "inference-gateway" / "xr.yaml").read_text())
    gw["metadata"]["name"] = "inference-b"
    gw["spec"]["envoy"] = {"serviceType": "ClusterIP"}
    env.kube.apply(gw)
    # The gateway publishes where routes attach at once, long before it is ready.
    wait(
        "inference-b publishing status.gateway, not ready",
        lambda: (
            (g := env.xr("InferenceGateway", GATEWAY[0], "inference-b"))
            and ((g.get("status") or {}).get("gateway") or {}).get("name")
            and not true(g, "GatewayReady")
        ),
        60,
    )
    route = _route_doc_one_backend()
    route["metadata"]["name"] = "mistral"
    route["spec"]["model"] = "mistral-7b"
    route["spec"]["gatewayRef"]["name"] = "inference-b"
    env.kube.apply(route)
    composed_while_not_ready = 0
    reasons: set[str] = set()
    deadline = time.monotonic() + CONVERGE_S
    while time.monotonic() < deadline:
        rt = env.route(ROUTE[0], "mistral")
        gb = env.xr("InferenceGateway", GATEWAY[0], "inference-b")
        if true(rt, "RoutingReady"):
            assert true(gb, "GatewayReady"), "RoutingReady True before its gateway's GatewayReady"
            break
        reasons.add(str(condition(rt, "RoutingReady").get("reason")))
        if not true(gb, "GatewayReady"):
            composed_while_not_ready = max(
                composed_while_not_ready, sum("mistral" in n for n in env.objects(ROUTE[0]))
            )
        time.sleep(0.25)
    else:
        raise AssertionError(
            f"RoutingReady never True: {condition(env.route(ROUTE[0], 'mistral'), 'RoutingReady')}"
        )
    # The route, its Backend and AIServiceBackend, its BackendTrafficPolicy and the gateway observer.
    assert composed_while_not_ready == 5, (
        f"{composed_while_not_ready} of 5 route resources composed before the gateway was ready"
    )
    gateway_at = ts(condition(gb, "GatewayReady")["lastTransitionTime"])
    r.lags.append(ts(condition(rt, "RoutingReady")["lastTransitionTime"]) - gateway_at)
    r.notes.append("all 5 route resources composed while the gateway was not ready")


# Every condition follows the world within this many seconds, both ways (README).
TRUTH_BOUND_S = 5


def route_follows_gateway(env: Env, r: Report) -> None:
    """An Envoy rollout under a Ready route: GatewayReady and RoutingReady turn False and back
    within seconds, driven by watch events (the route's gateway observer), not by the TTL."""
    dep = env.deployment()
    assert dep is not None, "want the Envoy Deployment"
    assert true(env.route(), "RoutingReady"), "want a Ready route on a ready gateway"
    observer = next(o for n, o in env.objects(ROUTE[0]).items() if "gateway-observer" in n)
    for typ in ("Synced", "Ready"):
        assert true(observer, typ), f"the route's gateway observer is not {typ}: {observer.get('status')}"
    started = time.time()
    env.kube.merge_patch(
        "apps/v1",
        "Deployment",
        dep["metadata"]["name"],
        dep["metadata"]["namespace"],
        {
            "spec": {
                "template": {"metadata": {"annotations": {"example.org/restarted-at": str(int(started))}}}
            }
        },
    )

    def flipped(get: Callable[[], dict[str, Any] | None], typ: str, status: bool) -> dict[str, Any]:
        return wait(  # type: ignore[no-any-return]
            f"{typ}={status}", lambda: (o := get()) and true(o, typ) == status and o, 60, interval=0.1
        )

    gw_down = flipped(env.gateway, "GatewayReady", False)
    rt_down = flipped(env.route, "RoutingReady", False)
    gw_up = flipped(env.gateway, "GatewayReady", True)
    rt_up = flipped(env.route, "RoutingReady", True)

    def at(obj: dict[str, Any], typ: str) -> float:
        return ts(condition(obj, typ)["lastTransitionTime"])

    lags = {
        "GatewayReady False after the rollout began": at(gw_down, "GatewayReady") - int(started),
        "RoutingReady False after GatewayReady": at(rt_down, "RoutingReady") - at(gw_down, "GatewayReady"),
        "RoutingReady True after GatewayReady": at(rt_up, "RoutingReady") - at(gw_up, "GatewayReady"),
    }
    r.lags.extend(lags.values())
    late = {k: v for k, v in lags.items() if v > TRUTH_BOUND_S}
    assert not late, f"conditions followed later than {TRUTH_BOUND_S} s: {late}"
    r.notes.append(", ".join(f"{k} {v:.0f} s" for k, v in lags.items()))
    wait(
        "the rollout settled", lambda: rolled_out(env.deployment()) and true(env.route(), "RoutingReady"), 120
    )


def backend_scaled_to_zero(env: Env, r: Report) -> None:
    """A model's own server scaled to zero and back: RoutingReady follows within seconds
    (BackendNotServing, then Available), through the route's watched workload observer."""
    server = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm-llama", "namespace": ROUTE[0]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vllm-llama"}},
            "template": {
                "metadata": {"labels": {"app": "vllm-llama"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
            },
        },
    }
    env.kube.apply(server)
    # The provider's dry-run patch of observed objects, in this application namespace (README).
    env.kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "provider-kubernetes-workload-dry-run", "namespace": ROUTE[0]},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "provider-kubernetes-envoy-deployment-dry-run",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "provider-kubernetes", "namespace": "crossplane-system"}
            ],
        }
    )
    doc = _route_doc_one_backend()
    doc["spec"]["backends"][0]["workloadRef"] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "vllm-llama",
    }
    env.kube.apply(doc)
    wait(
        "RoutingReady=True with the server observed serving",
        lambda: (
            (rt := env.route())
            and true(rt, "RoutingReady")
            and "vllm: 1 of 1 replicas available" in str(condition(rt, "BackendsServing").get("message"))
        ),
        CONVERGE_S,
    )

    def scale(replicas: int) -> float:
        env.kube.merge_patch(
            "apps/v1", "Deployment", "vllm-llama", ROUTE[0], {"spec": {"replicas": replicas}}
        )
        return time.time()

    def reason_is(reason: str) -> dict[str, Any]:
        return wait(  # type: ignore[no-any-return]
            f"RoutingReady {reason}",
            lambda: (rt := env.route()) and condition(rt, "RoutingReady").get("reason") == reason and rt,
            60,
            interval=0.1,
        )

    down_at = scale(0)
    down = reason_is("BackendNotServing")
    message = condition(down, "RoutingReady")["message"]
    assert "vllm: " in message, message
    assert "of 0 replicas available" in message, message
    up_at = scale(1)
    up = reason_is("Available")
    server_ready = max(
        pod_ready_at(p)
        for p in env.kube.list("v1", "Pod", ROUTE[0], label_selector="app=vllm-llama")
        if not p["metadata"].get("deletionTimestamp")
    )
    lags = {
        "RoutingReady False after the scale to zero": ts(
            condition(down, "RoutingReady")["lastTransitionTime"]
        )
        - int(down_at),
        "RoutingReady True after the new replica was Ready": ts(
            condition(up, "RoutingReady")["lastTransitionTime"]
        )
        - server_ready,
    }
    r.lags.extend(lags.values())
    assert up_at <= server_ready + 1
    late = {k: v for k, v in lags.items() if v > TRUTH_BOUND_S}
    assert not late, f"RoutingReady followed the model's server later than {TRUTH_BOUND_S} s: {late}"
    r.notes.append(", ".join(f"{k} {v:.0f} s" for k, v in lags.items()))


def bad_input(env: Env, r: Report) -> None:
    """Input the function refuses: one fatal result, the XR not Synced, nothing touched; then restored."""
    composition = EXAMPLES / "configuration" / "inferencegateway-composition.yaml"
    before = {n: o["metadata"]["resourceVersion"] for n, o in env.objects(GATEWAY[0]).items()}

    def refuse(doc: dict[str, Any]) -> None:
        doc["spec"]["pipeline"][0]["input"]["extProcMarkerAnnotation"] = ""
        doc["spec"]["pipeline"][0]["input"]["anchor"] = {"headerName": "x-ai-eg-model"}

    env.kube.apply_file(composition, refuse)
    gw = wait(
        "the gateway not Synced with the function's message",
        lambda: (g := env.gateway()) and "anchor" in condition(g, "Synced").get("message", "") and g,
        CONVERGE_S,
    )
    message = condition(gw, "Synced")["message"]
    assert condition(gw, "Synced")["status"] == "False"
    assert "input.anchor" in message, message
    assert "Traceback" not in message, message
    time.sleep(5)
    after = {n: o["metadata"]["resourceVersion"] for n, o in env.objects(GATEWAY[0]).items() if n in before}
    assert set(after) == set(before), "a composed resource went away on a fatal result"
    env.kube.apply_file(
        composition,
        lambda doc: doc["spec"]["pipeline"][0]["input"].__setitem__("extProcMarkerAnnotation", ""),
    )
    wait("Synced again", lambda: true(env.gateway(), "Synced"), CONVERGE_S)
    r.notes.append(f"fatal: {message[:80]}")


def _set_auth(env: Env, api_keys: dict[str, Any] | None) -> None:
    # A merge patch: Crossplane's own updates of the XR co-own its spec
    # fields, so leaving a field out of a server-side apply would not remove it.
    env.kube.merge_patch(
        XR_API, "InferenceGateway", GATEWAY[1], GATEWAY[0], {"spec": {"auth": {"apiKeys": api_keys}}}
    )


def _accepted_conditions(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """An Envoy Gateway policy's Accepted conditions, one per ancestor it reports."""
    ancestors = (policy.get("status") or {}).get("ancestors") or []
    return [c for a in ancestors for c in a.get("conditions", []) if c.get("type") == "Accepted"]


def _route_opened_and_covered_again(env: Env, r: Report) -> None:
    """Coverage narrowed to the gateway's namespace: the team-a route composes its own, empty
    SecurityPolicy and Envoy Gateway accepts it; coverage back to All: that policy goes."""
    sp = ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", ROUTE[0])
    _set_auth(env, {"secretRefs": [{"name": "client-keys"}], "routeNamespaces": {"from": "Same"}})
    changed = time.time()
    policy = wait(
        f"a SecurityPolicy on the route's HTTPRoute in {ROUTE[0]}, Accepted by Envoy Gateway",
        lambda: next(
            (
                p
                for p in env.kube.list(*sp)
                if any(c.get("status") == "True" for c in _accepted_conditions(p))
            ),
            None,
        ),
        CONVERGE_S,
    )
    assert [t["kind"] for t in policy["spec"]["targetRefs"]] == ["HTTPRoute"], policy["spec"]
    rt = wait(
        "RoutingReady Available and callerAuth not required",
        lambda: (
            (x := env.route())
            and condition(x, "RoutingReady").get("reason") == "Available"
            and (x.get("status") or {}).get("callerAuth") == {"required": False}
            and x
        ),
        CONVERGE_S,
    )
    r.lags.append(ts(condition(rt, "RoutingReady")["lastTransitionTime"]) - int(changed))
    # Said explicitly: a merge patch keeps what it leaves out.
    _set_auth(env, {"secretRefs": [{"name": "client-keys"}], "routeNamespaces": {"from": "All"}})
    wait("the route's SecurityPolicy deleted with coverage All", lambda: not env.kube.list(*sp), CONVERGE_S)
    wait(
        "the route tells callers to send a key",
        lambda: ((env.route() or {}).get("status") or {}).get("callerAuth", {}).get("required") is True,
        CONVERGE_S,
    )
    r.notes.append(
        "routeNamespaces Same: the team-a route's own SecurityPolicy Accepted, gone again with All"
    )


def caller_auth(env: Env, r: Report) -> None:
    """Caller auth whose key Secret is missing: GatewayReady False (AuthNotAccepted) on Envoy Gateway's own
    verdict; the Secret created: True again; coverage narrowed and widened: the route's own policy
    comes and goes; auth turned off: the SecurityPolicy goes."""
    _set_auth(env, {"secretRefs": [{"name": "client-keys"}]})
    _gateway_follows(env, r, "AuthNotAccepted")
    policies = env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0])
    assert len(policies) == 1, f"want one SecurityPolicy in {GATEWAY[0]}, got {len(policies)}"
    refused = _accepted_conditions(policies[0])
    r.notes.append(
        "without the Secret Envoy Gateway says "
        + (", ".join(f"Accepted={c['status']} ({c.get('reason')})" for c in refused) or "nothing yet")
    )
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "client-keys", "namespace": GATEWAY[0]},
            "stringData": {"team-a": "client-key-1"},
        }
    )
    assert true(_gateway_follows(env, r, "Available"), "GatewayReady")
    _route_opened_and_covered_again(env, r)
    _set_auth(env, None)
    wait(
        "the SecurityPolicy deleted with auth off",
        lambda: not env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0]),
        120,
    )
    assert true(env.gateway(), "GatewayReady"), condition(env.gateway(), "GatewayReady")


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
    backend_scaled_to_zero,
    caller_auth,
    bad_input,
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
            lambda doc: doc["spec"]["pipeline"][0]["input"].__setitem__("extProcMarkerAnnotation", MARKER),
        )
        EnvoyStack(kube, sup, workdir, cp.kubeconfig, lab).start()
        yield Env(kube)
    finally:
        left = sup.stop_all()
        lab.down()
        if left:
            print(f"integration: ports still open after teardown: {left}", file=sys.stderr)


def versions_line() -> str:
    v = versions
    return (
        f"Kubernetes {v.KUBERNETES.version}, Crossplane {v.CROSSPLANE.version}, provider-kubernetes "
        f"{v.PROVIDER_KUBERNETES.version}, Envoy Gateway {v.ENVOY_GATEWAY.version}, "
        f"Envoy AI Gateway {v.ENVOY_AI_GATEWAY.version}"
    )


def main() -> int:
    why = Lab.why_not()
    if why:
        print(f"integration: NOT RUN: {why}", file=sys.stderr)
        return 1
    try:
        for component in toolchain.COMPONENTS.values():
            for binary in component.binaries:
                toolchain.ensure(component, binary)
    except toolchain.ToolchainError as e:
        print(f"integration: NOT RUN: a component could not be built: {e}", file=sys.stderr)
        return 1
    # FGR_SCENARIOS=new_gateway,caller_auth runs a subset while developing;
    # CI runs them all.
    only = [n for n in os.environ.get("FGR_SCENARIOS", "").split(",") if n]
    chosen = [s for s in SCENARIOS if not only or s.__name__ in only]
    workdir = Path(tempfile.mkdtemp(prefix="fgr-integration-"))
    reports: list[Report] = []
    started = time.monotonic()
    try:
        with environment(workdir) as env:
            print(f"integration: environment up in {time.monotonic() - started:.0f} s", file=sys.stderr)
            for scenario in chosen:
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
    print(f"integration: {passed} of {len(chosen)} scenarios passed on {versions_line()}; {truth}")
    return 0 if passed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
