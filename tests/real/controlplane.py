"""A Kubernetes control plane as local processes: etcd, API server, controller manager, scheduler, kwok.

The Deployment and ReplicaSet controllers and garbage collection are the real
ones (kube-controller-manager); kwok fakes the nodes and the pods' lifecycle,
so Deployments really roll out one pod at a time and a deleted pod really
terminates, with no kubelet and no container runtime. Everything listens on
loopback, on ports picked free at start.
"""

from __future__ import annotations

import ssl
import textwrap
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.pki import CA
from tests.real import toolchain
from tests.real.processes import Supervisor, free_port
from tests.real.versions import ETCD, KUBERNETES, KWOK

# Seconds from a pod's creation to Ready, and from its deletion to gone: a
# rollout of two pods takes visible time, and a deleted pod drains.
POD_START_MS = 3000
POD_DRAIN_MS = 8000
# The ClusterIP range; the API server's own Service takes its first address.
SERVICE_CIDR = "10.96.0.0/16"
NODES = ("kwok-node-0", "kwok-node-1")
# The InternalIP kwok gives every node: Envoy Gateway publishes it as a
# NodePort Gateway's address, and the data plane opens node ports there.
NODE_IP = "127.0.0.1"


@dataclass(frozen=True)
class Credentials:
    server: str
    ca: Path
    cert: Path
    key: Path

    def kubeconfig(self, path: Path, user: str = "admin") -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {"server": self.server, "certificate-authority": str(self.ca)},
                        }
                    ],
                    "users": [
                        {
                            "name": user,
                            "user": {"client-certificate": str(self.cert), "client-key": str(self.key)},
                        }
                    ],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
                    "current-context": "local",
                }
            )
        )
        return path


# Envoy pods run for real (tests/real/dataplane.py): kwok marks them Ready
# only once the data plane, playing the kubelet, has seen every readiness
# probe pass and says so with this annotation.
ENVOY_POD = (
    "{key: '.metadata.labels[\"app.kubernetes.io/managed-by\"]', operator: In, values: [envoy-gateway]}"
)
NOT_ENVOY_POD = (
    "{key: '.metadata.labels[\"app.kubernetes.io/managed-by\"]', operator: NotIn, values: [envoy-gateway]}"
)
PROBED = '{key: \'.metadata.annotations["fgr.test/containers-ready"]\', operator: In, values: ["true"]}'
NOT_READY = (
    '{key: \'.status.conditions.[] | select( .type == "Ready" ) | .status\', operator: In, values: ["False"]}'
)


def _pod_status(ready: bool) -> str:
    """The status kwok writes: Running with an address, Ready or not (a kubelet's first status)."""
    r = '"True"' if ready else '"False"'
    return f"""\
              {{{{ $now := Now }}}}
              conditions:
              - {{type: Initialized, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
              - {{type: PodScheduled, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
              - {{type: ContainersReady, status: {r}, lastTransitionTime: {{{{ $now | Quote }}}}}}
              - {{type: Ready, status: {r}, lastTransitionTime: {{{{ $now | Quote }}}}}}
              containerStatuses:
              {{{{ range .spec.containers }}}}
              - name: {{{{ .name | Quote }}}}
                image: {{{{ .image | Quote }}}}
                ready: {"true" if ready else "false"}
                restartCount: 0
                state: {{running: {{startedAt: {{{{ $now | Quote }}}}}}}}
              {{{{ end }}}}
              hostIP: {{{{ NodeIPWith .spec.nodeName | Quote }}}}
              podIP: {{{{ PodIPWith .spec.nodeName false ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}}}
              phase: Running
              startTime: {{{{ $now | Quote }}}}"""


def _stage(name: str, expressions: list[str], next_: str, delay_ms: int | None = None) -> str:
    """One kwok Stage of pods: when every expression matches (after delay_ms), apply next_."""
    matches = "".join(f"\n            - {e}" for e in expressions)
    delay = f"\n          delay: {{durationMilliseconds: {delay_ms}}}" if delay_ms is not None else ""
    return f"""\
        apiVersion: kwok.x-k8s.io/v1alpha1
        kind: Stage
        metadata:
          name: {name}
        spec:
          resourceRef: {{apiGroup: v1, kind: Pod}}
          selector:
            matchExpressions:{matches}{delay}
          next:{next_}
"""


def _status(ready: bool) -> str:
    return "\n            statusTemplate: |\n" + _pod_status(ready)


