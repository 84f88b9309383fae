"""Who wrote what, read from etcd's history: each revision of an object, attributed to a field manager.

The API server's counters say how many requests each verb and resource took, not whose they were
nor which of them changed anything (a server-side apply that changes nothing is a request and no
write). etcd keeps every revision until the API server compacts it (every 5 minutes by default: at
each tick it compacts to the revision of the tick before, so a window read within 5 minutes of its
start is whole). A revision names its writer in `metadata.managedFields` (`writers`). A write that
changes a value a manager already owns, within the second of its last stamp (two annotation
values set by one controller within a second), names nobody: it is counted as such, never
guessed.

Custom resources are stored as JSON, which is all this reads (ModelRoutes and Objects).
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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


def _entries(doc: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[Any, frozenset[str]]]:
    return {
        (str(e.get("manager", "")), str(e.get("operation", "")), str(e.get("subresource", ""))): (
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


@dataclass
class Tally:
    """Revisions in a window, by writer, over some objects."""

    objects: int = 0
    revisions: int = 0
    by_writer: Counter[str] = field(default_factory=Counter)
    # Objects whose history in the window etcd had compacted: their counts are missing.
    compacted: int = 0

    def add(self, history: Sequence[Mapping[str, Any]], previous: Mapping[str, Any] | None) -> None:
        """One object's revisions in the window, oldest first; `previous`, its revision before it."""
        self.objects += 1
        before = previous
        for doc in history:
            self.revisions += 1
            # A write two managers made at once (an Update that also moved ownership) counts for each.
            self.by_writer.update(writers(before, doc))
            before = doc

    def per(self, n: int) -> dict[str, float]:
        """Revisions by writer per one of n (per route), most first."""
        return {who: round(count / n, 2) for who, count in self.by_writer.most_common()}

    def summary(self, what: str, n: int, per: str = "per route") -> str:
        """One clause: `what`'s writes divided by n (`per` says what n counts), by writer."""
        writes = "; ".join(f"{who} {count:g}" for who, count in self.per(n).items()) or "none"
        missing = f"; {self.compacted} objects' history compacted, not counted" if self.compacted else ""
        return f"{what} (etcd history, {per}): {self.revisions / n:.1f} writes: {writes}{missing}"


class CompactedError(Exception):
    """etcd no longer holds the revision asked for."""


class Etcd:
    """etcd's JSON gateway (v3), read only."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _range(self, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/v3/kv/range", data=json.dumps(body).encode())  # noqa: S310 - loopback
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if "compacted" in text:
                raise CompactedError(text) from e
            raise

    def revision(self) -> int:
        """The store's revision now."""
        return int(self._range({"key": _b64("\0")})["header"]["revision"])

    def keys(self, prefix: str, revision: int) -> list[str]:
        """Every key under `prefix` at `revision`."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True, "revision": revision}
        return [base64.b64decode(kv["key"]).decode() for kv in self._range(body).get("kvs", [])]

    def _at(self, key: str, revision: int) -> tuple[int, dict[str, Any]] | None:
        kvs = self._range({"key": _b64(key), "revision": revision}).get("kvs")
        if not kvs:
            return None
        return int(kvs[0]["mod_revision"]), json.loads(base64.b64decode(kvs[0]["value"]))

    def history(self, key: str, since: int, until: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """`key`'s revisions written after `since` up to `until`, oldest first, and its revision as
        of `since` (None when it did not exist then)."""
        found: list[dict[str, Any]] = []
        at = self._at(key, until)
        while at is not None and at[0] > since:
            found.append(at[1])
            at = self._at(key, at[0] - 1) if at[0] - 1 > 0 else None
        found.reverse()
        return found, (at[1] if at is not None else None)

    def tally(self, prefixes: Iterable[str], since: int, until: int) -> Tally:
        """Revisions written after `since` up to `until`, by writer, of every key under `prefixes`
        that existed at `until`."""
        tally = Tally()
        for prefix in prefixes:
            for key in self.keys(prefix, until):
                try:
                    history, previous = self.history(key, since, until)
                except CompactedError:
                    tally.compacted += 1
                    continue
                tally.add(history, previous)
        return tally


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
