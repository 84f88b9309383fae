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
from kubernetes.client.exceptions import ApiException

from function import naming
from function import route as composer
from function.api import Input, ModelRouteSpec
from function.objects import Target
from function.outcome import Requirement
from function.route import plan as route_plan
from function.route.view import GATEWAY_REQUIREMENT, read_gateway
from function.upstream import DEFAULT_EXTPROC_MARKER
from tests.pki import CA
from tests.real import toolchain, versions
from tests.real.controlplane import NODE_IP, NODES, ControlPlane
from tests.real.crossplane import CrossplaneStack
from tests.real.dataplane import Binaries, DataPlane, envoy_binary
from tests.real.dns import ClusterDNS
from tests.real.envoy import EG_NS, EnvoyStack
from tests.real.kube import Kube, condition, wait
from tests.real.network import Lab
from tests.real.prober import Prober, Totals, chat
from tests.real.processes import Supervisor, stop_cleanly_on_sigterm
from tests.real.upstreams import Upstream
from tests.support import EXAMPLES

XR_API = "ai.example.org/v1alpha1"
OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
AIGW_API = "aigateway.envoyproxy.io/v1beta1"
INPUT_API = "gatewayreadiness.fn.crossplane.io/v1alpha1"
GATEWAY = ("platform", "inference")
ROUTE = ("team-a", "llama")
EXTPROC = "ai-gateway-extproc"
# The Envoy AI Gateway that runs: the newest by default; FGR_STACK=oldest
# runs the oldest supported (v1.0.0) while developing.
AI_GATEWAY = (
    versions.ENVOY_AI_GATEWAY_OLDEST if os.environ.get("FGR_STACK") == "oldest" else versions.ENVOY_AI_GATEWAY
)
# The Input's extProcMarkerAnnotation on that release: v1.1.0 writes
# aigateway.envoyproxy.io/extproc-config-hash (the function's default);
# v1.0.0 writes none, and "" is the documented setting for it.
MARKER = "" if AI_GATEWAY is versions.ENVOY_AI_GATEWAY_OLDEST else DEFAULT_EXTPROC_MARKER
# Generous bounds for what is not measured against the truth bound: a new
# gateway's first rollout, the provider's 30 s re-read of a not-Ready Object.
CONVERGE_S = 300
# The example ModelRoute's first backend: vllm.team-a.svc.cluster.local:8000.
VLLM_PORT = 8000


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

    def __init__(self, kube: Kube, prober: Prober, plane: DataPlane, vllm: Upstream) -> None:
        self.kube = kube
        self.prober = prober
        self.plane = plane
        # The fake model server behind the example route's first backend.
        self.vllm = vllm
        # The caller keys a scenario has made valid, by header: the prober sends them.
        self.keys: dict[str, str] = {}

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
    # marker on the pod template (MARKER is ""), so the function cannot see
    # whether pods created before the webhook saw the anchor lack the sidecar:
    # GatewayReady may then say True until Envoy AI Gateway's first rollout.
    # Those samples are counted and printed; with a marker (v1.1.0) they fail.
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


def _set_listeners(env: Env, listeners: list[dict[str, Any]]) -> None:
    # A merge patch replaces the list whole; Crossplane co-owns the spec.
    env.kube.merge_patch(
        XR_API, "InferenceGateway", GATEWAY[1], GATEWAY[0], {"spec": {"listeners": listeners}}
    )


def _real_listener(env: Env, name: str) -> dict[str, Any] | None:
    """The real Gateway's Programmed condition of one listener, as Envoy Gateway reports it."""
    real = env.kube.get("gateway.networking.k8s.io/v1", "Gateway", GATEWAY[1], GATEWAY[0]) or {}
    for listener in (real.get("status") or {}).get("listeners") or []:
        if listener.get("name") == name:
            return condition({"status": listener}, "Programmed")
    return None


