"""Who wrote what, read from etcd: each write of an object, attributed to a field manager.

The API server's counters say how many requests each verb and resource took, not whose they were
nor which of them changed anything (a server-side apply that changes nothing is a request and no
write). etcd stores only the writes that changed something, and a watch of a key prefix with the
previous values (`prev_kv`) delivers each with the revision before it. A watch, not a walk of each
key's history afterwards: the API server compacts etcd every 5 minutes, and creating 300 routes
takes longer than that.

A write names its writer in `metadata.managedFields` (`writers`). One that changes a value a
manager already owns, within the second of that manager's last stamp (two annotation values set by
one controller within a second), names nobody: it is counted as such, never guessed. Custom
resources are stored as JSON, which is all this reads (ModelRoutes and Objects).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNATTRIBUTED = "(unattributed: no field manager's time or fields changed)"
# Crossplane names a composed resource's field manager after the XR (a hash of its UID): one label
# for all of them.
_HASHED = re.compile(r"^(apiextensions\.crossplane\.io/composed)/[0-9a-f]+$")


def label(entry: Mapping[str, Any]) -> str:
    """A managedFields entry as a writer: its manager, and its subresource when it has one."""
    manager = _HASHED.sub(r"\1", str(entry.get("manager", "")))
    sub = entry.get("subresource")
    return f"{manager} ({sub})" if sub else manager


def _entries(doc: Mapping[str, Any]) -> dict[tuple[str, ...], tuple[Any, frozenset[str]]]:
    return {
        (
            str(e.get("manager", "")),
            str(e.get("operation", "")),
            str(e.get("subresource", "")),
            str(e.get("apiVersion", "")),
        ): (
            e.get("time"),
            frozenset(_paths(e.get("fieldsV1") or {})),
        )
        for e in (doc.get("metadata") or {}).get("managedFields") or []
    }


def _paths(fields: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    """A fieldsV1 set as its paths."""
    for key, sub in fields.items():
        path = f"{prefix}/{key}"
        yield path
        if isinstance(sub, Mapping):
            yield from _paths(sub, path)


def writers(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """Who made the revision `after` of an object whose previous revision was `before` (None: it
    was created). The API server stamps an entry's time when its manager adds, changes or removes
    a field, not when another manager takes a field from it: so the writers are the managers whose
    entry is new or newly stamped; within one second a stamp does not move, and then they are the
    managers that gained a field; else nobody is named (UNATTRIBUTED)."""
    was = _entries(before) if before is not None else {}
    now = _entries(after)
    stamped = [k for k, (time, _) in now.items() if k not in was or was[k][0] != time]
    gained = [k for k, (_, paths) in now.items() if k in was and paths - was[k][1]]
    named = stamped or gained
    return sorted({label({"manager": k[0], "subresource": k[2]}) for k in named}) or [UNATTRIBUTED]


def writer(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """`writers` as one name: the API server stamps only the writer's entry, so there is one but
    where an object was created with several managers' entries (a client may send them)."""
    return " + ".join(writers(before, after))


@dataclass
class Tally:
    """Writes in a window, by writer, over the objects written in it."""

    by_writer: Counter[str] = field(default_factory=Counter)
    keys: set[str] = field(default_factory=set)

    @property
    def writes(self) -> int:
        return sum(self.by_writer.values())

    def add(self, key: str, who: str) -> None:
        self.keys.add(key)
        self.by_writer[who] += 1

    def per(self, n: int) -> dict[str, float]:
        """Writes by writer per one of n (per route), most first."""
        return {who: round(count / n, 2) for who, count in self.by_writer.most_common()}

    def summary(self, what: str, n: int, per: str = "per route") -> str:
        """One clause: `what`'s writes divided by n (`per` says what n counts), by writer."""
        writes = "; ".join(f"{who} {count:g}" for who, count in self.per(n).items()) or "none"
        return f"{what} (etcd, {per}): {self.writes / n:.1f} writes: {writes}"


class Etcd:
    """etcd's JSON gateway (v3), read only."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _range(self, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/v3/kv/range", data=json.dumps(body).encode())  # noqa: S310 - loopback
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return json.loads(answer.read())

    def revision(self) -> int:
        """The store's revision now."""
        return int(self._range({"key": _b64("\0")})["header"]["revision"])

    def latest_write(self, prefix: str) -> int:
        """The revision of the latest write of any key under `prefix` that exists now (0: none)."""
        body = {"key": _b64(prefix), "range_end": _b64(_end(prefix)), "keys_only": True}
        return max((int(kv["mod_revision"]) for kv in self._range(body).get("kvs", [])), default=0)


