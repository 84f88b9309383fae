"""`make image`: the function's runtime image, built without a Docker engine, then run and used.

The Dockerfile's two stages, from Debian 12's own packages when the upstream
base images cannot be pulled (these machines reach Debian's archive, not a
container registry):

- build: a minimal Debian 12 root (mmdebstrap's `minbase`, debian:12-slim's
  equivalent) with python3.11-venv, where `/venv` is made and the function's
  wheel installed, from wheels downloaded on the host at the versions the
  project's venv runs (`pip freeze`), so no network is needed inside;
- runtime: the distroless idea, made the same way: only the packages
  python3.11 needs, unpacked (`extract`: no maintainer script runs), then the
  package tools removed, so there is no shell, no dpkg, no tar; a `nonroot`
  user (65532, as distroless); `/venv` copied in from the build stage, so
  build and runtime share one interpreter, Debian's 3.11.

The image is written as an OCI archive by this module, not by buildah: one
layer, its entries sorted, owners and modes kept, every mtime clamped to
SOURCE_DATE_EPOCH (the commit's time), gzip without a timestamp. So one commit
and one set of Debian packages give one digest; `make image` builds twice and
says whether the digests agree, and if not, which files differ.

`make image-arm64` builds the same image for arm64 on this amd64 machine: the
Debian roots for arm64 (mmdebstrap runs their maintainer scripts, and the
build stage's pip, under qemu-user through binfmt_misc) and the wheels for
aarch64, at the same versions; then runs every check below on it, emulated,
and pushes its Function package with this commit's amd64 one as one
multi-platform index to a registry on loopback, as the forge's tag workflow
pushes them.

Then it is run (podman, crun): serving mTLS with the layout Crossplane's
function runtime mounts (TLS_SERVER_CERTS_DIR=/tls/server holding tls.crt,
tls.key, ca.crt), it must answer a client with a certificate of that CA and
refuse one without; run as uid 65532 with no shell to exec; and, started
`--insecure`, every example rendered through it by the Crossplane CLI's
Development runtime must equal the expected render. Ends with one line:
`image: <digest> <size> MB (non-root, Python 3.11, no shell), reproducible: ...; ...`.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import release

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_output" / "image"
SUITE = "bookworm"
# The release with its point updates and security fixes, as debian:12-slim has them.
SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# What python3.11 and the wheels' native code (grpcio, cel-expr-python: C++) need at run time,
# and nothing else (apt adds their dependencies).
RUNTIME_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6")
# debian:12-slim's equivalent, with the venv module.
BUILD_PACKAGES = ("python3.11-venv",)
# The package tools `extract` brings as dependencies, removed from the runtime:
# with them goes every way to run a command but Python.
REMOVED = (
    "bin/tar",
    "usr/bin/dpkg*",
    "usr/bin/update-alternatives",
    "usr/share/dpkg",
    "etc/dpkg",
    "var/lib/dpkg",
)
NONROOT = 65532
# Debian's architecture names, and the machine names of wheels' platform tags and of qemu-user.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
# Debian 12's glibc is 2.36: the manylinux tags a wheel may carry to run on it, newest first.
GLIBC_MINORS = range(36, 16, -1)
PYTHON = "/usr/bin/python3.11"
# The function runtime's mount point for its certificates (Crossplane's Deployment for a Function).
TLS_DIR = "/tls/server"
NAME = release.FUNCTION


def _run(cmd: list[str], *, merged: bool = False, **kwargs: object) -> str:
    """The command's output (merged: its stderr too, in order); SystemExit saying how it failed."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT if merged else subprocess.PIPE}
    done = subprocess.run(cmd, text=True, check=False, **streams, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        said = done.stdout if merged else done.stderr
        raise SystemExit(f"image: {' '.join(cmd[:3])} failed ({done.returncode}): {said[-2000:]}")
    return str(done.stdout)


def source_date_epoch() -> int:
    """The commit's time: every file in the image is dated no later than it."""
    return int(_run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"]).strip())


def host_arch() -> str:
    """This machine's architecture in Debian's (and OCI's) name, without dpkg (make release runs
    on machines that have none)."""
    machine = platform.machine()
    return next((arch for arch, name in MACHINES.items() if name == machine), machine)


def platform_options(arch: str) -> list[str]:
    """pip download's options for another architecture's wheels (none for this machine's)."""
    if arch == host_arch():
        return []
    machine = MACHINES[arch]
    tags = [*(f"manylinux_2_{minor}_{machine}" for minor in GLIBC_MINORS), f"manylinux2014_{machine}"]
    return [
        *(option for tag in tags for option in ("--platform", tag)),
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
    ]


def wheels(into: Path, arch: str) -> None:
    """The function's wheel and every runtime dependency's, at the versions the project's venv runs,
    built for arch."""
    into.mkdir(parents=True)
    python = sys.executable
    _run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(into), str(ROOT)])
    frozen = [
        line
        for line in _run([python, "-m", "pip", "freeze", "--exclude-editable"]).splitlines()
        if "==" in line
    ]
    constraints = into.parent / "constraints.txt"
    constraints.write_text("\n".join(frozen) + "\n")
    (wheel,) = into.glob("*.whl")
    _run(
        [python, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(into),
         "--constraint", str(constraints), *platform_options(arch), str(wheel)]
    )  # fmt: skip


