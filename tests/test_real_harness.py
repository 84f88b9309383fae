"""The real-component harness: its comparisons and checks can fail (pure parts, no binaries needed)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import http.client
import http.server
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.pki import CA
from tests.real import (
    conformance,
    costs,
    dataplane,
    network,
    packages,
    prober,
    report,
    timeline,
    toolchain,
    versions,
)
from tests.real.dataplane import DataPlane
from tests.real.process import ConformanceError
from tests.real.processes import Liveness, Supervisor
from tests.real.report import Report
from tests.real.upstreams import Upstream
from tests.real.versions import CROSSPLANE_OLDEST, Component

XR = {"apiVersion": "ai.example.org/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "gw"}}
OBJ = {
    "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
    "kind": "Object",
    "metadata": {"name": "o", "annotations": {"crossplane.io/composition-resource-name": "gateway"}},
    "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "Gateway", "metadata": {"name": "g"}}}},
}


def test_identical_renders_have_no_differences() -> None:
    assert conformance.differences([XR, OBJ], copy.deepcopy([XR, OBJ])) == []


def test_a_changed_composed_resource_is_a_difference() -> None:
    other = copy.deepcopy(OBJ)
    other["spec"]["forProvider"]["manifest"]["metadata"]["name"] = "h"
    assert conformance.differences([XR, OBJ], [XR, other]) == ["differs: Object gateway"]


def test_a_resource_only_one_side_renders_is_a_difference() -> None:
    assert conformance.differences([XR, OBJ], [XR]) == ["only in crossplane render: Object gateway"]


def test_the_same_documents_in_another_order_are_a_difference() -> None:
    assert conformance.differences([XR, OBJ], [OBJ, XR]) == ["the same documents in another order"]


def test_inner_manifests_are_validated_too() -> None:
    assert conformance.inner_manifests([XR, OBJ]) == [OBJ["spec"]["forProvider"]["manifest"]]


def test_the_validate_summary_is_read() -> None:
    line = "Total 12 resources: 0 missing schemas, 11 success cases, 1 failure cases"
    match = conformance._TOTAL.search(line)
    assert match is not None
    assert match.groups() == ("12", "0", "11", "1")


def test_the_cache_lives_outside_the_clone_keyed_by_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FGR_CACHE_DIR", str(tmp_path))
    assert (
        toolchain.binary_path(CROSSPLANE_OLDEST, "crank")
        == tmp_path / f"crossplane-{CROSSPLANE_OLDEST.version}" / "crank"
    )
    monkeypatch.delenv("FGR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert toolchain.cache_root() == tmp_path / "function-gateway-readiness"


WRAPPED = [c for c in (*toolchain.COMPONENTS.values(), versions.ENVOY_AI_GATEWAY_OLDEST) if c.archive is None]


@pytest.mark.parametrize("component", WRAPPED, ids=lambda c: f"{c.name} {c.version}")
def test_every_pinned_binary_has_a_wrapper_module_with_its_go_sum(component: Component) -> None:
    module = toolchain.MODULES / component.name
    go_mod = (module / "go.mod").read_text()
    assert f"{component.module} {component.version}" in go_mod
    assert (module / "go.sum").stat().st_size > 0
    local = go_mod.splitlines()[0].removeprefix("module ").strip()
    tools = (module / "tools.go").read_text() if (module / "tools.go").exists() else ""
    for package in component.binaries.values():
        if package.startswith(local + "/"):
            assert (module / package.removeprefix(local + "/") / "main.go").is_file(), package
        else:
            assert f'"{package}"' in tools, package


def test_the_configuration_package_wants_exactly_its_xrds_and_compositions() -> None:
    kinds = [kind for kind, _ in packages.want_configuration()]
    assert sorted(kinds) == [
        "CompositeResourceDefinition",
        "CompositeResourceDefinition",
        "Composition",
        "Composition",
        "Configuration",
    ]


def _archive(tmp_path: Path, *, checksum: str | None = None) -> Component:
    """A shared/upstream/ with one archive of one top folder holding a go.mod."""
    upstream = tmp_path / "shared" / "upstream"
    upstream.mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"module example.com/x\n"
        info = tarfile.TarInfo("x-v1.0.0/go.mod")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (upstream / "x.tar.gz").write_bytes(buf.getvalue())
    digest = checksum or hashlib.sha256(buf.getvalue()).hexdigest()
    (upstream / "x.tar.gz.sha256").write_text(f"{digest}  x.tar.gz\n")
    return Component(name="x", module="example.com/x", version="v1.0.0", binaries={}, archive="x.tar.gz")


@pytest.mark.parametrize(
    ("checksum", "builds"),
    [
        pytest.param(None, True, id="an archive whose sha256 matches is extracted into the cache"),
        pytest.param("0" * 64, False, id="an archive whose sha256 differs is refused before extraction"),
    ],
)
def test_an_archive_is_built_only_when_its_checksum_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checksum: str | None, builds: bool
) -> None:
    component = _archive(tmp_path, checksum=checksum)
    monkeypatch.setenv("SHARED_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("FGR_CACHE_DIR", str(tmp_path / "cache"))
    if builds:
        tree = toolchain.source_dir(component)
        assert tree == tmp_path / "cache" / "src" / "x-v1.0.0"
        assert (tree / "go.mod").read_text() == "module example.com/x\n"
    else:
        with pytest.raises(toolchain.ToolchainError, match="sha256"):
            toolchain.source_dir(component)
        assert not (tmp_path / "cache" / "src" / "x-v1.0.0").exists()


def test_the_shipped_envoy_ai_gateway_archive_matches_its_checksum() -> None:
    archive = toolchain.shared_dir() / "upstream" / str(versions.ENVOY_AI_GATEWAY.archive)
    want = archive.with_name(archive.name + ".sha256").read_text().split()[0]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == want


ROOT = Path(__file__).resolve().parent.parent


def test_every_pin_in_versions_env_is_read_by_the_harness_the_makefile_or_the_kind_suite() -> None:
    readers = (ROOT / "tests" / "real" / "versions.py").read_text() + (ROOT / "Makefile").read_text()
    readers += (ROOT / "e2e" / "run.sh").read_text()
    unread = [name for name in versions.PINS if name not in readers]
    assert unread == []


@pytest.mark.parametrize(
    ("reader", "own_pin"),
    [
        ("Makefile", r"^\w+_(VERSION|REF)\s*:?=\s*v?\d"),
        ("e2e/run.sh", r"_VERSION:-v?\d"),
    ],
    ids=[
        "the Makefile pins no upstream version of its own",
        "the kind suite pins no upstream version of its own",
    ],
)
def test_versions_env_is_the_one_pin(reader: str, own_pin: str) -> None:
    assert re.findall(own_pin, (ROOT / reader).read_text(), re.M) == []
    assert "versions.env" in (ROOT / reader).read_text()


def test_a_pin_line_without_a_value_is_refused(tmp_path: Path) -> None:
    pins = tmp_path / "versions.env"
    pins.write_text("# a comment\nKWOK_VERSION=v0.7.0\nENVOY_GATEWAY_VERSION=\n")
    with pytest.raises(ValueError, match="ENVOY_GATEWAY_VERSION"):
        versions.read_pins(pins)


def test_pins_are_read_as_name_and_value(tmp_path: Path) -> None:
    pins = tmp_path / "versions.env"
    pins.write_text("# a comment\n\n  KWOK_VERSION = v0.7.0  \nETCD_VERSION=v3.6.16\n")
    assert versions.read_pins(pins) == {"KWOK_VERSION": "v0.7.0", "ETCD_VERSION": "v3.6.16"}


class _Secrets:
    """A Kube that holds the named objects of a namespace."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)

    def get(self, _api_version: str, kind: str, name: str, _namespace: str) -> dict[str, object] | None:
        return {"metadata": {"name": name}} if f"{kind}/{name}" in self.present else None


_BUNDLE_POD = {
    "metadata": {"namespace": "envoy-gateway-system"},
    "spec": {
        "volumes": [
            {"name": "uds", "emptyDir": {}},
            {
                "name": "bundle",
                "projected": {
                    "sources": [
                        {"secret": {"name": "index"}},
                        {"secret": {"name": "part-0", "optional": True}},
                    ]
                },
            },
            {"name": "certs", "secret": {"secretName": "envoy"}},
        ]
    },
}


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        (("Secret/index", "Secret/envoy"), None),
        (("Secret/envoy",), "Secret/index"),
        (("Secret/index",), "Secret/envoy"),
    ],
    ids=[
        "an optional projected Secret may be missing",
        "a projected Secret not marked optional keeps the pod from starting",
        "a Secret volume keeps the pod from starting",
    ],
)
def test_the_data_plane_starts_a_pod_only_once_its_volumes_can_be_mounted(
    present: tuple[str, ...], missing: str | None
) -> None:
    plane: Any = SimpleNamespace(kube=_Secrets(*present))
    assert DataPlane._missing_source(plane, _BUNDLE_POD) == missing


def test_a_core_render_reads_as_the_in_process_one_without_what_the_core_adds_itself() -> None:
    """CLI v2.5 renders in a v2.4 core, which adds its own conditions, refs, UIDs and events;
    the function's results come back as events of its pipeline step."""
    xr = {
        "apiVersion": "ai.example.org/v1alpha1",
        "kind": "InferenceGateway",
        "spec": {"crossplane": {"resourceRefs": [{"kind": "Object", "name": "a"}]}},
        "status": {
            "conditions": [
                {"type": "Responsive", "status": "True"},
                {"type": "GatewayReady", "status": "False"},
                {"type": "Synced", "status": "True"},
                {"type": "Ready", "status": "False"},
            ]
        },
    }
    obj = {"kind": "Object", "metadata": {"ownerReferences": [{"kind": "InferenceGateway", "uid": "d1c0"}]}}
    api = "render.crossplane.io/v1beta1"
    events = [
        {
            "apiVersion": api,
            "kind": "Result",
            "message": "Successfully selected composition: x",
            "severity": "Normal",
        },
        {
            "apiVersion": api,
            "kind": "Result",
            "message": 'Pipeline step "compose": GatewayReady: no',
            "severity": "Warning",
        },
        {
            "apiVersion": api,
            "kind": "Result",
            "message": 'Composed resource "a" is not yet ready',
            "severity": "Normal",
        },
    ]
    assert conformance.as_in_process_render([xr, obj, *events]) == [
        {
            "apiVersion": "ai.example.org/v1alpha1",
            "kind": "InferenceGateway",
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "GatewayReady", "status": "False"},
                ]
            },
        },
        {"kind": "Object", "metadata": {"ownerReferences": [{"kind": "InferenceGateway", "uid": ""}]}},
        {
            "apiVersion": api,
            "kind": "Result",
            "message": "GatewayReady: no",
            "severity": "SEVERITY_WARNING",
            "step": "compose",
        },
    ]


