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
# A write whose watch event came without the value before it, where it was not the key's first
# (etcd sends prev_kv when it still holds it): nobody can be named, and a creation is not guessed.
PREVIOUS_MISSING = "(unattributed: the revision before it was not sent)"
# A revision whose stored value (or the one before it) is not the JSON document an object is.
UNREADABLE = "(unattributed: a revision not readable as JSON)"
# Crossplane names a composed resource's field manager after the XR (a hash of its UID): one label
# for all of them.
_HASHED = re.compile(r"^(apiextensions\.crossplane\.io/composed)/[0-9a-f]+$")


def _label(manager: str, subresource: str) -> str:
    """A managedFields entry as a writer: its manager, and its subresource when it has one."""
    manager = _HASHED.sub(r"\1", manager)
    return f"{manager} ({subresource})" if subresource else manager


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
    return sorted({_label(k[0], k[2]) for k in named}) or [UNATTRIBUTED]


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


@dataclass(frozen=True)
class _Write:
    """One write as its watch delivered it, attributed only when tallied: the watch's thread does
    nothing but record while the stack it measures runs, and no document it cannot read ends it."""

    revision: int
    key: str
    after: str  # the value written, base64 as etcd sends it
    before: str | None  # the value before it; None where it was the key's first or was not sent
    created: bool  # the key's first version (etcd's version 1): no value before it

    def writer(self) -> str:
        try:
            if self.before is None:
                return writer(None, _value(self.after)) if self.created else PREVIOUS_MISSING
            return writer(_value(self.before), _value(self.after))
        except ValueError:  # base64, UTF-8 or JSON: counted, and said to be unreadable
            return UNREADABLE


class Recorder:
    """Every write under some key prefixes from the moment it starts, by writer: one watch each."""

    def __init__(self, url: str, prefixes: Iterable[str]) -> None:
        self.etcd = Etcd(url)
        self.prefixes = list(prefixes)
        # prefix -> each write, in revision order.
        self.writes: dict[str, list[_Write]] = {p: [] for p in self.prefixes}
        # prefix -> the latest revision its watch has delivered.
        self.seen: dict[str, int] = dict.fromkeys(self.prefixes, 0)
        self.failed: dict[str, str] = {}
        # key -> the value its latest write stored (each key is under one prefix: one thread's).
        self._last: dict[str, str] = {}
        self._connections: list[http.client.HTTPConnection] = []
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._lock = threading.Lock()

    def start(self, *, wait_s: float = 10.0) -> int:
        """Watch from the next revision on, once etcd has confirmed every watch (within `wait_s`);
        returns the revision it began after. A watch etcd refuses raises here, not at the first
        tally."""
        began = self.etcd.revision()
        url = urllib.parse.urlsplit(self.etcd.url)
        created: list[threading.Event] = []
        for prefix in self.prefixes:
            self.seen[prefix] = began
            connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=None)
            confirmed = threading.Event()
            thread = threading.Thread(
                target=self._watch,
                args=(prefix, began + 1, connection, confirmed),
                name=f"etcd watch {prefix}",
                daemon=True,
            )
            # Registered before its thread runs: a stop() from here on reaches every connection.
            with self._lock:
                self._connections.append(connection)
                self._threads.append(thread)
            created.append(confirmed)
            thread.start()
        deadline = time.monotonic() + wait_s
        for prefix, confirmed in zip(self.prefixes, created, strict=True):
            if not confirmed.wait(max(0.0, deadline - time.monotonic())):
                self.stop()
                raise TimeoutError(f"etcd did not confirm the watch of {prefix} in {wait_s:g} s")
            with self._lock:
                failed = self.failed.get(prefix)
            if failed:
                self.stop()
                raise RuntimeError(f"etcd refused the watch of {prefix}: {failed}")
        return began

    def _watch(
        self, prefix: str, start: int, connection: http.client.HTTPConnection, confirmed: threading.Event
    ) -> None:
        body = {
            "key": _b64(prefix),
            "range_end": _b64(_end(prefix)),
            "start_revision": str(start),
            "prev_kv": True,
        }
        try:
            connection.connect()
            with self._lock:
                # stop() ran before this connection had a socket to shut down: end here.
                if self._stopped:
                    connection.close()
                    confirmed.set()
                    return
            connection.request("POST", "/v3/watch", body=json.dumps({"create_request": body}))
            stream = _answer(connection)
            for line in stream:
                result = _result(line)
                if result.get("created"):
                    confirmed.set()
                self._take(prefix, result)
            ended = f"etcd ended the watch's answer (HTTP {stream.status})"
        except (OSError, ValueError, RuntimeError, http.client.HTTPException) as e:
            ended = f"{type(e).__name__}: {e}"
        finally:
            connection.close()
        with self._lock:
            if not self._stopped:  # the watch broke, and what it missed must not read as none
                self.failed[prefix] = ended
        confirmed.set()  # start() reads the failure

    def _take(self, prefix: str, result: Mapping[str, Any]) -> None:
        """One message of a watch: its writes (a deletion is not one), then how far it has read."""
        for event in result.get("events") or []:
            kv = event["kv"]
            revision = int(kv["mod_revision"])
            key = _decode(kv["key"])
            if event.get("type") == "DELETE":  # a deletion is no write; a PUT's type is left out
                self._last.pop(key, None)
            else:
                # The value before a write is the one the watch delivered last for that key, where it
                # delivered one: the same string, so the run holds one copy of each revision, not two
                # (at N=300 the Objects' manifests are hundreds of MB). Else etcd's prev_kv.
                before = self._last.get(key, (event.get("prev_kv") or {}).get("value"))
                write = _Write(revision, key, kv["value"], before, int(kv.get("version", 0)) == 1)
                self._last[key] = kv["value"]
                with self._lock:
                    self.writes[prefix].append(write)
            with self._lock:
                self.seen[prefix] = max(self.seen[prefix], revision)

    def tally(self, prefix: str, since: int, until: int, *, wait_s: float = 30.0) -> Tally:
        """The writes under `prefix` after revision `since` up to `until`, once the watch has
        delivered every write up to `until` that etcd holds."""
        wanted = min(self.etcd.latest_write(prefix), until)
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                failed, seen = self.failed.get(prefix), self.seen[prefix]
            if failed:
                raise RuntimeError(f"the watch of {prefix} broke: {failed}")
            if seen >= wanted:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the watch of {prefix} delivered up to {seen}, not {wanted}, in {wait_s:.0f} s"
                )
            time.sleep(0.05)
        with self._lock:
            window = [w for w in self.writes[prefix] if since < w.revision <= until]
        tally = Tally()
        for write in window:
            tally.add(write.key, write.writer())
        return tally

    def stop(self) -> None:
        """Ends every watch and waits for its thread; a watch ended so is no failure."""
        with self._lock:
            self._stopped = True
            connections, self._connections = self._connections, []
            threads, self._threads = self._threads, []
        for connection in connections:
            # A watch's answer never ends: shutting its socket down ends the read its thread blocks
            # in, and the thread closes the connection (closing it from here races that read).
            sock = connection.sock  # read once: the watch's thread may close it meanwhile
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)


def _answer(connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
    """A watch's answer; one that is not a stream of messages (etcd's gateway refusing the request)
    raises, with what it said."""
    answer = connection.getresponse()
    if answer.status != 200:
        raise RuntimeError(f"HTTP {answer.status}: {answer.read(300).decode(errors='replace')}")
    return answer


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


def _value(value: str) -> dict[str, Any]:
    return json.loads(base64.b64decode(value))
