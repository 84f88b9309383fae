"""Local processes of a real-component run: started with their logs kept, stopped by PID.

Every process is its own process group, so stopping it stops whatever it
started too. Stopping sends SIGTERM, waits, then SIGKILL: a run ends with no
process of its own left and every port it took freed, even when a scenario
fails. Logs stay in the run's folder, so a red run explains itself.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.real.process import ConformanceError

# A command prefix: what follows runs in a mount namespace of its own, so the
# binds it makes (a pod's volumes, Envoy Gateway's /certs) are seen by it alone.
PRIVATE_MOUNTS = ["unshare", "--mount", "--propagation", "private", "--"]


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM (CI's timeout, a developer's kill) unwinds the run like an error does.

    Python's default SIGTERM ends the interpreter without running `finally`
    blocks, which left every component, pod process and network namespace of
    a killed run behind, holding the ports the next run needs.
    """

    def unwind(signum: int, _frame: object) -> None:
        # Once: a second SIGTERM (`timeout` forwarding the one a developer's
        # pkill also sent) would cut the teardown short and leave a run's
        # processes behind, as it did on 2026-12-02.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


@dataclass(frozen=True)
class Liveness:
    """A kubelet's httpGet liveness probe, with the kubelet's defaults for what a chart leaves out.

    Any status from 200 to 399 is a success (a redirect is not followed:
    /healthz endpoints do not redirect), anything else (a refused
    connection, no answer within timeout_s, a 500) a failure. After
    failure_threshold failures in a row the container is stopped as the
    kubelet stops it (SIGTERM, then SIGKILL after the pod's
    terminationGracePeriodSeconds, grace_s) and started again.
    """

    url: str
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3
    grace_s: float = 30.0

    def passes(self) -> bool:
        url = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=self.timeout_s)
        try:
            conn.request("GET", url.path or "/")
            return 200 <= conn.getresponse().status < 400
        except (OSError, http.client.HTTPException):  # refused, timed out, closed without an answer
            return False
        finally:
            conn.close()