ALIVE = "{key: .metadata.deletionTimestamp, operator: DoesNotExist}"
SCHEDULED = "{key: .spec.nodeName, operator: Exists}"
NOT_STARTED = "{key: .status.podIP, operator: DoesNotExist}"
STARTED = "{key: .status.podIP, operator: Exists}"


def _kwok_stages() -> str:
    """Pod stages: Ready POD_START_MS after scheduling (Envoy pods: once probed), gone POD_DRAIN_MS after deletion."""
    stages = [
        _stage("pod-ready", [ALIVE, SCHEDULED, NOT_STARTED, NOT_ENVOY_POD], _status(True), POD_START_MS),
        _stage("envoy-pod-running", [ALIVE, SCHEDULED, NOT_STARTED, ENVOY_POD], _status(False)),
        _stage("envoy-pod-ready", [ALIVE, STARTED, ENVOY_POD, PROBED, NOT_READY], _status(True)),
        _stage(
            "pod-delete",
            [
                "{key: .metadata.deletionTimestamp, operator: Exists}",
                "{key: .metadata.finalizers, operator: DoesNotExist}",
            ],
            " {delete: true}",
            POD_DRAIN_MS,
        ),
    ]
    return textwrap.dedent("        ---\n".join(stages))


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, on loopback."""

    def __init__(self, workdir: Path, supervisor: Supervisor, host: str = "127.0.0.1") -> None:
        # The API server's address: loopback, or the host side of the run's
        # private network (network.Lab), which every process here can reach.
        self.host = host
        self.dir = workdir
        self.sup = supervisor
        self.ca = CA("fgr-cluster-ca")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_file = self.dir / "ca.crt"
        self.ca_file.write_bytes(self.ca.pem)
        self.admin = self._client_cert("admin", "system:masters")
        self.kubeconfig = self.admin.kubeconfig(self.dir / "admin.kubeconfig")

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.apiserver_port}"

    def _client_cert(self, user: str, group: str | None = None) -> Credentials:
        cert, key = self.ca.leaf(user, organization=group)
        folder = self.dir / "users" / user
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tls.crt").write_bytes(cert)
        (folder / "tls.key").write_bytes(key)
        if not hasattr(self, "apiserver_port"):
            self.apiserver_port = free_port()
        return Credentials(self.server, self.ca_file, folder / "tls.crt", folder / "tls.key")

    def start(self) -> None:
        self._etcd()
        self._apiserver()
        self._controller_manager()
        self._scheduler()
        self._kwok()

    def _etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self.sup.start(
            "etcd",
            [
                str(toolchain.ensure(ETCD, "etcd")),
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throwaway store: speed over durability
            ],
            ports=[client, peer],
        )
        self.sup.wait_until(
            proc,
            "etcd healthy",
            lambda: b"true" in urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1).read(),  # noqa: S310 - loopback
        )

    def _apiserver(self) -> None:
        serving = self.dir / "apiserver"
        self.ca.write_leaf(
            serving,
            "kube-apiserver",
            sans=(
                self.host,
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key = self.dir / "sa.key"
        sa_pub = self.dir / "sa.pub"
        sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        self.sa_key = sa_key
        proc = self.sup.start(
            "kube-apiserver",
            [
                str(toolchain.ensure(KUBERNETES, "kube-apiserver")),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={self.host}",
                f"--advertise-address={self.host}",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={serving / 'tls.crt'}",
                f"--tls-private-key-file={serving / 'tls.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
            ],
            ports=[self.apiserver_port],
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        self.sup.wait_until(
            proc,
            "the API server ready",
            lambda: urllib.request.urlopen(f"{self.server}/readyz", context=context, timeout=2).status == 200,  # noqa: S310
            timeout=90,
        )

    def _controller_manager(self) -> None:
        port = free_port()
        self.sup.start(
            "kube-controller-manager",
            [
                str(toolchain.ensure(KUBERNETES, "kube-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=false",
                # Garbage collection and Deployments quickly, as a busy cluster would not.
                "--concurrent-deployment-syncs=5",
            ],
            ports=[port],
        )

    def _scheduler(self) -> None:
        port = free_port()
        self.sup.start(
            "kube-scheduler",
            [
                str(toolchain.ensure(KUBERNETES, "kube-scheduler")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
            ports=[port],
        )

    def _kwok(self) -> None:
        config = self.dir / "kwok.yaml"
        config.write_text(_kwok_stages())
        self.sup.start(
            "kwok",
            [
                str(toolchain.ensure(KWOK, "kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.244.0.1/16",
                f"--node-ip={NODE_IP}",
                "--node-lease-duration-seconds=40",
            ],
        )
