"""Crossplane's package manager installs this project from a registry, as a platform team does (make release-check).

- A registry (go-containerregistry's, versions.env) on loopback holds three
  packages under the paths they are published under: the Function package
  with its runtime image embedded (`make image`), the Configuration, and
  provider-kubernetes built from its released module's `package/` folder.
- An ImageConfig rewrites the published prefix to that registry, as a
  platform team mirrors packages; nothing of ours names the local registry.
- `crossplane xpkg install configuration` (the CLI users run) installs the
  Configuration; Crossplane resolves the Function and the provider from the
  registry, writes the XRDs and Compositions, and creates the Function's
  runtime Deployment. The data plane runs that pod's container as the image
  the package carries (podman, tests/real/dataplane.py), with the server
  certificate Crossplane signed, and Crossplane dials it through its
  headless Service's name (tests/real/dns.py).
- provider-kubernetes' package carries its own image, built as its
  cluster/images Dockerfile builds it (distroless/static, the binary at
  /usr/local/bin/crossplane-kubernetes-provider, user 65532) from Debian 12's
  packages and the binary the harness builds of that release (tools/image.py
  `static_image`), and embedded as `make image` embeds ours. The Deployment
  Crossplane makes for it must name that package. Its pod is only the API
  record: the provider that acts is the harness's process of the same binary
  (tests/real/crossplane.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.real import costs, toolchain
from tests.real.crossplane import CROSSPLANE_NS, FUNCTION, module_dir
from tests.real.dataplane import PODMAN, DataPlane, pipe
from tests.real.kube import Kube, condition, wait
from tests.real.packages import PROVIDER_BINARY, PROVIDER_RUNTIME, xpkg_build
from tests.real.process import run
from tests.real.processes import Supervisor, free_port, port_open
from tests.real.report import Installed
from tests.real.versions import CROSSPLANE_CLI, REGISTRY, RUNNING_PROVIDER
from tests.support import ROOT
from tools import image, release
from tools import publish as publish_ours

# The prefix every package this install pulls is published under (release.env,
# and provider-kubernetes' own), rewritten to the local registry.
PUBLISHED = "xpkg.crossplane.io/"
PROVIDER_PATH = "crossplane-contrib/provider-kubernetes"
# The selector of a Provider's runtime Deployment (Crossplane v2.4.0 runtime_override_options.go
# `DeploymentWithSelectors`: on spec.selector and the pod template, not the Deployment's own labels),
# whose value is the Provider object's name.
PROVIDER_LABEL = "pkg.crossplane.io/provider"
FUNCTION_LABEL = "pkg.crossplane.io/function"
# The gRPC port of a Function's runtime container (Crossplane v2.4.0, internal/controller/pkg/runtime).
FUNCTION_PORT = 9443
INSTALL_TIMEOUT_S = 300
# What a client pulling an image asks the registry for.
MANIFESTS = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
PKG_API = "pkg.crossplane.io/v1"


class Registry:
    """go-containerregistry's registry on loopback: plain HTTP, which Crossplane and the CLI use for localhost."""

    def __init__(self, sup: Supervisor, port: int | None = None) -> None:
        """A registry to start on a free port, or (port given) the one already running there."""
        self.sup = sup
        self.port = port or free_port()
        self.host = f"localhost:{self.port}"

    def start(self) -> Registry:
        binary = toolchain.ensure(REGISTRY, "registry")
        proc = self.sup.start("registry", [str(binary), "-port", str(self.port)], ports=[self.port])
        self.sup.wait_until(proc, "the registry listening", lambda: port_open(self.port))
        return self

    def _get(self, path: str, method: str = "GET") -> tuple[bytes, dict[str, str]]:
        """A request to the registry's API (/v2/path) asking for an image manifest: body, headers (lower case)."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{path}", method=method, headers={"Accept": MANIFESTS}
        )
        with urllib.request.urlopen(request, timeout=5) as rsp:  # noqa: S310 - http, the run's own registry
            return bytes(rsp.read()), {k.lower(): v for k, v in rsp.headers.items()}

    def digest(self, path: str) -> str:
        """The manifest digest a reference (path:tag) resolves to, as a client pulling it sees it."""
        name, tag = path.rsplit(":", 1)
        return self._get(f"{name}/manifests/{tag}", "HEAD")[1]["docker-content-digest"]

    def config(self, reference: str) -> dict[str, Any]:
        """The image config of a reference of this registry (host/path:tag or host/path@digest)."""
        path = reference.removeprefix(self.host + "/")
        name, at = path.split("@", 1) if "@" in path else path.rsplit(":", 1)
        manifest = json.loads(self._get(f"{name}/manifests/{at}")[0])
        return dict(json.loads(self._get(f"{name}/blobs/{manifest['config']['digest']}")[0]))


def publish(registry: Registry, workdir: Path) -> image.Image:
    """Both packages of ours pushed as `make release` pushes them, and provider-kubernetes built from its
    module with its own image embedded; that image."""
    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    this = release.read()
    published = this.registry.removeprefix(PUBLISHED)
    if published == this.registry:
        raise RuntimeError(f"release.env's REGISTRY {this.registry} is not under {PUBLISHED}")
    out = Path(tempfile.mkdtemp(prefix="packages-", dir=workdir))
    publish_ours.push(cli, f"{registry.host}/{published}", this.version, out)
    binary = toolchain.ensure(RUNNING_PROVIDER, "provider-kubernetes")
    try:  # tools/image.py says what failed with SystemExit, which the harness would not report
        provider_image = image.static_image(binary, PROVIDER_BINARY, PROVIDER_RUNTIME, out / "provider-image")
        said = image.output(provider_image, "--help")
    except SystemExit as e:
        raise RuntimeError(f"provider-kubernetes' image: {e}") from e
    if f"usage: {PROVIDER_BINARY.rsplit('/', 1)[1]} [<flags>]" not in said.splitlines():
        raise RuntimeError(f"provider-kubernetes' image did not run its binary: --help said {said[-500:]!r}")
    provider = xpkg_build(
        cli,
        module_dir(RUNNING_PROVIDER.module, RUNNING_PROVIDER.version) / "package",
        out / "provider.xpkg",
        embed=provider_image.docker_archive,
    )
    run(
        [
            str(cli),
            "xpkg",
            "push",
            "-f",
            str(provider),
            f"{registry.host}/{PROVIDER_PATH}:{RUNNING_PROVIDER.version}",
        ]
    )
    return provider_image


def publish_function(registry: Registry, tag: str, workdir: Path, *, commit: str | None = None) -> str:
    """A Function package pushed under tag, for the package manager to move to; its digest.

    Without commit: this commit's runtime image and package metadata, annotated
    with the tag, so the package's digest (and so Crossplane's revision) is new:
    what a release of the same code does to the package manager, without a
    second build. With commit: that commit's `function/` and `package/` (git),
    its code on this image's root as one more layer (tools/image.py
    `with_code`): another release's code, of the same dependencies.
    """
    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    root = workdir / f"package-{tag}"
    embed = publish_ours.RUNTIME_TARBALL
    if commit is None:
        shutil.copytree(ROOT / "package", root, dirs_exist_ok=True)
    else:
        tree = source_tree(commit, ["function", "package"], workdir / f"source-{tag}")
        shutil.copytree(tree / "package", root)
        epoch = int(run(["git", "-C", str(ROOT), "show", "-s", "--format=%ct", commit]).strip())
        embed = image.with_code(
            embed, tree / "function", workdir / f"function-{tag}.docker.tar", epoch, f"function/ of {commit}"
        )
    _annotated(root, tag)
    out = xpkg_build(cli, root, workdir / f"function-{tag}.xpkg", embed=embed)
    return _pushed(registry, cli, out, f"{release.FUNCTION}:{tag}")


def publish_configuration(registry: Registry, tag: str, workdir: Path, *, commit: str | None = None) -> str:
    """The Configuration package pushed under tag, for the package manager to move to; its digest.

    Without commit: this commit's, annotated with the tag as publish_function
    annotates. With commit: that commit's `examples/configuration` (git): its
    XRDs and Compositions, another release's."""
    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    root = workdir / f"configuration-{tag}"
    if commit is None:
        shutil.copytree(ROOT / "examples" / "configuration", root)
    else:
        tree = source_tree(commit, ["examples/configuration"], workdir / f"configuration-source-{tag}")
        shutil.copytree(tree / "examples" / "configuration", root)
    _annotated(root, tag)
    out = xpkg_build(cli, root, workdir / f"configuration-{tag}.xpkg")
    return _pushed(registry, cli, out, f"{release.CONFIGURATION}:{tag}")


