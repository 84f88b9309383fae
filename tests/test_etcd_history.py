"""tests/real/etcd_history.py: who wrote each revision, and the windows read from etcd's JSON gateway."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.etcd_history import UNATTRIBUTED, Etcd, Tally, writers

COMPOSED = "apiextensions.crossplane.io/composed/86ee85ef"


def entry(manager: str, time: str, *fields: str, operation: str = "Update", sub: str = "") -> dict[str, Any]:
    """A managedFields entry owning `fields` (dotted paths under fieldsV1)."""
    tree: dict[str, Any] = {}
    for path in fields:
        node = tree
        for part in path.split("."):
            node = node.setdefault(part, {})
    found = {"manager": manager, "operation": operation, "time": time, "fieldsV1": tree}
    if sub:
        found["subresource"] = sub
    return found


def doc(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "o", "managedFields": list(entries)}}


WRITERS_CASES = [
    (
        "an object created names every manager it was created with",
        None,
        doc(entry("crossplane", "t1", "f:spec"), entry("harness", "t1", "f:metadata", operation="Apply")),
        ["crossplane", "harness"],
    ),
    (
        "a write that stamps its manager's entry names that manager",
        doc(entry("crossplane", "t1", "f:spec"), entry("provider-kubernetes", "t1", "f:metadata")),
        doc(entry("crossplane", "t1", "f:spec"), entry("provider-kubernetes", "t2", "f:metadata")),
        ["provider-kubernetes"],
    ),
    (
        "a manager that loses fields to another is not named, the one that took them is",
        doc(entry("a", "t1", "f:status.f:x", "f:status.f:y", sub="status")),
        doc(entry("a", "t1", "f:status.f:y", sub="status"), entry("b", "t1", "f:status.f:x", sub="status")),
        ["b (status)"],
    ),
    (
        "within the second of its last stamp, the manager that gained a field is named",
        doc(entry("a", "t1", "f:status.f:x"), entry("b", "t1", "f:status.f:y")),
        doc(entry("a", "t1", "f:status.f:x", "f:status.f:y"), entry("b", "t1", "f:status.f:y")),
        ["a"],
    ),
    (
        "a write that changes only values within the second of the last stamp names nobody",
        doc(entry("provider-kubernetes", "t1", "f:metadata")),
        doc(entry("provider-kubernetes", "t1", "f:metadata")),
        [UNATTRIBUTED],
    ),
    (
        "Crossplane's composed managers are named as one, not by each XR's hash",
        doc(entry("provider-kubernetes", "t1", "f:metadata")),
        doc(
            entry("provider-kubernetes", "t1", "f:metadata"),
            entry(COMPOSED, "t2", "f:spec", operation="Apply"),
        ),
        ["apiextensions.crossplane.io/composed"],
    ),
    (
        "a status write is named with its subresource",
        doc(entry("provider-kubernetes", "t1", "f:status", sub="status")),
        doc(entry("provider-kubernetes", "t2", "f:status", sub="status")),
        ["provider-kubernetes (status)"],
    ),
]


@pytest.mark.parametrize(
    ("name", "before", "after", "want"), WRITERS_CASES, ids=[c[0] for c in WRITERS_CASES]
)
def test_each_revision_is_attributed_to_the_manager_that_wrote_it(
    name: str, before: dict[str, Any] | None, after: dict[str, Any], want: list[str]
) -> None:
    assert writers(before, after) == want, name


def test_a_tally_counts_revisions_by_writer_per_route() -> None:
    tally = Tally()
    created = doc(entry("crossplane", "t1", "f:spec"))
    stamped = doc(entry("crossplane", "t1", "f:spec"), entry("provider-kubernetes", "t2", "f:metadata"))
    tally.add([created, stamped], None)
    tally.add([doc(entry("crossplane", "t3", "f:spec"))], created)
    assert (tally.objects, tally.revisions) == (2, 3)
    assert tally.per(2) == {"crossplane": 1.0, "provider-kubernetes": 0.5}
    assert tally.summary("creation: Objects written", 2) == (
        "creation: Objects written (etcd history, per route): 1.5 writes: crossplane 1; provider-kubernetes 0.5"
    )
    tally.compacted = 4
    assert tally.summary("x", 2, "per route per transition").endswith(
        "; 4 objects' history compacted, not counted"
    ), "a window etcd compacted is said, not counted as no writes"


class Store:
    """etcd's multi-version store as its JSON gateway shows it: every key's revisions, compactable."""

    def __init__(self) -> None:
        self.revision = 1
        self.compacted = 0
        self.versions: dict[str, list[tuple[int, dict[str, Any] | None]]] = {}

    def put(self, key: str, value: dict[str, Any] | None) -> int:
        """Write (None: delete) `key` at the next revision."""
        self.revision += 1
        self.versions.setdefault(key, []).append((self.revision, value))
        return self.revision

    def at(self, key: str, revision: int) -> tuple[int, dict[str, Any]] | None:
        found = [(r, v) for r, v in self.versions.get(key, []) if r <= revision]
        if not found or found[-1][1] is None:
            return None
        r, v = found[-1]
        return r, v  # type: ignore[return-value]

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        revision = int(body.get("revision", 0)) or self.revision
        if revision < self.compacted:
            return 400, {"code": 11, "message": "etcdserver: mvcc: required revision has been compacted"}
        header = {"header": {"revision": str(self.revision)}}
        key = base64.b64decode(body["key"]).decode()
        if "range_end" in body:
            end = base64.b64decode(body["range_end"]).decode()
            keys = sorted(k for k in self.versions if key <= k < end and self.at(k, revision))
            return 200, {**header, "kvs": [{"key": body_key(k)} for k in keys]}
        found = self.at(key, revision)
        if found is None:
            return 200, header
        mod, value = found
        return 200, {
            **header,
            "kvs": [{"key": body_key(key), "mod_revision": str(mod), "value": body_key(json.dumps(value))}],
        }


def body_key(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@contextlib.contextmanager
def served(store: Store) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert self.path == "/v3/kv/range"
            status, answer = store.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PREFIX = "/registry/kubernetes.m.crossplane.io/objects/team-a/scale-"


def test_a_window_counts_only_its_own_revisions_and_reads_the_one_before_it() -> None:
    store = Store()
    key = PREFIX + "000-route"
    first = doc(entry(COMPOSED, "t1", "f:spec", operation="Apply"))
    store.put("/registry/kubernetes.m.crossplane.io/objects/team-a/other", first)  # not a scale route's
    since = store.put(key, first)  # the window begins after this revision
    store.put(
        key,
        doc(entry(COMPOSED, "t1", "f:spec", operation="Apply"), entry("provider-kubernetes", "t2", "f:m")),
    )
    until = store.revision
    store.put(key, doc(entry(COMPOSED, "t9", "f:spec", operation="Apply")))  # after the window
    with served(store) as url:
        etcd = Etcd(url)
        assert etcd.revision() == store.revision
        history, previous = etcd.history(key, since, until)
        tally = etcd.tally([PREFIX], since, until)
    assert previous == first, "the revision before the window names what the first one in it changed"
    assert len(history) == 1
    assert (tally.objects, tally.revisions, dict(tally.by_writer)) == (1, 1, {"provider-kubernetes": 1})


def test_an_object_created_in_the_window_names_its_creator_and_a_compacted_one_is_counted_apart() -> None:
    store = Store()
    old = PREFIX + "000-route"
    store.put(old, doc(entry(COMPOSED, "t1", "f:spec", operation="Apply")))
    store.put(
        old,
        doc(entry(COMPOSED, "t1", "f:spec", operation="Apply"), entry("provider-kubernetes", "t2", "f:m")),
    )
    since = store.revision
    store.compacted = since + 1  # the revision before the window is gone
    store.put(
        old,
        doc(entry(COMPOSED, "t1", "f:spec", operation="Apply"), entry("provider-kubernetes", "t3", "f:m")),
    )
    store.put(PREFIX + "001-route", doc(entry(COMPOSED, "t4", "f:spec", operation="Apply")))
    with served(store) as url:
        tally = Etcd(url).tally([PREFIX], since, store.revision)
    assert (tally.objects, tally.compacted) == (1, 1), "the object whose revision before the window is gone"
    assert dict(tally.by_writer) == {"apiextensions.crossplane.io/composed": 1}