def listener_not_programmed(env: Env, r: Report) -> None:
    """Issue #25 items 2 and 8. A second HTTPS listener without its certificate Secret: Envoy Gateway
    keeps the Gateway Programmed=True and that listener Programmed=False; no route attaches there, so
    GatewayReady stays Available and requests keep succeeding. The listener routes attach to made
    Conflicted (HTTPS beside it on its port): GatewayReady ListenerNotProgrammed while requests fail,
    then Available once the conflict is gone."""
    http = {"name": "http", "protocol": "HTTP", "port": 80}
    https = {
        "name": "https",
        "protocol": "HTTPS",
        "port": 443,
        "tls": {"certificateRefs": [{"name": "gw-tls"}]},
    }
    _set_listeners(env, [http, https])
    broken = wait(
        "Envoy Gateway reporting listener https not Programmed",
        lambda: (c := _real_listener(env, "https")) and c.get("status") == "False" and c,
        CONVERGE_S,
    )
    real = env.kube.get("gateway.networking.k8s.io/v1", "Gateway", GATEWAY[1], GATEWAY[0])
    assert true(real, "Programmed"), real["status"]
    for _ in range(12):  # the next few seconds: the attach listener serves, and GatewayReady says so
        assert true(env.gateway(), "GatewayReady"), condition(env.gateway(), "GatewayReady")
        time.sleep(0.25)
    r.notes.append(
        f"Envoy Gateway: Gateway Programmed=True with listener https Programmed=False ({broken.get('reason')}); "
        "GatewayReady stayed Available (no route attaches there)"
    )
    _set_listeners(env, [http])
    # The attach listener Conflicted: HTTPS beside it on its port (the Gateway API CRD allows it;
    # Envoy Gateway marks both ProtocolConflict). A listener only counts in the conflict once its
    # certificate resolves, so the Secret comes first.
    cert, key = CA("fgr-listener-ca").leaf("inference.example.com", sans=("inference.example.com",))
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gw-tls", "namespace": GATEWAY[0]},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.decode(), "tls.key": key.decode()},
        }
    )
    env.prober.fault()
    _set_listeners(env, [http, {**https, "name": "https-on-80", "port": 80}])
    _gateway_follows(env, r, "ListenerNotProgrammed")
    message = wait(
        "GatewayReady naming listener http not Programmed",
        lambda: (
            "listener http is not Programmed"
            in (m := condition(env.gateway(), "GatewayReady").get("message", ""))
            and m
        ),
        CONVERGE_S,
    )
    r.notes.append(f"the attach listener Conflicted: {message.split(': Envoy serves')[0]}")
    _set_listeners(env, [http])
    assert true(_gateway_follows(env, r, "Available"), "GatewayReady")
    wait("RoutingReady True again", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)
    env.kube.delete("v1", "Secret", "gw-tls", GATEWAY[0])


def route_not_allowed(env: Env, r: Report) -> None:
    """Issue #25 item 2: the listener narrowed to routes of its own namespace. Envoy Gateway refuses the
    team-a route (NotAllowedByListeners) while Envoy AI Gateway keeps it Accepted; RoutingReady says
    RouteNotAllowed; widened again, True."""
    http = {"name": "http", "protocol": "HTTP", "port": 80}
    env.prober.fault()  # Envoy drops the route as soon as Envoy Gateway translates the change
    _set_listeners(env, [{**http, "allowedRoutes": "Same"}])
    said = wait(
        "RoutingReady RouteNotAllowed",
        lambda: (c := condition(env.route(), "RoutingReady")).get("reason") == "RouteNotAllowed" and c,
        CONVERGE_S,
    )
    http_route = naming.unique_name(ROUTE[1], identity=("route",))
    refused = wait(
        "Envoy Gateway refusing the HTTPRoute",
        lambda: next(
            (
                c
                for p in (
                    (
                        env.kube.get("gateway.networking.k8s.io/v1", "HTTPRoute", http_route, ROUTE[0]) or {}
                    ).get("status")
                    or {}
                ).get("parents")
                or []
                for c in p.get("conditions", [])
                if c.get("type") == "Accepted" and c.get("status") == "False"
            ),
            None,
        ),
        CONVERGE_S,
    )
    accepted = [true(o, "Accepted") for o in env.kube.list(AIGW_API, "AIGatewayRoute", ROUTE[0])]
    r.notes.append(
        f"HTTPRoute Accepted=False ({refused.get('reason')}) while the AIGatewayRoutes say Accepted={accepted}; "
        f"RoutingReady {said['reason']}"
    )
    _set_listeners(env, [http])
    wait("RoutingReady True again", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)


def _published_url(env: Env) -> str | None:
    return (((env.gateway() or {}).get("status") or {}).get("gateway") or {}).get("url")


def _real_node_port(env: Env, listener_port: int) -> int | None:
    """The node port the API server assigned to the listener's port on the gateway's Envoy Service."""
    for svc in env.kube.list(
        "v1",
        "Service",
        EG_NS,
        label_selector=f"gateway.envoyproxy.io/owning-gateway-name={GATEWAY[1]},"
        f"gateway.envoyproxy.io/owning-gateway-namespace={GATEWAY[0]}",
    ):
        for port in (svc.get("spec") or {}).get("ports") or []:
            if port.get("port") == listener_port and port.get("nodePort"):
                return int(port["nodePort"])
    return None


