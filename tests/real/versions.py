"""Every upstream component the real-component checks build.

The versions come from `versions.env` at the root, the one pin the Makefile
and the kind suite read too. Each component is built from the Go module proxy
through a wrapper module under `tests/real/modules/<name>/` whose go.sum fixes
every dependency, so a build is the same on every machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PINS_FILE = Path(__file__).resolve().parents[2] / "versions.env"


def read_pins(path: Path = PINS_FILE) -> dict[str, str]:
    """`NAME=value` lines of a shell-style env file; comments and blank lines skipped."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            if not sep or not value:
                raise ValueError(f"{path.name}: not NAME=value: {line!r}")
            pins[name.strip()] = value.strip()
    return pins


PINS = read_pins()


@dataclass(frozen=True)
class Component:
    name: str  # the wrapper module's folder under tests/real/modules/
    module: str
    version: str
    # binary name -> Go package path (relative, ./cmd/..., when built from an archive)
    binaries: dict[str, str]
    # A release the Go module proxy refuses: its public source at the tag, as
    # shared/upstream/<archive> with <archive>.sha256 beside it. Built from the
    # extracted tree; its dependencies still come from the module proxy.
    archive: str | None = None
    # The Go variable a release build stamps with the version (-ldflags -X), where
    # the component reads its own version: Crossplane's package manager checks
    # each package's spec.crossplane.version against it, and an unstamped core
    # refuses every package that sets one.
    stamp: str | None = None


# The Crossplane CLI users install: its render hands rendering to a core
# binary (`crossplane internal render`, given with --crossplane-binary), which
# needs no Docker; validate is `crossplane resource validate`.
CROSSPLANE_CLI = Component(
    name="crossplane-cli",
    module="github.com/crossplane/cli/v2",
    version=PINS["CROSSPLANE_CLI_VERSION"],
    binaries={"crossplane-cli": "github.com/crossplane/cli/v2/cmd/crossplane"},
)

# Crossplane core, the control plane the integration runs. From v2.3 the CLI
# is a module of its own, so the core's wrapper module builds only the core.
CROSSPLANE = Component(
    name="crossplane-core",
    module="github.com/crossplane/crossplane/v2",
    version=PINS["CROSSPLANE_VERSION"],
    binaries={"crossplane": "github.com/crossplane/crossplane/v2/cmd/crossplane"},
    # As upstream's release build stamps it (nix/build.nix, v2.4.0).
    stamp="github.com/crossplane/crossplane-runtime/v2/pkg/version.version",
)

# The oldest Crossplane supported, and its CLI: v2.2.x is the last line whose
# CLI (cmd/crank) renders in-process (v2.3+ hands rendering to a core binary);
# cmd/crossplane in the same module is that release's core (FGR_STACK=oldest).
CROSSPLANE_OLDEST = Component(
    name="crossplane",
    module="github.com/crossplane/crossplane/v2",
    version=PINS["CROSSPLANE_OLDEST_VERSION"],
    binaries={
        "crank": "github.com/crossplane/crossplane/v2/cmd/crank",
        "crossplane": "github.com/crossplane/crossplane/v2/cmd/crossplane",
    },
)

# The control plane for the real run: Kubernetes 1.35 reports
# status.terminatingReplicas (DeploymentReplicaSetTerminatingReplicas, beta and
# on by default), which GatewayReady reads. Built through our own two-line
# mains because k8s.io/kubernetes replaces its staging modules locally.
_K8S = "function-gateway-readiness/tests/real/modules/kubernetes/cmd"
KUBERNETES = Component(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=PINS["KUBERNETES_VERSION"],
    binaries={
        "kube-apiserver": f"{_K8S}/kube-apiserver",
        "kube-controller-manager": f"{_K8S}/kube-controller-manager",
        "kube-scheduler": f"{_K8S}/kube-scheduler",
    },
)

# Kubernetes 1.31+ needs etcd 3.5.11 or newer (Debian's 3.4 is too old).
ETCD = Component(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=PINS["ETCD_VERSION"],
    binaries={"etcd": "function-gateway-readiness/tests/real/modules/etcd/cmd/etcd"},
)

# Fake nodes and pod status: Deployments roll out and pods terminate for real,
# with no kubelet and no container runtime.
KWOK = Component(
    name="kwok",
    module="sigs.k8s.io/kwok",
    version=PINS["KWOK_VERSION"],
    binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
)

# From v1.2.0 the provider dry-runs a server-side apply even for Observe-only
# Objects (the RBAC it needs is in examples/install/rbac.yaml). v1.1.0 is
# refused by the Go module proxy.
PROVIDER_KUBERNETES = Component(
    name="provider-kubernetes",
    module="github.com/crossplane-contrib/provider-kubernetes",
    version=PINS["PROVIDER_KUBERNETES_VERSION"],
    binaries={"provider-kubernetes": "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"},
)

