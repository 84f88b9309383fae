"""A cluster DNS for the data plane's pods: the few names they resolve, as kube-dns would answer.

Envoy resolves its STRICT_DNS clusters (Envoy Gateway's xDS Service, the
backends' FQDNs) with c-ares, which asks the nameserver in /etc/resolv.conf;
each pod's resolv.conf names this server. It answers A queries for the names
it was given (with or without the trailing dot Envoy Gateway's bootstrap
writes), an empty answer for other types of a known name, and NXDOMAIN for
the rest. UDP only: every answer fits in one datagram.

A headless Service's name (`services`) answers with its ready pods'
addresses at the moment of the query, as kube-dns does: Crossplane, out of
cluster, dials the Function's runtime pod this way (make release-check).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Mapping

_A = 1
_IN = 1


class ClusterDNS:
    def __init__(
        self,
        address: str,
        names: Mapping[str, str],
        port: int = 53,
        services: Mapping[str, Callable[[], list[str]]] | None = None,
    ) -> None:
        self.names = {n.lower().rstrip("."): ip for n, ip in names.items()}
        self.services = {n.lower().rstrip("."): ips for n, ips in (services or {}).items()}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((address, port))
        self._stop = threading.Event()

    def start(self) -> ClusterDNS:
        threading.Thread(target=self._serve, name="cluster-dns", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                query, peer = self._sock.recvfrom(512)
            except OSError:
                return
            try:
                answer = self.answer(query)
            except Exception:  # a service's lookup failing must not stop every pod's DNS
                answer = None
            if answer is not None:
                self._sock.sendto(answer, peer)

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
