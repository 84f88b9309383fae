"""One registry and version for every package reference (release.env)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import image, publish, release


def test_every_package_reference_follows_release_env() -> None:
    assert release.drift() == []


def test_every_place_is_found_exactly_once() -> None:
    current = release.read()
    for place in release.PLACES:
        assert release.found(place) == [place.render(current)] * place.count, place.path


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for place in release.PLACES:
        target = root / place.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(release.ROOT / place.path, target)
    shutil.copy(release.ROOT / "release.env", root / "release.env")
    return root


def test_retargeting_rewrites_every_place_and_nothing_else(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = {p.path: (root / p.path).read_text() for p in release.PLACES}
    wanted = release.Release("ghcr.io/acme/platform", "v2.3.4-rc.1")
    release.retarget(wanted, root)
    assert release.read(root) == wanted
    assert release.drift(root) == []
    for path, text in before.items():
        after = (root / path).read_text()
        # Only the references changed: same number of lines, same shape elsewhere.
        assert len(after.splitlines()) == len(text.splitlines())
        assert "xpkg.crossplane.io/example/function-gateway-readiness" not in after
    provider_line = "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"
    assert provider_line in (root / "examples/configuration/crossplane.yaml").read_text()


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--registry", "ghcr.io/acme", "--version", "0.2.0"], "--version '0.2.0'"),
        (["--registry", "ghcr.io/acme/", "--version", "v0.2.0"], "--registry 'ghcr.io/acme/'"),
        (["--registry", "GHCR.io/Acme", "--version", "v0.2.0"], "--registry 'GHCR.io/Acme'"),
    ],
    ids=["a version without its v", "a registry ending in a slash", "a registry in capitals"],
)
def test_a_bad_setting_is_refused_before_anything_is_written(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (release.ROOT / "release.env").read_text()
    with pytest.raises(SystemExit):
        release.main(args)
    assert complaint in capsys.readouterr().err
    assert (release.ROOT / "release.env").read_text() == before


@pytest.mark.parametrize(
    ("reference", "want"),
    [
        pytest.param(
            "xpkg.crossplane.io/example/function-gateway-readiness",
            "example-function-gateway-readiness",
            id="a package under an organisation is named with it, as the package manager names a dependency",
        ),
        pytest.param(
            "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes",
            "crossplane-contrib-provider-kubernetes",
            id="provider-kubernetes from the Configuration's dependsOn is named with its organisation",
        ),
        pytest.param(
            "ghcr.io/acme/platform/function-gateway-readiness",
            "acme-platform-function-gateway-readiness",
            id="every path part below the host becomes part of the name",
        ),
        pytest.param(
            "localhost:5000/function-gateway-readiness",
            "function-gateway-readiness",
            id="a registry host with a port is not part of the name",
        ),
        pytest.param(
            "acme/function-gateway-readiness",
            "acme-function-gateway-readiness",
            id="a reference without a host keeps its first part",
        ),
        pytest.param(
            "docker.io/function-gateway-readiness",
            "library-function-gateway-readiness",
            id="a one-part repository on Docker Hub is under library/, as go-containerregistry reads it",
        ),
        pytest.param(
            "ghcr.io/" + "a" * 70, "a" * 63, id="a repository longer than a DNS label is cut at 63 characters"
        ),
        pytest.param(
            "ghcr.io/Acme_Corp/fn",
            "cmeorp-fn",
            id="characters a DNS label cannot hold are dropped, as Crossplane drops them",
        ),
    ],
)
def test_a_package_is_named_after_its_repository_as_crossplane_names_it(reference: str, want: str) -> None:
    assert release.installed_name(reference) == want


@pytest.mark.parametrize(
    ("arm64_built_from", "pushed"),
    [
        ("HEAD", ["function-gateway-readiness.xpkg", "function-gateway-readiness-arm64.xpkg"]),
        ("an older commit", ["function-gateway-readiness.xpkg"]),
        (None, ["function-gateway-readiness.xpkg"]),
    ],
    ids=[
        "an arm64 package of the same commit is pushed with this machine's as one index",
        "an arm64 package of another commit is left out",
        "without an arm64 package only this machine's is pushed",
    ],
)
def test_make_release_pushes_every_architectures_package_of_the_commit_it_releases(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    arm64_built_from: str | None,
    pushed: list[str],
) -> None:
    monkeypatch.setattr(image, "OUT", tmp_path)
    monkeypatch.setattr(image, "host_arch", lambda: "amd64")
    monkeypatch.setattr(publish, "FUNCTION_XPKG", tmp_path / "function-gateway-readiness.xpkg")
    if arm64_built_from is not None:
        image.package_path("arm64").write_bytes(b"xpkg")
        image.commit_path("arm64").write_text(arm64_built_from + "\n")
    assert [p.name for p in publish.function_packages("HEAD")] == pushed
    said = capsys.readouterr().err
    assert ("the arm64 package is of another commit, not pushed" in said) is (
        arm64_built_from == "an older commit"
    )