def debian_root(into: Path, variant: str, packages: tuple[str, ...], epoch: int, arch: str) -> None:
    _run(
        ["mmdebstrap", "--quiet", f"--variant={variant}", f"--architectures={arch}",
         f"--include={','.join(packages)}", SUITE, str(into), *SOURCES],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
    )  # fmt: skip


def build_venv(build_root: Path, wheel_dir: Path, epoch: int) -> None:
    """`/venv` inside the build root, installed offline from the downloaded wheels; its pip removed after."""
    shutil.copytree(wheel_dir, build_root / "wheels")
    env = {"PATH": "/usr/bin:/bin", "SOURCE_DATE_EPOCH": str(epoch), "PIP_NO_CACHE_DIR": "1"}
    (wheel,) = (p.name for p in wheel_dir.glob("function_gateway_readiness-*.whl"))

    def inside(*cmd: str) -> None:
        _run([shutil.which("chroot") or "/usr/sbin/chroot", str(build_root), *cmd], env=env)

    inside(PYTHON, "-m", "venv", "/venv")
    inside("/venv/bin/pip", "install", "--quiet", "--no-index", "--find-links", "/wheels", f"/wheels/{wheel}")
    inside("/venv/bin/pip", "uninstall", "--quiet", "--yes", "pip", "setuptools")


def runtime_root(into: Path, build_root: Path, epoch: int, arch: str) -> None:
    debian_root(into, "extract", RUNTIME_PACKAGES, epoch, arch)
    for pattern in REMOVED:
        for path in into.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    nonroot_user(into)
    shutil.copytree(build_root / "venv", into / "venv", symlinks=True)


def nonroot_user(into: Path) -> None:
    """distroless's accounts: root, and `nonroot` (65532) with its home; a world-writable /tmp."""
    (into / "etc").mkdir(parents=True, exist_ok=True)
    (into / "etc" / "passwd").write_text(
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    )
    (into / "etc" / "group").write_text(f"root:x:0:\nnonroot:x:{NONROOT}:\n")
    (into / "home" / "nonroot").mkdir(parents=True, exist_ok=True)
    os.chown(into / "home" / "nonroot", NONROOT, NONROOT)
    (into / "tmp").mkdir(exist_ok=True)
    (into / "tmp").chmod(0o1777)


# distroless/static's idea for a static binary, from Debian 12's packages: the
# CA bundle (Debian's ca-certificates, its certificates concatenated in sorted
# order as update-ca-certificates writes /etc/ssl/certs/ca-certificates.crt:
# `extract` runs no maintainer script, so it is written here), the accounts,
# and the binary; nothing to run but it.
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


