"""What a newcomer and an operator meet first: help, render errors, the server's lines and its stop."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.support import EXAMPLES, GATEWAY_INPUT, ROOT, free_port, load_yaml, make_request

COMPOSITION = str(EXAMPLES / "inference-gateway" / "composition.yaml")


def test_the_help_names_the_render_subcommand() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "function", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "python -m function render" in out.stdout


@pytest.mark.parametrize(
    ("content", "is_dir", "says"),
    [
        pytest.param(
            "a: [1, 2\n", False, "invalid YAML (line 2)", id="invalid YAML names the file and the line"
        ),
        pytest.param("", False, "holds no YAML object", id="an empty XR file says so"),
        pytest.param(None, True, "is a folder", id="a folder given as the XR is refused"),
    ],
)
def test_render_errors_name_the_file(tmp_path: Path, content: str | None, is_dir: bool, says: str) -> None:
    target = tmp_path / "xr.yaml"
    if is_dir:
        target.mkdir()
    else:
        target.write_text(content or "")
    out = subprocess.run(
        [sys.executable, "-m", "function", "render", str(target), COMPOSITION],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert str(target) in out.stderr
    assert says in out.stderr
    assert "Traceback" not in out.stderr


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", "--insecure", *args],
        cwd=ROOT,
        env={**os.environ, "ADDRESS": address},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, address


def _until(proc: subprocess.Popen[str], want: str, timeout: float = 30) -> str:
    """Output lines until one that holds want (the SDK logs JSON, or console lines with --debug)."""
    lines: queue.Queue[str] = getattr(proc, "lines", None) or _reader(proc)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if want in line:
            return line
    raise AssertionError(f"no line with {want!r}; saw {seen}")


def _reader(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """A thread reads the server's output, so waiting for a line never blocks past its deadline."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stream = proc.stdout
    threading.Thread(target=lambda: [lines.put(x) for x in iter(stream.readline, "")], daemon=True).start()
    proc.lines = lines  # type: ignore[attr-defined]
    return lines


def test_the_server_says_where_it_listens() -> None:
    proc, address = _start()
    try:
        line = json.loads(_until(proc, "serving function-gateway-readiness"))
        assert line["address"] == address
        assert line["tls"] == "insecure (plaintext)"
        assert line["max_recv_mb"] == 4
    finally:
        proc.kill()
        proc.wait()


def test_with_debug_each_request_gets_one_line() -> None:
    proc, address = _start("--debug")
    try:
        _until(proc, "serving function-gateway-readiness")
        xr = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            grpcv1.FunctionRunnerServiceStub(channel).RunFunction(make_request(xr, GATEWAY_INPUT), timeout=10)
        line = _until(proc, "composed")
        assert "InferenceGateway platform/inference" in line
        assert "GatewayReady=False" in line
        assert "duration_ms" in line
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_stops_the_server_gracefully() -> None:
    proc, _ = _start()
    try:
        _until(proc, "serving function-gateway-readiness")
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        proc.kill()


def test_killing_make_run_stops_the_server() -> None:
    """make forwards SIGTERM to its child; the recipe execs the server, so the server gets it."""
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run", f"ADDRESS={address}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        host, port = address.rsplit(":", 1)
        import socket  # noqa: PLC0415

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((host, int(port))) != 0:
                    return
            time.sleep(0.2)
        raise AssertionError(f"the server still listens on {address} after make was killed")
    finally:
        proc.kill()
