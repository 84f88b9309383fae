"""`make load`: the function under Crossplane's concurrent calls (issue #28), beside an SDK floor.

Crossplane calls a function once per XR reconcile, many XRs at once. Three
measurements, each printed on a line of its own and summed up in one `load:`
line:

- **the knee**: calls arrive open-loop (on a schedule, whatever the answers
  do, as many XRs' reconciles do) at rising rates, for this function and for
  the SDK floor (`response.to(req)` only), alternately in one run. The knee
  is the first rate at which p99 latency is at least twice the p99 at the
  lowest rate; the floor's knee says what any Python function gets here.
- **memory**: RSS after calls for 20,000 distinct XRs, against RSS after the
  first 1,000: what the function remembers per XR (the transitions it has
  logged, `fn.REMEMBERED_XRS`) is bounded.
- **the drain**: SIGTERM while 16 callers keep calling: every call that had
  started before the signal must be answered, later ones are refused, and the
  server exits 0.

Latencies are reported, not asserted; the run fails when a call failed at a
rate below the knee, a call that had started before SIGTERM was not
answered, or the server did not exit 0. (gRPC's core can still cancel a call
that arrives in the very instant of shutdown, before the server could take
it: then the run says so and fails; Crossplane would requeue that XR.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tools.bench import floor_command, p, route_request, rss_mb, start

# Calls per second, each held for STEP_S; the sweep stops past both knees.
RATES = tuple(int(r) for r in os.environ.get("LOAD_RATES", "25,50,100,200,400,800").split(","))
STEP_S = float(os.environ.get("LOAD_STEP_S", "4"))
DISTINCT_XRS = int(os.environ.get("LOAD_XRS", "20000"))
# Crossplane sets no deadline per function call: the whole XR reconcile has two
# minutes (internal/controller/apiextensions/composite/reconciler.go, v2.4.0).
DEADLINE_S = 120.0


@dataclass
class Step:
    rate: int
    latencies: list[float] = field(default_factory=list)
    failed: int = 0

    @property
    def p99(self) -> float:
        return p(self.latencies, 0.99) if self.latencies else float("inf")


async def _open_loop(address: str, req: fnv1.RunFunctionRequest, rate: int, seconds: float) -> Step:
    """Calls started every 1/rate s for seconds, whatever the answers do; each call's latency."""
    step = Step(rate)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)

        async def one() -> None:
            t0 = time.perf_counter()
            try:
                await stub.RunFunction(req, timeout=DEADLINE_S)
                step.latencies.append(time.perf_counter() - t0)
            except grpc.RpcError:
                step.failed += 1

        tasks = []
        began = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = began + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    return step


def knee(steps: list[Step]) -> int | None:
    """The first rate whose p99 is at least twice the lowest rate's; None if none."""
    base = steps[0].p99
    return next((s.rate for s in steps[1:] if s.p99 >= 2 * base), None)


def _named(req: fnv1.RunFunctionRequest, i: int) -> fnv1.RunFunctionRequest:
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    out.observed.composite.resource.fields["metadata"].struct_value.fields["name"].string_value = f"llama-{i}"
    return out


def _memory(address: str, pid: int, req: fnv1.RunFunctionRequest) -> tuple[float, float]:
    """RSS (MB) after the first 1,000 distinct XRs, and after DISTINCT_XRS."""
    channel = grpc.insecure_channel(address)
    stub = grpcv1.FunctionRunnerServiceStub(channel)
    first = 0.0
    with ThreadPoolExecutor(8) as pool:
        for start_at in range(0, DISTINCT_XRS, 1000):
            batch = [_named(req, i) for i in range(start_at, start_at + 1000)]
            list(pool.map(lambda r: stub.RunFunction(r, timeout=DEADLINE_S), batch))
            if start_at == 0:
                first = rss_mb(pid)
    channel.close()
    return first, rss_mb(pid)


