"""Crossplane core, provider-kubernetes and this function, run out of cluster against the control plane.

- The function serves over mutual TLS, as Crossplane serves functions: its
  server certificate and Crossplane's client certificate share one CA.
- Crossplane core runs `core start` with webhooks off; its package manager
  leaves a Function annotated `crossplane.io/paused` alone, so the harness
  registers the function itself: a FunctionRevision whose status carries the
  function's endpoint and the composition capability.
- provider-kubernetes runs with `--enable-watches` (the argument the
  shipped DeploymentRuntimeConfig passes) and acts through a ProviderConfig
  holding a token of the `crossplane-system/provider-kubernetes` service
  account, so the RBAC in examples/install/rbac.yaml is what it may do.
- Crossplane resolves names through a hosts file of its own (a private
  mount namespace), where the function's Service name has two replicas'
  addresses, as a headless Service's DNS does: the replica fault
  (tests/real/scenarios_faults.py) points the FunctionRevision there.
- With `package=True` (make release-check) none of the above is written by
  hand: no function process, no paused Function, no XRDs or Compositions
  applied. The package manager installs them (tests/real/install.py), and
  Crossplane resolves the Function's Service through the cluster DNS.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.pki import CA
from tests.real import toolchain
from tests.real.controlplane import ControlPlane
from tests.real.kube import Kube, condition, wait
from tests.real.network import Lab
from tests.real.process import run
from tests.real.processes import PRIVATE_MOUNTS, Supervisor, free_port, port_open
from tests.real.versions import PROVIDER_HTTP, RUNNING_CROSSPLANE, RUNNING_PROVIDER
from tests.support import EXAMPLES, ROOT, load_yaml
from tools import release

# The Function's name: what Crossplane's package manager names it when the
# Configuration pulls it in (tools/release.py), and what the Compositions call.
FUNCTION = release.read().function_name
# Crossplane's arguments as the install example gives them to platform teams
# (its Helm values): the XR watch circuit breaker raised (v2.2: a burst of 50
# composed-resource updates, then one per 2 s, else the XR is reconciled only
# every 30 s for 5 minutes), which opens on an InferenceGateway: its observer
# Object changes with every change of the Envoy Deployment.
CROSSPLANE_ARGS = tuple(
    yaml.safe_load((EXAMPLES / "install" / "helm" / "crossplane-values.yaml").read_text())["args"]
)
# More of them for one run, to measure a flag before it is shipped (docs/operations.md, "Flags at
# scale"): FGR_CROSSPLANE_ARGS="--max-reconcile-rate=10" make scale.
EXTRA_CROSSPLANE_ARGS = tuple(os.environ.get("FGR_CROSSPLANE_ARGS", "").split())
# And provider-kubernetes' beside the shipped ones: FGR_PROVIDER_ARGS="--no-enable-server-side-apply"
# (kingpin's form of a false boolean; it refuses "--enable-server-side-apply=false" and exits).
EXTRA_PROVIDER_ARGS = tuple(os.environ.get("FGR_PROVIDER_ARGS", "").split())
CROSSPLANE_NS = "crossplane-system"
# FGR_OBSERVE_GATEWAY=0 runs the ModelRoute Composition with the Input's
# observeGateway: false, as docs/operations.md advises on Crossplane v2.4.
OBSERVE_GATEWAY = os.environ.get("FGR_OBSERVE_GATEWAY", "1") != "0"
# The package manager's FunctionRevision, and the endpoint it writes for a
# Function: its headless Service, dns:///<function>.<namespace>:9443
# (internal/controller/pkg/runtime, Crossplane v2.4.0); Crossplane dials it
# round_robin, waitForReady (internal/xfn/function_runner.go).
FUNCTION_REVISION = f"{FUNCTION}-local"
# The folder of the run's workdir holding Crossplane's client certificate (ca.crt, tls.crt, tls.key).
CLIENT_CERTS = "crossplane-client-tls"
FUNCTION_SERVICE = f"{FUNCTION}.{CROSSPLANE_NS}"
# The two replicas' addresses behind FUNCTION_SERVICE (loopback: no namespace needed).
FUNCTION_REPLICA_IPS = ("127.0.0.2", "127.0.0.3")
PROVIDER_SA = "provider-kubernetes"
# controller-runtime's default webhook port, which provider-kubernetes does not
# let one change; it serves it in its own network namespace (network.Lab).
PROVIDER_WEBHOOK_PORT = 9443


def module_dir(module: str, version: str) -> Path:
    return Path(run(["go", "env", "GOMODCACHE"]).strip()) / f"{module}@{version}"


def runtime_args(manifest: str) -> list[str]:
    """The arguments the DeploymentRuntimeConfig in examples/install/<manifest> passes a provider."""
    return next(
        c["args"]
        for d in load_yaml(EXAMPLES / "install" / manifest)
        if d["kind"] == "DeploymentRuntimeConfig"
        for c in d["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    )


def _crds(folder: Path) -> list[dict[str, Any]]:
    return [d for f in sorted(folder.glob("*.yaml")) for d in load_yaml(f)]


class CrossplaneStack:
    def __init__(
        self,
        cp: ControlPlane,
        kube: Kube,
        sup: Supervisor,
        workdir: Path,
        lab: Lab,
        *,
        log_calls: bool = False,
        package: bool = False,
    ) -> None:
        # Installed by Crossplane's package manager (tests/real/install.py), not by hand.
        self.package = package
        # A line per function call (DEBUG): fault scenarios count them to tell when Crossplane
        # calls again; other runs leave it off, as it costs every call (100 routes: many a second).
        self.log_calls = log_calls
        self.cp = cp
        self.lab = lab
        self.kube = kube
        self.sup = sup
        self.dir = workdir
        self.ca = CA("crossplane-root-ca", rsa_key=True)

    def start(self) -> None:
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CROSSPLANE_NS}})
        for crd in _crds(
            module_dir(RUNNING_CROSSPLANE.module, RUNNING_CROSSPLANE.version) / "cluster" / "crds"
        ):
            self.kube.apply(crd)
        for crd in _crds(module_dir(RUNNING_PROVIDER.module, RUNNING_PROVIDER.version) / "package" / "crds"):
            self.kube.apply(self._convert_through_provider(crd))
        self.kube.wait_crds_established()
        if self.package:
            self._package_manager_prerequisites()
        else:
            self._function()
        self._crossplane()
        self._provider()
        self._provider_http()
        if not self.package:
            self._apis()

    def _convert_through_provider(self, crd: dict) -> dict:  # type: ignore[type-arg]
        """A conversion webhook the package manager would point at the provider's Service, on loopback."""
        conversion = crd["spec"].get("conversion") or {}
        if conversion.get("strategy") == "Webhook":
            conversion["webhook"]["clientConfig"] = {
                "url": f"https://{self.lab.ip('provider-kubernetes')}:{PROVIDER_WEBHOOK_PORT}/convert",
                "caBundle": base64.b64encode(self.ca.pem).decode(),
            }
        return crd

    def _package_manager_prerequisites(self) -> None:
        """What `crossplane core init` and the Helm chart give the package manager, which the harness does not run.

        The root CA it signs each Function's server certificate with (the CA
        Crossplane's client certificate comes from), its ServiceAccount, the
        default DeploymentRuntimeConfig, and the default activation of every
        managed resource (the chart's provider.defaultActivations: ["*"]).
        """
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "crossplane-root-ca", "namespace": CROSSPLANE_NS},
                "type": "Opaque",
                "stringData": {"tls.crt": self.ca.pem.decode(), "tls.key": self.ca.key_pem.decode()},
            }
        )
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "crossplane", "namespace": CROSSPLANE_NS},
            }
        )
        self.kube.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1beta1",
                "kind": "DeploymentRuntimeConfig",
                "metadata": {"name": "default"},
                "spec": {},
            }
        )
        self.kube.apply(
            {
                "apiVersion": "apiextensions.crossplane.io/v1alpha1",
                "kind": "ManagedResourceActivationPolicy",
                "metadata": {"name": "default"},
                "spec": {"activate": ["*"]},
            }
        )

    def _function(self) -> None:
        certs = self.dir / "function-tls"
        # Named as Crossplane's own certificates name a function: its Service too.
        self.ca.write_leaf(
            certs, FUNCTION, sans=(FUNCTION_SERVICE, "localhost", "127.0.0.1", *FUNCTION_REPLICA_IPS)
        )
        port = free_port()
        self.function_endpoint = f"127.0.0.1:{port}"
        proc = self.sup.start(
            "function",
            [sys.executable, "-m", "function", "--tls-server-certs-dir", str(certs)],
            env={
                "ADDRESS": self.function_endpoint,
                "PYTHONPATH": str(ROOT),
                **({"DEBUG": "true"} if self.log_calls else {}),
            },
            ports=[port],
        )
        self.sup.wait_until(proc, "the function listening", lambda: port_open(port))

    def _crossplane(self) -> None:
        client_certs = self.dir / CLIENT_CERTS
        self.ca.write_leaf(client_certs, "crossplane")
        ports = [free_port() for _ in range(3)]
        hosts = self.dir / "crossplane-hosts"
        resolv = self.dir / "crossplane-resolv.conf"
        # Installed by the package manager, the Function's Service is the cluster DNS's to answer.
        replicas = () if self.package else FUNCTION_REPLICA_IPS
        hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {FUNCTION_SERVICE}\n" for ip in replicas))
        resolv.write_text(f"nameserver {self.lab.host_ip}\noptions ndots:1\n")
        self.sup.start(
            "crossplane",
            [
                *PRIVATE_MOUNTS,
                "sh",
                "-c",
                # Installed by the package manager, the Function's Service is the cluster DNS's to answer.
                'mount --bind "$0" /etc/hosts && { [ -z "$1" ] || mount --bind "$1" /etc/resolv.conf; } '
                '&& shift && exec "$@"',
                str(hosts),
                str(resolv) if self.package else "",
                str(toolchain.ensure(RUNNING_CROSSPLANE, "crossplane")),
                "core",
                "start",
                "--debug",
                *CROSSPLANE_ARGS,
                *EXTRA_CROSSPLANE_ARGS,
            ],
            env={
                # Go's own resolver, which reads every address a hosts file gives a name.
                "GODEBUG": "netdns=go",
                "KUBECONFIG": str(self.cp.kubeconfig),
                "POD_NAMESPACE": CROSSPLANE_NS,
                "TLS_CLIENT_CERTS_DIR": str(client_certs),
                "ENABLE_WEBHOOKS": "false",
                "WEBHOOK_PORT": str(ports[0]),
                "METRICS_PORT": str(ports[1]),
                "HEALTH_PROBE_PORT": str(ports[2]),
                "XPKG_CACHE_DIR": str(self._xpkg_cache()),
            },
            ports=ports,
        )
        if self.package:
            return
        # The package manager leaves a paused Function alone: the revision and
        # its status (where to dial, what it can do) are ours to write.
        this = release.read()
        package = f"{this.function}:{this.version}"
        self.kube.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {"name": FUNCTION, "annotations": {"crossplane.io/paused": "true"}},
                "spec": {"package": package},
            }
        )
        revision = FUNCTION_REVISION
        self.kube.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "FunctionRevision",
                "metadata": {
                    "name": revision,
                    "labels": {"pkg.crossplane.io/package": FUNCTION},
                    "annotations": {"crossplane.io/paused": "true"},
                },
                "spec": {"desiredState": "Active", "image": package, "revision": 1},
            }
        )
        self.kube.patch_status(
            "pkg.crossplane.io/v1",
            "FunctionRevision",
            revision,
            {"endpoint": self.function_endpoint, "capabilities": ["composition"]},
        )

    def _xpkg_cache(self) -> Path:
        # The package manager does not make its cache folder (in a pod it is an
        # emptyDir): without it every package failed to unpack with "io:
        # read/write on closed pipe" (make release-check, 2026-12-04).
        cache = self.dir / "xpkg-cache"
        cache.mkdir(parents=True, exist_ok=True)
        return cache

    def _provider(self) -> None:
        # The provider's identity for what it applies and observes: the
        # service account the shipped RBAC binds, through a token.
        # The namespaces the shipped RBAC binds roles in.
        for namespace in ("envoy-gateway-system", "platform"):
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        self.kube.apply_file(EXAMPLES / "install" / "rbac.yaml")
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": PROVIDER_SA, "namespace": CROSSPLANE_NS},
            }
        )
        token = self.kube.core.create_namespaced_service_account_token(
            name=PROVIDER_SA,
            namespace=CROSSPLANE_NS,
            body={"spec": {"expirationSeconds": 86400}},
        ).status.token
        kubeconfig = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": self.cp.server,
                            "certificate-authority-data": __import__("base64")
                            .b64encode(self.cp.ca.pem)
                            .decode(),
                        },
                    }
                ],
                "users": [{"name": PROVIDER_SA, "user": {"token": token}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": PROVIDER_SA}}],
                "current-context": "local",
            }
        )
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "provider-kubernetes-identity", "namespace": CROSSPLANE_NS},
                "stringData": {"kubeconfig": kubeconfig},
            }
        )
        self.kube.apply(
            {
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "ClusterProviderConfig",
                "metadata": {"name": "default"},
                "spec": {
                    "credentials": {
                        "source": "Secret",
                        "secretRef": {
                            "namespace": CROSSPLANE_NS,
                            "name": "provider-kubernetes-identity",
                            "key": "kubeconfig",
                        },
                    }
                },
            }
        )
        webhook_certs = self.dir / "provider-webhook-tls"
        self.ca.write_leaf(webhook_certs, "provider-kubernetes", sans=(self.lab.ip("provider-kubernetes"),))
        # controller-runtime's webhook server reads tls.crt and tls.key.
        health = free_port()
        # The arguments the shipped DeploymentRuntimeConfig passes.
        args = [*runtime_args("provider-kubernetes.yaml"), *EXTRA_PROVIDER_ARGS]
        self.sup.start(
            "provider-kubernetes",
            self.lab.inside(
                "provider-kubernetes",
                [str(toolchain.ensure(RUNNING_PROVIDER, "provider-kubernetes")), *args, "--debug"],
            ),
            env={
                "KUBECONFIG": str(self.cp.kubeconfig),
                "TLS_SERVER_CERTS_DIR": str(webhook_certs),
                "HEALTH_PROBE_BIND_ADDRESS": f"127.0.0.1:{health}",
            },
        )

    def _provider_http(self) -> None:
        """provider-http as examples/install/provider-http.yaml installs it: its CRDs, the
        ClusterProviderConfig the model checks use, and the process with the shipped arguments.
        It resolves backends' names through the cluster DNS (started with the data plane)."""
        for crd in _crds(module_dir(PROVIDER_HTTP.module, PROVIDER_HTTP.version) / "package" / "crds"):
            self.kube.apply(crd)
        self.kube.wait_crds_established()
        shipped = load_yaml(EXAMPLES / "install" / "provider-http.yaml")
        for doc in shipped:
            if doc["kind"] == "ClusterProviderConfig":
                self.kube.apply(doc)
        args = runtime_args("provider-http.yaml")
        resolv = self.dir / "provider-http-resolv.conf"
        resolv.write_text(f"nameserver {self.lab.host_ip}\noptions ndots:1\n")
        self.sup.start(
            "provider-http",
            self.lab.inside(
                "provider-http",
                [
                    *PRIVATE_MOUNTS,
                    "sh",
                    "-c",
                    'mount --bind "$0" /etc/resolv.conf && exec "$@"',
                    str(resolv),
                    str(toolchain.ensure(PROVIDER_HTTP, "provider-http")),
                    *args,
                    "--debug",
                ],
            ),
            env={"KUBECONFIG": str(self.cp.kubeconfig), "GODEBUG": "netdns=go"},
        )

    def _apis(self) -> None:
        configuration = EXAMPLES / "configuration"
        for xrd in sorted(configuration.glob("*-xrd.yaml")):
            self.kube.apply_file(xrd)
        for xrd in sorted(configuration.glob("*-xrd.yaml")):
            name = yaml.safe_load(xrd.read_text())["metadata"]["name"]
            wait(
                f"XRD {name} Established",
                lambda n=name: (
                    condition(
                        self.kube.get("apiextensions.crossplane.io/v1", "CompositeResourceDefinition", n),
                        "Established",
                    ).get("status")
                    == "True"
                ),
                timeout=90,
            )
        for composition in sorted(configuration.glob("*-composition.yaml")):
            self.kube.apply_file(composition, mutate=_route_input)
        self.kube.wait_crds_established()


def _route_input(composition: dict[str, Any]) -> None:
    """The ModelRoute Composition's Input as a platform team following examples/install sets it:
    modelCheckPollSeconds as provider-http's --poll there (so an answer it stops renewing expires in
    four of its polls), and observeGateway off where FGR_OBSERVE_GATEWAY=0 asks."""
    poll = next(
        a.removeprefix("--poll=") for a in runtime_args("provider-http.yaml") if a.startswith("--poll=")
    )
    assert poll.endswith("s"), poll
    for step in composition["spec"]["pipeline"]:
        if step["input"].get("compose") == "ModelRoute":
            step["input"]["modelCheckPollSeconds"] = int(poll.removesuffix("s"))
            if not OBSERVE_GATEWAY:
                step["input"]["observeGateway"] = False
