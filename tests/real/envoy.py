"""Envoy Gateway (Kubernetes provider) and Envoy AI Gateway's controller, run out of cluster.

- Envoy Gateway reads its xDS certificates from the fixed path /certs, so it
  runs in a mount namespace of its own where a folder of this run's
  certificates is bound over /certs.
- Envoy AI Gateway's controller exits at start unless its
  MutatingWebhookConfiguration exists; the harness creates it pointing at the
  controller's webhook server by URL, so the API server calls it for every
  Envoy pod created and the ext-proc container is injected into the pod spec
  for real.
- Envoy Gateway runs in a network namespace of its own (network.Lab) and
  calls Envoy AI Gateway's extension server, as upstream's
  envoy-gateway-values.yaml configures it, at the host's address.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.pki import CA
from tests.real import toolchain
from tests.real.crossplane import module_dir
from tests.real.kube import Kube, condition, wait
from tests.real.network import Lab
from tests.real.process import ConformanceError
from tests.real.processes import PRIVATE_MOUNTS, Liveness, Supervisor, port_open
from tests.real.versions import ENVOY_AI_GATEWAY, ENVOY_GATEWAY, Component
from tests.support import load_yaml

EG_NS = "envoy-gateway-system"
AIGW_NS = "envoy-ai-gateway-system"
# Envoy Gateway's health probes (/healthz, /readyz): its manager's healthProbeBindAddress
# (internal/provider/kubernetes/kubernetes.go, v1.8.3).
EG_HEALTH_PORT = 8081
GATEWAY_CLASS = "envoy-ai-gateway"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
# Envoy AI Gateway's controller (and webhook) process, by its Supervisor name.
AIGW_CONTROLLER = "envoy-ai-gateway-controller"
AIGW_WEBHOOK_PORT = 9443
AIGW_EXTENSION_PORT = 1063


def extproc_image(component: Component) -> str:
    """The ext-proc image the webhook injects, tagged with the release that runs.

    kwok runs no container; the data plane reads the tag to run the ext-proc
    built from that release, so pods injected before an upgrade of Envoy AI
    Gateway keep the old ext-proc and pods injected after it get the new one.
    """
    return f"docker.io/envoyproxy/ai-gateway-extproc:{component.version}"


def envoy_gateway_config(extension_host: str) -> dict[str, Any]:
    """EnvoyGateway configuration: upstream's values for AI Gateway, extension server on our address."""
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyGateway",
        "gateway": {"controllerName": CONTROLLER_NAME},
        "logging": {"level": {"default": "info"}},
        "provider": {"type": "Kubernetes"},
        "extensionApis": {"enableEnvoyPatchPolicy": True, "enableBackend": True},
        "extensionManager": {
            "hooks": {
                "xdsTranslator": {
                    "translation": {
                        "listener": {"includeAll": True},
                        "route": {"includeAll": True},
                        "cluster": {"includeAll": True},
                        "secret": {"includeAll": True},
                    },
                    "post": ["Translation", "Cluster", "Route"],
                }
            },
            "service": {"fqdn": {"hostname": extension_host, "port": AIGW_EXTENSION_PORT}},
        },
    }


def ai_gateway_crds(component: Component) -> Path:
    """Envoy AI Gateway's CRDs at the release that runs: upstream's manifests, or generated from an archive."""
    if component.archive is not None:
        generated = toolchain.archive_crds(component)
        # The kinds shared/crds/ holds from upstream's release manifests must
        # come out the same, or the generated rest cannot be trusted either.
        for upstream in sorted((toolchain.shared_dir() / "crds" / "envoy-ai-gateway").glob("*.yaml")):
            ours = load_yaml(generated / upstream.name)
            if [d["spec"] for d in ours] != [d["spec"] for d in load_yaml(upstream)]:
                raise RuntimeError(f"controller-gen wrote {upstream.name} unlike upstream's release manifest")
        return generated
    return (
        module_dir(component.module, component.version)
        / "manifests"
        / "charts"
        / "ai-gateway-crds-helm"
        / "templates"
    )