def node_port(env: Env, r: Report) -> None:
    """Issue #25 item 8. serviceType NodePort: Envoy Gateway publishes the nodes' address, and the URL
    carries the node port the API server assigned to the listener's port on the Envoy Service (the
    function observes it); requests to that URL, through the node port, reach the model. Back to
    ClusterIP: the observer goes and the URL is the listener's again."""
    before = _published_url(env)
    _patch_gateway(env, {"serviceType": "NodePort"})
    url = wait(
        "a URL on a node port",
        lambda: (u := _published_url(env)) and u.startswith(f"http://{NODE_IP}:") and u,
        CONVERGE_S,
    )
    assigned = _real_node_port(env, 80)
    assert url == f"http://{NODE_IP}:{assigned}", (url, assigned)
    assert true(env.gateway(), "GatewayReady"), condition(env.gateway(), "GatewayReady")
    model = _route_doc()["spec"]["model"]
    port = int(url.rsplit(":", 1)[1])
    # The data plane opens node ports as kube-proxy does, within its sync period.
    wait("a request through the node port answered", lambda: chat(port, model).ok, 30)
    answers = [chat(port, model).status for _ in range(10)]
    assert answers == [200] * 10, answers
    r.notes.append(f"URL {url} (the Service's node port for 80); 10 of 10 requests to it answered 200")
    _patch_gateway(env, {"serviceType": "ClusterIP"})
    wait("the listener's URL again", lambda: _published_url(env) == before, CONVERGE_S)
    wait(
        "the Service observer gone",
        lambda: not any("envoy-service" in n for n in env.objects(GATEWAY[0])),
        CONVERGE_S,
    )
    wait("GatewayReady True", lambda: true(env.gateway(), "GatewayReady"), CONVERGE_S)


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
    with env.prober.ablation():
        _without_anchor(env, r, anchor, generation)
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


def _without_anchor(env: Env, r: Report, anchor: str, generation: int) -> None:
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


def _model_server(name: str, replicas: int) -> dict[str, Any]:
    """A model server's Deployment in the route's namespace (kwok runs no container)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ROUTE[0]},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
            },
        },
    }


def backend_scaled_to_zero(env: Env, r: Report) -> None:
    """A model's own server scaled to zero and back: RoutingReady follows within seconds
    (BackendNotServing, then Available), through the route's watched workload observer."""
    server = _model_server("vllm-llama", 1)
    env.kube.apply(server)
    # The provider's dry-run patch of observed workloads in this application namespace, as shipped.
    env.kube.apply_file(EXAMPLES / "install" / "workload-rbac.yaml")
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

    # Its Service loses every endpoint at once; to the gateway this is a fault to detect. The
    # prober hears of the fault first: a request sent between the server going down and the
    # prober being told was counted as a lie (CI, both routes on this server, one second).
    env.prober.fault()
    env.vllm.down = True
    down_at = scale(0)
    down = reason_is("BackendNotServing")
    message = condition(down, "RoutingReady")["message"]
    assert "vllm: " in message, message
    assert "of 0 replicas available" in message, message
    up_at = scale(1)
    wait(
        "the new replica Ready",
        lambda: any(
            true(p, "Ready")
            for p in env.kube.list("v1", "Pod", ROUTE[0], label_selector="app=vllm-llama")
            if not p["metadata"].get("deletionTimestamp")
        ),
        60,
        interval=0.1,
    )
    env.vllm.down = False
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
    # A gateway change reaches its routes through Crossplane (the route's
    # gateway observer, then a reconcile): requests see Envoy's new
    # configuration up to a second before RoutingReady can follow, as after
    # any change a route cannot know of beforehand. Detection, not a lie.
    env.prober.fault()
    # A merge patch: Crossplane's own updates of the XR co-own its spec
    # fields, so leaving a field out of a server-side apply would not remove it.
    env.kube.merge_patch(
        XR_API, "InferenceGateway", GATEWAY[1], GATEWAY[0], {"spec": {"auth": {"apiKeys": api_keys}}}
    )