@dataclass
class _Probing:
    """One process's liveness probe: the process it probes, when it is next sent, the failures in a row."""

    probe: Liveness
    proc: Process
    due: float
    failures: int = 0


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    ports: list[int] = field(default_factory=list)
    # How it was started, so a fault scenario can start it again the same way.
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    """Starts processes, remembers them, and stops all of them in reverse order."""

    def __init__(
        self, logdir: Path, *, tick_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logdir = logdir
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.processes: list[Process] = []
        # The kubelet's restartPolicy Always, for the components (keep_running):
        # a process that exits on its own is started again, and counted.
        self.restarts: dict[str, int] = {}
        self.failed_restarts: list[str] = []
        self._kept: Callable[[Process], bool] = lambda _p: False
        # Processes a fault scenario took down on purpose: not started again until it says so.
        self._held: set[str] = set()
        # Liveness probes by process name (probe_liveness), and the restarts they caused.
        self._probing: dict[str, _Probing] = {}
        self.liveness_restarts: dict[str, int] = {}
        self._tick_s = tick_s
        self._clock = clock  # the liveness probes' (tests step it)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None

    def start(
        self, name: str, cmd: list[str], *, env: dict[str, str] | None = None, ports: list[int] | None = None
    ) -> Process:
        log = self.logdir / f"{name}.log"
        handle = log.open("ab")
        popen = subprocess.Popen(
            cmd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        handle.close()
        proc = Process(name, popen, log, ports or [], list(cmd), dict(env or {}))
        with self._lock:
            self.processes.append(proc)
        return proc

    def find(self, name: str) -> Process:
        """The running process of that name (the newest, after a restart)."""
        with self._lock:
            found = [p for p in self.processes if p.name == name]
        if not found:
            raise ConformanceError(f"no process named {name}: {[p.name for p in self.processes]}")
        return found[-1]

    def keep_running(self, which: Callable[[Process], bool]) -> None:
        """Start again, as the kubelet would, every process `which` selects that exits on its own.

        In a cluster each component is a pod with restartPolicy Always; here a
        component that exits (Envoy Gateway's leader election lost while the
        API server was down, say) would otherwise stay gone for the rest of
        the run, a fault no cluster has.
        """
        self._kept = which
        self._watchdog = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._watchdog.start()

    def probe_liveness(self, name: str, probe: Liveness) -> None:
        """Probe a component as its chart's livenessProbe has the kubelet probe it (the watchdog sends it).

        Some components fail without exiting: Envoy Gateway v1.8.3 goes on
        running after it loses its leader lease, reconciling nothing, with
        its health port closed (docs/testing.md). A cluster's kubelet
        restarts it once the probe fails failure_threshold times in a row;
        so does this. The probe starts over, after its initial delay, with
        every start of the process.
        """
        with self._lock:
            self._probing[name] = _Probing(probe, self.find(name), self._clock() + probe.initial_delay_s)

    def _probe(self) -> None:
        """One round of liveness probes: the due ones are sent; a process that failed enough is restarted."""
        with self._lock:
            due = [p for p in self._probing.values() if p.due <= self._clock() and self._probed(p)]
        for probing in due:
            passed = probing.probe.passes()  # outside the lock: a probe may take its whole timeout
            with self._lock:
                if not self._probed(probing):
                    continue  # exited (keep_running's), stopped, restarted or held down by a fault meanwhile
                probing.due = self._clock() + probing.probe.period_s
                probing.failures = 0 if passed else probing.failures + 1
                if probing.failures < probing.probe.failure_threshold:
                    continue
                with probing.proc.log.open("a") as log:
                    log.write(
                        f"\n--- liveness probe {probing.probe.url} failed {probing.failures} times: "
                        f"SIGTERM, SIGKILL after {probing.probe.grace_s:.0f} s, and started again ---\n"
                    )
                _signal_group(probing.proc, signal.SIGTERM)
            # Outside the lock: the grace may be seconds (a SIGSTOPped process never acts on SIGTERM).
            with contextlib.suppress(subprocess.TimeoutExpired):
                probing.proc.popen.wait(timeout=probing.probe.grace_s)
            with self._lock:
                if self._stopping.is_set() or self._probing.get(probing.proc.name) is not probing:
                    continue  # the run is ending, or the process was stopped meanwhile
                try:
                    self._respawn(probing.proc)
                except Exception as e:  # one failed start must not end the watchdog for the run
                    self.failed_restarts.append(f"{probing.proc.name}: {type(e).__name__}: {e}")
                    continue
                name = probing.proc.name
                self.liveness_restarts[name] = self.liveness_restarts.get(name, 0) + 1

    def _probed(self, probing: _Probing) -> bool:
        """Its process is alive, the newest of its name, and not held down by a fault: probe it."""
        name = probing.proc.name
        newest = [p for p in self.processes if p.name == name][-1:]
        return (
            self._probing.get(name) is probing
            and probing.proc.alive()
            and name not in self._held
            and newest == [probing.proc]
        )

    def _watch(self) -> None:
        while not self._stopping.wait(self._tick_s):
            self._probe()
            with self._lock:
                if self._stopping.is_set():
                    return  # stop_all is stopping everything: nothing is started again
                gone = [
                    p for p in self.processes if not p.alive() and p.name not in self._held and self._kept(p)
                ]
                for proc in gone:
                    self.restarts[proc.name] = self.restarts.get(proc.name, 0) + 1
                    try:
                        with proc.log.open("a") as log:
                            log.write(f"\n--- exited with {proc.popen.returncode}: started again ---\n")
                        self._respawn(proc)
                    except Exception as e:  # one failed start must not end the watchdog for the run
                        self.failed_restarts.append(f"{proc.name}: {type(e).__name__}: {e}")

    def kill(self, proc: Process, *, hold: bool = True) -> None:
        """SIGKILL, as a crash or an OOM kill would: no cleanup, no goodbye.

        Held down until restart(), unless hold is False: then whoever keeps it
        running (the watchdog, the data plane's kubelet) starts it again.
        """
        with self._lock:
            if hold:
                self._held.add(proc.name)
            _signal_group(proc, signal.SIGKILL)
            proc.popen.wait(timeout=10)

    def hang(self, proc: Process) -> None:
        """SIGSTOP: alive, listening, and answering nothing, as a wedged process."""
        _signal_group(proc, signal.SIGSTOP)

    def resume(self, proc: Process) -> None:
        _signal_group(proc, signal.SIGCONT)

    def restart(self, proc: Process) -> Process:
        """Start a killed process again with its command and environment (its log goes on)."""
        if proc.alive():
            raise ConformanceError(f"{proc.name} is still running: kill it first")
        with self._lock:
            self._held.discard(proc.name)
            return self._respawn(proc)

    def _respawn(self, proc: Process) -> Process:
        # Whatever the dead process started goes first: it may hold the ports.
        _signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=10)
        # Started before the old one is forgotten: if the start fails, the dead one stays
        # listed, so the watchdog tries again.
        again = self.start(proc.name, proc.cmd, env=proc.env, ports=proc.ports)
        if proc in self.processes:
            self.processes.remove(proc)
        probing = self._probing.get(proc.name)
        if probing is not None:  # a new container: its probe starts over, after its initial delay
            self._probing[proc.name] = _Probing(
                probing.probe, again, self._clock() + probing.probe.initial_delay_s
            )
        return again

    def wait_until(self, proc: Process, what: str, check: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ConformanceError(
                    f"{proc.name} exited ({proc.popen.returncode}) before {what}:\n{proc.tail()}"
                )
            try:
                if check():
                    return
            except Exception:  # noqa: S110 - not up yet; the deadline decides
                pass
            time.sleep(0.2)
        raise ConformanceError(f"{proc.name}: {what} not within {timeout:.0f} s:\n{proc.tail()}")

    def stop(self, proc: Process, grace: float = 10) -> None:
        """Stop one process (SIGTERM, then SIGKILL after grace) and forget it, and its liveness probe."""
        with self._lock:
            if proc in self.processes:
                self.processes.remove(proc)
            probing = self._probing.get(proc.name)
            if probing is not None and probing.proc is proc:
                del self._probing[proc.name]
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.popen.wait(timeout=10)
        _signal_group(proc, signal.SIGKILL)

    def stop_all(self) -> list[str]:
        """Stop every process, newest first; what was still listening afterwards."""
        self._stopping.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
        with self._lock:  # once the watchdog sees the stop under its lock, it starts nothing more
            pass
        for proc in reversed(self.processes):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in reversed(self.processes):
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.popen.wait(timeout=10)
            # Whatever the process started and left behind goes too.
            _signal_group(proc, signal.SIGKILL)
        return [f"{p.name}:{port}" for p in self.processes for port in p.ports if port_open(port)]


def _signal_group(proc: Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.popen.pid, sig)
