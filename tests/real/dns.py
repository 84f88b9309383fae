"""A cluster DNS for the data plane's pods: the few names they resolve, as kube-dns would answer.

Envoy resolves its STRICT_DNS clusters (Envoy Gateway's xDS Service, the
backends' FQDNs) with c-ares, which asks the nameserver in /etc/resolv.conf;
each pod's resolv.conf names this server. It answers A queries for the names
it was given (with or without the trailing dot Envoy Gateway's bootstrap
writes), an empty answer for other types of a known name, and NXDOMAIN for
the rest. UDP only: every answer fits in one datagram.

A headless Service's name (`services`) answers with its ready pods'
addresses, as kube-dns does: Crossplane, out of cluster, dials the Function's
runtime pod this way (make release-check). They are read in the harness and
sent to the server every SERVICE_POLL_S.

The server is a process of its own, as kube-dns is a pod of its own, not a
thread of the harness, whose interpreter lock it would share with the prober
and the watches of hundreds of XRs: queries lost for a few seconds can leave
a backend's cluster in Envoy with no host for 30 s while its route says True
(docs/design.md, Limitations). It says how late it answered each query, from
the kernel's receive time (SO_TIMESTAMPNS), and how many queries the kernel
dropped with its socket full: make scale notes both. `fall_silent` makes it
lose every query, as a DNS pod that is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

_A = 1
_IN = 1
# c-ares (1.34, as Envoy 1.38 configures it) gives a query's first try at least 250 ms before it
# sends it again; four tries without an answer fail the lookup. An answer later than this one
# counts as late.
LATE_S = 0.25
SERVICE_POLL_S = 0.5
_TIMESTAMP = struct.Struct("ll")  # a struct timespec, as Linux on 64 bits sends it
# Linux's SO_TIMESTAMPNS (asm-generic/socket.h), which Python 3.11's socket module does not name.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


class Answers:
    """The answers: fixed names, and headless Services' current addresses."""

    def __init__(self, names: Mapping[str, str], services: Mapping[str, Callable[[], list[str]]]) -> None:
        self.names = {n.lower().rstrip("."): ip for n, ip in names.items()}
        self.services = {n.lower().rstrip("."): ips for n, ips in services.items()}

    def answer(self, query: bytes) -> bytes | None:
        if len(query) < 12:
            return None
        ident, _flags, qdcount = struct.unpack("!HHH", query[:6])
        if qdcount != 1:
            return None
        labels, pos = [], 12
        while pos < len(query) and query[pos] != 0:
            length = query[pos]
            labels.append(query[pos + 1 : pos + 1 + length].decode(errors="replace"))
            pos += 1 + length
        question_end = pos + 5
        if question_end > len(query):
            return None
        qtype, _qclass = struct.unpack("!HH", query[pos + 1 : question_end])
        name = ".".join(labels).lower()
        ips = (
            [self.names[name]]
            if name in self.names
            else self.services[name]()
            if name in self.services
            else None
        )
        # Response, recursion desired copied, recursion available; rcode 3 (NXDOMAIN) when unknown.
        flags = 0x8180 | (0 if ips else 3)
        found = ips if ips and qtype == _A else []
        answers = b"".join(
            struct.pack("!HHHIH", 0xC00C, _A, _IN, 5, 4) + socket.inet_aton(ip) for ip in found
        )
        header = struct.pack("!HHHHHH", ident, flags, 1, len(found), 0, 0)
        return header + query[12:question_end] + answers