class Recorder:
    """Every write under some key prefixes from the moment it starts, by writer: one watch each."""

    def __init__(self, url: str, prefixes: Iterable[str]) -> None:
        self.etcd = Etcd(url)
        self.prefixes = list(prefixes)
        # prefix -> (revision, key, writer) of each write, in revision order.
        self.writes: dict[str, list[tuple[int, str, str]]] = {p: [] for p in self.prefixes}
        # prefix -> the latest revision its watch has delivered.
        self.seen: dict[str, int] = dict.fromkeys(self.prefixes, 0)
        self.failed: dict[str, str] = {}
        self._connections: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def start(self) -> int:
        """Watch from the next revision on; returns the revision it began after."""
        began = self.etcd.revision()
        for prefix in self.prefixes:
            self.seen[prefix] = began
            threading.Thread(target=self._watch, args=(prefix, began + 1), daemon=True).start()
        return began

    def _watch(self, prefix: str, start: int) -> None:
        url = urllib.parse.urlsplit(self.etcd.url)
        connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=None)
        with self._lock:
            self._connections.append(connection)
        body = {
            "key": _b64(prefix),
            "range_end": _b64(_end(prefix)),
            "start_revision": str(start),
            "prev_kv": True,
        }
        try:
            connection.request("POST", "/v3/watch", body=json.dumps({"create_request": body}))
            stream = connection.getresponse()
            for line in stream:
                self._take(prefix, _result(line))
            ended = f"etcd ended the watch's answer (HTTP {stream.status})"
        except (OSError, ValueError, RuntimeError, http.client.HTTPException) as e:
            ended = f"{type(e).__name__}: {e}"
        finally:
            connection.close()
        with self._lock:
            if self._connections:  # not stopped: the watch broke, and what it missed must not read as none
                self.failed[prefix] = ended

    def _take(self, prefix: str, result: Mapping[str, Any]) -> None:
        """One message of a watch: its writes (a deletion is not one), then how far it has read."""
        for event in result.get("events") or []:
            kv = event["kv"]
            revision = int(kv["mod_revision"])
            if event.get("type") != "DELETE":  # a PUT's type is the enum's zero, left out of the JSON
                before = _value(event["prev_kv"]) if "prev_kv" in event else None
                with self._lock:
                    self.writes[prefix].append((revision, _decode(kv["key"]), writer(before, _value(kv))))
            with self._lock:
                self.seen[prefix] = max(self.seen[prefix], revision)

    def tally(self, prefix: str, since: int, until: int, *, wait_s: float = 30.0) -> Tally:
        """The writes under `prefix` after revision `since` up to `until`, once the watch has
        delivered every write made so far."""
        latest = self.etcd.latest_write(prefix)
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                failed, seen = self.failed.get(prefix), self.seen[prefix]
            if failed:
                raise RuntimeError(f"the watch of {prefix} broke: {failed}")
            if seen >= latest:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the watch of {prefix} delivered up to {seen}, not {latest}, in {wait_s:.0f} s"
                )
            time.sleep(0.05)
        tally = Tally()
        with self._lock:
            for revision, key, who in self.writes[prefix]:
                if since < revision <= until:
                    tally.add(key, who)
        return tally

    def stop(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            # A watch's answer never ends: shutting its socket down ends the read its thread blocks
            # in, and the thread closes the connection (closing it from here races that read).
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)


def _result(line: bytes) -> dict[str, Any]:
    """One message of a watch's answer; one that ends the watch (an error, a cancel, a compacted
    start revision) raises: the writes after it would be missing."""
    message = json.loads(line)
    result = message.get("result") or {}
    if "error" in message or result.get("canceled") or result.get("compact_revision"):
        raise RuntimeError(line.decode(errors="replace")[:300])
    return result


def _end(prefix: str) -> str:
    """The range end that makes a key a prefix: the same string with its last character's successor."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _decode(text: str) -> str:
    return base64.b64decode(text).decode()


def _value(kv: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(base64.b64decode(kv["value"]))