class EnvoyStack:
    def __init__(
        self,
        kube: Kube,
        sup: Supervisor,
        workdir: Path,
        kubeconfig: Path,
        lab: Lab,
        *,
        ai_gateway: Component = ENVOY_AI_GATEWAY,
    ) -> None:
        self.ai_gateway = ai_gateway
        self.kube = kube
        self.sup = sup
        self.dir = workdir
        self.kubeconfig = kubeconfig
        self.lab = lab
        self.ca = CA("fgr-envoy-ca")

    def start(self) -> None:
        eg = (
            module_dir(ENVOY_GATEWAY.module, ENVOY_GATEWAY.version)
            / "charts"
            / "gateway-helm"
            / "charts"
            / "crds"
            / "crds"
        )
        self._apply_crds([eg / "gatewayapi-crds.yaml", *(eg / "generated").glob("*.yaml")])
        self._apply_crds(ai_gateway_crds(self.ai_gateway).glob("*.yaml"))
        for ns in (EG_NS, AIGW_NS):
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self._ai_gateway()
        self._envoy_gateway()
        self.kube.apply(
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": GATEWAY_CLASS},
                "spec": {"controllerName": CONTROLLER_NAME},
            }
        )
        wait(
            f"GatewayClass {GATEWAY_CLASS} Accepted",
            lambda: (
                condition(
                    self.kube.get("gateway.networking.k8s.io/v1", "GatewayClass", GATEWAY_CLASS), "Accepted"
                ).get("status")
                == "True"
            ),
            timeout=90,
        )

    def upgrade_ai_gateway(self, to: Component) -> None:
        """Envoy AI Gateway upgraded in place, as `helm upgrade` does: its CRDs first, then
        the controller (and its webhook) replaced by the new release's."""
        # Built before the old controller stops: its webhook (failurePolicy Fail) is down meanwhile.
        toolchain.ensure(to, AIGW_CONTROLLER)
        self._apply_crds(ai_gateway_crds(to).glob("*.yaml"))
        self.sup.stop(self.sup.find(AIGW_CONTROLLER))
        self.ai_gateway = to
        self._ai_gateway()

    def _apply_crds(self, files: Iterable[Path]) -> None:
        for f in sorted(files):
            for crd in load_yaml(f):
                self.kube.apply(crd)
        self.kube.wait_crds_established()

    def _ai_gateway(self) -> None:
        certs = self.dir / "aigw-tls"
        self.ca.write_leaf(certs, "ai-gateway-controller")
        self.kube.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": f"envoy-ai-gateway-gateway-pod-mutator.{AIGW_NS}"},
                "webhooks": [
                    {
                        "name": f"ai-gateway-controller.{AIGW_NS}.svc.cluster.local",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{AIGW_WEBHOOK_PORT}/mutate",
                            "caBundle": base64.b64encode(self.ca.pem).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                            }
                        ],
                        "objectSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "envoy-gateway"}},
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 10,
                        "failurePolicy": "Fail",
                    }
                ],
            }
        )
        proc = self.sup.start(
            AIGW_CONTROLLER,
            [
                str(toolchain.ensure(self.ai_gateway, "envoy-ai-gateway-controller")),
                f"-envoyGatewayNamespace={EG_NS}",
                f"-tlsCertDir={certs}",
                "-enableLeaderElection=false",
                f"-webhookPort={AIGW_WEBHOOK_PORT}",
                f"-port=:{AIGW_EXTENSION_PORT}",
                f"-extProcImage={extproc_image(self.ai_gateway)}",
            ],
            env={"KUBECONFIG": str(self.kubeconfig), "POD_NAMESPACE": AIGW_NS},
            ports=[AIGW_WEBHOOK_PORT, AIGW_EXTENSION_PORT, 8080],
        )
        self.sup.wait_until(
            proc, "Envoy AI Gateway's webhook listening", lambda: port_open(AIGW_WEBHOOK_PORT), timeout=90
        )

    def _envoy_secret(self) -> None:
        """The Secret `envoy` Envoy Gateway's certgen job makes: the proxies' xDS client certificate."""
        cert, key = self.ca.leaf("envoy", sans=("envoy",))
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "envoy", "namespace": EG_NS},
                "type": "kubernetes.io/tls",
                "data": {
                    "ca.crt": base64.b64encode(self.ca.pem).decode(),
                    "tls.crt": base64.b64encode(cert).decode(),
                    "tls.key": base64.b64encode(key).decode(),
                },
            }
        )

    def _envoy_gateway(self) -> None:
        self._envoy_secret()
        # certgen's other Secret: the HMAC key of OIDC cookies (Envoy Gateway logs an error per
        # reconcile without it, and its wasm cache does not start).
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "envoy-oidc-hmac", "namespace": EG_NS},
                "data": {"hmac-secret": base64.b64encode(os.urandom(32)).decode()},
            }
        )
        if shutil.which("unshare") is None:
            raise ConformanceError("no unshare (util-linux): Envoy Gateway needs a private /certs")
        certs = self.dir / "eg-certs"
        self.ca.write_leaf(
            certs,
            "envoy-gateway",
            sans=("envoy-gateway", f"envoy-gateway.{EG_NS}", f"envoy-gateway.{EG_NS}.svc", "127.0.0.1"),
        )
        config = self.dir / "envoy-gateway.yaml"
        config.write_text(yaml.safe_dump(envoy_gateway_config(self.lab.host_ip)))
        # Envoy Gateway's xDS server reads /certs; a mount point must exist to bind over.
        Path("/certs").mkdir(exist_ok=True)
        proc = self.sup.start(
            "envoy-gateway",
            self.lab.inside(
                "envoy-gateway",
                [
                    *PRIVATE_MOUNTS,
                    "sh",
                    "-c",
                    'mount --bind "$0" /certs && exec "$@"',
                    str(certs),
                    str(toolchain.ensure(ENVOY_GATEWAY, "envoy-gateway")),
                    "server",
                    f"--config-path={config}",
                ],
            ),
            env={"KUBECONFIG": str(self.kubeconfig), "ENVOY_GATEWAY_NAMESPACE": EG_NS},
        )
        self.sup.wait_until(
            proc,
            "Envoy Gateway's xDS server listening",
            lambda: port_open(18000, self.lab.ip("envoy-gateway")),
            timeout=90,
        )
        # The Helm chart's livenessProbe and grace (charts/gateway-helm/templates/
        # envoy-gateway-deployment.yaml, v1.8.3): after losing its leader lease Envoy Gateway goes
        # on running, reconciling nothing, and its manager's health server on :8081 is gone; a
        # kubelet restarts it 40 to 60 s later (50 to 70 s if it ignores SIGTERM).
        self.sup.probe_liveness(
            "envoy-gateway",
            Liveness(
                f"http://{self.lab.ip('envoy-gateway')}:{EG_HEALTH_PORT}/healthz",
                initial_delay_s=15,
                period_s=20,
                grace_s=10,
            ),
        )