def test_a_second_sigterm_does_not_cut_the_teardown_short(tmp_path: Path) -> None:
    """A killed run unwinds through its `finally` blocks once; a second SIGTERM (timeout
    forwarding the one pkill also sent) must not interrupt that teardown."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    done = tmp_path / "torn-down"
    script = textwrap.dedent(
        f"""
        import os, signal, time
        from tests.real.processes import stop_cleanly_on_sigterm
        stop_cleanly_on_sigterm()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the second one, mid-teardown
            time.sleep(0.2)
            open({str(done)!r}, "w").write("yes")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 128 + 15, out.stderr
    assert done.read_text() == "yes"


def _route(condition: str | None, serving: bool | None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if condition is not None:
        status["conditions"] = [{"type": "RoutingReady", "status": condition}]
    if serving is not None:
        status["serving"] = {"ready": serving, "reason": "R"}
    return {"status": status}


SAID_CASES = [
    ("a route whose function decided True says True", _route("True", True), (True, True)),
    ("a condition written back True over a decided False says False", _route("True", False), (False, True)),
    ("a condition written back False over a decided True says True", _route("False", True), (True, False)),
    ("a route an older version composed says its condition", _route("True", None), (True, True)),
    ("a route with neither says nothing ready", _route(None, None), (False, False)),
]


@pytest.mark.parametrize(("name", "xr", "want"), SAID_CASES, ids=[c[0] for c in SAID_CASES])
def test_the_prober_reads_what_was_decided(name: str, xr: dict[str, Any], want: tuple[bool, bool]) -> None:
    assert prober.said(xr, "RoutingReady") == want, name


def _sample(
    ok: bool,
    ready: bool,
    *,
    written_back: bool = False,
    allowance: bool = False,
    deleted: bool = False,
    leak: bool = False,
) -> prober.Sample:
    return prober.Sample(
        1,
        "s",
        "route a/b",
        ok,
        200 if ok else 500,
        ready,
        leak=leak,
        allowance=allowance,
        written_back=written_back,
        deleted=deleted,
    )


JUDGE_CASES = [
    # (name, sample, (lying, written back, leaks, deleted))
    ("a failed request while it said it was decided ready is a lie", _sample(False, True), (1, 0, 0, 0)),
    (
        "a failed request while only a written-back condition said True is counted apart",
        _sample(False, False, written_back=True),
        (0, 1, 0, 0),
    ),
    ("a failed request while nothing said ready is neither", _sample(False, False), (0, 0, 0, 0)),
    ("a served request is neither", _sample(True, True), (0, 0, 0, 0)),
    (
        "a failure inside the detection allowance is neither",
        _sample(False, True, written_back=False, allowance=True),
        (0, 0, 0, 0),
    ),
    (
        "a failure answered after its route was deleted is counted apart, not a lie",
        _sample(False, True, deleted=True),
        (0, 0, 0, 1),
    ),
    ("a keyless answer while the route needs a key is a leak", _sample(True, True, leak=True), (0, 0, 1, 0)),
    (
        "a keyless answer is a leak even for a route being deleted: no deletion skips a key check",
        _sample(True, True, leak=True, deleted=True),
        (0, 0, 1, 0),
    ),
]


@pytest.mark.parametrize(("name", "sample", "want"), JUDGE_CASES, ids=[c[0] for c in JUDGE_CASES])
def test_the_prober_judges_lies_and_written_back_seconds_apart(
    name: str, sample: prober.Sample, want: tuple[int, int, int, int]
) -> None:
    p = prober.Prober(kube=None, port_for=lambda *_: 0, keys=dict)  # type: ignore[arg-type]
    p.samples.append(sample)
    t = p.totals()
    assert (t.lying, t.written_back, t.leaks, t.deleted) == want, name
    assert len(t.lies) == t.lying + t.leaks, name


ALLOWANCE_CASES = [
    # (name, (fault at, detection s, detected at), (read at, answered at), (inside, seconds after the fault))
    ("before any fault nothing is detection", (None, 5, None), (99.0, 100.0), (False, None)),
    ("an answer within the allowance is detection", (100.0, 5, None), (103.0, 104.0), (True, 4.0)),
    ("an answer past the allowance is judged", (100.0, 5, None), (104.5, 105.5), (False, 5.5)),
    (
        "a read from before the XRs were seen to know is still detection",
        (100.0, 10, 103.0),
        (102.9, 103.4),
        (True, 3.4),
    ),
    (
        "a read after the XRs were seen to know is judged, whatever the allowance left",
        (100.0, 10, 103.0),
        (103.1, 103.4),
        (False, 3.4),
    ),
    (
        "an answer that came after a fault its probe began before is detection",
        (100.0, 5, None),
        (99.5, 100.2),
        (True, 0.2),
    ),
]


@pytest.mark.parametrize(
    ("name", "state", "when", "want"), ALLOWANCE_CASES, ids=[c[0] for c in ALLOWANCE_CASES]
)
def test_the_detection_allowance_runs_from_a_fault_until_its_bound_or_until_the_xrs_know(
    name: str,
    state: tuple[float | None, float, float | None],
    when: tuple[float, float],
    want: tuple[bool, float | None],
) -> None:
    p = prober.Prober(kube=None, port_for=lambda *_: 0, keys=dict)  # type: ignore[arg-type]
    p._fault_at, p._detection_s, p._detected_at = state
    assert p._allowance(*when) == want, name


def test_a_fault_starts_a_new_allowance_and_detected_ends_it() -> None:
    p = prober.Prober(kube=None, port_for=lambda *_: 0, keys=dict)  # type: ignore[arg-type]
    began = p.fault(detection_s=60)
    assert p._allowance(began, began + 1)[0]
    p.detected()
    assert not p._allowance(time.time() + 0.001, time.time() + 1)[0]
    p.fault(detection_s=60)  # a new fault: its reads are detection again
    assert p._allowance(time.time(), time.time() + 1)[0]


def test_a_lie_comes_with_what_its_subject_answered_and_said_in_the_seconds_before(tmp_path: Path) -> None:
    p = prober.Prober(kube=None, port_for=lambda *_: 0, keys=dict)  # type: ignore[arg-type]

    def at(second: int, subject: str, status: int, ready: bool) -> prober.Sample:
        return prober.Sample(
            second, "s", subject, 200 <= status < 300, status, ready, after_fault=second - 100.0
        )

    p.samples += [
        at(80, "route a/b", 200, True),  # before the window
        at(95, "route a/b", 200, True),
        at(96, "route a/c", 500, False),  # another subject
        at(97, "route a/b", 404, False),
        at(98, "route a/b", 404, True),
        at(99, "route a/b", 404, True),  # after it
        prober.Sample(99, "s", "prober refused", False, -1, False),  # before any fault: no distance
    ]
    lie = p.samples[4]
    assert p.history(lie) == "-3 s 200 T, -1 s 404 F, +0 s 404 T"
    p.dump(tmp_path / "prober.jsonl")
    dumped = [json.loads(line) for line in (tmp_path / "prober.jsonl").read_text().splitlines()]
    assert [(d["second"], d["subject"], d["after_fault"]) for d in dumped] == [
        (s.second, s.subject, s.after_fault) for s in p.samples
    ]


class _FakeKube:
    """What the prober lists: one gateway and one route, each saying what it was handed."""

    def __init__(self, gateway_status: dict[str, Any], route_status: dict[str, Any]) -> None:
        self.gateway_status, self.route_status = gateway_status, route_status
        self.down = False  # the API server does not answer
        # (kind, namespace, name) -> when the harness's delete of it returned, and when it began, as
        # Kube records them.
        self.deleted_at: dict[tuple[str, str | None, str], float] = {}
        self.deleting_since: dict[tuple[str, str | None, str], float] = {}
        # What a read of the route by name finds, where it differs from the list (it turned since).
        self.route_read: dict[str, Any] | None = None

    def list(self, _api: str, kind: str, _namespace: str | None = None, **_: Any) -> list[dict[str, Any]]:
        if self.down:
            raise ConnectionRefusedError("the API server is down")
        if kind == "InferenceGateway":
            status = {"gateway": {"name": "g", "namespace": "p"}} | self.gateway_status
            return [
                {
                    "apiVersion": "v1",
                    "kind": kind,
                    "metadata": {"name": "g", "namespace": "p"},
                    "status": status,
                }
            ]
        return [
            {
                "apiVersion": "v1",
                "kind": kind,
                "metadata": {"name": "r", "namespace": "t"},
                "spec": {"model": "m", "gatewayRef": {"name": "g", "namespace": "p"}},
                "status": self.route_status,
            }
        ]

    def get(
        self, api: str, kind: str, name: str, _namespace: str | None = None, **_: Any
    ) -> dict[str, Any] | None:
        found = next(o for o in self.list(api, kind) if o["metadata"]["name"] == name)
        if kind == "ModelRoute" and self.route_read is not None:
            found = found | {"status": self.route_read}
        return found


def test_a_probe_judges_each_subject_by_what_it_decided_and_flags_a_written_back_condition() -> None:
    """Through _probe itself, to a port nothing listens on (every request fails): the route's
    written-back True is flagged, not called a lie; the gateway's decided True is a lie."""
    kube = _FakeKube(
        {"serving": {"ready": True, "reason": "Available"}},
        {
            "serving": {"ready": False, "reason": "GatewayNotReady"},
            "conditions": [{"type": "RoutingReady", "status": "True"}],
        },
    )
    p = prober.Prober(kube, port_for=lambda *_: 1, keys=dict)  # type: ignore[arg-type]
    p._probe(1)
    got = {s.subject: (s.ok, s.ready, s.written_back) for s in p.samples}
    assert got == {"gateway p/g": (False, True, False), "route t/r": (False, False, True)}
    t = p.totals()
    assert (t.lying, t.written_back) == (1, 1)


DELETED_CASES = [
    # (name, when the harness's delete of the route began and returned: "read" is just after the
    # prober read it by name; seconds are from the probe's start; None: not begun, or not returned
    # yet; its failure excused)
    ("a route the harness deleted between the read and the answer is excused", "read", "read", True),
    (
        "a delete begun before the answer that returned after it is excused: it took effect inside the call",
        "read",
        60.0,
        True,
    ),
    ("a delete begun after the read and still under way is excused", "read", None, True),
    (
        "a delete under way for 40 s excuses nothing: a call that hangs would excuse the route for good",
        -40.0,
        None,
        False,
    ),
    ("a route deleted before the prober read it (made again since) still lied", -5.0, -5.0, False),
    ("a route deleted only after its answer came still lied", 60.0, 60.0, False),
    ("a route never deleted lied", None, None, False),
]


@pytest.mark.parametrize(
    ("name", "began", "returned", "excused"), DELETED_CASES, ids=[c[0] for c in DELETED_CASES]
)
def test_a_failure_is_excused_only_for_a_route_whose_delete_overlapped_the_read_and_its_answer(
    name: str, began: str | float | None, returned: str | float | None, excused: bool
) -> None:
    """Through _probe: the route read as decided True, its request failed (the CI of a2bb011: a
    scenario deleted the route within the prober's second; make scale: a 503 came before the delete
    call returned). The gateway, never deleted, lied."""
    decided_true = {"serving": {"ready": True, "reason": "Available"}}
    kube = _FakeKube(decided_true, decided_true)
    key = ("ModelRoute", "t", "r")
    for record, when in ((kube.deleting_since, began), (kube.deleted_at, returned)):
        if isinstance(when, float):
            record[key] = time.time() + when
    if "read" in (began, returned):
        read = kube.get

        def read_then_delete(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
            got = read(*args, **kwargs)
            if args[1] == "ModelRoute":
                for record, when in ((kube.deleting_since, began), (kube.deleted_at, returned)):
                    if when == "read":
                        record[key] = time.time()
            return got

        kube.get = read_then_delete  # type: ignore[method-assign]
    p = prober.Prober(kube, port_for=lambda *_: 1, keys=dict)  # type: ignore[arg-type]
    p._probe(1)
    assert {s.subject: s.deleted for s in p.samples} == {"gateway p/g": False, "route t/r": excused}, name
    t = p.totals()
    assert (t.lying, t.deleted) == ((1, 1) if excused else (2, 0)), name
    assert all(s.why.startswith("Available: ") for s in t.lies), name


@pytest.mark.parametrize(
    ("read", "lying"),
    [({"serving": {"ready": False, "reason": "GatewayNotReady"}}, 1), (None, 2)],
    ids=[
        "a route that turned False after the round's list is judged by its read just before the request",
        "a route still True when read before its request lied",
    ],
)
def test_a_route_is_judged_by_what_it_said_just_before_its_request(
    read: dict[str, Any] | None, lying: int
) -> None:
    """make scale: a round of 100 routes takes 20 s, and 503s sent 20 s into a rollout were judged by
    the True each route said when the round began."""
    decided_true = {"serving": {"ready": True, "reason": "Available"}}
    kube = _FakeKube(decided_true, decided_true)
    kube.route_read = read
    p = prober.Prober(kube, port_for=lambda *_: 1, keys=dict)  # type: ignore[arg-type]
    p._probe(1)
    assert p.totals().lying == lying


def _probed_then_api_server_down() -> prober.Prober:
    """A prober that has probed one second of a serving gateway and route; the API server then goes down."""
    kube = _FakeKube({"serving": {"ready": True}}, {"serving": {"ready": True}})
    p = prober.Prober(kube, port_for=lambda *_: 1, keys=dict)  # type: ignore[arg-type]
    p._probe(1)
    kube.down = True
    return p


def test_while_the_api_server_is_down_on_purpose_requests_go_on_judged_by_what_the_xrs_said_last() -> None:
    p = _probed_then_api_server_down()
    with p.reporter_down():
        p._probe(2)
    during = {s.subject: (s.ready, s.down) for s in p.samples if s.second == 2}
    assert during == {"gateway p/g": (True, True), "route t/r": (True, True)}
    t = p.totals()
    # Every request fails (nothing listens on port 1): the first second's are lies, the second's stale.
    assert (t.lying, t.stale_down) == (2, 2)


def test_an_api_server_down_by_accident_is_an_error_not_a_probe_of_old_answers() -> None:
    p = _probed_then_api_server_down()
    with pytest.raises(ConnectionRefusedError):
        p._probe(2)


def _wait_until(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def test_a_component_that_exits_on_its_own_is_started_again_and_counted(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    proc = sup.start("quitter", [sys.executable, "-c", "import time; time.sleep(0.2)"])
    sup.start("pod-x-envoy", [sys.executable, "-c", "pass"])
    try:
        sup.keep_running(lambda p: not p.name.startswith("pod-"))
        assert _wait_until(lambda: sup.restarts.get("quitter", 0) >= 1)
        assert sup.find("quitter") is not proc
        # A pod's container is its kubelet's to start again, not the watchdog's.
        assert "pod-x-envoy" not in sup.restarts
    finally:
        sup.stop_all()


def test_a_component_a_fault_killed_stays_down_until_the_fault_ends(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    held = sup.start("held", [sys.executable, "-c", "import time; time.sleep(60)"])
    crashed = sup.start("crashed", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sup.keep_running(lambda _p: True)
        sup.kill(held)
        sup.kill(crashed, hold=False)
        assert _wait_until(lambda: sup.restarts.get("crashed", 0) == 1)
        time.sleep(1.5)  # a watchdog round or more
        assert "held" not in sup.restarts
        assert not sup.find("held").alive()
        assert sup.restart(held).alive()
    finally:
        sup.stop_all()


class _Health:
    """A /healthz that answers the status a test sets (None: the connection is closed unanswered)."""

    def __init__(self) -> None:
        self.status: int | None = 200
        health = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if health.status is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(health.status)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/healthz"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    ("status", "passes"),
    [
        pytest.param(200, True, id="a 200 passes"),
        pytest.param(302, True, id="a redirect passes, as the kubelet counts 200 to 399"),
        pytest.param(500, False, id="a 500 fails"),
        pytest.param(None, False, id="a connection closed without an answer fails"),
    ],
)
def test_a_liveness_probe_passes_as_the_kubelet_judges_an_http_get(status: int | None, passes: bool) -> None:
    health = _Health()
    health.status = status
    try:
        assert Liveness(health.url, timeout_s=2).passes() is passes
    finally:
        health.close()


def test_a_liveness_probe_to_a_closed_port_fails() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        assert Liveness(f"http://127.0.0.1:{port}/healthz").passes() is False


def test_a_liveness_probe_that_gets_no_answer_within_its_timeout_fails() -> None:
    # Listening, never accepting: the kernel completes the connection, nothing answers (a
    # SIGSTOPped server).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        started = time.monotonic()
        assert Liveness(f"http://127.0.0.1:{s.getsockname()[1]}/healthz", timeout_s=0.3).passes() is False
        assert time.monotonic() - started < 5


class _Clock:
    """The liveness probes' clock, stepped by a test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def _probed(tmp_path: Path, **probe: Any) -> Iterator[tuple[Supervisor, _Clock, _Health]]:
    """A supervisor with a sleeping "component" probed at a /healthz, every 10 clock seconds."""
    health = _Health()
    clock = _Clock()
    sup = Supervisor(tmp_path, clock=clock)
    try:
        sup.start("component", [sys.executable, "-c", "import time; time.sleep(60)"])
        sup.probe_liveness("component", Liveness(health.url, period_s=10, grace_s=5, **probe))
        yield sup, clock, health
    finally:
        sup.stop_all()
        health.close()


def _rounds(sup: Supervisor, clock: _Clock, health: _Health, statuses: list[int | None]) -> None:
    """One probe round per status, each a period after the last."""
    for status in statuses:
        health.status = status
        sup._probe()
        clock.now += 10


@pytest.mark.parametrize(
    ("statuses", "restarts"),
    [
        pytest.param([200] * 5, 0, id="passing probes restart nothing"),
        pytest.param([500, 500], 0, id="two failures are not yet the threshold of three"),
        pytest.param([500, 500, 500], 1, id="three failures in a row restart it"),
        pytest.param([500, None, 500], 1, id="a connection closed unanswered is a failure like a 500"),
        pytest.param(
            [500, 500, 200, 500, 500, 200], 0, id="failures that do not come in a row restart nothing"
        ),
        pytest.param(
            [500, 500, 500, 500, 500], 1, id="the probe starts over on the new process, so two more do not"
        ),
        pytest.param([500] * 6, 2, id="three more on the new process restart it again"),
    ],
)
def test_a_component_is_restarted_after_failure_threshold_failed_probes_in_a_row(
    tmp_path: Path, statuses: list[int | None], restarts: int
) -> None:
    with _probed(tmp_path, failure_threshold=3) as (sup, clock, health):
        first = sup.find("component")
        _rounds(sup, clock, health, statuses)
        assert sup.liveness_restarts.get("component", 0) == restarts
        assert (sup.find("component") is first) is (restarts == 0)
        assert sup.find("component").alive()
        assert first.alive() is (restarts == 0)
        # Not an exit: keep_running's count is of processes that exited on their own.
        assert sup.restarts == {}


def test_a_restarted_component_is_not_probed_before_its_initial_delay(tmp_path: Path) -> None:
    with _probed(tmp_path, failure_threshold=1, initial_delay_s=25) as (sup, clock, health):
        clock.now += 25
        _rounds(sup, clock, health, [500])
        again = sup.find("component")
        assert sup.liveness_restarts == {"component": 1}
        _rounds(sup, clock, health, [500, 500])  # 10 and 20 s after its start: within its initial delay
        assert sup.find("component") is again
        _rounds(sup, clock, health, [500])  # 30 s after
        assert sup.liveness_restarts == {"component": 2}
        assert "failed 1 times" in sup.find("component").log.read_text()


def test_a_component_a_fault_holds_down_is_not_probed_until_the_fault_ends(tmp_path: Path) -> None:
    with _probed(tmp_path, failure_threshold=3) as (sup, clock, health):
        _rounds(sup, clock, health, [500, 500])
        sup.kill(sup.find("component"))
        _rounds(sup, clock, health, [500, 500, 500])
        assert sup.liveness_restarts == {}
        assert not sup.find("component").alive()
        # Back: a new process, whose probe starts over (one failure is not three).
        sup.restart(sup.find("component"))
        _rounds(sup, clock, health, [500])
        assert sup.liveness_restarts == {}


def test_a_stopped_component_is_no_longer_probed(tmp_path: Path) -> None:
    with _probed(tmp_path, failure_threshold=1) as (sup, clock, health):
        sup.stop(sup.find("component"))
        sup.start("component", [sys.executable, "-c", "import time; time.sleep(60)"])
        _rounds(sup, clock, health, [500, 500])
        assert sup.liveness_restarts == {}


def test_the_watchdog_sends_the_probes(tmp_path: Path) -> None:
    health = _Health()
    health.status = 500
    sup = Supervisor(tmp_path, tick_s=0.05)
    proc = sup.start("wedged", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sup.probe_liveness("wedged", Liveness(health.url, period_s=0.05, failure_threshold=2, grace_s=1))
        sup.keep_running(lambda _p: True)
        assert _wait_until(lambda: sup.liveness_restarts.get("wedged", 0) >= 1)
        health.status = 200
        assert not proc.alive()
    finally:
        sup.stop_all()
        health.close()


def test_a_killed_process_starts_again_the_same_way(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    proc = sup.start(
        "sleeper",
        [sys.executable, "-c", "import os, time; print(os.environ['MARK']); time.sleep(60)"],
        env={"MARK": "m1"},
    )
    try:
        sup.kill(proc)
        assert not proc.alive()
        again = sup.restart(proc)
        assert again.alive()
        assert sup.find("sleeper") is again
        assert (again.cmd, again.env) == (proc.cmd, proc.env)
    finally:
        sup.stop_all()


def test_a_running_process_is_not_started_twice(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    proc = sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(ConformanceError, match="still running"):
            sup.restart(proc)
    finally:
        sup.stop_all()


def test_a_hung_process_answers_nothing_until_resumed(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    proc = sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sup.hang(proc)
        state = lambda: Path(f"/proc/{proc.popen.pid}/stat").read_text().split()[2]  # noqa: E731
        wait_for = time.monotonic() + 5
        while state() != "T" and time.monotonic() < wait_for:
            time.sleep(0.05)
        assert state() == "T"
        sup.resume(proc)
        wait_for = time.monotonic() + 5
        while state() == "T" and time.monotonic() < wait_for:
            time.sleep(0.05)
        assert state() != "T"
    finally:
        sup.stop_all()


def test_seconds_while_a_reporter_is_down_are_counted_apart() -> None:
    p = prober.Prober(kube=None, port_for=lambda *_: 0, keys=dict)  # type: ignore[arg-type]
    p.samples += [_sample(False, True), replace(_sample(False, True), second=2, down=True)]
    t = p.totals()
    assert (t.lying, t.stale_down) == (1, 1)


FAULT_LINE_CASES = [
    (
        "every fault survived prints its recovery",
        [
            Report("a", ok=True, fault=True, recovery=3.0, stale_down=2),
            Report("b", ok=True, fault=True, recovery=9.0),
        ],
        "faults: 2 of 2 faults survived on",
        "composed resources lost 0 (0 DELETE requests on Objects); lying seconds 0; "
        "stale while the reporter was down max 2 s; recovery p50 6 s, max 9 s",
    ),
    (
        "a fault that lost an Object is not survived and says how many",
        [Report("a", ok=False, fault=True, recovery=None, lost=3, deletes=3)],
        "faults: 0 of 2 faults survived on",
        "composed resources lost 3 (3 DELETE requests on Objects); lying seconds 0; "
        "stale while the reporter was down max 0 s; recovery not measured",
    ),
]


@pytest.mark.parametrize(
    ("name", "reports", "head", "tail"), FAULT_LINE_CASES, ids=[c[0] for c in FAULT_LINE_CASES]
)
def test_the_faults_line_says_what_the_faults_showed(
    name: str, reports: list[Report], head: str, tail: str
) -> None:
    line = report.faults_line(reports, 2, 0)
    assert line.startswith(head), name
    assert line.endswith(tail), name


def test_the_unit_suite_imports_without_the_kubernetes_client() -> None:
    """`make test` installs `.[test]` only: no test module may need the client to import
    (a fresh-clone CI failed on it when the prober's judging got its first test)."""
    modules = sorted(p.stem for p in (ROOT / "tests").glob("test_*.py"))
    code = (
        "import importlib, sys\n"
        "sys.modules['kubernetes'] = None\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('tests.' + m)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _terminating(finalizers: list[str], since: str | None, name: str = "r") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "finalizers": finalizers}
    if since:
        meta["deletionTimestamp"] = since
    return {"metadata": meta}


# 2026-12-03T10:00:00Z
NOON = 1796292000.0
# A line Envoy AI Gateway v1.1.0's controller wrote in CI (envoyproxy/ai-gateway#2565).
CONFLICT_LOG = (
    "2026-12-03T11:39:22Z\tERROR\tcontroller.ai-service-backend\tFailed to remove finalizer from object\t"
    '{"namespace": "team-a", "name": "r", "error": "Operation cannot be fulfilled on aiservicebackends'
    '.aigateway.envoyproxy.io \\"r\\": the object has been modified"}\n'
)
STUCK_CASES = [
    (
        "an object Terminating for a minute after the controller logged the failed removal is stuck, the others' kept",
        _terminating([report.AIGW_FINALIZER, "other.io/keep"], "2026-12-03T09:59:00Z"),
        CONFLICT_LOG,
        ["other.io/keep"],
    ),
    (
        "an object Terminating for less than the allowance is still the controller's to finish",
        _terminating([report.AIGW_FINALIZER], "2026-12-03T09:59:45Z"),
        CONFLICT_LOG,
        None,
    ),
    (
        "an object the controller never logged a failed removal for is left for its deletion wait to report",
        _terminating([report.AIGW_FINALIZER], "2026-12-03T09:00:00Z"),
        CONFLICT_LOG.replace('"name": "r"', '"name": "another"'),
        None,
    ),
    (
        "an object not being deleted is never touched",
        _terminating([report.AIGW_FINALIZER], None),
        CONFLICT_LOG,
        None,
    ),
    (
        "an object Terminating on another controller's finalizer is not Envoy AI Gateway's to release",
        _terminating(["other.io/keep"], "2026-12-03T09:00:00Z"),
        CONFLICT_LOG,
        None,
    ),
]


@pytest.mark.parametrize(("name", "obj", "log", "keep"), STUCK_CASES, ids=[c[0] for c in STUCK_CASES])
def test_an_object_envoy_ai_gateway_left_terminating_is_found(
    name: str, obj: dict[str, Any], log: str, keep: list[str] | None
) -> None:
    stuck = report.stuck_on_finalizer([obj], NOON, report.conflicted(log))
    assert [k for _, k in stuck] == ([keep] if keep is not None else []), name


METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubernetes.m.crossplane.io",resource="objects",scope="namespace",subresource="",verb="APPLY",version="v1alpha1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kubernetes.m.crossplane.io",resource="objects",scope="namespace",subresource="",verb="APPLY",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ai.example.org",resource="modelroutes",scope="namespace",subresource="status",verb="PUT",version="v1alpha1"} 3e+00
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/openapi/v3",verb="GET",version=""} 7
apiserver_request_duration_seconds_count{group="",resource="pods",verb="LIST"} 99
"""


def test_the_api_servers_requests_are_counted_by_verb_and_resource_over_codes() -> None:
    assert costs.request_totals(METRICS) == {
        "APPLY objects": 12,
        "PUT modelroutes/status": 3,
        "GET -//openapi/v3": 7,
    }


def test_the_api_servers_conflicts_are_counted_apart() -> None:
    assert costs.request_totals(METRICS, "409") == {"APPLY objects": 2}


def _stat(pid: int, comm: str, session: int, *, utime: int, stime: int, cutime: int = 0) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    return f"{pid} ({comm}) S 1 {session} {session} 0 -1 0 0 0 0 0 {utime} {stime} {cutime} 0 20 0 1 0"


SESSION_CPU_CASES = [
    ("a session's processes count, and what they reaped of their children", 100, 3.5),
    ("another session's processes do not count", 300, 1.0),
    ("a session with no process left costs nothing", 999, 0.0),
]


@pytest.mark.parametrize(
    ("name", "session", "want"), SESSION_CPU_CASES, ids=[c[0] for c in SESSION_CPU_CASES]
)
def test_a_components_cpu_is_its_sessions(name: str, session: int, want: float) -> None:
    stats = [
        _stat(100, "crossplane", 100, utime=150, stime=50),
        _stat(101, "sh (with) ) parens", 100, utime=100, stime=0, cutime=50),
        _stat(300, "etcd", 300, utime=60, stime=40),
    ]
    assert costs.session_cpu(stats, session, ticks_per_s=100) == want, name


def test_the_functions_calls_are_counted_by_kind_within_the_window() -> None:
    log = "\n".join(
        [
            '{"xr": "ModelRoute team-a/a", "msg": "composed", "ts": 10.0}',
            '{"xr": "ModelRoute team-a/b", "msg": "composed", "ts": 19.9}',
            '{"xr": "ModelRoute team-a/c", "msg": "composed", "ts": 20.0}',
            '{"xr": "InferenceGateway platform/inference", "msg": "composed", "ts": 12.0}',
            '{"xr": "ModelRoute team-a/a", "msg": "condition changed", "message": "composed", "ts": 12.0}',
            # The console renderer's line, colour codes and all, as the harness's function writes it.
            "\x1b[2m1970-01-01T00:00:15.5Z\x1b[0m [\x1b[32m\x1b[1minfo     \x1b[0m] \x1b[1mcomposed     \x1b[0m "
            "\x1b[36mduration_ms\x1b[0m=\x1b[35m1.46\x1b[0m \x1b[36mxr\x1b[0m=\x1b[35m'ModelRoute team-a/d'\x1b[0m",
            # The same, plain and padded as the renderer pads it, just outside the window.
            "1970-01-01T00:00:20Z [info     ] composed                       xr='ModelRoute team-a/e'",
            "1970-01-01T00:00:19Z [info     ] composed                       xr='InferenceGateway p/g'",
            '{"xr": "ModelRoute team-a/f", "msg": "composed", "ts": 1',
            "not json, and not a call",
        ]
    )
    assert costs.calls(log, "ModelRoute", 10.0, 20.0) == 3
    assert costs.calls(log, "ModelRoute", 10.0, 20.5) == 5
    assert costs.calls(log, "InferenceGateway", 0.0, 20.0) == 2


def test_the_functions_transition_lines_are_read_apart_from_its_calls() -> None:
    log = "\n".join(
        [
            '{"xr": "ModelRoute t/a", "msg": "composed", "condition": "RoutingReady=True (Available)", "ts": 10.0}',
            '{"xr": "ModelRoute t/a", "msg": "condition changed", "condition": "RoutingReady=False (GatewayNotReady)",'
            ' "ts": 11.0}',
            # As the console renderer writes it (colour codes and all), padded, with a message quoted.
            "\x1b[2m1970-01-01T00:00:12.5Z\x1b[0m [\x1b[32m\x1b[1minfo     \x1b[0m] \x1b[1mcondition changed    "
            "\x1b[0m \x1b[36mcondition\x1b[0m=\x1b[35m'RoutingReady=True (Available)'\x1b[0m "
            '\x1b[36mmessage\x1b[0m=\x1b[35m"the route\'s model is served"\x1b[0m '
            "\x1b[36mxr\x1b[0m=\x1b[35m'ModelRoute t/b'\x1b[0m",
        ]
    )
    assert costs.logged(log, costs.CONDITION_CHANGED) == [
        costs.Call(11.0, "ModelRoute t/a", "RoutingReady=False (GatewayNotReady)"),
        costs.Call(12.5, "ModelRoute t/b", "RoutingReady=True (Available)"),
    ]
    assert [c.at for c in costs.answered(log)] == [10.0]


def _said(at: float, ready: bool, reason: str = "") -> costs.Call:
    status = "True (Available)" if ready else f"False ({reason or 'GatewayNotReady'})"
    return costs.Call(at, "ModelRoute t/a", f"RoutingReady={status}")


@pytest.mark.parametrize(
    ("name", "calls_made", "lines", "noisy"),
    [
        (
            "a line for each change decided, just before its call, is no noise",
            [_said(1, True), _said(11.1, False), _said(12, False), _said(15.1, True)],
            [_said(11, False), _said(15, True)],
            [],
        ),
        (
            "a line repeating the one before is noise",
            [_said(1, True), _said(11.1, False), _said(12.1, False)],
            [_said(11, False), _said(12, False)],
            [_said(12, False)],
        ),
        (
            "a change of reason is a change",
            [_said(1, True), _said(11.1, False), _said(12.1, False, "ConfigLoading")],
            [_said(11, False), _said(12, False, "ConfigLoading")],
            [],
        ),
        (
            "a window's first line is compared with the last line before it",
            [_said(1.1, False), _said(11.1, False)],
            [_said(1, False), _said(11, False)],
            [_said(11, False)],
        ),
        (
            "a line naming what its call did not decide is noise",
            [_said(1, True), _said(11.1, True)],
            [_said(0.5, True), _said(11, False)],
            [_said(11, False)],
        ),
        (
            "a line with no call after it is noise",
            [_said(1, True)],
            [_said(0.5, True), _said(11, False)],
            [_said(11, False)],
        ),
        (
            "lines outside the window are not judged",
            [_said(1, True), _said(5.1, False), _said(30.1, False)],
            [_said(5, False), _said(30, False)],
            [],
        ),
    ],
)
def test_a_transition_line_is_noise_unless_it_names_a_change_its_call_decided(
    name: str, calls_made: list[costs.Call], lines: list[costs.Call], noisy: list[costs.Call]
) -> None:
    assert costs.noisy_transitions(calls_made, lines, "ModelRoute", 10.0, 20.0) == noisy, name


def test_the_scale_line_says_per_route_per_transition_what_a_rollout_cost() -> None:
    reading = costs.Reading(0.0, {"function": 0.0, "kube-apiserver": 0.0}, Counter())
    after = costs.Reading(
        40.0,
        {"function": 2.0, "kube-apiserver": 40.0, "crossplane": 10.0},
        Counter({"APPLY objects": 1000, "GET modelroutes": 200}),
        {"function": 80.0, "crossplane": 300.0},
    )
    rollout = costs.between("rollout", reading, after, 100, calls_made=400, transitions=2)
    created = costs.Reading(150.0, {}, Counter(), {"function": 70.4, "crossplane": 250.6})
    creation = costs.between("creation", reading, created, 100, calls_made=0)
    follow = [float(s) for s in range(1, 101)]
    published = [s + 5 for s in follow]
    record = report.scale_record(100, follow, 9.0, creation, rollout, published=published, objects=400)
    assert record["rollout"]["memory_mb"] == {"function": 80.0, "crossplane": 300.0}
    assert record["objects_per_route"] == 4
    assert report.scale_line(record) == (
        "scale: N=100 routes on one gateway: all false within p50 50 s, p99 99 s, max 100 s "
        "(published: p50 55 s, p99 104 s, max 105 s); "
        "all true again within 9 s of the gateway; all true after creation in 150 s (150 s per 100 routes); "
        "function calls per route per transition 2.0; API requests per route per transition 6 (5 writes); "
        "cpu s per 100 routes per transition: function 1.0, crossplane 5.0, provider-kubernetes 0.0, apiserver 20.0; "
        "resident MB with the routes created: function 70, crossplane 251"
    )
    early = [s * 2 for s in follow]
    record = report.scale_record(
        100,
        follow,
        9.0,
        creation,
        rollout,
        published=published,
        objects=400,
        right_after_creation=(early, follow),
    )
    assert report.scale_line(record) == (
        "scale: N=100 routes on one gateway: all false within p50 50 s, p99 99 s, max 100 s "
        "(published: p50 55 s, p99 104 s, max 105 s) at rest, p99 198 s (published 99 s) right after creation; "
        "all true again within 9 s of the gateway; all true after creation in 150 s (150 s per 100 routes); "
        "function calls per route per transition 2.0; API requests per route per transition 6 (5 writes); "
        "cpu s per 100 routes per transition: function 1.0, crossplane 5.0, provider-kubernetes 0.0, apiserver 20.0; "
        "resident MB with the routes created: function 70, crossplane 251"
    )


@pytest.mark.parametrize(
    ("name", "rollout", "said"),
    [
        (
            "the writes etcd kept of the routes' XRs and Objects are summed",
            {"ModelRoute": {"writes": 3.0}, "Object": {"writes": 0.25}},
            "(5 writes; the routes' XRs and Objects: 3.2 stored in etcd)",
        ),
        (
            "a kind etcd did not answer for is said to be unread, not summed short",
            {"ModelRoute": {"writes": 3.0}, "Object": {"error": "TimeoutError: the watch delivered up to 9"}},
            "(5 writes; the routes' XRs and Objects: writes stored in etcd not read)",
        ),
    ],
)
def test_the_scale_line_says_how_many_of_a_rollouts_writes_etcd_kept(
    name: str, rollout: dict[str, Any], said: str
) -> None:
    reading = costs.Reading(0.0, {}, Counter())
    after = costs.Reading(40.0, {}, Counter({"APPLY objects": 1000, "GET modelroutes": 200}), {})
    phase = costs.between("rollout", reading, after, 100, calls_made=400, transitions=2)
    created = costs.Reading(150.0, {}, Counter(), {"function": 70.4, "crossplane": 250.6})
    creation = costs.between("creation", reading, created, 100, calls_made=0)
    follow = [1.0, 2.0]
    record = report.scale_record(
        100, follow, 9.0, creation, phase, published=follow, objects=400, stored={"rollout": rollout}
    )
    assert record["writes"] == {"rollout": rollout}
    assert f"API requests per route per transition 6 {said}; " in report.scale_line(record), name


@pytest.mark.parametrize(
    ("name", "calls", "last_write", "rested"),
    [
        ("routes called once a TTL and written 10 s ago are at rest", 8, 90.0, True),
        ("one call per five routes is still at rest", 20, 90.0, True),
        ("a call more than one per five routes is not", 21, 90.0, False),
        ("a write 9 s ago is not, however few the calls", 0, 91.0, False),
        ("Crossplane's queue after a burst of routes turned True is not", 100, 99.5, False),
    ],
)
def test_routes_at_rest_before_the_rollout_the_goal_judges(
    name: str, calls: int, last_write: float, rested: bool
) -> None:
    assert costs.at_rest(calls, last_write, now=100.0, routes=100, window=10.0) is rested, name


def test_a_components_memory_is_its_sessions_resident_pages() -> None:
    def stat(pid: int, session: int, rss_pages: int) -> str:
        fields = ["S", "1", str(session), str(session)] + ["0"] * 17 + [str(rss_pages)] + ["0"] * 5
        return f"{pid} (a (b) c) " + " ".join(fields)

    stats = [stat(1, 100, 1000), stat(2, 100, 500), stat(3, 300, 7)]
    assert costs.session_rss_mb(stats, 100, page_bytes=4096) == 1500 * 4096 / 1e6
    assert costs.session_rss_mb(stats, 999, page_bytes=4096) == 0.0


def _call(at: float, xr: str, ready: bool) -> costs.Call:
    typ = "GatewayReady" if xr.startswith("InferenceGateway") else "RoutingReady"
    return costs.Call(at, xr, f"{typ}={'True' if ready else 'False'} (Reason)")


GW = "InferenceGateway p/g"
TRUE_AGAIN_CASES = [
    (
        "a route judged ready on a stale gateway before it judged it down is not ready again",
        [
            _call(1, "ModelRoute a/r", True),
            _call(2, GW, False),
            _call(3, "ModelRoute a/r", True),
            _call(4, "ModelRoute a/r", False),
            _call(9, GW, True),
            _call(10, "ModelRoute a/r", True),
        ],
        [],
    ),
    (
        "a route judged ready after it was judged not ready, with the gateway down, is",
        [
            _call(2, GW, False),
            _call(4, "ModelRoute a/r", False),
            _call(5, "ModelRoute a/r", True),
            _call(9, GW, True),
        ],
        ["ModelRoute a/r"],
    ),
    (
        "the gateway's own calls are not counted, nor calls before the window",
        [
            _call(0, "ModelRoute a/r", False),
            _call(0.5, "ModelRoute a/r", True),
            _call(2, GW, False),
            _call(3, GW, True),
        ],
        [],
    ),
]


@pytest.mark.parametrize(("name", "made", "want"), TRUE_AGAIN_CASES, ids=[c[0] for c in TRUE_AGAIN_CASES])
def test_what_the_function_decided_again_is_read_from_its_own_calls(
    name: str, made: list[costs.Call], want: list[str]
) -> None:
    assert costs.decided_true_again(made, GW, since=1.0)[0] == want, name


def test_a_calls_condition_is_read_from_its_console_line() -> None:
    line = (
        "\x1b[2m2026-12-03T15:13:47.298457Z\x1b[0m [\x1b[32m\x1b[1minfo     \x1b[0m] \x1b[1mcomposed"
        "                       \x1b[0m \x1b[36mcondition\x1b[0m=\x1b[35m'RoutingReady=True (Available)'\x1b[0m "
        "\x1b[36mduration_ms\x1b[0m=\x1b[35m1.76\x1b[0m \x1b[36mxr\x1b[0m=\x1b[35m'ModelRoute team-a/scale-049'\x1b[0m"
    )
    (call,) = costs.answered(line)
    assert (call.xr, call.condition, call.ready) == (
        "ModelRoute team-a/scale-049",
        "RoutingReady=True (Available)",
        True,
    )


BLOCK_CASES = [
    (
        "a leaked run's veth address takes its block",
        "inet 10.213.240.1/30 brd 10.213.240.3 scope global fgr1240proh",
        {240},
    ),
    ("a route to a /24 in the range takes that block", "10.213.9.0/24 dev eth1 proto kernel", {9}),
    ("a wider route to the machine's gateway takes none", "10.0.0.0/8 via 192.0.2.1 dev eth0", set()),
    ("a host address in a wide prefix takes only its own block", "inet 10.213.7.9/16 scope global eth0", {7}),
    (
        "addresses outside the range take none",
        "inet 10.214.3.1/30 scope global p3h\n192.0.2.0/24 dev eth0",
        set(),
    ),
]


@pytest.mark.parametrize(("name", "routes", "want"), BLOCK_CASES, ids=[c[0] for c in BLOCK_CASES])
def test_a_run_never_claims_a_block_the_host_already_routes(name: str, routes: str, want: set[int]) -> None:
    assert network.blocks_in_use(213, routes) == want, name


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_claim_skips_blocks_in_use_and_held_and_takes_back_a_dead_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(network, "CLAIMS", tmp_path)
    monkeypatch.setattr(network, "run_tag", lambda: 5)
    monkeypatch.setattr(network, "reap", network.reap_claims)
    monkeypatch.setattr(network, "_host_routes", lambda: "inet 10.213.5.1/30 scope global leaked")
    # Block 5 is routed by a leak, 6 is held by a live run (this one), 7 by a run that is gone.
    (tmp_path / "10.213.6").write_text(f"{os.getpid()} 1\n")
    (tmp_path / "10.213.7").write_text(f"{_dead_pid()} 2\n")
    assert network.claim_block(213) == 7
    assert (tmp_path / "10.213.7").read_text().split()[0] == str(os.getpid())
    network.release_block(213, 7)
    assert not (tmp_path / "10.213.7").exists()
    assert (tmp_path / "10.213.6").exists()


ORPHAN_CASES = [
    ("processes whose parent is init are orphans", {10: 1, 11: 1}, True),
    ("a process and the children it started, its parent init, are orphans", {10: 1, 11: 10, 12: 11}, True),
    ("a process gone since it was listed counts as no owner", {10: 0}, True),
    ("a process a live run outside started is owned", {10: 4242}, False),
    ("one owned process among orphans keeps the namespace", {10: 1, 11: 4242}, False),
]


@pytest.mark.parametrize(("name", "parents", "want"), ORPHAN_CASES, ids=[c[0] for c in ORPHAN_CASES])
def test_a_dead_runs_namespace_is_reaped_only_when_nothing_alive_owns_its_processes(
    name: str, parents: dict[int, int], want: bool
) -> None:
    assert network.orphaned(parents) is want, name


def test_a_process_s_parent_is_read_from_proc_even_with_a_parenthesis_in_its_name(tmp_path: Path) -> None:
    named = tmp_path / "sl) 1 (x"
    named.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = subprocess.Popen([str(named), "30"])
    gone = _dead_pid()
    try:
        assert network._parents([proc.pid, gone]) == {proc.pid: os.getpid(), gone: 0}
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_runs_processes_are_orphans_and_a_live_runs_are_not() -> None:
    processes = {
        10: (1, "/cache/etcd-v3.6.16/etcd /cache/etcd-v3.6.16/etcd --data-dir=/tmp/fgr-integration-abc/etcd"),
        11: (
            1,
            "/venv/bin/python3.11 /venv/bin/python -m function --tls-server-certs-dir /tmp/fgr-integration-a/t",
        ),
        12: (1, "/cache/crossplane-core-v2.4.0/crossplane crossplane core start --debug"),
        13: (
            4242,
            "/cache/kube-apiserver-v1.35.4/kube-apiserver kube-apiserver --cert-dir=/tmp/fgr-integration-d/p",
        ),
        14: (1, "/usr/sbin/sshd /usr/sbin/sshd -D"),
        15: (1, "/usr/bin/etcd /usr/bin/etcd --data-dir=/var/lib/etcd"),
        16: (1, "/cache-other/x /cache-other/x"),
    }
    assert network.orphans(processes, "/cache") == [10, 11, 12]


def _dns_query(name: str, qtype: int = 1) -> bytes:
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return (
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        + labels
        + b"\x00"
        + qtype.to_bytes(2, "big")
        + b"\x00\x01"
    )


@pytest.mark.parametrize(
    ("name", "ready", "rcode", "want"),
    [
        pytest.param(
            "svc.ns",
            ["10.0.0.1", "10.0.0.2"],
            0,
            ["10.0.0.1", "10.0.0.2"],
            id="a headless Service's name answers with every ready pod's address",
        ),
        pytest.param(
            "svc.ns", [], 3, [], id="a headless Service with no ready pod is not found, as kube-dns answers"
        ),
        pytest.param(
            "fixed.example", ["10.0.0.9"], 0, ["10.0.0.3"], id="a fixed name answers with its one address"
        ),
        pytest.param("other.example", ["10.0.0.9"], 3, [], id="a name nobody gave is not found"),
    ],
)
def test_the_cluster_dns_answers_names_and_headless_services(
    name: str, ready: list[str], rcode: int, want: list[str]
) -> None:
    from tests.real.dns import ClusterDNS  # noqa: PLC0415

    dns = ClusterDNS("127.0.0.1", {"fixed.example": "10.0.0.3"}, port=0, services={"svc.ns": lambda: ready})
    try:
        answer = dns.answer(_dns_query(name))
    finally:
        dns.stop()
    assert answer is not None
    assert answer[3] & 0x0F == rcode
    count = int.from_bytes(answer[6:8], "big")
    # Each A record is 16 bytes, its address the last 4.
    records = answer[len(answer) - 16 * count :]
    assert [".".join(str(b) for b in records[16 * i + 12 : 16 * i + 16]) for i in range(count)] == want


def _ask(port: int, name: str, timeout: float = 5.0) -> list[str]:
    """A query sent over UDP to the server: the addresses it answered."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(timeout)
        client.sendto(_dns_query(name), ("127.0.0.1", port))
        answer = client.recv(512)
    count = int.from_bytes(answer[6:8], "big")
    records = answer[len(answer) - 16 * count :]
    return [".".join(str(b) for b in records[16 * i + 12 : 16 * i + 16]) for i in range(count)]


def test_the_cluster_dns_serves_from_a_process_of_its_own_and_follows_a_services_pods() -> None:
    from tests.real.dns import SERVICE_POLL_S, ClusterDNS  # noqa: PLC0415

    ready = ["10.0.0.7"]
    dns = ClusterDNS(
        "127.0.0.1", {"fixed.example": "10.0.0.3"}, port=0, services={"svc.ns": lambda: ready}
    ).start()
    try:
        assert dns._process is not None
        assert dns._process.pid != os.getpid()
        assert _ask(dns.port, "fixed.example") == ["10.0.0.3"]
        assert _ask(dns.port, "svc.ns") == ["10.0.0.7"]
        ready[:] = ["10.0.0.8", "10.0.0.9"]
        time.sleep(3 * SERVICE_POLL_S)
        assert _ask(dns.port, "svc.ns") == ["10.0.0.8", "10.0.0.9"]
    finally:
        dns.stop()


def test_the_cluster_dns_counts_an_answer_held_up_after_its_query_arrived() -> None:
    from tests.real.dns import ClusterDNS  # noqa: PLC0415

    dns = ClusterDNS("127.0.0.1", {"fixed.example": "10.0.0.3"}, port=0).start()
    try:
        assert dns._process is not None
        _ask(dns.port, "fixed.example")
        time.sleep(0.2)
        before = len(dns.late())  # a server just started, on a busy machine, may answer late
        os.kill(dns._process.pid, signal.SIGSTOP)  # a server starved of CPU: the query waits in its socket
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.settimeout(10)
            client.sendto(_dns_query("fixed.example"), ("127.0.0.1", dns.port))
            time.sleep(0.8)
            os.kill(dns._process.pid, signal.SIGCONT)
            client.recv(512)
        deadline = time.monotonic() + 5
        while len(dns.late()) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        late = dns.late()[before:]
        assert len(late) == 1, late
        assert late[0] >= 0.7, late
        assert dns.summary(before).startswith("cluster DNS: 1 answers later than 0.25 s, the latest ")
    finally:
        dns.stop()


def test_a_silent_cluster_dns_loses_each_query_until_it_answers_again() -> None:
    from tests.real.dns import ClusterDNS  # noqa: PLC0415

    dns = ClusterDNS("127.0.0.1", {"fixed.example": "10.0.0.3"}, port=0).start()
    try:
        dns.fall_silent()
        with pytest.raises(TimeoutError):
            _ask(dns.port, "fixed.example", timeout=1)
        dns.answer_again()
        assert _ask(dns.port, "fixed.example") == ["10.0.0.3"]
    finally:
        dns.stop()


def test_the_cluster_dns_says_how_many_queries_the_kernel_dropped_while_it_could_not_read() -> None:
    from tests.real.dns import ClusterDNS  # noqa: PLC0415

    dns = ClusterDNS("127.0.0.1", {"fixed.example": "10.0.0.3"}, port=0).start()
    try:
        assert dns._process is not None
        assert dns.dropped() == 0
        os.kill(dns._process.pid, signal.SIGSTOP)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            for _ in range(5000):  # more than its socket's buffer holds
                client.sendto(_dns_query("fixed.example"), ("127.0.0.1", dns.port))
        assert dns.dropped() > 0
        assert f"; {dns.dropped()} queries dropped by the kernel" in dns.summary()
    finally:
        os.kill(dns._process.pid, signal.SIGCONT)
        dns.stop()


def test_the_cluster_dns_ends_with_the_harness_that_started_it() -> None:
    from tests.real.dns import ClusterDNS  # noqa: PLC0415

    dns = ClusterDNS("127.0.0.1", {}, port=0).start()
    assert dns._process is not None
    assert dns._process.stdin is not None
    dns._process.stdin.close()  # as when the harness's process dies
    assert dns._process.wait(timeout=5) == 0


@pytest.mark.parametrize(
    ("pod", "container", "want"),
    [
        pytest.param(
            {"runAsUser": 2000, "runAsGroup": 2000},
            {},
            ["--user", "2000:2000"],
            id="the pod's user and group run the container, as Crossplane's runtime Deployment sets them",
        ),
        pytest.param(
            {"runAsUser": 2000},
            {"runAsUser": 3000},
            ["--user", "3000"],
            id="the container's user wins over the pod's",
        ),
        pytest.param({}, {}, [], id="no user in either leaves the image's own"),
    ],
)
def test_an_image_pod_runs_as_the_user_its_security_contexts_name(
    pod: dict[str, Any], container: dict[str, Any], want: list[str]
) -> None:
    from tests.real.dataplane import _user  # noqa: PLC0415

    assert _user({"spec": {"securityContext": pod}}, {"securityContext": container}) == want


def test_a_stamped_component_is_cached_apart_from_an_unstamped_build_of_its_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FGR_CACHE_DIR", str(tmp_path))
    stamped = versions.CROSSPLANE
    assert stamped.stamp is not None
    assert (
        toolchain.binary_path(stamped, "crossplane").parent.name
        == f"crossplane-core-{stamped.version}-stamped"
    )
    assert (
        toolchain.binary_path(replace(stamped, stamp=None), "crossplane").parent.name
        == f"crossplane-core-{stamped.version}"
    )


def test_crossplanes_root_ca_key_is_pkcs1_rsa_as_its_package_manager_reads_it() -> None:
    from cryptography import x509  # noqa: PLC0415

    from tests.pki import CA  # noqa: PLC0415

    ca = CA("crossplane-root-ca", rsa_key=True)
    assert ca.key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    cert, _ = ca.leaf("function-gateway-readiness")
    x509.load_pem_x509_certificate(cert).verify_directly_issued_by(ca.cert)


def _installed(served: str) -> report.Installed:
    return report.Installed(packages={}, images={}, seconds=1.0, pushed="sha256:pushed", served=served)


@pytest.mark.parametrize(
    ("installed", "ok", "says"),
    [
        pytest.param(None, False, "release: FAILED", id="nothing installed fails and says so"),
        pytest.param(
            _installed("sha256:pushed"),
            True,
            "ran sha256:pushed, the Function package's digest",
            id="the pushed digest served passes",
        ),
        pytest.param(
            _installed("sha256:other"),
            False,
            "FAILED: the function's pod ran sha256:other",
            id="another image served fails, naming both digests",
        ),
        pytest.param(
            _installed(""),
            False,
            "FAILED: the function's pod ran no container",
            id="no container served fails",
        ),
    ],
)
def test_the_release_line_passes_only_when_the_pushed_package_served(
    installed: report.Installed | None, ok: bool, says: str
) -> None:
    assert report.proven(installed) is ok
    assert says in report.release_line(installed, 2, 2)


@pytest.mark.parametrize(
    ("listed", "want"),
    [
        pytest.param(
            "c1 12\nc2 34\n", ["c2"], id="a container of a dead run is removed and a live run's kept"
        ),
        pytest.param("c1 <no value>\n", [], id="a line without a tag is not a container of ours"),
        pytest.param("c1 x12\n", ["c1"], id="a tag that is not a run's number is no live run's"),
    ],
)
def test_a_dead_runs_podman_containers_are_found_by_their_run_label(listed: str, want: list[str]) -> None:
    assert network.dead_containers(listed, {12}) == want


@pytest.mark.parametrize(
    ("listeners", "want"),
    [
        (None, prober.Via(80, False, None)),
        ([{"name": "http", "port": 8080}], prober.Via(8080, False, None)),
        (
            [
                {"name": "https", "protocol": "HTTPS", "port": 443, "hostname": "ai.example.com"},
                {"name": "http"},
            ],
            prober.Via(443, True, "ai.example.com"),
        ),
        ([{"name": "w", "hostname": "*.example.com"}], prober.Via(80, False, "probe.example.com")),
    ],
    ids=[
        "a gateway with the default listener is reached over HTTP on 80",
        "the first listener's port is the one a client uses",
        "an HTTPS first listener is reached over TLS by its host name",
        "a wildcard host is reached by a name under it",
    ],
)
def test_the_prober_reaches_a_gateway_as_its_first_listener_says(
    listeners: list[dict[str, Any]] | None, want: prober.Via
) -> None:
    gw: dict[str, Any] = {"spec": {"listeners": listeners}} if listeners is not None else {"spec": {}}
    assert prober.via(gw) == want


def test_a_probe_over_tls_sends_the_listeners_host_name_as_sni_and_host(tmp_path: Path) -> None:
    """An HTTPS listener with a hostname serves only requests for that name: a probe that sent the
    loopback address would fail where a client succeeds."""
    cert, key = CA("prober-test").leaf("ai.example.com", sans=("ai.example.com",))
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)
    seen: dict[str, str | None] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen["host"] = self.headers.get("host")
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    context.sni_callback = lambda _sock, name, _ctx: seen.__setitem__("sni", name)  # type: ignore[assignment, misc]
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        ans = prober.request(
            server.server_address[1], "GET", "/v1/models", None, {}, tls=True, hostname="ai.example.com"
        )
    finally:
        thread.join(timeout=10)
        server.server_close()
    assert ans.status == 200
    assert seen == {"sni": "ai.example.com", "host": "ai.example.com"}


def test_a_killed_model_server_resets_its_connections_and_comes_back_on_its_port() -> None:
    """Envoy keeps connections to a backend alive: a kill that left them open would serve on."""
    server = Upstream("killed", "openai", models=["m"]).start()
    port = server.port
    try:
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
        kept.request("GET", "/v1/models")
        assert kept.getresponse().read()
        server.kill()

        def ask_again() -> None:
            kept.request("GET", "/v1/models")
            kept.getresponse()

        with pytest.raises((ConnectionError, http.client.HTTPException)):
            ask_again()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        server.revive()
        assert server.port == port
        server.delay_s = 0.3
        started = time.monotonic()
        assert prober.request(port, "GET", "/v1/models", None, {}).status == HTTPStatus.OK
        assert time.monotonic() - started >= 0.3
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("caller_auth", "subjects"),
    [
        (
            {"required": True, "header": "authorization"},
            {"route t/r", "route t/r keyless", "route t/r wrong key"},
        ),
        (
            {"required": True, "header": "authorization", "removedAt": "2026-12-04T15:00:00Z"},
            {"route t/r"},
        ),
        ({"required": False}, {"route t/r"}),
    ],
    ids=[
        "a route that needs a key is also asked without one, which must be refused",
        "a route whose gateway turned auth off is asked with a key only: keyless may go either way",
        "a route that needs no key is asked without one",
    ],
)
def test_the_prober_asks_without_a_key_only_where_one_must_be_refused(
    caller_auth: dict[str, Any], subjects: set[str]
) -> None:
    kube = _FakeKube({"serving": {"ready": True}}, {"serving": {"ready": True}, "callerAuth": caller_auth})
    p = prober.Prober(kube, port_for=lambda *_: 1, keys=lambda: {"authorization": "k"})  # type: ignore[arg-type]
    p._probe(1)
    assert {s.subject for s in p.samples if s.subject.startswith("route")} == subjects


def _echo_server(context: ssl.SSLContext | None) -> tuple[socket.socket, int]:
    """A server that answers each read upper-cased, in one write of many records when large."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        if context is not None:
            conn = context.wrap_socket(conn, server_side=True)
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper() * 8)

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


PIPE_CASES = [
    ("bytes go both ways between plain sockets", False),
    ("a TLS side readable with no application data (TLS 1.3 session tickets) stalls neither direction", True),
]


@pytest.mark.parametrize(("name", "tls"), PIPE_CASES, ids=[c[0] for c in PIPE_CASES])
def test_the_pipe_carries_both_ways_on_one_thread(tmp_path: Path, name: str, tls: bool) -> None:
    server_ctx = client_ctx = None
    if tls:
        ca = CA("pipe")
        cert, key = ca.write_leaf(tmp_path, "echo", sans=("localhost",))
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(cert), str(key))
        client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    srv, port = _echo_server(server_ctx)
    with srv:
        upstream = socket.create_connection(("127.0.0.1", port))
        if client_ctx is not None:
            upstream = client_ctx.wrap_socket(upstream, server_hostname="localhost")
        near, far = socket.socketpair()
        carrier = threading.Thread(target=dataplane.pipe, args=(far, upstream), daemon=True)
        carrier.start()
        message = b"x" * 20_000
        near.sendall(message)
        got = b""
        near.settimeout(5)
        while len(got) < len(message) * 8:
            got += near.recv(65536)
        assert got == message.upper() * 8, name
        near.close()
        carrier.join(5)
        assert not carrier.is_alive(), name


R1, R2 = "ModelRoute a/r1", "ModelRoute a/r2"
FOLLOW_CASES = [
    (
        "each route follows from the function's first not-ready decision about the gateway",
        [_call(5, GW, True), _call(10, GW, False), _call(12.5, R1, False), _call(14, R2, False)],
        {},
        [2.5, 4.0],
    ),
    (
        "a route's condition stamped after its decision counts from the stamp",
        [_call(10, GW, False), _call(12.5, R1, False), _call(13, R2, False)],
        {R1: 14.0},
        [4.0, 3.0],
    ),
    (
        "a stamp truncated to the second before the decision does not shorten it",
        [_call(10, GW, False), _call(12.5, R1, False), _call(13, R2, False)],
        {R1: 12.0},
        [2.5, 3.0],
    ),
    (
        "a route's decision before the gateway's does not count, and one that never said False is inf",
        [_call(9, R1, False), _call(10, GW, False), _call(11, R1, False)],
        {},
        [1.0, math.inf],
    ),
    (
        "a gateway that never went not ready leaves every route unmeasured",
        [_call(10, GW, True), _call(11, R1, False)],
        {R1: 11.0},
        [math.inf, math.inf],
    ),
    (
        "an outage before the rollout began does not count",
        [
            _call(1, GW, False),
            _call(2, R1, False),
            _call(8, GW, True),
            _call(10, GW, False),
            _call(11, R1, False),
        ],
        {},
        [1.0, math.inf],
    ),
]


@pytest.mark.parametrize(
    ("name", "calls_made", "stamps", "want"), FOLLOW_CASES, ids=[c[0] for c in FOLLOW_CASES]
)
def test_how_late_each_route_followed_its_gateway(
    name: str, calls_made: list[costs.Call], stamps: dict[str, float], want: list[float]
) -> None:
    assert costs.follow_times(calls_made, GW, 5.0, stamps, [R1, R2]) == want, name


def _word(at: float, xr: str, decided: bool, condition: bool | None = None) -> timeline.Seen:
    return timeline.Seen(at, xr, decided, decided if condition is None else condition)


def _rounded(said: dict[str, Any]) -> dict[str, Any]:
    """Seconds compared to the microsecond: sums of float timestamps are not exact."""

    def r(x: Any) -> Any:
        return [r(v) for v in x] if isinstance(x, list) else round(x, 6) if isinstance(x, float) else x

    return {k: r(v) for k, v in said.items()}


OUTAGE_CASES = [
    (
        "each route follows from the gateway's published not-ready word to its own",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(11.5, R1, False),
            _word(13, R2, False),
            _word(20, GW, True),
            _word(21, R1, True),
            _word(22.5, R2, True),
        ],
        {"follow": [1.5, 3.0], "route_seconds": 4.5, "true_again": [], "back": 2.5},
    ),
    (
        "a route that said not ready before its gateway did follows in 0 s",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(9, R1, False),
            _word(10, GW, False),
            _word(12, R2, False),
            _word(20, GW, True),
            _word(20.5, R1, True),
            _word(21, R2, True),
        ],
        {"follow": [0.0, 2.0], "route_seconds": 2.0, "true_again": [], "back": 1.0},
    ),
    (
        "a route that says ready again while its gateway is not ready is true again, every second counted",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(11, R2, False),
            _word(14, R1, True),
            _word(16, R1, False),
            _word(20, GW, True),
            _word(21, R1, True),
            _word(21, R2, True),
        ],
        {"follow": [1.0, 1.0], "route_seconds": 4.0, "true_again": [R1], "back": 1.0},
    ),
    (
        "a route that never said not ready is ready the whole outage and never followed",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(12, R1, False),
            _word(20, GW, True),
            _word(21, R1, True),
        ],
        {"follow": [2.0, math.inf], "route_seconds": 12.0, "true_again": [], "back": 1.0},
    ),
    (
        "an outage still going is counted until now, and nobody is back",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(12, R1, False),
        ],
        {"follow": [2.0, math.inf], "route_seconds": 2.0 + 20.0, "true_again": [], "back": math.inf},
    ),
    (
        "a route not ready again after the gateway's return is not back",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(11, R2, False),
            _word(20, GW, True),
            _word(21, R1, True),
            _word(22, R2, True),
            _word(23, R2, False),
        ],
        {"follow": [1.0, 1.0], "route_seconds": 2.0, "true_again": [], "back": math.inf},
    ),
    (
        "an outage before the rollout began does not count",
        [
            _word(0, GW, False),
            _word(0, R1, False),
            _word(0, R2, False),
            _word(2, GW, True),
            _word(3, R1, True),
            _word(3, R2, True),
            _word(10, GW, False),
            _word(12, R1, False),
            _word(12, R2, False),
            _word(15, GW, True),
            _word(16, R1, True),
            _word(16, R2, True),
        ],
        {"follow": [2.0, 2.0], "route_seconds": 4.0, "true_again": [], "back": 1.0},
    ),
    (
        "a gateway that flaps back for a moment is still out, and only its not-ready seconds count",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(10.3, GW, True),
            _word(11, GW, False),
            _word(12, R1, False),
            _word(12, R2, False),
            _word(14, R1, True),
            _word(16, R1, False),
            _word(25, GW, True),
            _word(26, R1, True),
            _word(26, R2, True),
        ],
        {"follow": [2.0, 2.0], "route_seconds": 1.3 + 2.0 + 1.3, "true_again": [R1], "back": 1.0},
    ),
    (
        "a route that says ready at the instant it first says not ready is true again",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(11, R1, True),
            _word(13, R1, False),
            _word(11, R2, False),
            _word(20, GW, True),
            _word(21, R1, True),
            _word(21, R2, True),
        ],
        {"follow": [1.0, 1.0], "route_seconds": 1.0 + 2.0 + 1.0, "true_again": [R1], "back": 1.0},
    ),
    (
        "a route that said nothing never followed and is never back",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(20, GW, True),
            _word(21, R1, True),
        ],
        {"follow": [1.0, math.inf], "route_seconds": 1.0, "true_again": [], "back": math.inf},
    ),
    (
        "words after now are not read: a return still to come is not counted",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(0, R2, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(12, R2, False),
            _word(40, GW, True),
            _word(41, R1, True),
            _word(41, R2, True),
        ],
        {"follow": [1.0, 2.0], "route_seconds": 3.0, "true_again": [], "back": math.inf},
    ),
]


@pytest.mark.parametrize(("name", "seen", "want"), OUTAGE_CASES, ids=[c[0] for c in OUTAGE_CASES])
def test_what_the_routes_said_over_their_gateways_outage(
    name: str, seen: list[timeline.Seen], want: dict[str, Any]
) -> None:
    got = timeline.outage(seen, GW, [R1, R2], 5.0, until=30.0, by=lambda s: s.decided)
    assert got is not None, name
    assert _rounded({k: getattr(got, k) for k in want}) == _rounded(want), name


def test_a_gateway_that_never_went_down_has_no_outage() -> None:
    seen = [_word(0, GW, True), _word(6, R1, False), _word(7, GW, True)]
    assert timeline.outage(seen, GW, [R1], 5.0, until=30.0, by=lambda s: s.decided) is None


JUDGED_CASES = [
    (
        "a route that says ready after its gateway decided so, before its status did, is not true again",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(20.2, R1, True),
            _word(21, GW, True),
        ],
        [_word(0, GW, True), _word(9.5, GW, False), _word(20, GW, True)],
        {"follow": [1.0], "true_again": [], "route_seconds": 1.5, "back": 0.2},
    ),
    (
        "a route that says ready while its gateway decided it was not is true again",
        [
            _word(0, GW, True),
            _word(0, R1, True),
            _word(10, GW, False),
            _word(11, R1, False),
            _word(15, R1, True),
            _word(21, GW, True),
        ],
        [_word(0, GW, True), _word(9.5, GW, False), _word(20, GW, True)],
        {"follow": [1.0], "true_again": [R1], "route_seconds": 1.5 + 5.0, "back": 0.0},
    ),
]


@pytest.mark.parametrize(("name", "seen", "judge", "want"), JUDGED_CASES, ids=[c[0] for c in JUDGED_CASES])
def test_routes_are_judged_against_what_their_gateways_function_decided(
    name: str, seen: list[timeline.Seen], judge: list[timeline.Seen], want: dict[str, Any]
) -> None:
    got = timeline.outage(seen, GW, [R1], 5.0, until=30.0, by=lambda s: s.decided, judge=judge)
    assert got is not None, name
    assert _rounded({k: getattr(got, k) for k in want}) == _rounded(want), name


def test_the_condition_is_read_apart_from_the_decision() -> None:
    # The condition written back True over a published not-ready decision: read by the condition,
    # the route says True again; read by the decision, it does not.
    seen = [_word(0, GW, True), _word(0, R1, True), _word(10, GW, False), _word(11, R1, False)]
    seen += [_word(12, R1, False, condition=True), _word(20, GW, True), _word(21, R1, True)]
    by_condition = timeline.outage(seen, GW, [R1], 5.0, until=30.0, by=lambda s: s.condition)
    by_decision = timeline.outage(seen, GW, [R1], 5.0, until=30.0, by=lambda s: s.decided)
    assert by_condition is not None
    assert by_decision is not None
    assert (by_condition.true_again, by_decision.true_again) == ([R1], [])


def _route(name: str, status: str | None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = (
        []
        if status is None
        else [{"type": "RoutingReady", "status": status, "reason": reason, "message": message}]
    )
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


# (case, names, looks: [(at, listed routes)], want: (every route True at the last look, route-seconds by state))
WAITING_CASES = [
    (
        "a route not listed yet waits as not listed until it is",
        {"a"},
        [(0.0, []), (2.0, [_route("a", "True", "Available")])],
        (True, {"not listed": 2.0}),
    ),
    (
        "each interval counts under what the route said at its start",
        {"a"},
        [
            (0.0, [_route("a", None)]),
            (2.0, [_route("a", "False", "BackendNotAccepted", "not Accepted yet: backend-vllm")]),
            (
                5.0,
                [
                    _route(
                        "a",
                        "False",
                        "ConfigLoading",
                        "this route's configuration was written at 2026-12-05T11:59:57Z; Envoy and Envoy AI",
                    )
                ],
            ),
            (6.0, [_route("a", "True", "Available")]),
        ],
        (
            True,
            {
                "no RoutingReady yet": 2.0,
                "BackendNotAccepted (not Accepted yet: backend-vllm)": 3.0,
                "ConfigLoading (this route's configuration was written at … Envoy)": 1.0,
            },
        ),
    ),
    (
        "two routes in one state add up, and a True one counts nothing",
        {"a", "b"},
        [
            (0.0, [_route("a", "False", "RouteNotAccepted"), _route("b", "False", "RouteNotAccepted")]),
            (2.0, [_route("a", "True", "Available"), _route("b", "False", "RouteNotAccepted")]),
            (3.0, [_route("a", "True", "Available"), _route("b", "False", "RouteNotAccepted")]),
        ],
        (False, {"RouteNotAccepted ()": 5.0}),
    ),
    (
        "a route listed but not named is not waited for, and one gone is waited for again",
        {"a"},
        [(0.0, [_route("a", "True", "Available"), _route("c", "False", "X")]), (4.0, []), (5.0, [])],
        (False, {"not listed": 1.0}),
    ),
]


@pytest.mark.parametrize(("name", "names", "looks", "want"), WAITING_CASES, ids=[c[0] for c in WAITING_CASES])
def test_creation_time_is_filed_under_what_each_waiting_route_said(
    name: str,
    names: set[str],
    looks: list[tuple[float, list[dict[str, Any]]]],
    want: tuple[bool, dict[str, float]],
) -> None:
    waiting = timeline.Waiting(names)
    done = [waiting.see(routes, at) for at, routes in looks]
    assert (done[-1], waiting.seconds) == want, name


def test_one_step_of_every_route_files_as_one_whatever_the_names_and_numbers() -> None:
    waiting = timeline.Waiting({"a", "b"})
    said = "AIGatewayRoute team-a/{} is not Accepted yet with its current spec"
    waiting.see([_route(n, "False", "RouteNotAccepted", said.format(n + "-123")) for n in "ab"], 0.0)
    waiting.see([], 2.0)
    assert waiting.seconds == {"RouteNotAccepted (AIGatewayRoute … is not Accepted yet with its)": 4.0}


def test_the_waiting_summary_puts_the_longest_wait_first_and_says_none_when_nothing_waited() -> None:
    waiting = timeline.Waiting({"a", "b"})
    assert waiting.summary() == "route-seconds waiting at creation, by what the route said: none"
    waiting.see([_route("a", "False", "ConfigLoading", "written"), _route("b", None)], 0.0)
    waiting.see([_route("a", "False", "ConfigLoading", "written"), _route("b", "True", "Available")], 1.0)
    waiting.see([_route("a", "True", "Available"), _route("b", "True", "Available")], 4.0)
    assert waiting.summary() == (
        "route-seconds waiting at creation, by what the route said: ConfigLoading (written) 4, no RoutingReady yet 1"
    )


def test_a_delete_that_fails_is_recorded_as_returned() -> None:
    """Else it would stand as a delete under way, and excuse its route's failures while it said True."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - only this test needs it

    from tests.real.kube import Kube  # noqa: PLC0415

    class Refusing:
        namespaced = True

        def delete(self, **_: Any) -> None:
            raise ApiException(status=500)

    kube = object.__new__(Kube)
    kube.deleted_at, kube.deleting_since = {}, {}
    kube._resource = lambda *_: Refusing()  # type: ignore[method-assign]
    with pytest.raises(ApiException):
        kube.delete("v1", "ModelRoute", "r", "t")
    key = ("ModelRoute", "t", "r")
    assert kube.deleting_since[key] <= kube.deleted_at[key]


def _obj(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "t", "resourceVersion": str(version)}}


# Each case: what each LIST answers (objects, the list's version), what each watch call answers
# (its events, then how it ends: None for the server's timeout, or an HTTP status), and what the
# watch must have asked for and heard.
WATCH_CASES = [
    pytest.param(
        [([_obj("r-a", 9), _obj("r-b", 4)], 12)],
        [([], None), ([("MODIFIED", _obj("r-a", 13))], None)],
        {"versions": ["12", "12"], "heard": ["ADDED r-a 9", "ADDED r-b 4", "MODIFIED r-a 13"]},
        id="a watch goes on from its list's version, not from the version of the object listed last",
    ),
    pytest.param(
        [([_obj("r-a", 3)], 5), ([_obj("r-a", 20)], 21)],
        [([("MODIFIED", _obj("r-a", 6))], 410), ([], None)],
        {"versions": ["5", "21"], "heard": ["ADDED r-a 3", "MODIFIED r-a 6", "GAP", "ADDED r-a 20"]},
        id="a watch its server can no longer serve lists afresh and says a gap came first",
    ),
    pytest.param(
        [([_obj("r-a", 3)], 5)],
        [([("MODIFIED", _obj("r-a", 7))], 503), ([], None)],
        {"versions": ["5", "7"], "heard": ["ADDED r-a 3", "MODIFIED r-a 7"]},
        id="a watch the server cannot answer for a moment goes on from the last change it heard",
    ),
]


@pytest.mark.parametrize(("lists", "watches", "want"), WATCH_CASES)
def test_the_kube_watch(lists: list[Any], watches: list[Any], want: dict[str, Any]) -> None:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - only these tests need it

    from tests.real.kube import Kube  # noqa: PLC0415

    stop = threading.Event()
    asked: list[str] = []
    heard: list[str] = []
    listing = iter(lists)
    answers = iter(watches)

    class Listed:
        def __init__(self, items: list[dict[str, Any]], version: int) -> None:
            self.found = {"metadata": {"resourceVersion": str(version)}, "items": items}

        def to_dict(self) -> dict[str, Any]:
            return copy.deepcopy(self.found)

    class Resource:
        def get(self, namespace: str | None) -> Listed:
            assert namespace == "t"
            return Listed(*next(listing))

    def watching(_: Any, *, resource_version: str, **__: Any) -> Iterator[dict[str, Any]]:
        asked.append(resource_version)
        events, end = next(answers, ([], None))
        yield from ({"type": t, "raw_object": {"kind": "ModelRoute", **copy.deepcopy(o)}} for t, o in events)
        if end is not None:
            raise ApiException(status=end)
        if len(asked) >= len(watches):
            stop.set()

    def on_event(event: str, obj: dict[str, Any], _: float) -> None:
        meta = obj.get("metadata") or {}
        heard.append(" ".join(x for x in (event, meta.get("name"), meta.get("resourceVersion")) if x))
        if obj:
            assert obj["kind"] == "ModelRoute", "each object says what it is, as a watch's do"

    kube = object.__new__(Kube)
    kube._resource = lambda *_: Resource()  # type: ignore[method-assign]
    kube.dyn = SimpleNamespace(watch=watching)  # type: ignore[assignment]
    stop.wait = lambda *_: True  # type: ignore[method-assign] # no pause between tries
    kube.watch("ai.example.org/v1alpha1", "ModelRoute", "t", stop, on_event)
    assert {"versions": asked, "heard": heard} == want
