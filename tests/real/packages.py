"""Build the Function and the Configuration package with the real `crossplane xpkg build`, and look inside.

`make packages` writes both to `_output/`. The Configuration's package root
holds only what the package parser accepts (its metadata, XRDs and
Compositions); the install manifests live in `examples/install/`, and the
package's examples are the two example XRs, staged into a folder of their own
because `--examples-root` takes every YAML under it.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.real import toolchain
from tests.real.process import run
from tests.real.versions import CROSSPLANE_OLDEST as CROSSPLANE_CLI
from tests.support import EXAMPLES, ROOT, yaml_docs
from tools import image

CONFIGURATION = EXAMPLES / "configuration"
FUNCTION_PACKAGE = "function-gateway-readiness.xpkg"
CONFIGURATION_PACKAGE = "configuration-inference-gateways.xpkg"
# The example XRs a Configuration carries.
CONFIGURATION_EXAMPLES = [EXAMPLES / "inference-gateway" / "xr.yaml", EXAMPLES / "model-route" / "xr.yaml"]

# provider-kubernetes' image as its cluster/images/provider-kubernetes/Dockerfile
# makes it on gcr.io/distroless/static (whose PATH and SSL_CERT_FILE these are).
PROVIDER_BINARY = "/usr/local/bin/crossplane-kubernetes-provider"
PROVIDER_RUNTIME = image.Runtime(
    "provider-kubernetes",
    (PROVIDER_BINARY.rsplit("/", 1)[1],),
    (
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"SSL_CERT_FILE=/{image.CA_BUNDLE}",
    ),
    "https://github.com/crossplane-contrib/provider-kubernetes",
    workdir="/",
)


def _layers(xpkg: Path) -> dict[str, bytes]:
    """Every file in every layer of a package (an OCI image tarball)."""
    files: dict[str, bytes] = {}
    with tarfile.open(xpkg) as outer:
        manifest = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for layer in manifest[0]["Layers"]:
            data = outer.extractfile(layer).read()  # type: ignore[union-attr]
            with tarfile.open(fileobj=io.BytesIO(data)) as inner:
                for member in inner.getmembers():
                    if member.isfile():
                        files[member.name] = inner.extractfile(member).read()  # type: ignore[union-attr]
    return files


def _kinds(text: bytes) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in yaml_docs(text.decode()))


def xpkg_build(
    cli: Path, root: Path, out: Path, *, examples: Path | None = None, embed: Path | None = None
) -> Path:
    """`crossplane xpkg build` of a package root, offline, into out.

    examples: the folder of example XRs it carries; when None an empty one,
    because the CLI's default (./examples from the working directory) would
    put this repository's examples into a package that wants none. embed: a
    `docker save` tarball of the runtime image, embedded.
    """
    if examples is None:
        examples = out.with_suffix(".no-examples")
        examples.mkdir(parents=True, exist_ok=True)
    run(
        [
            str(cli),
            "xpkg",
            "build",
            "--package-root",
            str(root),
            "--examples-root",
            str(examples),
            *(["--embed-runtime-image-tarball", str(embed)] if embed else []),
            "-o",
            str(out),
        ],
        no_network=True,
    )
    return out


def want_configuration() -> list[tuple[str, str]]:
    return sorted(
        [("Configuration", "configuration-inference-gateways")]
        + [
            (d["kind"], d["metadata"]["name"])
            for f in sorted(CONFIGURATION.glob("*.yaml"))
            if f.name != "crossplane.yaml"
            for d in yaml_docs(f.read_text())
        ]
    )


def build(crank: Path, outdir: Path) -> dict[str, list[str]]:
    """Build both packages into outdir; per package, what is wrong with its contents."""
    outdir.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {FUNCTION_PACKAGE: [], CONFIGURATION_PACKAGE: []}
    with tempfile.TemporaryDirectory(prefix="xpkg-") as tmp:
        none = Path(tmp) / "no-examples"
        none.mkdir()
        fn = outdir / FUNCTION_PACKAGE
        xpkg_build(crank, ROOT / "package", fn, examples=none)
        got = _kinds(_layers(fn)["package.yaml"])
        want = [
            ("CustomResourceDefinition", "inputs.gatewayreadiness.fn.crossplane.io"),
            ("Function", "function-gateway-readiness"),
        ]
        if got != want:
            problems[FUNCTION_PACKAGE].append(f"the Function package holds {got}, want {want}")

        staged = Path(tmp) / "configuration-examples"
        staged.mkdir()
        for xr in CONFIGURATION_EXAMPLES:
            (staged / f"{xr.parent.name}.yaml").write_bytes(xr.read_bytes())
        cfg = outdir / CONFIGURATION_PACKAGE
        xpkg_build(crank, CONFIGURATION, cfg, examples=staged)
        files = _layers(cfg)
        got = _kinds(files["package.yaml"])
        if got != want_configuration():
            problems[CONFIGURATION_PACKAGE].append(
                f"the Configuration holds {got}, want {want_configuration()}"
            )
        examples = sorted(d["kind"] for d in yaml_docs(files.get(".up/examples.yaml", b"").decode()))
        if examples != ["InferenceGateway", "ModelRoute"]:
            problems[CONFIGURATION_PACKAGE].append(f"the Configuration's examples are {examples}")
    return problems


def main(argv: list[str]) -> int:
    outdir = Path(argv[0] if argv else ROOT / "_output")
    try:
        crank = toolchain.ensure(CROSSPLANE_CLI, "crank")
    except toolchain.ToolchainError as e:
        print(e, file=sys.stderr)
        return 1
    problems = build(crank, outdir)
    for found in problems.values():
        for p in found:
            print(p, file=sys.stderr)
    for name in problems:
        print(outdir / name)
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
