"""Private network namespaces for the controllers that cannot share loopback.

provider-kubernetes, Envoy Gateway and Envoy AI Gateway's controller all
serve controller-runtime metrics on :8080 (and two of them webhooks on :9443),
and none lets those ports be changed. So provider-kubernetes and Envoy
Gateway each run in a network namespace of their own, joined to the host by a
veth pair with a default route through it: from inside, every address of the
host (the API server's, Envoy AI Gateway's extension server) is reachable,
and the API server reaches the provider's conversion webhook at the inside
address. Every address is this run's own, made here and removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


class LabError(RuntimeError):
    pass


@dataclass(frozen=True)
class Host:
    namespace: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str


class Lab:
    def __init__(self, names: tuple[str, ...]) -> None:
        tag = os.getpid() % 10_000
        # One /30 per namespace in 10.213.<run>.0/24, picked from the PID so
        # two runs on one machine do not meet.
        third = tag % 250
        self.hosts = {
            name: Host(
                namespace=f"fgr{tag}{name[:4]}",
                host_if=f"fgr{tag}{name[:3]}h",
                ns_if=f"fgr{tag}{name[:3]}n",
                host_ip=f"10.213.{third}.{4 * i + 1}",
                ns_ip=f"10.213.{third}.{4 * i + 2}",
            )
            for i, name in enumerate(names)
        }

    @property
    def host_ip(self) -> str:
        """An address of the host itself, reachable from every namespace and from the host."""
        return next(iter(self.hosts.values())).host_ip

    def ip(self, name: str) -> str:
        return self.hosts[name].ns_ip

    @staticmethod
    def why_not() -> str | None:
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "no ip command (Debian: iproute2)"
        return None

    @staticmethod
    def _ip(*args: str) -> None:
        out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise LabError(f"ip {' '.join(args)}: {out.stderr.strip()}")

    def up(self) -> None:
        why = self.why_not()
        if why:
            raise LabError(why)
        self.down()
        for h in self.hosts.values():
            self._ip("netns", "add", h.namespace)
            self._ip("link", "add", h.host_if, "type", "veth", "peer", "name", h.ns_if)
            self._ip("link", "set", h.ns_if, "netns", h.namespace)
            self._ip("addr", "add", f"{h.host_ip}/30", "dev", h.host_if)
            self._ip("link", "set", h.host_if, "up")
            self._ip("-n", h.namespace, "addr", "add", f"{h.ns_ip}/30", "dev", h.ns_if)
            self._ip("-n", h.namespace, "link", "set", h.ns_if, "up")
            self._ip("-n", h.namespace, "link", "set", "lo", "up")
            self._ip("-n", h.namespace, "route", "add", "default", "via", h.host_ip)

    def inside(self, name: str, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[name].namespace, *cmd]

    def down(self) -> None:
        for h in self.hosts.values():
            subprocess.run(["ip", "link", "del", h.host_if], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", h.namespace], capture_output=True, check=False)