def static_root(into: Path, binary: Path, at: str, epoch: int, arch: str) -> None:
    """A root holding only the CA bundle, the accounts and one static binary at `at`."""
    into.parent.mkdir(parents=True, exist_ok=True)
    debs = into.with_name(into.name + "-ca-certificates")
    debian_root(debs, "extract", ("ca-certificates",), epoch, arch)
    certs = sorted((debs / "usr" / "share" / "ca-certificates").rglob("*.crt"))
    if not certs:
        raise SystemExit(f"image: Debian's ca-certificates held no certificate under {debs}")
    bundle = into / CA_BUNDLE
    bundle.parent.mkdir(parents=True)
    bundle.write_text("".join(c.read_text() for c in certs))
    shutil.rmtree(debs)
    nonroot_user(into)
    target = into / at.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(binary, target)
    target.chmod(0o755)


def _clamped(info: tarfile.TarInfo, epoch: int) -> tarfile.TarInfo:
    info.mtime = min(int(info.mtime), epoch)
    info.uname = info.gname = ""
    return info


def layer(root: Path, epoch: int) -> bytes:
    """The root as one tar layer: entries sorted, owners and modes kept, mtimes clamped."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
            rel = path.relative_to(root).as_posix()
            info = _clamped(tar.gettarinfo(str(path), arcname=rel), epoch)
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return raw.getvalue()


@dataclass(frozen=True)
class Runtime:
    """What an image's config says it runs, and as whom (always `nonroot`)."""

    name: str  # the tag its `docker save` form carries
    entrypoint: tuple[str, ...]
    env: tuple[str, ...]
    source: str  # org.opencontainers.image.source
    ports: tuple[int, ...] = ()
    workdir: str = "/home/nonroot"


# As the Dockerfile: Crossplane's function runtime sets TLS_SERVER_CERTS_DIR itself.
FUNCTION_RUNTIME = Runtime(
    NAME,
    ("/venv/bin/python3.11", "-m", "function"),
    ("PATH=/venv/bin:/usr/bin",),
    "https://github.com/example/function-gateway-readiness",
    (9443,),
)


@dataclass(frozen=True)
class Image:
    archive: Path  # the OCI layout, tarred (podman's oci-archive:)
    digest: str  # its manifest's
    size_mb: float  # its one layer, compressed
    layer_digest: str  # the layer's diff ID
    docker_archive: Path  # the same image as `docker save` writes it: what xpkg build embeds
    arch: str  # Debian's name of the architecture it is built for

    @property
    def emulated(self) -> bool:
        """Run here under qemu-user: slower to start and to answer."""
        return self.arch != host_arch()