def _accepted_conditions(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """An Envoy Gateway policy's Accepted conditions, one per ancestor it reports."""
    ancestors = (policy.get("status") or {}).get("ancestors") or []
    return [c for a in ancestors for c in a.get("conditions", []) if c.get("type") == "Accepted"]


def _narrowed_coverage_refused(env: Env, r: Report) -> None:
    """routeNamespaces narrower than All: the API server refuses it (the XRD's rule), and
    nothing changes: the Gateway's SecurityPolicy stays, the route still needs a key (issue #23)."""
    sp = ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy")
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in env.kube.list(*sp, GATEWAY[0])}
    for covers in ({"from": "Same"}, {"from": "Names", "names": [ROUTE[0]]}):
        refusal: ApiException | None = None
        try:
            _set_auth(env, {"secretRefs": [{"name": "client-keys"}], "routeNamespaces": covers})
        except ApiException as e:
            refusal = e
        assert refusal is not None, f"the API server took routeNamespaces {covers}"
        assert refusal.status == 422, (refusal.status, refusal.body)
        assert "only from All" in str(refusal.body), refusal.body
    time.sleep(3)
    assert not env.kube.list(*sp, ROUTE[0]), "a SecurityPolicy appeared in the route's namespace"
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in env.kube.list(*sp, GATEWAY[0])}
    assert after == before, (before, after)
    assert ((env.route() or {}).get("status") or {}).get("callerAuth", {}).get("required") is True
    r.notes.append("routeNamespaces Same and Names refused by the API server; the Gateway's policy kept")


def _no_key_no_model(env: Env, r: Report) -> None:
    """Issue #23's requests through the real Envoy pods: no key or a wrong one never reaches a model,
    whatever x-ai-eg-model the client sends (none, the body's model, another gateway's, the anchor's
    header); the right key does."""
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = _route_doc()["spec"]["model"]
    answers: dict[tuple[str, str], int] = {}
    for key_label, key in (
        ("no key", None),
        ("wrong key", "Bearer not-a-key"),
        ("right key", "Bearer client-key-1"),
    ):
        for header_label, extra in (
            ("no model header", {}),
            ("the body's model", {"x-ai-eg-model": model}),
            ("another gateway's model", {"x-ai-eg-model": "mistral-7b"}),
            ("an unknown model", {"x-ai-eg-model": "no-such-model"}),
            ("the anchor's header", {"x-gateway-readiness-anchor": "anything"}),
        ):
            headers = dict(extra) | ({"authorization": key} if key else {})
            answers[key_label, header_label] = chat(port, model, headers).status
    leaks = {k: v for k, v in answers.items() if k[0] != "right key" and 200 <= v < 300}
    assert not leaks, f"answered without a valid key: {leaks}"
    served = [k[1] for k, v in answers.items() if k[0] == "right key" and v == 200]
    assert "no model header" in served, answers
    r.notes.append(
        f"{sum(1 for k in answers if k[0] != 'right key')} keyless or wrong-key requests refused "
        f"({sorted({v for k, v in answers.items() if k[0] != 'right key'})}), "
        f"right key served with {', '.join(served)}"
    )


def caller_auth(env: Env, r: Report) -> None:
    """Caller auth whose key Secret is missing: GatewayReady False (AuthNotAccepted) on Envoy Gateway's own
    verdict; the Secret created: True again; coverage narrower than All refused, nothing changed;
    auth turned off: the SecurityPolicy goes."""
    _set_auth(env, {"secretRefs": [{"name": "client-keys"}]})
    _gateway_follows(env, r, "AuthNotAccepted")
    # GatewayReady says AuthNotAccepted on the call that composes the policy,
    # before provider-kubernetes has created it.
    policies = wait(
        f"one SecurityPolicy in {GATEWAY[0]}, with Envoy Gateway's verdict",
        lambda: (
            (found := env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0]))
            and len(found) == 1
            and _accepted_conditions(found[0])
            and found
        ),
        60,
    )
    refused = _accepted_conditions(policies[0])
    r.notes.append(
        "without the Secret Envoy Gateway says "
        + (", ".join(f"Accepted={c['status']} ({c.get('reason')})" for c in refused) or "nothing yet")
    )
    # The prober sends this key wherever a route says a key is needed.
    env.keys = {"authorization": "client-key-1"}
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "client-keys", "namespace": GATEWAY[0]},
            "stringData": {"team-a": "client-key-1"},
        }
    )
    assert true(_gateway_follows(env, r, "Available"), "GatewayReady")
    _no_key_no_model(env, r)
    _narrowed_coverage_refused(env, r)
    _set_auth(env, None)
    wait(
        "the SecurityPolicy deleted with auth off",
        lambda: not env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0]),
        120,
    )
    assert true(env.gateway(), "GatewayReady"), condition(env.gateway(), "GatewayReady")