def source_tree(commit: str, paths: list[str], into: Path) -> Path:
    """Those paths of a commit, written under into (git archive)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, *paths], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _annotated(root: Path, tag: str) -> None:
    """The package's metadata annotated with its tag: each tag a package of its own digest."""
    meta = root / "crossplane.yaml"
    meta.write_text(
        meta.read_text().replace("  annotations:\n", f"  annotations:\n    fgr.test/revision: {tag}\n", 1)
    )


def _pushed(registry: Registry, cli: Path, package: Path, name_tag: str) -> str:
    """The package pushed under release.env's repository path in the registry; its digest there."""
    path = f"{release.read().registry.removeprefix(PUBLISHED)}/{name_tag}"
    run([str(cli), "xpkg", "push", "-f", str(package), f"{registry.host}/{path}"])
    return registry.digest(path)


def served_by(plane: DataPlane) -> str:
    """The image digest podman ran as the Function's pod's container; empty if no such container ran."""
    names = [
        name for sb in plane.running() if sb.labels.get(FUNCTION_LABEL) == FUNCTION for name in sb.images
    ]
    digests = {
        subprocess.run(
            [*PODMAN, "inspect", "--format", "{{.ImageDigest}}", name],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        for name in names
    }
    digests.discard("")  # a container that exited since the list: not one that served
    return digests.pop() if len(digests) == 1 else ", ".join(sorted(digests))


def transitions_logged(plane: DataPlane) -> list[str]:
    """ "<xr> <condition>" of each `condition changed` line the Function's running pods logged, in order."""
    return [
        f"{said.xr} {said.condition}"
        for sb in plane.running()
        if sb.labels.get(FUNCTION_LABEL) == FUNCTION
        for proc in sb.processes
        for said in costs.logged(proc.log.read_text(errors="replace"), costs.CONDITION_CHANGED)
    ]


def with_served(installed: Installed | None, plane: DataPlane) -> Installed | None:
    """The install, with the digest its Function's pod ran, read while the pod still runs."""
    if installed is not None:
        installed.served = served_by(plane)
    return installed


def provider_runtime(kube: Kube, registry: Registry, built: image.Image) -> str:
    """The image of the Deployment Crossplane made for provider-kubernetes, if it is the package that
    carries the image built here (its layer among the config's, its entrypoint); RuntimeError if not."""
    provider = release.installed_name(PUBLISHED + PROVIDER_PATH)
    deployments = [
        d
        for d in kube.list("apps/v1", "Deployment", CROSSPLANE_NS)
        if (d["spec"].get("selector") or {}).get("matchLabels", {}).get(PROVIDER_LABEL) == provider
    ]
    images = sorted({c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]})
    if len(images) != 1 or not images[0].startswith(registry.host + "/"):
        raise RuntimeError(
            f"provider-kubernetes' Deployment runs {images or 'nothing'}, not one package of {registry.host}"
        )
    problems = image.carrying(registry.config(images[0]), built, PROVIDER_RUNTIME, images[0])
    if problems:
        raise RuntimeError("; ".join(problems))
    return images[0]


