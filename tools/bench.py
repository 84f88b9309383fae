"""`make bench`: this function against an SDK floor, side by side, over loopback gRPC.

The floor is a servicer that only returns `response.to(req)`: what any Python
function pays for gRPC and protobuf. Both run as separate server processes
and are measured alternately in one run, so machine noise hits both alike.
Not part of `make test`: numbers are reported, never asserted.
"""

from __future__ import annotations

import copy
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.support import (
    EXAMPLES,
    GATEWAY_INPUT,
    ROOT,
    ROUTE_INPUT,
    by_resource_name,
    free_port,
    load_yaml,
    make_request,
    run,
)

FLOOR = """
from crossplane.function import cli as sdkcli, response
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
import click

class Floor(grpcv1.FunctionRunnerServiceServicer):
    async def RunFunction(self, req, _):
        return response.to(req)

@click.command()
@sdkcli.standard_options
def cli(**kw):
    sdkcli.run(Floor(), **kw)

cli()
"""
CALLS = int(os.environ.get("BENCH_CALLS", "300"))


def start(cmd: list[str]) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    env = {**os.environ, "ADDRESS": f"127.0.0.1:{port}"}
    t0 = time.monotonic()
    proc = subprocess.Popen([*cmd, "--insecure"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    req = route_request(1)
    # A fresh channel per attempt: a channel whose first connection failed
    # waits out gRPC's reconnect backoff (a second), which would be measured
    # as start-up time.
    while True:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=1)
                break
            except grpc.RpcError:
                time.sleep(0.005)
    cold = time.monotonic() - t0
    return proc, f"127.0.0.1:{port}", cold


def route_request(backends: int) -> fnv1.RunFunctionRequest:
    xr = copy.deepcopy(load_yaml(EXAMPLES / "model-route" / "xr.yaml")[0])
    # Each backend with an API key: a BackendSecurityPolicy each, as issue #18 measured.
    xr["spec"]["backends"] = [
        {
            "name": f"b{i}",
            "endpoint": {"hostname": f"vllm-{i}.example", "port": 8000},
            "apiKeySecretRef": {"name": f"key-{i}"},
        }
        for i in range(backends)
    ]
    gw = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")[0]
    return steady(make_request(xr, ROUTE_INPUT, {}, {"inference-gateway": [gw]}))


def steady(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    """The request as Crossplane sends it at steady state: the XR already carries the
    conditions this call computes, so no transition is logged and no event emitted (a
    first call does both, once)."""
    rsp = run(req)
    conditions = [
        {
            "type": c.type,
            "status": fnv1.Status.Name(c.status).removeprefix("STATUS_CONDITION_").title(),
            "reason": c.reason,
            "message": c.message,
        }
        for c in rsp.conditions
    ]
    req.observed.composite.resource.get_or_create_struct("status").update({"conditions": conditions})
    return req


def gateway_request() -> fnv1.RunFunctionRequest:
    xr = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
    observed = by_resource_name(load_yaml(EXAMPLES / "inference-gateway" / "observed" / "ready.yaml"))
    return steady(make_request(xr, GATEWAY_INPUT, observed))


def latencies(stub: Any, req: fnv1.RunFunctionRequest, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        stub.RunFunction(req, timeout=10)
        out.append(time.perf_counter() - t0)
    return out


def throughput(address: str, req: fnv1.RunFunctionRequest, concurrency: int, n: int) -> float:
    channel = grpc.insecure_channel(address)
    stub = grpcv1.FunctionRunnerServiceStub(channel)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: stub.RunFunction(req, timeout=10), range(n)))
    elapsed = time.perf_counter() - t0
    channel.close()
    return n / elapsed


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def floor_command() -> list[str]:
    """How to start the SDK floor: FLOOR written beside the venv, run by this Python."""
    floor_file = ROOT / ".venv" / "bench_floor.py"
    floor_file.parent.mkdir(exist_ok=True)
    floor_file.write_text(FLOOR)
    return [sys.executable, str(floor_file)]


def main() -> int:
    floor_cmd = floor_command()
    colds = []
    for _ in range(5):
        proc, _addr, cold = start([sys.executable, "-m", "function"])
        colds.append(cold)
        proc.terminate()
        proc.wait()
    ours, ours_addr, _ = start([sys.executable, "-m", "function"])
    floor, floor_addr, _ = start(floor_cmd)
    try:
        stubs = {
            name: grpcv1.FunctionRunnerServiceStub(grpc.insecure_channel(addr))
            for name, addr in (("ours", ours_addr), ("floor", floor_addr))
        }
        cases = {"gateway": gateway_request(), **{f"route({n})": route_request(n) for n in (1, 8, 32)}}
        overhead: dict[str, float] = {}
        print(
            f"{'case':<11} {'ours p50':>9} {'p99':>7} {'floor p50':>10} {'p99':>7} {'overhead p50 ms':>16}  thr c1/c4/c16 ours | floor (req/s)"
        )
        tails: dict[str, tuple[float, float]] = {}
        for name, req in cases.items():
            lat: dict[str, list[float]] = {"ours": [], "floor": []}
            for _ in range(CALLS // 50):  # alternate in rounds: noise hits both
                for who in ("ours", "floor"):
                    lat[who] += latencies(stubs[who], req, 50)
            thr = {
                who: [throughput(addr, req, c, CALLS) for c in (1, 4, 16)]
                for who, addr in (("ours", ours_addr), ("floor", floor_addr))
            }
            overhead[name] = statistics.median(lat["ours"]) * 1000 - statistics.median(lat["floor"]) * 1000
            tails[name] = (
                p(lat["ours"], 0.99) / p(lat["ours"], 0.5),
                p(lat["floor"], 0.99) / p(lat["floor"], 0.5),
            )
            print(
                f"{name:<11} {p(lat['ours'], 0.5):>9.3f} {p(lat['ours'], 0.99):>7.3f} {p(lat['floor'], 0.5):>10.3f} "
                f"{p(lat['floor'], 0.99):>7.3f} {overhead[name]:>16.3f}  "
                + "/".join(f"{t:.0f}" for t in thr["ours"])
                + " | "
                + "/".join(f"{t:.0f}" for t in thr["floor"])
            )
        rss = rss_mb(ours.pid)
    finally:
        ours.terminate()
        floor.terminate()
    per_resource_us = (overhead["route(32)"] - overhead["route(1)"]) / ((3 + 2 * 32) - (3 + 2)) * 1000
    print(
        f"bench: gateway overhead p50 {overhead['gateway']:.2f} ms, route(32) overhead p50 {overhead['route(32)']:.2f} ms, "
        f"per resource {per_resource_us:.0f} us, cold start {statistics.median(colds):.2f} s, rss {rss:.0f} MB, "
        f"route(32) p99/p50 {tails['route(32)'][0]:.2f} (floor {tails['route(32)'][1]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