def missing_secret(env: Env, r: Report) -> None:
    """Issue #25 item 1: a backend's API-key Secret missing. Envoy AI Gateway accepts every object and
    drops the backend, so requests fail; RoutingReady says ReferenceNotFound, and True once the Secret
    exists and requests succeed (the prober judges both)."""
    key_name = "vllm-api-key"
    env.kube.delete("v1", "Secret", key_name, ROUTE[0])
    doc = _route_doc_one_backend()
    doc["spec"]["backends"][0]["apiKeySecretRef"] = {"name": key_name}
    env.kube.apply(doc)
    wait(
        "RoutingReady=False ReferenceNotFound",
        lambda: condition(env.route(), "RoutingReady").get("reason") == "ReferenceNotFound",
        CONVERGE_S,
    )
    wait(
        "the BackendSecurityPolicy Accepted without its Secret",
        lambda: (
            (p := env.kube.list(AIGW_API, "BackendSecurityPolicy", ROUTE[0]))
            and all(true(x, "Accepted") for x in p)
        ),
        CONVERGE_S,
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = doc["spec"]["model"]
    failed = wait(
        "a request refused while the Secret is missing",
        lambda: (a := chat(port, model)) and not a.ok and a,
        60,
    )
    message = condition(env.route(), "RoutingReady")["message"]
    assert f"Secret {ROUTE[0]}/{key_name} not found" in message, message
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": key_name, "namespace": ROUTE[0]},
            "stringData": {"apiKey": "sk-vllm"},
        }
    )
    started = time.monotonic()
    wait("RoutingReady=True with the Secret in place", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)
    wait("a request served", lambda: chat(port, model).ok, 60)
    r.notes.append(
        f"every object Accepted and requests answered {failed.status} while the Secret was missing; "
        f"True {time.monotonic() - started:.0f} s after it was created"
    )
    env.kube.apply(_route_doc_one_backend())


def _model_route(where: tuple[str, str], model: str, backends: list[dict[str, Any]]) -> dict[str, Any]:
    """A ModelRoute at (namespace, name) on the run's gateway."""
    return {
        "apiVersion": XR_API,
        "kind": "ModelRoute",
        "metadata": {"name": where[1], "namespace": where[0]},
        "spec": {
            "gatewayRef": {"name": GATEWAY[1], "namespace": GATEWAY[0]},
            "model": model,
            "backends": backends,
        },
    }


def _btp(name: str, http_route: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": {"name": name, "namespace": ROUTE[0]},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": http_route}],
            "timeout": {"http": {"streamIdleTimeout": "60s"}},
        },
    }


def traffic_policy_conflicted(env: Env, r: Report) -> None:
    """Issue #25 item 4: a ModelRoute whose first priority is dead (its Deployment scaled to zero, nothing
    listening) and whose fallback serves. An older BackendTrafficPolicy on its HTTPRoute makes ours
    Conflicted, so no retry reaches the fallback and every request fails: RoutingReady says
    BackendNotServing. The older policy deleted: ours Accepted, retries fail over, RoutingReady True
    and requests served (the prober judges both)."""
    name, model = "fallback", "fallback-model"
    http_route = naming.unique_name(name, identity=("route",))
    env.kube.apply(_btp("platform-older", http_route))
    time.sleep(2)  # Envoy Gateway resolves conflicts by age: this one is older by whole seconds.
    env.kube.apply(_model_server("vllm-dead", 0))
    env.kube.apply_file(EXAMPLES / "install" / "workload-rbac.yaml")
    env.kube.apply(
        _model_route(
            (ROUTE[0], name),
            model,
            [
                {
                    "name": "dead",
                    # Nothing listens there: every request to it is refused.
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT + 1},
                    "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-dead"},
                },
                {
                    "name": "live",
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT},
                    "priority": 1,
                },
            ],
        )
    )
    route = lambda: env.kube.get(XR_API, "ModelRoute", name, ROUTE[0])  # noqa: E731
    ours = wait(
        "our BackendTrafficPolicy with Envoy Gateway's verdict",
        lambda: (
            (
                p := env.kube.get(
                    "gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", http_route, ROUTE[0]
                )
            )
            and _accepted_conditions(p)
            and p
        ),
        CONVERGE_S,
    )
    verdict = _accepted_conditions(ours)
    assert all(c["status"] == "False" for c in verdict), verdict
    wait(
        "RoutingReady BackendNotServing, saying the policy is not Accepted",
        lambda: (
            "BackendTrafficPolicy is not Accepted" in condition(route(), "RoutingReady").get("message", "")
        ),
        CONVERGE_S,
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    failed = wait(
        "a request refused without failover", lambda: (a := chat(port, model)) and not a.ok and a, 60
    )
    r.notes.append(
        f"ours {', '.join(c['reason'] for c in verdict)} under an older policy: requests {failed.status}, "
        "RoutingReady BackendNotServing"
    )
    started = time.monotonic()
    env.kube.delete("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", "platform-older", ROUTE[0])
    wait("RoutingReady True once ours is Accepted", lambda: true(route(), "RoutingReady"), CONVERGE_S)
    wait("a request served by the fallback", lambda: chat(port, model).ok, 60)
    r.notes.append(
        f"the older policy deleted: True and served through the fallback in {time.monotonic() - started:.0f} s"
    )
    env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])
    wait("the fallback ModelRoute gone", lambda: route() is None, CONVERGE_S)


