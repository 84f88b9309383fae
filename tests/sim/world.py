"""The cluster the function composes for: Envoy Gateway, Envoy AI Gateway, pods, traffic.

A deterministic model, stepped one second at a time, of the controllers
whose timing the incident lives in (upstream behaviour as of Envoy Gateway
v1.8.1 and Envoy AI Gateway v1.1.0, see shared/docs/upstream-facts.md):

- Envoy Gateway creates one proxy Deployment per Gateway, named as it names
  them (pinned by the EnvoyProxy, or its hashed default), and rolls it with
  maxSurge and maxUnavailable 25%;
- Envoy AI Gateway's webhook injects the ext-proc sidecar into a pod only if
  an effective route exists when the pod is created (as its informer sees it,
  a few seconds late); its controller stamps the pod template with the
  ext-proc config hash once routes exist (v1.1.0), and rolls the Deployment
  when "routes exist" and "every pod has the sidecar" disagree or pods are
  mixed, never mid-rollout as it judges one (generation not observed, or
  status.replicas above updatedReplicas; v1.0.0 gateway.go, read from the
  source);
- a pod taken away (rollout, eviction, drain) terminates for a grace period,
  out of `status.replicas` but counted in `status.terminatingReplicas`
  (Kubernetes 1.35, DeploymentReplicaSetTerminatingReplicas on by default),
  and keeps serving the connections it has open until it is gone;
- a request for a model goes to every ready or terminating pod: 503 where no
  pod serves or the listener is broken, 404 where no accepted route matches
  the model, 500 where the pod lacks the sidecar, 200 otherwise;
- faults the control plane learns of only by watching: a route rejected
  (Accepted=False, no longer programmed), a listener broken (the Gateway's
  Programmed=False, nothing served), every Envoy pod crashing.

InferenceGateways, as Crossplane writes them, are stored here too, so the
provider can observe them like any other object.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

MARKER = "aigateway.envoyproxy.io/extproc-config-hash"
UUID = "aigateway.envoyproxy.io/uuid"
MODEL_HEADER = "x-ai-eg-model"
EG_NAMESPACE = "envoy-gateway-system"

# Seconds from pod creation to available: image pull, Envoy and the ext-proc
# starting, readiness probes. A two-pod rollout then takes about 45 s, longer
# than provider-kubernetes' 30 s poll of a not-Ready Object, as in the incident.
POD_START_SECONDS = 20
# How stale Envoy AI Gateway's view of routes is (informer and reconcile lag).
AIGW_LAG_SECONDS = 3
# Seconds the Deployment controller takes to observe a new generation.
OBSERVE_GENERATION_SECONDS = 1
# Seconds a terminating Envoy pod keeps serving its open connections (Envoy
# Gateway's shutdown manager drains before Envoy exits).
DRAIN_SECONDS = 15

Key = tuple[str, str, str]  # (kind, namespace, name)


def envoy_gateway_deployment_name(gateway_namespace: str, gateway_name: str) -> str:
    """Envoy Gateway's own name for a proxy Deployment it is not told to pin.

    Written here from Envoy Gateway v1.8.1's source (internal/utils/misc.go
    GetHashedName with length 48, internal/infrastructure/kubernetes/proxy/
    resource.go ExpectedResourceHashedName), not taken from the function
    under test, so the simulation can disagree with it.
    """
    ns_name = f"{gateway_namespace}/{gateway_name}"
    digest = hashlib.sha256(ns_name.encode()).hexdigest()
    readable = ns_name.replace("/", "-")
    if len(readable) > 48:
        readable = readable[:48].removesuffix("-")  # Go's TrimSuffix: one hyphen at most
    return f"envoy-{readable}-{digest[:8]}"


@dataclass
class Pod:
    name: str
    template: int  # the template revision it was created from
    created: int
    sidecar: bool
    crashed_until: int = 0  # not ready before this second (a crash and restart)

    def available(self, now: int) -> bool:
        return now >= self.created + POD_START_SECONDS and now >= self.crashed_until


@dataclass
class Deployment:
    namespace: str
    name: str
    gateway: tuple[str, str]  # owning Gateway (namespace, name)
    replicas: int
    generation: int = 1
    observed_generation: int = 0
    observed_at: int = 0
    template: int = 1  # bumped on every template change
    annotations: dict[str, str] = field(default_factory=dict)
    image: str = "envoy:v1"
    pods: list[Pod] = field(default_factory=list)
    # Pods with a deletion timestamp, and the second they are gone.
    terminating: list[tuple[Pod, int]] = field(default_factory=list)
    uid: int = 0

    def terminate(self, pod: Pod, now: int) -> None:
        self.pods.remove(pod)
        self.terminating.append((pod, now + DRAIN_SECONDS))

    def change_template(self, now: int) -> None:
        self.template += 1
        self.generation += 1
        self.observed_at = now + OBSERVE_GENERATION_SECONDS

    def rolling(self) -> bool:
        """Mid-rollout as Envoy AI Gateway judges it (v1.0.0 internal/controller/gateway.go
        isRolloutInProgress): the generation is not observed yet, or status.replicas exceeds
        status.updatedReplicas (an old-template pod is still there). Availability is not
        waited for."""
        current = [p for p in self.pods if p.template == self.template]
        return self.observed_generation < self.generation or len(self.pods) > len(current)

    def manifest(self, now: int) -> dict[str, Any]:
        """The Deployment as the API server would return it (zero counts omitted)."""
        current = [p for p in self.pods if p.template == self.template]
        status = {
            "observedGeneration": self.observed_generation,
            "replicas": len(self.pods),
            "updatedReplicas": len(current),
            "readyReplicas": sum(p.available(now) for p in self.pods),
            "availableReplicas": sum(p.available(now) for p in self.pods),
        }
        # A pointer field: reported even when zero.
        counts = {k: v for k, v in status.items() if v}
        counts["terminatingReplicas"] = len(self.terminating)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "generation": self.generation,
                "labels": {
                    "app.kubernetes.io/managed-by": "envoy-gateway",
                    "gateway.envoyproxy.io/owning-gateway-namespace": self.gateway[0],
                    "gateway.envoyproxy.io/owning-gateway-name": self.gateway[1],
                },
            },
            "spec": {
                "replicas": self.replicas,
                "template": {
                    "metadata": {"annotations": dict(self.annotations)},
                    "spec": {"containers": [{"name": "envoy", "image": self.image}]},
                },
            },
            "status": counts,
        }


@dataclass
class Workload:
    """A model server's Deployment (vLLM): replicas start in POD_START_SECONDS;
    scaled down, they go at once (out of the Service's endpoints)."""

    namespace: str
    name: str
    replicas: int
    # The second each current replica was created.
    started: list[int] = field(default_factory=list)
    generation: int = 1
    # What the server has loaded: what its `GET /v1/models` lists, and the only models it
    # answers (any other gets 404, as vLLM answers "The model does not exist").
    loaded: tuple[str, ...] = ()

    def available(self, now: int) -> int:
        return sum(now >= t + POD_START_SECONDS for t in self.started)

    def manifest(self, now: int) -> dict[str, Any]:
        status = {
            "observedGeneration": self.generation,
            "replicas": len(self.started),
            "updatedReplicas": len(self.started),
            "availableReplicas": self.available(now),
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": self.namespace, "generation": self.generation},
            "spec": {"replicas": self.replicas},
            "status": {k: v for k, v in status.items() if v},
        }


@dataclass
class Traffic:
    requests: int = 0
    ok: int = 0
    errors_500: int = 0
    not_found: int = 0
    unavailable: int = 0
    # 503 from behind the gateway: the model's server has no available replica.
    no_backend: int = 0
    # 404 from behind the gateway: the model's server has another model loaded.
    not_loaded: int = 0

    @property
    def failed(self) -> int:
        return self.errors_500 + self.not_found + self.unavailable + self.no_backend + self.not_loaded


@dataclass(frozen=True)
class Served:
    """What one second of requests for a model got."""

    requests: int
    ok: int

    @property
    def failed(self) -> int:
        return self.requests - self.ok


class World:
    """Every object in the cluster that is not a Crossplane or provider object."""

    def __init__(self, *, gateway_namespace_mode: bool = False) -> None:
        self.now = 0
        # Targets provider-kubernetes manages, as applied (plus controller status).
        self.objects: dict[Key, dict[str, Any]] = {}
        self.created_at: dict[Key, int] = {}
        self.deployments: dict[tuple[str, str], Deployment] = {}
        # Envoy Gateway's deploy mode: ControllerNamespace (default) or GatewayNamespace.
        self.gateway_namespace_mode = gateway_namespace_mode
        # Effective routes per Gateway as Envoy AI Gateway saw them, per second.
        self._route_history: list[dict[tuple[str, str], int]] = []
        self.rollouts = 0
        self.changed: set[Key] = set()  # targets whose content changed this tick
        self._pod_serial = 0
        # Model servers, and which one serves each model.
        self.workloads: dict[tuple[str, str], Workload] = {}
        self.model_workload: dict[str, tuple[str, str]] = {}
        # A model server's host name (its Service) -> its workload.
        self.hosts: dict[str, tuple[str, str]] = {}
        # Faults: AIGatewayRoutes rejected, Gateways whose listener is broken.
        self.rejected: set[Key] = set()
        self.broken_listeners: set[tuple[str, str]] = set()

    # --- the API server -----------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> None:
        meta = manifest["metadata"]
        key = (manifest["kind"], meta.get("namespace", ""), meta["name"])
        old = self.objects.get(key)
        new = {k: v for k, v in manifest.items() if k != "status"}
        if old is not None:
            new["status"] = old.get("status", {})
            if {k: v for k, v in old.items() if k != "status"} == {
                k: v for k, v in new.items() if k != "status"
            }:
                return
        else:
            self.created_at[key] = self.now
            new["status"] = {}
        self.objects[key] = new
        self.changed.add(key)

    def compose(self, key: Key, obj: dict[str, Any]) -> None:
        """Crossplane's apply of a composed resource it writes itself: the spec as desired, the
        status as its controller last wrote it."""
        old = self.objects.get(key)
        new = dict(obj)
        if old is not None and "status" in old:
            new["status"] = old["status"]
        self.put(key, new)

    def put(self, key: Key, obj: dict[str, Any]) -> None:
        """Store an object as its controller wrote it (an InferenceGateway, by Crossplane)."""
        if self.objects.get(key) != obj:
            self.objects[key] = obj
            self.created_at.setdefault(key, self.now)
            self.changed.add(key)

    def delete(self, key: Key) -> None:
        if self.objects.pop(key, None) is not None:
            self.changed.add(key)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Deployment":
            workload = self.workloads.get((namespace, name))
            if workload is not None:
                return workload.manifest(self.now)
            dep = self.deployments.get((namespace, name))
            return dep.manifest(self.now) if dep else None
        return self.objects.get((kind, namespace, name))

    # --- Envoy AI Gateway's view -----------------------------------------------------

    def effective_routes(self) -> dict[tuple[str, str], int]:
        """AIGatewayRoutes attached to each Gateway, now."""
        counts: dict[tuple[str, str], int] = {}
        for (kind, ns, name), obj in self.objects.items():
            if kind != "AIGatewayRoute" or (kind, ns, name) in self.rejected:
                continue
            for parent in obj["spec"].get("parentRefs", []):
                gw = (parent.get("namespace", ns), parent["name"])
                counts[gw] = counts.get(gw, 0) + 1
        return counts

    def routes_seen_by_aigw(self, gateway: tuple[str, str]) -> bool:
        index = max(0, len(self._route_history) - 1 - AIGW_LAG_SECONDS)
        if not self._route_history:
            return False
        return self._route_history[index].get(gateway, 0) > 0

    def models(self, gateway: tuple[str, str]) -> list[str]:
        """What `/v1/models` lists: exact x-ai-eg-model matches of attached, accepted routes."""
        out = []
        for (kind, ns, name), obj in sorted(self.objects.items()):
            if kind != "AIGatewayRoute" or (kind, ns, name) in self.rejected:
                continue
            if not any(
                (p.get("namespace", ns), p["name"]) == gateway for p in obj["spec"].get("parentRefs", [])
            ):
                continue
            for rule in obj["spec"].get("rules", []):
                for match in rule.get("matches", []):
                    for header in match.get("headers", []):
                        if header.get("name") == MODEL_HEADER and header.get("type", "Exact") == "Exact":
                            out.append(header["value"])
        return out

    # --- controllers, one step ----------------------------------------------------------

    def step(self) -> None:
        before = {key: dep.manifest(self.now) for key, dep in self.deployments.items()}
        served_before = {key: w.manifest(self.now) for key, w in self.workloads.items()}
        self.now += 1
        self._route_history.append(self.effective_routes())
        self._accept()
        self._httproutes()
        self._envoy_gateway()
        self._ai_gateway()
        for dep in self.deployments.values():
            self._roll(dep)
        # Watches fire on Deployments too: any change of spec or status.
        for key in set(before) | set(self.deployments):
            dep = self.deployments.get(key)
            if dep is None or before.get(key) != dep.manifest(self.now):
                self.changed.add(("Deployment", *key))
        for key, workload in self.workloads.items():
            if served_before.get(key) != workload.manifest(self.now):
                self.changed.add(("Deployment", *key))

    def _set_status(self, key: Key, status: dict[str, Any]) -> None:
        if self.objects[key].get("status") != status:
            self.objects[key]["status"] = status
            self.changed.add(key)

    # Kinds whose controllers set Accepted a second after creation.
    _ACCEPTING = ("AIGatewayRoute", "AIServiceBackend", "Backend", "BackendSecurityPolicy", "EnvoyProxy")

    # Envoy Gateway policies: Accepted per ancestor (status.ancestors), a second after creation.
    _POLICIES = ("ClientTrafficPolicy", "BackendTrafficPolicy")

    def _accept(self) -> None:
        for key in list(self.objects):
            if self.now - self.created_at[key] < 1:
                continue
            accepted = key not in self.rejected
            verdict = {
                "type": "Accepted",
                "status": "True" if accepted else "False",
                "reason": "Accepted" if accepted else "NoMatchingParent",
            }
            if key[0] in self._ACCEPTING:
                self._set_status(key, {"conditions": [verdict]})
            elif key[0] in self._POLICIES:
                self._set_status(key, {"ancestors": [{"conditions": [verdict]}]})

    def _httproutes(self) -> None:
        """Envoy AI Gateway's HTTPRoute of each AIGatewayRoute it accepted (v1.1.0 `newHTTPRoute`: the
        rules' matches on the root path, the parentRefs; a new generation when they change), and Envoy
        Gateway's status of it in the same step: Accepted on each parent, of that generation
        (`status/route.go`); deleted with its AIGatewayRoute. Routes read their own on every call
        (function/route/httproute.py)."""
        made = {}
        routes = {(ns, name) for kind, ns, name in self.objects if kind == "AIGatewayRoute"}
        for (kind, ns, name), obj in self.objects.items():
            accepted = (obj.get("status") or {}).get("conditions") or [{}]
            # One it refuses keeps the HTTPRoute made before (`newHTTPRoute` failed: left as it was).
            if kind != "AIGatewayRoute" or accepted[0].get("status") != "True":
                continue
            root = {"type": "PathPrefix", "value": "/"}
            spec = {
                "parentRefs": obj["spec"].get("parentRefs", []),
                "rules": [
                    {"matches": [{**m, "path": root} for m in rule.get("matches", [])]}
                    for rule in obj["spec"].get("rules", [])
                ],
            }
            made[("HTTPRoute", ns, name)] = spec
        for key in [k for k in self.objects if k[0] == "HTTPRoute" and k[1:] not in routes]:
            self.delete(key)
        for key, spec in made.items():
            old = self.objects.get(key)
            if old is not None and old["spec"] == spec:
                continue
            generation = (old or {}).get("metadata", {}).get("generation", 0) + 1
            accepted = {
                "type": "Accepted",
                "status": "True",
                "reason": "Accepted",
                "observedGeneration": generation,
            }
            self.put(
                key,
                {
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "HTTPRoute",
                    "metadata": {"name": key[2], "namespace": key[1], "generation": generation},
                    "spec": spec,
                    "status": {
                        "parents": [
                            {"parentRef": ref, "conditions": [accepted]} for ref in spec["parentRefs"]
                        ]
                    },
                },
            )

    def deployment_key(self, gw_ns: str, gw_name: str, proxy: dict[str, Any] | None) -> tuple[str, str]:
        # Naming and placement are separate (Envoy Gateway v1.8 resource_provider.go):
        # a pinned name is placed in the Gateway's namespace in GatewayNamespace mode.
        pinned = (
            (proxy or {}).get("spec", {}).get("provider", {}).get("kubernetes", {}).get("envoyDeployment", {})
        ).get("name")
        if self.gateway_namespace_mode:
            return gw_ns, pinned or gw_name
        return EG_NAMESPACE, pinned or envoy_gateway_deployment_name(gw_ns, gw_name)

    def _envoy_gateway(self) -> None:
        wanted: dict[tuple[str, str], tuple[tuple[str, str], int]] = {}
        for (kind, ns, name), gw in self.objects.items():
            if kind != "Gateway":
                continue
            ref = gw["spec"].get("infrastructure", {}).get("parametersRef", {})
            proxy = self.objects.get(("EnvoyProxy", ns, ref.get("name", "")))
            replicas = (
                (proxy or {})
                .get("spec", {})
                .get("provider", {})
                .get("kubernetes", {})
                .get("envoyDeployment", {})
            ).get("replicas", 1)
            wanted[self.deployment_key(ns, name, proxy)] = ((ns, name), int(replicas))
        for key in list(self.deployments):
            if key not in wanted:
                del self.deployments[key]
        for key, (gateway, replicas) in wanted.items():
            dep = self.deployments.get(key)
            if dep is None:
                dep = Deployment(
                    key[0], key[1], gateway, replicas, observed_at=self.now + OBSERVE_GENERATION_SECONDS
                )
                self.deployments[key] = dep
            elif dep.replicas != replicas:
                dep.replicas = replicas
                dep.generation += 1
                dep.observed_at = self.now + OBSERVE_GENERATION_SECONDS
            # Programmed once the proxy has an available pod to serve the listeners.
            available = any(p.available(self.now) for p in dep.pods)
            # A broken listener (an HTTPS certificate Secret missing) is
            # Programmed=False under a Gateway that stays Programmed: Envoy
            # Gateway's Gateway Programmed ignores listeners (status/gateway.go).
            serving = available and gateway not in self.broken_listeners
            listeners = self.objects[("Gateway", *gateway)]["spec"].get("listeners", [])
            status = {
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted"},
                    {
                        "type": "Programmed",
                        "status": "True" if available else "False",
                        "reason": "Programmed" if available else "NoResources",
                    },
                ],
                "listeners": [
                    {
                        "name": listener["name"],
                        "conditions": [
                            {
                                "type": "Programmed",
                                "status": "True" if serving else "False",
                                "reason": "Programmed" if serving else "Invalid",
                            }
                        ],
                    }
                    for listener in listeners
                ],
            }
            if available:
                status["addresses"] = [{"type": "IPAddress", "value": "172.18.0.200"}]
            self._set_status(("Gateway", *gateway), status)

    def _ai_gateway(self) -> None:
        for dep in self.deployments.values():
            if dep.rolling():
                continue  # never patch a Deployment mid-rollout
            routes = self.routes_seen_by_aigw(dep.gateway)
            sidecars = [p.sidecar for p in dep.pods]
            # Stamp the template with the ext-proc config hash once routes exist.
            needs_stamp = routes and MARKER not in dep.annotations
            # "Routes exist" and "every pod has the sidecar" disagree, or pods are
            # mixed (v1.0.0 annotateGatewayPods: hasSideCar needs one with and
            # none without; a mix forces a rollout).
            has_sidecar = any(sidecars) and all(sidecars)
            mixed = any(sidecars) and not all(sidecars)
            mismatch = routes != has_sidecar or mixed
            if not (needs_stamp or mismatch):
                continue
            if needs_stamp:
                dep.annotations[MARKER] = "5d41402abc4b2a76"
            dep.uid += 1
            dep.annotations[UUID] = f"uuid-{dep.uid}"
            dep.change_template(self.now)
            self.rollouts += 1

    def _new_pod(self, dep: Deployment) -> Pod:
        self._pod_serial += 1
        # The webhook injects the sidecar only if it sees an effective route now.
        return Pod(
            name=f"{dep.name}-{self._pod_serial}",
            template=dep.template,
            created=self.now,
            sidecar=self.routes_seen_by_aigw(dep.gateway),
        )

    def _roll(self, dep: Deployment) -> None:
        """The Deployment controller: RollingUpdate, maxSurge and maxUnavailable 25%."""
        dep.terminating = [(pod, until) for pod, until in dep.terminating if until > self.now]
        if dep.observed_generation < dep.generation and self.now >= dep.observed_at:
            dep.observed_generation = dep.generation
        if dep.observed_generation < dep.generation:
            return
        surge = max(1, math.ceil(dep.replicas * 0.25))
        max_unavailable = math.floor(dep.replicas * 0.25)
        current = [p for p in dep.pods if p.template == dep.template]
        old = [p for p in dep.pods if p.template != dep.template]
        while len(current) < dep.replicas and len(dep.pods) < dep.replicas + surge:
            pod = self._new_pod(dep)
            dep.pods.append(pod)
            current.append(pod)
        # Old pods go while enough pods stay available; unavailable ones first.
        old.sort(key=lambda p: (p.available(self.now), p.created))
        for pod in old:
            available = sum(p.available(self.now) for p in dep.pods)
            if pod.available(self.now) and available - 1 < dep.replicas - max_unavailable:
                break
            dep.terminate(pod, self.now)
        while not old and len(dep.pods) > dep.replicas:
            dep.terminate(min(dep.pods, key=lambda p: (p.available(self.now), -p.created)), self.now)

    # --- faults -------------------------------------------------------------------------

    def evict_one(self, gateway: tuple[str, str], min_available: int) -> bool:
        """Evict the oldest available pod of the gateway, if the PDB allows it."""
        for dep in self.deployments.values():
            if dep.gateway != gateway:
                continue
            available = [p for p in dep.pods if p.available(self.now)]
            if len(available) - 1 < min_available or not available:
                return False
            dep.terminate(min(available, key=lambda p: p.created), self.now)
            self.changed.add(("Deployment", dep.namespace, dep.name))
            return True
        return False

    def serve_model(self, model: str, namespace: str, name: str, host: str) -> None:
        """A model server for the model, reached at `host`: one replica, starting now."""
        self.workloads[(namespace, name)] = Workload(namespace, name, 1, [self.now], loaded=(model,))
        self.model_workload[model] = (namespace, name)
        self.hosts[host] = (namespace, name)
        self.changed.add(("Deployment", namespace, name))

    def load(self, namespace: str, name: str, models: tuple[str, ...]) -> None:
        """The server swaps what it has loaded (nothing in the API says so)."""
        self.workloads[(namespace, name)].loaded = models

    def get_url(self, url: str) -> tuple[int, str] | None:
        """A GET of a model server's URL, as a probe sends it: (status, body), or None where
        nothing answers (no such host, or no replica available: connection refused)."""
        parts = urlsplit(url)
        server = self.workloads.get(self.hosts.get(parts.hostname or "", ("", "")))
        if server is None or server.available(self.now) == 0:
            return None
        if parts.path != "/v1/models":
            return 404, '{"detail": "Not Found"}'
        return 200, json.dumps(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in server.loaded]}
        )

    def scale_workload(self, namespace: str, name: str, replicas: int) -> None:
        workload = self.workloads[(namespace, name)]
        workload.replicas = replicas
        workload.generation += 1
        workload.started = workload.started[:replicas] + [self.now] * max(0, replicas - len(workload.started))
        self.changed.add(("Deployment", namespace, name))

    def model_server_down(self, model: str) -> bool:
        """The model's server cannot answer it: no replica available, or another model loaded."""
        server = self.workloads.get(self.model_workload.get(model, ("", "")))
        return server is not None and (server.available(self.now) == 0 or model not in server.loaded)

    def crash_pods(self, gateway: tuple[str, str], seconds: int) -> None:
        """Every Envoy pod of the gateway crashes and is not ready again for `seconds`."""
        for dep in self.deployments.values():
            if dep.gateway == gateway:
                for pod in dep.pods:
                    pod.crashed_until = self.now + seconds
                self.changed.add(("Deployment", dep.namespace, dep.name))

    def upgrade_envoy(self, gateway: tuple[str, str], image: str) -> None:
        for dep in self.deployments.values():
            if dep.gateway == gateway and dep.image != image:
                dep.image = image
                dep.change_template(self.now)
                self.rollouts += 1
                # A change made between steps: the API server bumped the generation now.
                self.changed.add(("Deployment", dep.namespace, dep.name))

    # --- traffic ----------------------------------------------------------------------------

    def request(self, gateway: tuple[str, str], model: str, traffic: Traffic) -> Served:
        """One request for the model to every pod that takes traffic."""
        routed = model in self.models(gateway)
        pods = [
            p
            for dep in self.deployments.values()
            if dep.gateway == gateway
            for p in [*dep.pods, *(pod for pod, _ in dep.terminating)]
            if p.available(self.now)
        ]
        if not pods or gateway in self.broken_listeners:
            traffic.requests += 1
            traffic.unavailable += 1
            return Served(1, 0)
        ok = 0
        server = self.workloads.get(self.model_workload.get(model, ("", "")))
        for pod in pods:
            traffic.requests += 1
            if routed and server is not None and server.available(self.now) == 0:
                traffic.no_backend += 1  # the route works; nothing behind it answers
            elif routed and server is not None and model not in server.loaded:
                traffic.not_loaded += 1  # the server answers 404: it has another model loaded
            elif not routed:
                traffic.not_found += 1  # no route matches: Envoy answers before any filter
            elif not pod.sidecar:
                traffic.errors_500 += 1
            else:
                traffic.ok += 1
                ok += 1
        return Served(len(pods), ok)

    # --- the truth, for measuring how late conditions follow it -------------------------

    def gateway_serves(self, gateway: tuple[str, str]) -> bool:
        """What GatewayReady promises: its pods serve with the sidecar, on one settled template.

        Independent of the function: read from the pods, not from anything it computes.
        """
        if gateway in self.broken_listeners:
            return False
        for dep in self.deployments.values():
            if dep.gateway != gateway:
                continue
            every = [*dep.pods, *(pod for pod, _ in dep.terminating)]
            serving = [p for p in every if p.available(self.now)]
            return (
                bool(serving)
                and all(p.sidecar for p in serving)
                and dep.observed_generation >= dep.generation
                and all(p.template == dep.template for p in every)
            )
        return False
