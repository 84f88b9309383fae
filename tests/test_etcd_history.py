"""tests/real/etcd_history.py: who wrote each revision, and the writes a watch of etcd's JSON gateway records."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.etcd_history import PREVIOUS_MISSING, UNATTRIBUTED, Recorder, Tally, writer, writers

COMPOSED = "apiextensions.crossplane.io/composed/86ee85ef"


def entry(
    manager: str, time: str, *fields: str, operation: str = "Update", sub: str = "", api: str = "v1"
) -> dict[str, Any]:
    """A managedFields entry owning `fields` (dotted paths under fieldsV1)."""
    tree: dict[str, Any] = {}
    for path in fields:
        node = tree
        for part in path.split("."):
            node = node.setdefault(part, {})
    found = {"manager": manager, "operation": operation, "apiVersion": api, "time": time, "fieldsV1": tree}
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
        "one manager's entries at two API versions are two entries, and the new one names it",
        doc(entry("crossplane", "t1", "f:spec", api="v1alpha1")),
        doc(
            entry("crossplane", "t1", "f:spec", api="v1alpha1"),
            entry("crossplane", "t1", "f:status", api="v1"),
        ),
        ["crossplane"],
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


def test_a_revision_has_one_writer_even_when_it_names_several() -> None:
    created = doc(
        entry("crossplane", "t1", "f:spec"), entry("harness", "t1", "f:metadata", operation="Apply")
    )
    assert writer(None, created) == "crossplane + harness", "the writes by writer add up to the writes"


def test_a_tally_counts_writes_by_writer_per_route() -> None:
    tally = Tally()
    for key, who in [("a", "crossplane"), ("a", "provider-kubernetes"), ("b", "crossplane")]:
        tally.add(key, who)
    assert (len(tally.keys), tally.writes) == (2, 3)
    assert tally.per(2) == {"crossplane": 1.0, "provider-kubernetes": 0.5}
    assert tally.summary("creation: the routes' Objects written", 2) == (
        "creation: the routes' Objects written (etcd, per route): 1.5 writes: crossplane 1; provider-kubernetes 0.5"
    )
    assert tally.summary("x", 4, "per route per transition").startswith(
        "x (etcd, per route per transition): 0.8"
    )


class Store:
    """etcd's multi-version store as its JSON gateway shows it: ranges, and watches with prev_kv."""

    def __init__(self) -> None:
        self.revision = 1
        self.events: list[tuple[int, str, dict[str, Any] | None]] = []  # revision, key, value (None: deleted)
        self.changed = threading.Condition()
        self.hold_after: int | None = None  # a watch delivers nothing past this revision while set
        self.cut_after: int | None = None  # a watch's answer ends after this revision
        self.drop_prev = False  # a watch sends no previous values (as where etcd no longer holds them)
        self.refuse = False  # a watch is answered with an error, as etcd's gateway answers a bad one
        self.silent = False  # a watch's answer begins and says nothing, not even that it was created

    def put(self, key: str, value: dict[str, Any] | None) -> int:
        """Write (None: delete) `key` at the next revision."""
        with self.changed:
            self.revision += 1
            self.events.append((self.revision, key, value))
            self.changed.notify_all()
            return self.revision

    def _latest(self, key: str, before: int) -> tuple[int, dict[str, Any] | None] | None:
        found = [(r, v) for r, k, v in self.events if k == key and r < before]
        return found[-1] if found else None

    def _version(self, key: str, revision: int) -> int:
        """The key's version at `revision`: its writes since it was last created."""
        version = 0
        for r, k, v in self.events:
            if k == key and r <= revision:
                version = 0 if v is None else version + 1
        return version

    def range(self, body: dict[str, Any]) -> dict[str, Any]:
        header = {"header": {"revision": str(self.revision)}}
        key = decoded(body["key"])
        end = decoded(body.get("range_end", "")) or key + "\0"
        kvs = []
        for k in sorted({k for _, k, _ in self.events if key <= k < end}):
            latest = self._latest(k, self.revision + 1)
            if latest is not None and latest[1] is not None:
                kvs.append({"key": encoded(k), "mod_revision": str(latest[0])})
        return {**header, "kvs": kvs} if kvs else header

    def watch(self, body: dict[str, Any], send: Any) -> None:
        create = body["create_request"]
        key, end, start = decoded(create["key"]), decoded(create["range_end"]), int(create["start_revision"])
        assert create["prev_kv"] is True
        if self.silent:
            with self.changed:
                self.changed.wait_for(lambda: not self.silent)
            return
        send({"result": {"header": {"revision": str(self.revision)}, "created": True}})
        sent = start - 1
        while True:
            with self.changed:
                self.changed.wait_for(
                    lambda after=sent: any(after < r <= (self.hold_after or r) for r, _, _ in self.events),
                    timeout=0.2,
                )
                batch = [e for e in self.events if e[0] > sent and e[0] <= (self.hold_after or e[0])]
            for revision, k, value in batch:
                sent = revision
                if self.cut_after is not None and revision > self.cut_after:
                    return
                if not key <= k < end:
                    continue
                event: dict[str, Any] = {"kv": {"key": encoded(k), "mod_revision": str(revision)}}
                if value is None:
                    event["type"] = "DELETE"
                else:
                    event["kv"]["value"] = encoded(json.dumps(value))
                    event["kv"]["version"] = str(self._version(k, revision))
                previous = self._latest(k, revision)
                if previous is not None and previous[1] is not None and not self.drop_prev:
                    event["prev_kv"] = {"key": encoded(k), "value": encoded(json.dumps(previous[1]))}
                send({"result": {"header": {"revision": str(revision)}, "events": [event]}})