class ClusterDNS:
    """The server's process, seen from the harness."""

    def __init__(
        self,
        address: str,
        names: Mapping[str, str],
        port: int = 53,
        services: Mapping[str, Callable[[], list[str]]] | None = None,
    ) -> None:
        self.address, self.port = address, port
        self._answers = Answers(names, services or {})
        self._process: subprocess.Popen[str] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._acknowledged = threading.Event()
        self._late: list[float] = []

    def answer(self, query: bytes) -> bytes | None:
        """What the server answers to `query` (read here, in the harness)."""
        return self._answers.answer(query)

    def start(self) -> ClusterDNS:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.real.dns", "--address", self.address, "--port", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._send({"names": self._answers.names, "services": self._services()})
        assert self._process.stdout is not None
        bound = self._process.stdout.readline().split()
        if bound[:1] != ["port"]:
            self.stop()
            raise RuntimeError(f"the cluster DNS did not start: {bound}")
        self.port = int(bound[1])
        threading.Thread(target=self._read, name="cluster-dns-read", daemon=True).start()
        if self._answers.services:
            threading.Thread(target=self._feed, name="cluster-dns-services", daemon=True).start()
        return self

    def _services(self, before: Mapping[str, list[str]] | None = None) -> dict[str, list[str]]:
        """Each service's addresses now; one whose lookup fails keeps those it had `before`."""
        found = {}
        for name, ips in self._answers.services.items():
            try:
                found[name] = list(ips())
            except Exception:  # a lookup failing must not stop every pod's DNS
                found[name] = list((before or {}).get(name, []))
        return found

    def _send(self, message: Mapping[str, object]) -> None:
        # One line a message, whole: the services' feed and fall_silent write from two threads.
        with self._writing:
            if self._process is not None and self._process.stdin is not None:
                self._process.stdin.write(json.dumps(message) + "\n")
                self._process.stdin.flush()

    def _feed(self) -> None:
        sent: dict[str, list[str]] = {}
        while not self._stop.wait(SERVICE_POLL_S):
            now = self._services(sent)
            if now != sent:
                try:
                    self._send({"services": now})
                except (OSError, ValueError):
                    return
                sent = now

    def _read(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            what, _, seconds = line.partition(" ")
            if what == "late":
                with self._lock:
                    self._late.append(float(seconds))
            elif what == "silent":
                self._acknowledged.set()

    def late(self) -> list[float]:
        """How late each answer later than LATE_S was, in seconds, since the server started."""
        with self._lock:
            return list(self._late)

    def summary(self, since: int = 0) -> str:
        """The late answers after the first `since` of them, in one clause."""
        late = self.late()[since:]
        worst = f", the latest {max(late):.1f} s after its query arrived" if late else ""
        dead = (
            f"; its process ended (exit {self._process.returncode}): every query since was lost"
            if self._process is not None and self._process.poll() is not None
            else ""
        )
        return (
            f"cluster DNS: {len(late)} answers later than {LATE_S:g} s{worst}; "
            f"{self.dropped()} queries dropped by the kernel since it started (its socket full){dead}"
        )

    def fall_silent(self) -> None:
        """The server reads its queries and answers none, as a DNS pod that is gone: each is lost.
        Returns once the server has said so."""
        self._silence(True)

    def answer_again(self) -> None:
        self._silence(False)

    def _silence(self, silent: bool) -> None:
        self._acknowledged.clear()
        self._send({"silent": silent})
        if not self._acknowledged.wait(5):
            raise TimeoutError(
                f"the cluster DNS did not say it was {'silent' if silent else 'answering'} in 5 s"
            )

    def dropped(self) -> int:
        """Queries the kernel dropped because the server's socket was full (/proc/net/udp)."""
        if self._process is None:
            return 0
        # /proc/net/udp lists every UDP socket of the network namespace, each local address as the
        # kernel holds it: the IPv4 address's 32 bits in this machine's byte order, then the port.
        local = f"{int.from_bytes(socket.inet_aton(self.address), sys.byteorder):08X}:{self.port:04X}"
        with contextlib.suppress(OSError):
            for row in Path(f"/proc/{self._process.pid}/net/udp").read_text().splitlines()[1:]:
                fields = row.split()
                if fields[1] == local:
                    return int(fields[-1])
        return 0

    def stop(self) -> None:
        self._stop.set()
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def serve(address: str, port: int) -> None:
    """The server's process: its answers from stdin (a JSON object a line), a line on stdout for
    each late answer."""
    # The harness's Ctrl-C reaches its whole process group: the DNS ends with the harness's teardown
    # (stop(), or its stdin closed), not before it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    first = json.loads(sys.stdin.readline())
    services: dict[str, list[str]] = first.get("services", {})
    silent = threading.Event()
    answers = Answers(first["names"], {name: (lambda name=name: services.get(name, [])) for name in services})

    def updates() -> None:
        try:
            for line in sys.stdin:
                message = json.loads(line)
                services.update(message.get("services", {}))
                if "silent" in message:
                    (silent.set if message["silent"] else silent.clear)()
                    print("silent", int(silent.is_set()), flush=True)
        finally:
            os._exit(0)  # the harness is gone (or wrote what it never writes): so is its DNS

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    sock.bind((address, port))
    print("port", sock.getsockname()[1], flush=True)
    threading.Thread(target=updates, daemon=True).start()
    while True:
        query, ancillary, _, peer = sock.recvmsg(512, socket.CMSG_SPACE(_TIMESTAMP.size))
        arrived = time.time()
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESTAMP.unpack(data[: _TIMESTAMP.size])
                arrived = seconds + nanoseconds / 1e9
        if silent.is_set():
            continue
        try:
            answer = answers.answer(query)
        except Exception:  # one bad query must not stop every pod's DNS
            answer = None
        if answer is None:
            continue
        try:
            sock.sendto(answer, peer)
        except OSError:  # a pod's address gone with its network namespace: the next query is another's
            continue
        late = time.time() - arrived
        if late > LATE_S:
            print(f"late {late:.3f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    arguments = parser.parse_args()
    serve(arguments.address, arguments.port)