def install(
    kube: Kube, kubeconfig: Path, registry: Registry, client_certs: Path, provider_image: image.Image
) -> Installed:
    """The Configuration installed by the CLI; wait until it and its dependencies are Healthy and its XRDs offered."""
    started = time.monotonic()
    kube.apply(
        {
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "ImageConfig",
            "metadata": {"name": "local-registry"},
            "spec": {
                "matchImages": [{"type": "Prefix", "prefix": PUBLISHED}],
                "rewriteImage": {"prefix": f"{registry.host}/"},
            },
        }
    )
    this = release.read()
    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    run(
        [str(cli), "xpkg", "install", "configuration", f"{this.configuration}:{this.version}"],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    # Named as the CLI and the package manager name them: after each package's repository.
    wanted = [
        ("Configuration", release.installed_name(this.configuration)),
        ("Function", FUNCTION),
        ("Provider", release.installed_name(PUBLISHED + PROVIDER_PATH)),
    ]
    for kind, name in wanted:
        wait(
            f"{kind} {name} Healthy",
            lambda k=kind, n=name: condition(kube.get(PKG_API, k, n), "Healthy").get("status") == "True",
            INSTALL_TIMEOUT_S,
            interval=1,
        )
    for xrd in ("inferencegateways.ai.example.org", "modelroutes.ai.example.org"):
        wait(
            f"XRD {xrd} Established",
            lambda n=xrd: (
                condition(
                    kube.get("apiextensions.crossplane.io/v1", "CompositeResourceDefinition", n),
                    "Established",
                ).get("status")
                == "True"
            ),
            INSTALL_TIMEOUT_S,
            interval=1,
        )
    kube.wait_crds_established()
    got: dict[str, dict[str, Any]] = {f"{k}/{n}": kube.get(PKG_API, k, n) or {} for k, n in wanted}
    elsewhere = {
        key: (obj.get("status") or {}).get("resolvedPackage")
        for key, obj in got.items()
        if not str((obj.get("status") or {}).get("resolvedPackage", "")).startswith(registry.host + "/")
    }
    if elsewhere:
        raise RuntimeError(f"packages not resolved through the ImageConfig to {registry.host}: {elsewhere}")
    provider_runs = provider_runtime(kube, registry, provider_image)
    return Installed(
        provider=(
            f"provider-kubernetes {RUNNING_PROVIDER.version}'s own image {provider_image.digest[:19]}… "
            f"({provider_image.size_mb:.1f} MB, static, uid 65532, built here from its release's binary; "
            f"its --help answered) embedded in its package, whose image {provider_runs.removeprefix(registry.host + '/')} "
            "Crossplane's Deployment for it names (its pod is the API record: the harness runs the same binary)"
        ),
        packages={key: obj["spec"]["package"] for key, obj in got.items()},
        images={key: (obj.get("status") or {}).get("resolvedPackage", "") for key, obj in got.items()},
        seconds=time.monotonic() - started,
        registry=registry.host,
        client_certs=str(client_certs),
        pushed=registry.digest(
            f"{release.read().registry.removeprefix(PUBLISHED)}/{release.FUNCTION}:{this.version}"
        ),
    )


class MutualTLSForwarder:
    """127.0.0.1:port, plaintext, forwarded over mutual TLS to the Function's pod, as Crossplane dials it.

    The Crossplane CLI's render calls a Development runtime in plaintext; the
    installed Function serves only mutual TLS. This carries each connection's
    bytes (HTTP/2, ALPN h2) to the pod with Crossplane's client certificate,
    checking the pod's certificate for its Service's name, so `crossplane
    render` reaches the very container the package manager runs.
    """

    def __init__(self, target: tuple[str, int], certs: Path, server_name: str) -> None:
        self.target = target
        self.server_name = server_name
        self.context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certs / "ca.crt"))
        self.context.load_cert_chain(str(certs / "tls.crt"), str(certs / "tls.key"))
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"

    def __enter__(self) -> MutualTLSForwarder:
        threading.Thread(target=self._accept, name="mtls-forwarder", daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(client,), daemon=True).start()

    def _carry(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            upstream = self.context.wrap_socket(
                socket.create_connection(self.target, timeout=10), server_hostname=self.server_name
            )
            upstream.settimeout(None)
            pipe(client, upstream)
            return
        client.close()  # the pod refused: the client sees the connection end


def render_through(plane: DataPlane, certs: Path) -> tuple[int, list[str]]:
    """Every example rendered by the Crossplane CLI through the installed Function's pod: (identical, problems)."""
    from tests.real.conformance import CLIS, differences, our_render, real_render  # noqa: PLC0415
    from tests.test_examples import EXAMPLE_LIST  # noqa: PLC0415

    pods = [sb for sb in plane.running() if sb.labels.get(FUNCTION_LABEL) == FUNCTION and sb.ready]
    if not pods:
        return 0, ["no ready pod of the Function to render through"]
    identical, problems = 0, []
    with MutualTLSForwarder((pods[0].ip, FUNCTION_PORT), certs, f"{FUNCTION}.{CROSSPLANE_NS}") as forwarder:
        for example in EXAMPLE_LIST:
            diff = differences(real_render(CLIS[0], example, forwarder.address), our_render(example))
            problems += [f"{example.name}: {d}" for d in diff]
            identical += not diff
    return identical, problems
