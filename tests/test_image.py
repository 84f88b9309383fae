"""The runtime image's archive (tools/image.py): one root and one epoch give one digest."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.real.packages import PROVIDER_BINARY, PROVIDER_RUNTIME
from tools import image

EPOCH = 1_700_000_000


def _root(at: Path, mtime: float) -> Path:
    (at / "venv" / "bin").mkdir(parents=True)
    (at / "venv" / "bin" / "python3.11").symlink_to("/usr/bin/python3.11")
    (at / "usr" / "bin").mkdir(parents=True)
    (at / "usr" / "bin" / "python3.11").write_bytes(b"\x7fELF")
    (at / "usr" / "bin" / "python3.11").chmod(0o755)
    (at / "etc").mkdir()
    (at / "etc" / "passwd").write_text("nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n")
    for path in at.rglob("*"):
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return at


def test_two_roots_alike_but_for_their_files_times_give_one_digest(tmp_path: Path) -> None:
    first = image.oci_archive(_root(tmp_path / "a", EPOCH + 500), tmp_path / "a.oci.tar", EPOCH, "amd64")
    second = image.oci_archive(_root(tmp_path / "b", EPOCH + 9_000), tmp_path / "b.oci.tar", EPOCH, "amd64")
    assert first.digest == second.digest
    assert first.archive.read_bytes() == second.archive.read_bytes()
    assert first.docker_archive.read_bytes() == second.docker_archive.read_bytes()


def test_a_changed_file_changes_the_digest(tmp_path: Path) -> None:
    first = image.oci_archive(_root(tmp_path / "a", EPOCH), tmp_path / "a.oci.tar", EPOCH, "amd64")
    root = _root(tmp_path / "b", EPOCH)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    os.utime(root / "etc" / "passwd", (EPOCH, EPOCH))
    assert image.oci_archive(root, tmp_path / "b.oci.tar", EPOCH, "amd64").digest != first.digest


def test_the_layer_is_sorted_dated_no_later_than_the_epoch_and_keeps_modes_and_links(tmp_path: Path) -> None:
    root = _root(tmp_path / "r", EPOCH + 500)
    os.utime(root / "etc" / "passwd", (EPOCH - 10, EPOCH - 10))
    with tarfile.open(fileobj=io.BytesIO(image.layer(root, EPOCH))) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    by_name = {m.name: m for m in members}
    assert by_name["etc/passwd"].mtime == EPOCH - 10, "an older file keeps its time"
    assert by_name["usr/bin/python3.11"].mtime == EPOCH, "a newer one is clamped"
    assert by_name["usr/bin/python3.11"].mode & 0o777 == 0o755
    assert by_name["venv/bin/python3.11"].issym()
    assert by_name["venv/bin/python3.11"].linkname == "/usr/bin/python3.11"
    assert all(m.uname == m.gname == "" for m in members)


@pytest.mark.parametrize("archive", ["oci", "docker"])
def test_both_archives_describe_one_image_that_runs_the_function_as_nonroot(
    tmp_path: Path, archive: str
) -> None:
    built = image.oci_archive(_root(tmp_path / "r", EPOCH), tmp_path / "fn.oci.tar", EPOCH, "amd64")
    with tarfile.open(built.archive if archive == "oci" else built.docker_archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    if archive == "oci":
        (described,) = json.loads(files["index.json"])["manifests"]
        assert described["digest"] == built.digest
        manifest = json.loads(files["blobs/sha256/" + built.digest.removeprefix("sha256:")])
        config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:")])
    else:
        (entry,) = json.loads(files["manifest.json"])
        config = json.loads(files[entry["Config"]])
        assert entry["Layers"] == [built.layer_digest.removeprefix("sha256:") + "/layer.tar"]
    assert config["rootfs"]["diff_ids"] == [built.layer_digest]
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["/venv/bin/python3.11", "-m", "function"]
    assert not any(e.startswith("TLS_SERVER_CERTS_DIR=") for e in config["config"]["Env"])


def test_another_commits_code_is_one_more_layer_that_hides_the_function_package_below(tmp_path: Path) -> None:
    built = image.oci_archive(_root(tmp_path / "r", EPOCH), tmp_path / "fn.oci.tar", EPOCH, "amd64")
    code = tmp_path / "function"
    (code / "route" / "__pycache__").mkdir(parents=True)
    (code / "fn.py").write_text("OLD = True\n")
    (code / "route" / "verdict.py").write_text("pass\n")
    (code / "route" / "__pycache__" / "verdict.cpython-311.pyc").write_bytes(b"new code compiled")
    out = image.with_code(built.docker_archive, code, tmp_path / "old.docker.tar", EPOCH, "function/ of abc")
    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    (entry,) = json.loads(files["manifest.json"])
    config = json.loads(files[entry["Config"]])
    below, added = entry["Layers"]
    assert files[below] == image.layer(_root(tmp_path / "again", EPOCH), EPOCH), (
        "the image's own layer, untouched"
    )
    assert config["rootfs"]["diff_ids"] == [
        built.layer_digest,
        "sha256:" + hashlib.sha256(files[added]).hexdigest(),
    ]
    assert config["history"][-1]["created_by"] == "tools/image.py: function/ of abc"
    with tarfile.open(fileobj=io.BytesIO(files[added])) as layer:
        members = {m.name: m for m in layer.getmembers()}
        package = image.FUNCTION_PACKAGE
        # In this order: the folder, its whiteout before any entry beside it (OCI layer.md), the sources.
        assert list(members) == [
            package,
            f"{package}/.wh..wh..opq",
            f"{package}/fn.py",
            f"{package}/route",
            f"{package}/route/verdict.py",
        ], "the package below hidden (its compiled new code with it), the other commit's sources added"
        assert layer.extractfile(members[f"{package}/fn.py"]).read() == b"OLD = True\n"  # type: ignore[union-attr]
        assert all(m.mtime == EPOCH and m.uid == 0 for m in members.values())


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_the_image_config_names_the_architecture_it_was_built_for(tmp_path: Path, arch: str) -> None:
    built = image.oci_archive(_root(tmp_path / "r", EPOCH), tmp_path / "fn.oci.tar", EPOCH, arch)
    with tarfile.open(built.docker_archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    (entry,) = json.loads(files["manifest.json"])
    assert json.loads(files[entry["Config"]])["architecture"] == arch
    assert built.arch == arch


def test_wheels_for_another_architecture_are_asked_for_by_its_platform_tags_and_this_machines_by_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(image, "host_arch", lambda: "amd64")
    assert image.platform_options("amd64") == []
    options = image.platform_options("arm64")
    tags = [options[i + 1] for i, o in enumerate(options) if o == "--platform"]
    assert "manylinux_2_36_aarch64" in tags, "Debian 12's glibc"
    assert "manylinux2014_aarch64" in tags
    assert all("aarch64" in t for t in tags)
    assert not any("2_37" in t for t in tags), "a wheel needing a newer glibc than Debian 12's would not load"
    assert options[options.index("--python-version") + 1] == "3.11"


def test_outputs_of_another_architecture_are_named_apart_from_this_machines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(image, "host_arch", lambda: "amd64")
    assert image.package_path("amd64").name == "function-gateway-readiness.xpkg"
    assert image.package_path("arm64").name == "function-gateway-readiness-arm64.xpkg"
    assert image.commit_path("amd64").name == "commit"
    assert image.commit_path("arm64").name == "commit-arm64"


@pytest.mark.parametrize(
    ("machine", "arch"), [("x86_64", "amd64"), ("aarch64", "arm64"), ("riscv64", "riscv64")]
)
def test_this_machines_architecture_is_named_as_debian_and_oci_name_it(
    monkeypatch: pytest.MonkeyPatch, machine: str, arch: str
) -> None:
    monkeypatch.setattr(image.platform, "machine", lambda: machine)
    assert image.host_arch() == arch


def _config_and_tags(docker_archive: Path) -> tuple[dict[str, object], list[str]]:
    with tarfile.open(docker_archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    (entry,) = json.loads(files["manifest.json"])
    return json.loads(files[entry["Config"]])["config"], entry["RepoTags"]


@pytest.mark.parametrize(
    ("runtime", "says"),
    [
        (image.FUNCTION_RUNTIME, {"Entrypoint": ["/venv/bin/python3.11", "-m", "function"],
                                  "ExposedPorts": {"9443/tcp": {}}, "WorkingDir": "/home/nonroot",
                                  "tag": "function-gateway-readiness:latest"}),
        (PROVIDER_RUNTIME, {"Entrypoint": ["crossplane-kubernetes-provider"], "ExposedPorts": None,
                    "WorkingDir": "/", "tag": "provider-kubernetes:latest"}),
    ],
    ids=["the function's image serves gRPC on 9443 from nonroot's home",
         "a static binary's image runs it from / and exposes nothing"],
)  # fmt: skip
def test_an_images_config_says_what_its_runtime_runs_always_as_nonroot(
    tmp_path: Path, runtime: image.Runtime, says: dict[str, object]
) -> None:
    built = image.oci_archive(_root(tmp_path / "r", EPOCH), tmp_path / "x.oci.tar", EPOCH, "amd64", runtime)
    config, tags = _config_and_tags(built.docker_archive)
    assert config["Entrypoint"] == says["Entrypoint"]
    assert config.get("ExposedPorts") == says["ExposedPorts"]
    assert config["WorkingDir"] == says["WorkingDir"]
    assert tags == [says["tag"]]
    assert config["Env"] == list(runtime.env)
    assert config["User"] == "65532:65532"
    assert config["Labels"] == {"org.opencontainers.image.source": runtime.source}


def test_a_static_root_holds_the_ca_bundle_the_accounts_and_the_binary_and_nothing_of_debian_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def extract(into: Path, variant: str, packages: tuple[str, ...], epoch: int, arch: str) -> None:
        assert (variant, packages, epoch, arch) == ("extract", ("ca-certificates",), EPOCH, "amd64")
        certs = into / "usr" / "share" / "ca-certificates" / "mozilla"
        certs.mkdir(parents=True)
        (certs / "B.crt").write_text("B\n")
        (certs / "A.crt").write_text("A\n")
        (into / "usr" / "bin").mkdir(parents=True)
        (into / "usr" / "bin" / "openssl").write_bytes(b"\x7fELF")

    monkeypatch.setattr(image, "debian_root", extract)
    owned: dict[str, tuple[int, int]] = {}
    # The build runs as root; this test need not: the owner it gives is recorded, not set.
    monkeypatch.setattr(image.os, "chown", lambda path, uid, gid: owned.__setitem__(str(path), (uid, gid)))
    binary = tmp_path / "provider"
    binary.write_bytes(b"\x7fELF static")
    root = tmp_path / "root"
    image.static_root(root, binary, PROVIDER_BINARY, EPOCH, "amd64")
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())
    assert files == [
        "etc/group",
        "etc/passwd",
        "etc/ssl/certs/ca-certificates.crt",
        "usr/local/bin/crossplane-kubernetes-provider",
    ]
    assert (root / image.CA_BUNDLE).read_text() == "A\nB\n", "the certificates in sorted order"
    assert (root / "usr/local/bin/crossplane-kubernetes-provider").read_bytes() == b"\x7fELF static"
    assert (root / "usr/local/bin/crossplane-kubernetes-provider").stat().st_mode & 0o777 == 0o755
    assert (root / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert owned == {str(root / "home" / "nonroot"): (image.NONROOT, image.NONROOT)}
    assert not (tmp_path / "root-ca-certificates").exists(), "Debian's extracted packages removed"


def _package_config(layers: list[str], entrypoint: list[str]) -> dict[str, object]:
    return {"rootfs": {"diff_ids": layers}, "config": {"Entrypoint": entrypoint}}


@pytest.mark.parametrize(
    ("layers", "entrypoint", "problems"),
    [
        (["LAYER", "sha256:package-yaml"], PROVIDER_RUNTIME.entrypoint, []),
        (["sha256:package-yaml"], PROVIDER_RUNTIME.entrypoint, ["pkg does not carry the image's layer LAYER"]),
        (["LAYER"], ["/bin/sh"], ["pkg's entrypoint is ['/bin/sh']"]),
    ],
    ids=["a package whose image holds the built layer and runs its entrypoint is what was built",
         "a package without the built layer is another image, however it starts",
         "a package with the layer but another entrypoint runs something else"],
)  # fmt: skip
def test_a_package_carries_an_image_only_with_its_layer_and_its_entrypoint(
    tmp_path: Path, layers: list[str], entrypoint: tuple[str, ...], problems: list[str]
) -> None:
    built = image.oci_archive(
        _root(tmp_path / "r", EPOCH), tmp_path / "x.oci.tar", EPOCH, "amd64", PROVIDER_RUNTIME
    )
    layers = [built.layer_digest if layer == "LAYER" else layer for layer in layers]
    problems = [p.replace("LAYER", built.layer_digest) for p in problems]
    assert (
        image.carrying(_package_config(layers, list(entrypoint)), built, PROVIDER_RUNTIME, "pkg") == problems
    )