def oci_archive(root: Path, out: Path, epoch: int, arch: str, runtime: Runtime = FUNCTION_RUNTIME) -> Image:
    """An OCI image layout, tarred (podman's `oci-archive:`), of one layer and its config."""
    tar = layer(root, epoch)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    gz = gzip.compress(tar, compresslevel=9, mtime=0)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    config = {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Env": list(runtime.env),
            "Entrypoint": list(runtime.entrypoint),
            **({"ExposedPorts": {f"{p}/tcp": {} for p in runtime.ports}} if runtime.ports else {}),
            "WorkingDir": runtime.workdir,
            "Labels": {"org.opencontainers.image.source": runtime.source},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "tools/image.py"}],
    }
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(gz)}],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    described = blob(manifest_bytes)
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **described}],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
        **{f"blobs/sha256/{d.removeprefix('sha256:')}": data for d, data in blobs.items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    _tar(out, files, ["blobs", "blobs/sha256"], epoch)
    docker = out.with_name(out.name.replace(".oci.tar", ".docker.tar"))
    _docker_save(docker, config_bytes, [tar], epoch, runtime.name)
    return Image(out, str(described["digest"]), len(gz) / 1e6, diff_id, docker, arch)


def _docker_save(out: Path, config: bytes, layers: list[bytes], epoch: int, name: str = NAME) -> None:
    """The image as `docker save` writes it, which `crossplane xpkg build --embed-runtime-image-tarball`
    reads (go-containerregistry's tarball package): the config, and each layer uncompressed, named
    by its diff ID, bottom first."""
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [hashlib.sha256(layer).hexdigest() + "/layer.tar" for layer in layers]
    manifest = [{"Config": config_name, "RepoTags": [f"{name}:latest"], "Layers": names}]
    files = {
        "manifest.json": json.dumps(manifest).encode(),
        config_name: config,
        **dict(zip(names, layers, strict=True)),
    }
    _tar(out, files, sorted({name.split("/")[0] for name in names}), epoch)


def _tar(out: Path, files: dict[str, bytes], folders: list[str], epoch: int) -> None:
    """A tar of these folders and files, in this order then sorted, every entry dated `epoch`."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
        for name in [*folders, *sorted(files)]:
            info = tarfile.TarInfo(name)
            info.mtime = epoch
            if name in files:
                info.size = len(files[name])
                archive.addfile(info, io.BytesIO(files[name]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)


# Where the function's package lives in the image: the wheel installed into /venv.
FUNCTION_PACKAGE = "venv/lib/python3.11/site-packages/function"
# An opaque whiteout (OCI image spec, layer.md): the folder holding it hides every entry the
# layers below have in it.
OPAQUE = ".wh..wh..opq"


def with_code(saved: Path, code: Path, out: Path, epoch: int, label: str) -> Path:
    """The image of `saved` (a `docker save` tarball, as `oci_archive` writes it) with the function
    package replaced by the tree `code` (a `function/` folder of another commit, its caches left
    out): one more layer, hiding the package below and adding that tree, dated `epoch`. What
    another release of the same dependencies would run, without a second build of the root."""
    with tarfile.open(saved) as tar:
        (described,) = json.loads(_member(tar, "manifest.json"))
        config = json.loads(_member(tar, described["Config"]))
        layers = [_member(tar, name) for name in described["Layers"]]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo(FUNCTION_PACKAGE)
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, epoch
        tar.addfile(folder)
        hide = tarfile.TarInfo(f"{FUNCTION_PACKAGE}/{OPAQUE}")
        hide.mtime = epoch
        tar.addfile(hide)
        for path in sorted(code.rglob("*"), key=lambda p: p.relative_to(code).as_posix()):
            rel = path.relative_to(code)
            if "__pycache__" in rel.parts:
                continue
            info = tarfile.TarInfo(f"{FUNCTION_PACKAGE}/{rel.as_posix()}")
            info.mtime = epoch
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    added = raw.getvalue()
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(added).hexdigest())
    config["history"].append({"created": config["created"], "created_by": f"tools/image.py: {label}"})
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    _docker_save(out, config_bytes, [*layers, added], epoch)
    return out


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise ValueError(f"{name} is not a file in the image archive")
    return f.read()


def static_image(binary: Path, at: str, runtime: Runtime, workdir: Path) -> Image:
    """`static_root` of one binary as an image for this machine, dated by this commit."""
    epoch, arch = source_date_epoch(), host_arch()
    static_root(workdir / "root", binary, at, epoch, arch)
    return oci_archive(workdir / "root", workdir / f"{runtime.name}.oci.tar", epoch, arch, runtime)


def build(workdir: Path, out: Path, arch: str) -> tuple[Image, Path]:
    """Both stages, then the archive; returns it and the runtime root (kept for a comparison)."""
    epoch = source_date_epoch()
    wheels(workdir / "wheels", arch)
    debian_root(workdir / "build", "minbase", BUILD_PACKAGES, epoch, arch)
    build_venv(workdir / "build", workdir / "wheels", epoch)
    runtime_root(workdir / "runtime", workdir / "build", epoch, arch)
    return oci_archive(workdir / "runtime", out, epoch, arch), workdir / "runtime"


def differing(a: Path, b: Path) -> list[str]:
    """Files of two roots whose content, mode or link differs (what made two digests differ)."""

    def listing(root: Path) -> dict[str, str]:
        out = {}
        for path in root.rglob("*"):
            st = path.lstat()
            what = (
                os.readlink(path)
                if path.is_symlink()
                else (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir")
            )
            out[path.relative_to(root).as_posix()] = f"{st.st_mode:o} {st.st_uid} {what}"
        return out

    la, lb = listing(a), listing(b)
    return sorted(k for k in la.keys() | lb.keys() if la.get(k) != lb.get(k))


# --- run it ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# podman as root here: runc, because crun refuses this machine's hybrid cgroups;
# limits under the machine's hard ones, which podman's defaults exceed.
PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def output(image: Image, *args: str) -> str:
    """What the image's entrypoint prints given args (stdout and stderr), run once by podman with no network."""
    return _run(
        [
            *PODMAN,
            "run",
            "--rm",
            "--quiet",
            "--network",
            "none",
            *LIMITS,
            f"oci-archive:{image.archive}",
            *args,
        ],
        merged=True,
        timeout=120,
    )


@contextlib.contextmanager
def running(image: Image, *args: str, options: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """The image run by podman on the host network; yields (container name, address)."""
    port = _free_port()
    name = f"fgr-image-{port}"
    cmd = [*PODMAN, "run", "--detach", "--rm", "--name", name, "--network", "host", *LIMITS, *options]
    _run([*cmd, f"oci-archive:{image.archive}", f"--address=127.0.0.1:{port}", *args])
    try:
        # Emulated, Python takes seconds to import the SDK and the function before it listens.
        started_within = 300 if image.emulated else 60
        deadline = time.monotonic() + started_within
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            logs = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True, check=False)
            raise SystemExit(
                f"image: the container did not listen within {started_within} s: {logs.stdout}{logs.stderr}"
            )
        yield name, f"127.0.0.1:{port}"
    finally:
        subprocess.run([*PODMAN, "stop", "--time", "10", name], capture_output=True, check=False)


def _call(address: str, root: bytes, client: tuple[bytes, bytes] | None, timeout: float) -> str:
    """One RunFunction over TLS: "served" or the gRPC status code's name."""
    import grpc  # noqa: PLC0415 - the SDK's grpcio, only where a container is called
    from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1  # noqa: PLC0415

    from tests.support import EXAMPLES, GATEWAY_INPUT, load_yaml, make_request  # noqa: PLC0415

    xr = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
    creds = grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=client[1] if client else None,
        certificate_chain=client[0] if client else None,
    )
    with grpc.secure_channel(address, creds) as channel:
        try:
            rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(
                make_request(xr, GATEWAY_INPUT), timeout=timeout
            )
        except grpc.RpcError as e:
            return str(e.code().name)  # type: ignore[attr-defined]
    return "served" if rsp.desired.resources else "served nothing"


