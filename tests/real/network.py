"""Private network namespaces for the controllers that cannot share loopback.

provider-kubernetes, Envoy Gateway and Envoy AI Gateway's controller all
serve controller-runtime metrics on :8080 (and two of them webhooks on :9443),
and none lets those ports be changed. So provider-kubernetes and Envoy
Gateway each run in a network namespace of their own, joined to the host by a
veth pair with a default route through it: from inside, every address of the
host (the API server's, Envoy AI Gateway's extension server) is reachable,
and the API server reaches the provider's conversion webhook at the inside
address. Every address is this run's own, made here and removed at the end.

A run that is killed outright (SIGKILL, a lost machine) leaves its namespaces
and addresses behind. The next run must neither meet them nor be refused by
them: a /30 that is already on a leaked veth wins the host's route, and the
controllers in the new namespace time out reaching the API server (CI,
2026-12-03: Envoy Gateway's "dial tcp 10.213.240.1: i/o timeout", the block a
dead run had left). So each run claims its address blocks (`claim_block`):
never one with an address or route on the host, never one a live run holds,
and the namespaces of runs that are gone are removed first (`reap`).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.real import toolchain

# Which run holds which block: one file per block, holding the owner's PID and tag.
CLAIMS = Path("/run/fgr-net")
# Every namespace a run makes is named fgr<tag><letter>...
_NAMESPACE = re.compile(r"^fgr(\d+)[a-z]")


def run_tag() -> int:
    """This run's tag, in every interface and namespace name it makes (names are at most 15 characters)."""
    return os.getpid() % 10_000


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claims() -> dict[Path, tuple[int, int]]:
    """Every claim file: path -> (owner PID, owner tag)."""
    out: dict[Path, tuple[int, int]] = {}
    for path in CLAIMS.glob("10.*"):
        try:
            pid, tag = (int(x) for x in path.read_text().split())
        except (OSError, ValueError):
            continue
        out[path] = (pid, tag)
    return out


def reap_claims() -> set[int]:
    """Drop the claims of runs that are gone; return the tags of the runs alive."""
    live_tags = {run_tag()}
    for path, (pid, tag) in _claims().items():
        if _alive(pid):
            live_tags.add(tag)
        else:
            path.unlink(missing_ok=True)
    return live_tags


# Every run works in a folder of this prefix (tests/real/integration.py); its processes name it.
RUN_DIR_PREFIX = "fgr-integration-"


def orphans(processes: dict[int, tuple[int, str]], cache: str) -> list[int]:
    """PIDs of a dead run's processes, from PID -> (parent PID, executable and command line):
    adopted by init, and an upstream binary the harness built into `cache` or naming a run's
    folder. A live run's processes are the harness's children."""
    return sorted(
        pid
        for pid, (parent, command) in processes.items()
        if parent == 1 and (command.startswith(cache + "/") or RUN_DIR_PREFIX in command)
    )


def _processes() -> dict[int, tuple[int, str]]:
    """PID -> (parent PID, "<executable> <command line>") of every process readable here."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes().decode(errors="replace")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            exe = os.readlink(entry / "exe")
        except OSError:
            continue  # gone since the listing, or a kernel thread
        out[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), f"{exe} {cmdline}")
    return out


# The podman label on an image pod's containers (tests/real/dataplane.py): the run's tag.
RUN_LABEL = "fgr.run"


def dead_containers(listed: str, live_tags: set[int]) -> list[str]:
    """IDs of containers whose run tag (from `podman ps` lines "<id> <tag>") is no live run's."""
    rows = [line.split() for line in listed.splitlines()]
    return [
        row[0] for row in rows if len(row) == 2 and (not row[1].isdigit() or int(row[1]) not in live_tags)
    ]


def _reap_containers(live_tags: set[int]) -> None:
    """A dead run's podman containers: their conmon keeps running, parented by nothing reap kills."""
    if shutil.which("podman") is None:
        return
    label = f'{{{{.ID}}}} {{{{index .Labels "{RUN_LABEL}"}}}}'
    with contextlib.suppress(subprocess.TimeoutExpired):
        listed = subprocess.run(
            ["podman", "ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", label],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        ).stdout
        dead = dead_containers(listed, live_tags)
        if dead:
            subprocess.run(
                ["podman", "rm", "--force", "--time", "0", *dead],
                capture_output=True,
                check=False,
                timeout=60,
            )