def gateway_rate_limit(env: Env, r: Report) -> None:
    """Issue #25 item 4: a platform's Gateway-level BackendTrafficPolicy (a local rate limit, for
    requests carrying one header the prober never sends) still limits a ModelRoute's requests: the
    route's own policy merges into it (mergeType StrategicMerge) instead of replacing it."""
    name = "platform-limits"
    env.kube.apply(
        {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "BackendTrafficPolicy",
            "metadata": {"name": name, "namespace": GATEWAY[0]},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY[1]}],
                "rateLimit": {
                    "type": "Local",
                    "local": {
                        "rules": [
                            {
                                "clientSelectors": [{"headers": [{"name": "x-limited", "value": "yes"}]}],
                                "limit": {"requests": 2, "unit": "Minute"},
                            }
                        ]
                    },
                },
            },
        }
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = _route_doc()["spec"]["model"]
    limited = wait(
        "a limited request answered 429 through the ModelRoute",
        lambda: (a := chat(port, model, {"x-limited": "yes"})) and a.status == 429 and a,
        60,
        interval=0.5,
    )
    assert chat(port, model).ok  # the prober's kind of request is not limited
    r.notes.append(f"the Gateway-level limit answered {limited.status} through the route's merged policy")
    env.kube.delete("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", name, GATEWAY[0])


def model_claimed(env: Env, r: Report) -> None:
    """Issue #25 item 3: a second ModelRoute, in another team's namespace, claims the model team-a's
    route already serves, with a backend where nothing listens. Envoy keeps serving the older route (the
    prober would count team-a's failures as lies otherwise); the younger says ModelClaimed naming it."""
    squat = ("team-b", "squat")
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": squat[0]}})
    model = _route_doc()["spec"]["model"]
    env.kube.apply(
        _model_route(
            squat,
            model,
            [
                {
                    "name": "nothing",
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT + 1},
                }
            ],
        )
    )
    squatter = lambda: env.kube.get(XR_API, "ModelRoute", squat[1], squat[0])  # noqa: E731
    said = wait(
        "the younger route says ModelClaimed",
        lambda: (c := condition(squatter(), "RoutingReady")).get("reason") == "ModelClaimed" and c,
        CONVERGE_S,
    )
    assert f"ModelRoute {ROUTE[0]}/{ROUTE[1]}" in said["message"], said
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    for _ in range(5):  # the older route keeps the model: its backend answers
        assert chat(port, model).ok
        assert true(env.route(), "RoutingReady"), condition(env.route(), "RoutingReady")
        time.sleep(1)
    r.notes.append(f"the younger route: {said['message'].split(':')[0]}; the older kept serving")
    env.kube.delete(XR_API, "ModelRoute", squat[1], squat[0])
    wait("the squatting ModelRoute gone", lambda: squatter() is None, CONVERGE_S)