def check_mtls(image: Image, work: Path) -> list[str]:
    """Served over mTLS from the certificates Crossplane mounts; as uid 65532; no shell to exec."""
    from tests.pki import CA  # noqa: PLC0415 - test certificates, only here

    ca, other = CA("crossplane-root-ca"), CA("someone-else")
    certs = work / "tls"
    ca.write_leaf(certs, NAME)
    for f in certs.iterdir():
        f.chmod(0o644)  # the container's user is not root
    problems = []
    mount = ("--volume", f"{certs}:{TLS_DIR}:ro", "--env", f"TLS_SERVER_CERTS_DIR={TLS_DIR}")
    timeout = 60 if image.emulated else 10
    with running(image, options=mount) as (name, address):
        if (got := _call(address, ca.pem, ca.leaf("crossplane"), timeout)) != "served":
            problems.append(f"a client with the CA's certificate got {got}")
        if (got := _call(address, ca.pem, None, timeout)) == "served":
            problems.append("a client without a certificate was served")
        if (got := _call(address, ca.pem, other.leaf("crossplane"), timeout)) == "served":
            problems.append("a client with another CA's certificate was served")
        # exec works (Python answers with its uid), so a shell that does not run is absent, not unreachable.
        uid = _run(
            [*PODMAN, "exec", name, "/venv/bin/python3.11", "-c", "import os; print(os.getuid())"]
        ).strip()
        if uid != str(NONROOT):
            problems.append(f"the container runs as uid {uid}, not {NONROOT}")
        for shell in ("/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"):
            execed = subprocess.run(
                [*PODMAN, "exec", name, shell, "-c", "true"], capture_output=True, check=False
            )
            if execed.returncode == 0 or "no such file" not in execed.stderr.decode().lower():
                problems.append(
                    f"{shell} in the image: exec gave {execed.returncode} {execed.stderr[-200:]!r}"
                )
    return problems