def reap() -> list[str]:
    """Remove what runs that are gone left behind: their processes (which outlive a SIGKILL of the
    harness, each in a session of its own), their podman containers, their claims and their
    namespaces (a veth goes with its peer)."""
    for pid in orphans(_processes(), str(toolchain.cache_root())):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    live_tags = reap_claims()
    _reap_containers(live_tags)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    reaped = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAMESPACE.match(name)
        if not m or int(m.group(1)) in live_tags:
            continue
        pids = [
            int(p)
            for p in subprocess.run(
                ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
            ).stdout.split()
        ]
        # Processes a run started outlive its SIGKILL (each runs in a session of its
        # own) and keep its namespace. Orphans are killed; a namespace with a process
        # some live parent still owns belongs to something alive, and is left.
        parents = _parents(pids)
        if pids and not orphaned(parents):
            continue
        # Not one read as gone (parent 0): its PID may be another process's by now.
        for pid in (p for p, parent in parents.items() if parent):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        reaped.append(name)
    return reaped


def orphaned(parents: dict[int, int]) -> bool:
    """Whether processes (PID -> parent PID) belong to no live process outside them: each one's
    parent is init (1), gone (0: its /proc entry was unreadable), or one of them."""
    return all(parent in {0, 1} or parent in parents for parent in parents.values())


def _parents(pids: list[int]) -> dict[int, int]:
    """PID -> parent PID, from /proc/<pid>/stat (0 for a process gone since it was listed)."""
    out = {}
    for pid in pids:
        try:
            # Bytes: a command name cut at 15 bytes can end inside a UTF-8 character.
            stat = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
        except OSError:
            out[pid] = 0
            continue
        # The command may hold spaces and parentheses: the fields after its last ")".
        out[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _host_routes() -> str:
    """Every IPv4 address and route on the host, as `ip` prints them."""
    return "".join(
        subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"])
    )


def blocks_in_use(second: int, routes: str) -> set[int]:
    """Third octets of the 10.<second>.x.0/24 blocks that an address or route in `routes` lies in.

    A route wider than a /24 (a 10.0.0.0/8 to the machine's gateway) is left
    out: the /30s a run adds are more specific and win over it.
    """
    used: set[int] = set()
    for token in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?", routes):
        iface = ipaddress.ip_interface(token)
        nets = [ipaddress.ip_network(iface.ip)]
        if iface.network.prefixlen >= 24:
            nets.append(iface.network)
        for net in nets:
            if net.network_address.packed[:2] == bytes((10, second)):
                used.add(net.network_address.packed[2])
    return used


def claim_block(second: int) -> int:
    """Claim a free 10.<second>.<third>.0/24 for this run and return <third>; `release_block` gives it back."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    # One claimer at a time on this machine, so two runs never pick one block.
    with open(CLAIMS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reap()
        used = blocks_in_use(second, _host_routes())
        held = {path.name for path in _claims()}
        start = run_tag() % 250
        for k in range(250):
            third = (start + k) % 250
            name = f"10.{second}.{third}"
            if third in used or name in held:
                continue
            (CLAIMS / name).write_text(f"{os.getpid()} {run_tag()}\n")
            return third
    raise LabError(f"no free /24 in 10.{second}.0.0/16 on this machine")


def remove_pair(host_if: str, namespace: str) -> None:
    """Remove a namespace and the host end of its veth, if they exist: before making them (a dead
    run with this run's tag may have left them) and when done."""
    subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


def release_block(second: int, third: int) -> None:
    (CLAIMS / f"10.{second}.{third}").unlink(missing_ok=True)


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
        self.names = names
        self.hosts: dict[str, Host] = {}
        self._third: int | None = None

    def _plan(self, third: int) -> None:
        # One /30 per namespace in this run's claimed 10.213.<third>.0/24.
        tag = run_tag()
        self.hosts = {
            name: Host(
                # The index keeps names of one prefix apart (provider-kubernetes, provider-http).
                namespace=f"fgr{tag}{name[:3]}{i}",
                host_if=f"fgr{tag}{name[:2]}{i}h",
                ns_if=f"fgr{tag}{name[:2]}{i}n",
                host_ip=f"10.213.{third}.{4 * i + 1}",
                ns_ip=f"10.213.{third}.{4 * i + 2}",
            )
            for i, name in enumerate(self.names)
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
        self._third = claim_block(213)
        self._plan(self._third)
        self._remove()
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
        self._remove()
        if self._third is not None:
            release_block(213, self._third)
            self._third = None

    def _remove(self) -> None:
        for h in self.hosts.values():
            remove_pair(h.host_if, h.namespace)