def encoded(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decoded(text: str) -> str:
    return base64.b64decode(text).decode()


@contextlib.contextmanager
def served(store: Store) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v3/kv/range":
                data = json.dumps(store.range(body)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            assert self.path == "/v3/watch"
            if store.refuse:
                data = b'{"error":{"grpc_code":3,"http_code":400,"message":"invalid watch request"}}'
                self.send_response(400)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(message: dict[str, Any]) -> None:
                data = json.dumps(message).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            with contextlib.suppress(OSError):
                store.watch(body, send)
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


ROUTES = "/registry/ai.example.org/modelroutes/team-a/scale-"
OBJECTS = "/registry/kubernetes.m.crossplane.io/objects/team-a/scale-"
APPLIED = doc(entry(COMPOSED, "t1", "f:spec", operation="Apply"))
ANNOTATED = doc(
    entry(COMPOSED, "t1", "f:spec", operation="Apply"), entry("provider-kubernetes", "t2", "f:metadata")
)


def test_a_window_counts_the_writes_after_its_first_revision_up_to_its_last() -> None:
    store = Store()
    store.put(OBJECTS + "000-route", APPLIED)  # before the recorder: never counted
    with served(store) as url:
        recorder = Recorder(url, [ROUTES, OBJECTS])
        began = recorder.start()
        since = store.put(OBJECTS + "000-route", ANNOTATED)  # the window begins after this one
        store.put("/registry/kubernetes.m.crossplane.io/objects/team-a/other", APPLIED)  # not a scale route's
        store.put(OBJECTS + "001-route", APPLIED)
        until = store.put(
            OBJECTS + "000-route", doc(*ANNOTATED["metadata"]["managedFields"], entry("p", "t3", "f:x"))
        )
        store.put(OBJECTS + "001-route", ANNOTATED)  # after the window
        store.put(OBJECTS + "001-route", None)  # a deletion is no write
        # The last write under the prefix, to a key that still exists: a tally waits until the watch
        # has delivered it, so the one to the end below counts every write before it.
        store.put(OBJECTS + "002-route", APPLIED)
        objects = recorder.tally(OBJECTS, since, until)
        routes = recorder.tally(ROUTES, began, store.revision)
        everything = recorder.tally(OBJECTS, began, store.revision)
        recorder.stop()
    assert dict(objects.by_writer) == {"apiextensions.crossplane.io/composed": 1, "p": 1}
    assert objects.keys == {OBJECTS + "000-route", OBJECTS + "001-route"}
    assert routes.writes == 0
    assert dict(everything.by_writer) == {
        "provider-kubernetes": 2,
        "apiextensions.crossplane.io/composed": 2,
        "p": 1,
    }, "each write named by the value before it, which the watch sends with it"


def test_a_tally_waits_for_the_watch_to_deliver_what_etcd_holds() -> None:
    store = Store()
    with served(store) as url:
        recorder = Recorder(url, [OBJECTS])
        began = recorder.start()
        store.hold_after = began  # etcd holds the write; the watch has not delivered it yet
        written = store.put(OBJECTS + "000-route", APPLIED)
        with pytest.raises(TimeoutError, match="delivered up to"):
            recorder.tally(OBJECTS, began, written, wait_s=0.5)
        store.hold_after = None
        with store.changed:
            store.changed.notify_all()
        assert recorder.tally(OBJECTS, began, written).writes == 1
        recorder.stop()


def test_a_tally_of_an_earlier_window_waits_for_no_write_after_it() -> None:
    store = Store()
    with served(store) as url:
        recorder = Recorder(url, [OBJECTS])
        began = recorder.start()
        until = store.put(OBJECTS + "000-route", APPLIED)
        store.hold_after = until  # the watch is behind on what came after the window
        store.put(OBJECTS + "000-route", ANNOTATED)
        tally = recorder.tally(OBJECTS, began, until, wait_s=0.5)
        store.hold_after = None
        with store.changed:
            store.changed.notify_all()
        recorder.stop()
    assert tally.writes == 1


def test_a_watch_that_ends_is_said_not_read_as_no_writes() -> None:
    store = Store()
    with served(store) as url:
        recorder = Recorder(url, [OBJECTS])
        began = recorder.start()
        store.cut_after = began
        written = store.put(OBJECTS + "000-route", APPLIED)
        with pytest.raises(RuntimeError, match="broke"):
            recorder.tally(OBJECTS, began, written, wait_s=5)
        recorder.stop()


def test_a_write_sent_without_its_previous_value_is_a_creation_only_at_the_keys_first_version() -> None:
    store = Store()
    store.put(OBJECTS + "000-route", APPLIED)  # before the recorder: its value is not delivered
    store.drop_prev = True
    with served(store) as url:
        recorder = Recorder(url, [OBJECTS])
        began = recorder.start()
        store.put(OBJECTS + "000-route", ANNOTATED)  # version 2, and nothing before it to read
        store.put(OBJECTS + "001-route", APPLIED)  # version 1: created
        until = store.put(OBJECTS + "001-route", ANNOTATED)  # the value before it is the one delivered
        tally = recorder.tally(OBJECTS, began, until)
        recorder.stop()
    assert dict(tally.by_writer) == {
        PREVIOUS_MISSING: 1,
        "apiextensions.crossplane.io/composed": 1,
        "provider-kubernetes": 1,
    }, "a later write with no value before it names nobody; read as a creation, it would name every manager"


def test_a_watch_etcd_refuses_fails_the_start_not_a_later_tally() -> None:
    store = Store()
    store.refuse = True
    with served(store) as url:
        recorder = Recorder(url, [ROUTES, OBJECTS])
        with pytest.raises(RuntimeError, match=r"refused the watch .*HTTP 400.*invalid watch request"):
            recorder.start()
    assert not watch_threads(), "a refused start leaves no watch running"


def test_a_watch_etcd_never_confirms_fails_the_start_in_its_time() -> None:
    store = Store()
    store.silent = True
    with served(store) as url:
        recorder = Recorder(url, [OBJECTS])
        with pytest.raises(TimeoutError, match="did not confirm the watch"):
            recorder.start(wait_s=0.5)
        store.silent = False
        with store.changed:
            store.changed.notify_all()
    assert not watch_threads()


def test_a_stopped_recorder_leaves_no_watch_running_and_says_no_watch_broke() -> None:
    store = Store()
    with served(store) as url:
        recorder = Recorder(url, [ROUTES, OBJECTS])
        recorder.start()
        assert len(watch_threads()) == 2
        store.put(OBJECTS + "000-route", APPLIED)
        recorder.stop()
        assert not watch_threads()
        assert recorder.failed == {}, "a watch ended by stop() is not one that broke"


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("etcd watch ") and t.is_alive()]


def test_a_revision_not_readable_as_json_is_counted_and_said_so() -> None:
    from tests.real.etcd_history import UNREADABLE, _Write  # noqa: PLC0415

    assert _Write(2, "k", encoded("not json"), None, created=True).writer() == UNREADABLE
    assert _Write(3, "k", encoded("{}"), "%%", created=False).writer() == UNREADABLE