def upgraded_from_v0_1_0(env: Env, r: Report) -> None:
    """Issue #25 item 6: a ModelRoute whose resources v0.1.0 composed (target names without a hash)
    is taken over by this version. No target is renamed, so no second AIGatewayRoute appears beside
    the old one; deleting the ModelRoute deletes what v0.1.0 created, and the model stops being routed."""
    where, model = ("team-up", "legacy"), "legacy-model"
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": where[0]}})
    doc = _model_route(
        where,
        model,
        [{"name": "vllm", "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT}}],
    )
    # Paused until v0.1.0's resources are in place, so this version composes nothing first.
    doc["metadata"]["annotations"] = {"crossplane.io/paused": "true"}
    env.kube.apply(doc)
    xr = wait("the paused ModelRoute", lambda: env.route(*where), 30)
    refs = []
    for obj in _v0_1_0_objects(env, xr):
        env.kube.apply(obj)
        refs.append({"apiVersion": OBJECT_API, "kind": "Object", "name": obj["metadata"]["name"]})
    env.kube.merge_patch(
        XR_API, "ModelRoute", where[1], where[0], {"spec": {"crossplane": {"resourceRefs": refs}}}
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    wait("v0.1.0's route serves the model", lambda: chat(port, model).ok, CONVERGE_S)
    _paused(env, XR_API, "ModelRoute", where[1], where[0], paused=False)
    wait(
        "RoutingReady=True after the upgrade",
        lambda: (rt := env.route(*where)) and true(rt, "RoutingReady") and rt,
        CONVERGE_S,
    )
    # RoutingReady may read an Object's status from before the provider applied
    # this version's manifest: judge once every Object reports the manifest it holds now.
    wait("the provider applied every Object", lambda: _applied(env.objects(where[0])), CONVERGE_S)
    routes = sorted(o["metadata"]["name"] for o in env.kube.list(AIGW_API, "AIGatewayRoute", where[0]))
    assert routes == [where[1]], f"AIGatewayRoutes after the upgrade: {routes} (v0.1.0 named it {where[1]!r})"
    backends = sorted(o["metadata"]["name"] for o in env.kube.list(AIGW_API, "AIServiceBackend", where[0]))
    assert backends == [f"{where[1]}-vllm"], backends
    assert chat(port, model).ok
    objects = env.objects(where[0])
    assert {ref["name"] for ref in refs} <= set(objects), sorted(objects)
    env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
    wait("every Object of the route deleted", lambda: not env.objects(where[0]), 120)
    wait("no AIGatewayRoute left", lambda: not env.kube.list(AIGW_API, "AIGatewayRoute", where[0]), 120)
    wait("the model no longer routed", lambda: not chat(port, model).ok, CONVERGE_S)
    r.notes.append(
        f"v0.1.0's {len(refs)} Objects taken over: AIGatewayRoute {routes[0]} kept its name, "
        f"{len(objects) - len(refs)} Objects added; deleting the route removed every target"
    )


def _applied(objects: dict[str, dict[str, Any]]) -> bool:
    """Every Object Synced, its observed target the one its manifest names."""
    for obj in objects.values():
        wanted = obj["spec"]["forProvider"]["manifest"]["metadata"]["name"]
        seen = (((obj.get("status") or {}).get("atProvider") or {}).get("manifest") or {}).get(
            "metadata"
        ) or {}
        if not true(obj, "Synced") or seen.get("name") != wanted:
            return False
    return bool(objects)


def _v0_1_0_objects(env: Env, xr: dict[str, Any]) -> list[dict[str, Any]]:
    """The Objects v0.1.0 composed for `xr`: its names (`<xr>-<backend>`, the route `<xr>`), no
    BackendTrafficPolicy or gateway observer, owned by the XR as Crossplane owns composed resources."""
    meta = xr["metadata"]
    ns, name = meta["namespace"], meta["name"]
    spec = ModelRouteSpec.model_validate({k: v for k, v in xr["spec"].items() if k != "crossplane"})
    held = {route_plan.ROUTE: Target(ns, name)}
    for b in spec.backends:
        for prefix in (route_plan.BACKEND_PREFIX, route_plan.SERVICE_BACKEND_PREFIX):
            held[prefix + b.name] = Target(ns, f"{name}-{b.name}")
    plan = route_plan.RoutePlan(
        xr_name=name,
        xr_namespace=ns,
        spec=spec,
        inp=Input.model_validate({"apiVersion": INPUT_API, "kind": "Input", "compose": "ModelRoute"}),
        held=held,
    )
    ref = Requirement(api_version=XR_API, kind="InferenceGateway", name=GATEWAY[1], namespace=GATEWAY[0])
    view = read_gateway({GATEWAY_REQUIREMENT: [env.gateway() or {}]}, ref)
    assert view.attachment is not None, view.missing
    objects = composer.build_objects(plan, view.attachment)
    out = []
    for key in sorted(held):
        obj = objects[key]
        obj["metadata"] = {
            "name": f"{name}-{key}",
            "namespace": ns,
            "annotations": {"crossplane.io/composition-resource-name": key},
            "labels": {"crossplane.io/composite": name},
            "ownerReferences": [
                {
                    "apiVersion": XR_API,
                    "kind": "ModelRoute",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        out.append(obj)
    return out


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
    listener_not_programmed,
    route_not_allowed,
    node_port,
    backend_scaled_to_zero,
    caller_auth,
    bad_input,
    missing_secret,
    traffic_policy_conflicted,
    gateway_rate_limit,
    model_claimed,
    upgraded_from_v0_1_0,
]


# --- the run -----------------------------------------------------------------------------


@contextmanager
def environment(workdir: Path) -> Iterator[Env]:
    sup = Supervisor(workdir / "logs")
    lab = Lab(("provider-kubernetes", "envoy-gateway"))
    env: Env | None = None
    vllm: Upstream | None = None
    dns: ClusterDNS | None = None
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
        # The Input's marker for the release that runs (MARKER above).
        kube.apply_file(
            EXAMPLES / "configuration" / "inferencegateway-composition.yaml",
            lambda doc: doc["spec"]["pipeline"][0]["input"].__setitem__("extProcMarkerAnnotation", MARKER),
        )
        EnvoyStack(kube, sup, workdir, cp.kubeconfig, lab, ai_gateway=AI_GATEWAY).start()
        envoy, _ = envoy_binary()
        vllm = Upstream("vllm", "openai", host="0.0.0.0", bind_port=VLLM_PORT).start()
        names = {
            # Envoy Gateway's xDS Service, as its bootstrap names it.
            f"envoy-gateway.{EG_NS}.svc.cluster.local": lab.ip("envoy-gateway"),
            # The example route's backends: the fake vLLM on a host address.
            "vllm.team-a.svc.cluster.local": lab.host_ip,
            "api.models.example.com": lab.host_ip,
        }
        dns = ClusterDNS(lab.host_ip, names).start()
        plane = DataPlane(
            Kube(cp.kubeconfig),
            sup,
            workdir=workdir,
            binaries=Binaries(envoy=envoy, extproc=toolchain.ensure(AI_GATEWAY, "extproc")),
            hosts=names,
            namespaces=(EG_NS,),
            nameserver=lab.host_ip,
        )
        plane.start()
        env = Env(kube, Prober(Kube(cp.kubeconfig), plane.gateway_port, lambda: env.keys), plane, vllm)
        env.prober.start()
        yield env
    finally:
        if env is not None:
            env.prober.stop()
            env.plane.stop()
        if vllm is not None:
            vllm.stop()
        if dns is not None:
            dns.stop()
        left = sup.stop_all()
        lab.down()
        if left:
            print(f"integration: ports still open after teardown: {left}", file=sys.stderr)


def versions_line() -> str:
    v = versions
    return (
        f"Kubernetes {v.KUBERNETES.version}, Crossplane {v.CROSSPLANE.version}, provider-kubernetes "
        f"{v.PROVIDER_KUBERNETES.version}, Envoy Gateway {v.ENVOY_GATEWAY.version}, "
        f"Envoy AI Gateway {AI_GATEWAY.version}"
    )


def main() -> int:
    stop_cleanly_on_sigterm()
    why = Lab.why_not()
    if why:
        print(f"integration: NOT RUN: {why}", file=sys.stderr)
        return 1
    try:
        stack = [c for c in toolchain.COMPONENTS.values() if c.name != AI_GATEWAY.name] + [AI_GATEWAY]
        for component in stack:
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
    totals: list[Totals] = []
    started = time.monotonic()
    try:
        with environment(workdir) as env:
            print(f"integration: environment up in {time.monotonic() - started:.0f} s", file=sys.stderr)
            for scenario in chosen:
                report = Report(scenario.__name__)
                env.prober.scenario = scenario.__name__
                since = int(time.time())
                t0 = time.monotonic()
                try:
                    scenario(env, report)
                    report.ok = True
                except Exception as e:
                    report.error = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                judged = env.prober.totals(since)
                report.notes.append(
                    f"requests {judged.requests}, failed {judged.failed}, lying {judged.lying}, "
                    f"leaks {judged.leaks}"
                    + (f", ablation lying {judged.ablation_lying}" if judged.ablation_lying else "")
                )
                if report.ok and (judged.lying or judged.leaks):
                    report.ok = False
                    report.error = "requests disagree with the conditions: " + "; ".join(
                        f"{s.second} {s.subject} {s.status} ready={s.ready}{' LEAK' if s.leak else ''}"
                        for s in judged.lies[:8]
                    )
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
            totals.append(env.prober.totals())
            restarted = {sb.key: sb.restarts for sb in env.plane.sandboxes.values() if sb.restarts}
            if restarted:
                print(f"integration: containers restarted after they exited: {restarted}", file=sys.stderr)
            if env.plane.errors:
                print(f"integration: data plane errors: {env.plane.errors[-5:]}", file=sys.stderr)
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
    print(
        f"integration: {passed} of {len(chosen)} scenarios passed on {versions_line()}; "
        f"requests {t.requests}, failed {t.failed}, lying seconds {t.lying}, {late}, leaks {t.leaks}; {truth}"
    )
    return 0 if passed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