def check_renders(image: Image) -> tuple[list[str], int]:
    """Every example rendered by the Crossplane CLI through the container equals its expected render."""
    from tests.real.conformance import CLIS, differences, our_render, real_render  # noqa: PLC0415
    from tests.test_examples import EXAMPLE_LIST  # noqa: PLC0415

    problems, identical = [], 0
    with running(image, "--insecure") as (_, address):
        for example in EXAMPLE_LIST:
            diff = differences(real_render(CLIS[0], example, address), our_render(example))
            problems += [f"{example.name}: {d}" for d in diff]
            identical += not diff
    return problems, identical


def carrying(config: dict[str, Any], built: Image, runtime: Runtime, what: str) -> list[str]:
    """What is wrong with the image config of a package that should embed `built` to run `runtime`."""
    problems = []
    if built.layer_digest not in config["rootfs"]["diff_ids"]:
        problems.append(f"{what} does not carry the image's layer {built.layer_digest}")
    if config["config"].get("Entrypoint") != list(runtime.entrypoint):
        problems.append(f"{what}'s entrypoint is {config['config'].get('Entrypoint')}")
    return problems


def function_package(image: Image, out: Path) -> list[str]:
    """The Function package with the image embedded, built by the real CLI; what is wrong with it."""
    from tests.real import toolchain  # noqa: PLC0415
    from tests.real.packages import _layers, xpkg_build  # noqa: PLC0415
    from tests.real.versions import CROSSPLANE_CLI  # noqa: PLC0415

    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    xpkg_build(cli, ROOT / "package", out, embed=image.docker_archive)
    with tarfile.open(out) as xpkg:
        manifest = json.loads(xpkg.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(xpkg.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
    problems = carrying(config, image, FUNCTION_RUNTIME, "the Function package")
    if "package.yaml" not in _layers(out):
        problems.append("the Function package has no package.yaml")
    return problems


# What the build and the checks run, from Debian's packages.
TOOLS = ("mmdebstrap", "podman", "runc")


def suffix(arch: str) -> str:
    """What tells an architecture's outputs apart: nothing for this machine's, `-<arch>` for another."""
    return "" if arch == host_arch() else f"-{arch}"


def package_path(arch: str) -> Path:
    """Where the Function package with arch's image embedded is left (make release pushes it)."""
    return OUT / f"{NAME}{suffix(arch)}.xpkg"


def commit_path(arch: str) -> Path:
    """The commit package_path(arch) was built from: make release refuses another commit's."""
    return OUT / f"commit{suffix(arch)}"


def emulation_missing(arch: str) -> str | None:
    """Why arch's binaries cannot run here, or None: another architecture runs under qemu-user,
    registered with binfmt_misc (Debian's qemu-user-static and binfmt-support register it)."""
    if arch == host_arch():
        return None
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{MACHINES[arch]}"
    if entry.is_file() and entry.read_text().startswith("enabled"):
        return None
    return (
        f"no qemu-user for {arch} registered in binfmt_misc ({entry}); Debian: "
        "apt-get install qemu-user-static binfmt-support"
    )


def index_platforms(packages: list[Path]) -> list[str]:
    """The platforms of the one index `crossplane xpkg push` makes of these packages, read back from a
    registry on loopback, as the forge's tag workflow pushes amd64 and arm64 together."""
    from tests.real import toolchain  # noqa: PLC0415
    from tests.real.versions import CROSSPLANE_CLI, REGISTRY  # noqa: PLC0415

    cli = toolchain.ensure(CROSSPLANE_CLI, "crossplane-cli")
    port = _free_port()
    registry = subprocess.Popen(
        [str(toolchain.ensure(REGISTRY, "registry")), "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ref = f"localhost:{port}/example/{NAME}:index"
        _run([str(cli), "xpkg", "push", "-f", ",".join(str(p) for p in packages), ref])
        request = urllib.request.Request(
            f"http://localhost:{port}/v2/example/{NAME}/manifests/index",
            headers={
                "Accept": "application/vnd.oci.image.index.v1+json, "
                "application/vnd.docker.distribution.manifest.list.v2+json"
            },
        )
        with urllib.request.urlopen(request, timeout=10) as rsp:  # noqa: S310 - http, our own registry
            index = json.loads(rsp.read())
    finally:
        registry.terminate()
        registry.wait(timeout=10)
    return sorted(
        f"{m['platform']['os']}/{m['platform']['architecture']}"
        for m in index.get("manifests", [])
        if "platform" in m
    )


def main(argv: list[str] | None = None) -> int:
    # `.ci/run` stops a failed run with SIGTERM: as an exit, so `running` stops its container.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(prog="python -m tools.image")
    parser.add_argument("--arch", choices=sorted(MACHINES), default=host_arch())
    arch = parser.parse_args(argv).arch
    said = "image" if arch == host_arch() else f"image {arch}"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print(
            f"{said}: NOT BUILT: {', '.join(missing)} not installed (Debian: apt-get install {' '.join(missing)})"
        )
        return 1
    if (why := emulation_missing(arch)) is not None:
        print(f"{said}: NOT BUILT: {why}")
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    head = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    with tempfile.TemporaryDirectory(prefix="fgr-image-") as d:
        work = Path(d)
        image, first_root = build(work / "first", OUT / f"{NAME}{suffix(arch)}.oci.tar", arch)
        again, second_root = build(work / "second", work / "second.oci.tar", arch)
        diff = [] if image.digest == again.digest else differing(first_root, second_root)
        problems = check_mtls(image, work)
        rendered, identical = check_renders(image)
        problems += function_package(image, package_path(arch))
        # What make release and make release-check push: they refuse an image of another commit.
        commit_path(arch).write_text(head)
    problems += rendered
    reproducible = (
        "two builds gave one digest"
        if not diff and image.digest == again.digest
        else f"two builds differ ({again.digest}) in {len(diff)} files: {', '.join(diff[:5])}"
    )
    pushed = ""
    if image.emulated:
        # With this commit's image for this machine, as make release pushes them: one index.
        native = host_arch()
        if package_path(native).is_file() and commit_path(native).read_text().strip() == head.strip():
            platforms = index_platforms([package_path(native), package_path(arch)])
            if platforms != sorted(f"linux/{a}" for a in (native, arch)):
                problems.append(f"the two Function packages pushed as one index list {platforms}")
            pushed = f"; pushed with the {native} package as one index of {', '.join(platforms)}"
        else:
            pushed = f"; not pushed as one index: no {native} package of this commit (make image first)"
    for problem in problems:
        print(f"{said}: {problem}", file=sys.stderr)
    from tests.test_examples import EXAMPLE_LIST  # noqa: PLC0415

    run_by = "run under qemu-user, " if image.emulated else ""
    print(
        f"{said}: {image.digest} {image.size_mb:.1f} MB compressed (uid {NONROOT}, Python 3.11 from Debian 12, "
        f"no shell), built without a Docker engine; {reproducible}; {run_by}served mTLS from {TLS_DIR} "
        f"and refused clients without the CA's certificate; {identical} of {len(EXAMPLE_LIST)} examples "
        f"rendered through it identically; the Function package built with it embedded (crossplane xpkg "
        f"build){pushed}"
    )
    return 1 if problems or image.digest != again.digest else 0


if __name__ == "__main__":
    sys.exit(main())