@dataclass
class Drain:
    before: int = 0  # calls started before SIGTERM
    before_failed: int = 0
    after: int = 0
    after_refused: int = 0
    exit_code: int | None = None
    exit_s: float = 0.0


def drain(req: fnv1.RunFunctionRequest, callers: int = 16, seconds: float = 1.0) -> Drain:
    """SIGTERM while callers keep calling: calls started before it must all be answered."""
    proc, address, _ = start([sys.executable, "-m", "function"])
    out = Drain()
    lock = threading.Lock()
    sent_at: list[float] = []  # the moment SIGTERM went, once it has
    stop = threading.Event()
    channel = grpc.insecure_channel(address)
    stub = grpcv1.FunctionRunnerServiceStub(channel)

    def caller() -> None:
        while not stop.is_set():
            began = time.monotonic()
            try:
                stub.RunFunction(req, timeout=DEADLINE_S)
                ok = True
            except grpc.RpcError:
                ok = False
            with lock:
                if not sent_at or began < sent_at[0]:
                    out.before += 1
                    out.before_failed += not ok
                else:
                    out.after += 1
                    out.after_refused += not ok

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    with lock:
        sent_at.append(time.monotonic())
        proc.send_signal(signal.SIGTERM)
    try:
        out.exit_code = proc.wait(timeout=30)
    finally:
        out.exit_s = time.monotonic() - sent_at[0]
        stop.set()
        for t in threads:
            t.join()
        channel.close()
        proc.kill()
    return out


def main() -> int:
    req = route_request(8)
    ours, ours_addr, _ = start([sys.executable, "-m", "function"])
    floor, floor_addr, _ = start(floor_command())
    steps: dict[str, list[Step]] = {"ours": [], "floor": []}
    try:
        print(f"{'calls/s':>8} {'ours p50 ms':>12} {'p99':>8} {'failed':>7} {'floor p50 ms':>13} {'p99':>8}")
        for rate in RATES:
            # Side by side: each rate for both before the next rate.
            for who, address in (("ours", ours_addr), ("floor", floor_addr)):
                steps[who].append(asyncio.run(_open_loop(address, req, rate, STEP_S)))
            o, f = steps["ours"][-1], steps["floor"][-1]
            print(
                f"{rate:>8} {p(o.latencies, 0.5):>12.2f} {o.p99:>8.2f} {o.failed:>7} "
                f"{p(f.latencies, 0.5):>13.2f} {f.p99:>8.2f}"
            )
        first, last = _memory(ours_addr, ours.pid, req)
        print(f"memory: RSS {first:.0f} MB after 1,000 distinct XRs, {last:.0f} MB after {DISTINCT_XRS:,}")
    finally:
        ours.terminate()
        floor.terminate()
        ours.wait()
        floor.wait()
    d = drain(req)
    print(
        f"drain: SIGTERM with 16 callers: {d.before} calls started before it, {d.before_failed} not answered; "
        f"{d.after} after, {d.after_refused} refused; exit {d.exit_code} in {d.exit_s:.2f} s"
    )
    ours_knee, floor_knee = knee(steps["ours"]), knee(steps["floor"])
    below_knee = [s for s in steps["ours"] if s.rate < (ours_knee or RATES[-1] + 1)]
    worst = max(s.p99 for s in below_knee)
    print(
        f"load: p99 doubles at {ours_knee or f'more than {RATES[-1]}'} calls/s for a route with 8 backends "
        f"(SDK floor {floor_knee or f'more than {RATES[-1]}'}), lowest-rate p99 {steps['ours'][0].p99:.1f} ms, "
        f"p99 below the knee at most {worst:.1f} ms; "
        f"RSS {first:.0f} -> {last:.0f} MB over {DISTINCT_XRS:,} XRs; "
        f"SIGTERM: {d.before_failed} of {d.before} in-flight calls cut, exit {d.exit_code}"
    )
    return 0 if d.exit_code == 0 and d.before_failed == 0 and not any(s.failed for s in below_knee) else 1


if __name__ == "__main__":
    sys.exit(main())