# The oldest provider-kubernetes supported (FGR_STACK=oldest), through its own wrapper module.
PROVIDER_KUBERNETES_OLDEST = Component(
    name="provider-kubernetes-oldest",
    module=PROVIDER_KUBERNETES.module,
    version=PINS["PROVIDER_KUBERNETES_OLDEST_VERSION"],
    binaries=PROVIDER_KUBERNETES.binaries,
)

# Its observe-only Request GETs a backend's /v1/models every --poll
# (backends[].modelCheck, issue #30); v1.0.13 added the namespaced kinds.
PROVIDER_HTTP = Component(
    name="provider-http",
    module="github.com/crossplane-contrib/provider-http",
    version=PINS["PROVIDER_HTTP_VERSION"],
    binaries={"provider-http": "github.com/crossplane-contrib/provider-http/cmd/provider"},
)

ENVOY_GATEWAY = Component(
    name="envoy-gateway",
    module="github.com/envoyproxy/gateway",
    version=PINS["ENVOY_GATEWAY_VERSION"],
    binaries={"envoy-gateway": "github.com/envoyproxy/gateway/cmd/envoy-gateway"},
)

# v1.1.0 writes the pod-template marker GatewayReady rests on
# (aigateway.envoyproxy.io/extproc-config-hash). The Go module proxy refuses
# it, so it is built from its public source in shared/upstream/.
ENVOY_AI_GATEWAY = Component(
    name="envoy-ai-gateway",
    module="github.com/envoyproxy/ai-gateway",
    version=PINS["ENVOY_AI_GATEWAY_VERSION"],
    binaries={
        "envoy-ai-gateway-controller": "./cmd/controller",
        # The standalone runner: Envoy Gateway (file provider, host
        # infrastructure), the extension server and ext-proc in one process,
        # running the Envoy binary it finds in its data home (never fetched).
        "aigw": "./cmd/aigw",
        # The external processor the webhook injects into every Envoy pod; the
        # data plane runs it beside each pod's Envoy.
        "extproc": "./cmd/extproc",
    },
    archive=f"envoy-ai-gateway-{PINS['ENVOY_AI_GATEWAY_VERSION']}.tar.gz",
)

# The oldest Envoy AI Gateway supported: the newest the module proxy serves,
# built through its wrapper module. It writes no marker (docs/design.md, Limitations).
ENVOY_AI_GATEWAY_OLDEST = Component(
    name="envoy-ai-gateway",
    module="github.com/envoyproxy/ai-gateway",
    version=PINS["ENVOY_AI_GATEWAY_OLDEST_VERSION"],
    binaries={
        "envoy-ai-gateway-controller": "github.com/envoyproxy/ai-gateway/cmd/controller",
        "aigw": "github.com/envoyproxy/ai-gateway/cmd/aigw",
        "extproc": "github.com/envoyproxy/ai-gateway/cmd/extproc",
    },
)

# Writes the CRDs of a component built from an archive that has no manifests
# (Envoy AI Gateway v1.1.0), at the version its upstream CRDs name
# (controller-gen.kubebuilder.io/version in shared/crds/envoy-ai-gateway/).
CONTROLLER_TOOLS = Component(
    name="controller-tools",
    module="sigs.k8s.io/controller-tools",
    version=PINS["CONTROLLER_TOOLS_VERSION"],
    binaries={"controller-gen": "sigs.k8s.io/controller-tools/cmd/controller-gen"},
)


# The OCI registry make release-check runs on loopback: the packages are pushed
# there and Crossplane's package manager installs them from there.
REGISTRY = Component(
    name="registry",
    module="github.com/google/go-containerregistry",
    version=PINS["GO_CONTAINERREGISTRY_VERSION"],
    binaries={"registry": "github.com/google/go-containerregistry/cmd/registry"},
)


# Checks the forge's workflows (.github/workflows/): make workflows.
ACTIONLINT = Component(
    name="actionlint",
    module="github.com/rhysd/actionlint",
    version=PINS["ACTIONLINT_VERSION"],
    binaries={"actionlint": "github.com/rhysd/actionlint/cmd/actionlint"},
)


# The stack the integration runs: the newest (by default), or with
# FGR_STACK=oldest the oldest supported (Crossplane, provider-kubernetes, Envoy AI Gateway).
OLDEST_STACK = os.environ.get("FGR_STACK") == "oldest"
RUNNING_CROSSPLANE = CROSSPLANE_OLDEST if OLDEST_STACK else CROSSPLANE
RUNNING_PROVIDER = PROVIDER_KUBERNETES_OLDEST if OLDEST_STACK else PROVIDER_KUBERNETES
RUNNING_AI_GATEWAY = ENVOY_AI_GATEWAY_OLDEST if OLDEST_STACK else ENVOY_AI_GATEWAY
