"""Requests are the judge: once a second, every ModelRoute's request through the real data plane,
recorded against what the API server says at that second.

Each second, for every ModelRoute: the request an SDK sends (model in the JSON
body, no `x-ai-eg-model` header), keyed where the route says callers need a
key, plus one request without a key where it does (it must be refused); and
one `GET /v1/models` for the gateway. Each answer is judged against the
conditions read in the same second:

- a **lying second**: a model's request failed while its ModelRoute said
  RoutingReady=True, or the gateway's failed while it said GatewayReady=True,
  beyond the detection allowance after an unplanned fault (the simulation's
  rule: the first DETECTION_S seconds after a fault are detection), or after
  a planned change that moves clients before the XRs can know of it (a
  gateway's first listener: until its routes say False, within a bound).
  What an
  XR says is what its function last decided, `status.serving` (the condition
  where an older version published none);
- a **written-back second**: a request failed while the condition said True
  and `status.serving` did not: Crossplane wrote an old condition back from
  its cache (crossplane/crossplane#7062, issue #32). Counted apart and
  printed: the function's answer, conditional on the XR's version, prevents it;
- a **late second**: a model's request succeeded while its ModelRoute did not
  say True yet; counted per episode (the seconds served before each turn to
  True);
- a **leak**: a request without a key (or with a wrong one) answered by a
  model while its route says a key is needed and RoutingReady=True.

A failed answer for an XR the harness deleted after the prober read it and
before the answer came (the time its delete call returned) is counted apart
too: the scenario took the model away between the prober's read and the
request, and no condition can speak for a route that no longer exists. A
leak never is: deleting a route cannot make Envoy skip a key check.

Seconds inside an ablation (a design element taken away on purpose) are
counted apart: they show what the design prevents, and never fail a run.
So are seconds while a reporter is down (a fault scenario killed or hung
the function, Crossplane, the provider, the API server or etcd): its
conditions cannot move then, and how long they stay stale is measured
(`stale_down`), not called a lie. While the API server cannot answer,
requests go on and are judged against what the XRs said last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.real.report import condition

if TYPE_CHECKING:
    from tests.real.kube import Kube

XR_API = "ai.example.org/v1alpha1"
DETECTION_S = 5
# A read of the XRs that takes longer than this (etcd down behind a live API
# server) is given up, so the prober's second does not stall.
READ_TIMEOUT_S = 2
# How long after a harness's delete call began, while it has not returned, a failed request of its
# route is excused: the deletion takes effect inside the call, which a loaded API server answers in
# seconds, not in half a minute.
DELETE_UNDER_WAY_S = 30


@dataclass(frozen=True)
class Answer:
    status: int
    body: str = ""
    location: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Sample:
    second: int
    scenario: str
    subject: str  # "route ns/name" or "gateway ns/name"
    ok: bool
    status: int
    ready: bool  # what the subject says it decided at this second (status.serving)
    leak: bool = False
    allowance: bool = False  # inside the detection allowance after an unplanned fault
    ablation: bool = False
    written_back: bool = False  # its condition said True, written back stale by Crossplane
    down: bool = False  # a reporter was down (a fault scenario): its conditions could not move
    # The harness deleted its XR between the prober's read and the answer: the scenario took the
    # model away (the CI of a2bb011 counted one such 500 as a lie).
    deleted: bool = False
    # Of a failed answer or a leak only: the condition's reason at that second and the answer's
    # first bytes, so a lie in CI's log says which verdict held and what Envoy answered.
    why: str = ""
    # Seconds from the run's last fault (or planned change) to the answer, None before any: how far
    # past the detection allowance a lie came (CI's one-line lie of https_only could not say).
    after_fault: float | None = None


@dataclass
class Totals:
    requests: int = 0
    failed: int = 0
    lying: int = 0
    leaks: int = 0
    late: list[int] = field(default_factory=list)
    ablation_lying: int = 0
    written_back: int = 0
    stale_down: int = 0
    deleted: int = 0
    lies: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class Via:
    """How a client reaches a gateway: its first listener (where ModelRoutes attach), by the port,
    the protocol and the host name the InferenceGateway's spec gives it."""

    port: int = 80
    tls: bool = False
    hostname: str | None = None


def via(gw: dict[str, Any] | None) -> Via:
    listeners = ((gw or {}).get("spec") or {}).get("listeners") or [{}]
    first = listeners[0]
    host = first.get("hostname")
    # A wildcard names no host a client sends: any name under it will do.
    if isinstance(host, str) and host.startswith("*."):
        host = "probe" + host[1:]
    return Via(int(first.get("port") or 80), first.get("protocol") == "HTTPS", host)


class _Named(http.client.HTTPSConnection):
    """TLS to a loopback address with the listener's host name as SNI, as a client resolving it sends.

    The certificate is not verified: the prober judges whether requests are
    served, and a listener without its certificate fails the handshake anyway."""

    def __init__(self, address: str, port: int, server_name: str | None, timeout: float) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        super().__init__(address, port, timeout=timeout, context=context)
        self._server_name = server_name or address

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)  # type: ignore[attr-defined]


def request(
    port: int,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
    *,
    host: str = "127.0.0.1",
    tls: bool = False,
    hostname: str | None = None,
) -> Answer:
    """One request to `host:port`; `hostname` is the Host (and, over TLS, the SNI) a client sends."""
    conn = _Named(host, port, hostname, 5) if tls else http.client.HTTPConnection(host, port, timeout=5)
    try:
        data = json.dumps(body).encode() if body is not None else None
        sent = {"content-type": "application/json", **({"host": hostname} if hostname else {}), **headers}
        conn.request(method, path, body=data, headers=sent)
        rsp = conn.getresponse()
        return Answer(rsp.status, rsp.read(2048).decode(errors="replace"), rsp.getheader("location") or "")
    except (OSError, http.client.HTTPException) as e:
        # A refused or reset connection is a failed request, as a client sees it.
        return Answer(0, f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def chat(
    port: int,
    model: str,
    headers: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    *,
    tls: bool = False,
    hostname: str | None = None,
) -> Answer:
    return request(
        port,
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "ping"}]},
        headers or {},
        host=host,
        tls=tls,
        hostname=hostname,
    )


@dataclass
class Judged:
    """One request a second for a model, each judged against what its condition said that second."""

    seconds: int = 0
    failed: int = 0
    # Failed while the condition said True: the worst bug, counted by the scenario itself.
    lying: int = 0
    # The condition at the last second judged.
    said: dict[str, Any] = field(default_factory=dict)

    def assert_truthful(self, nothing_failed: str) -> None:
        """Requests failed (else the scenario proved nothing: `nothing_failed` says why), and none while
        the condition said True."""
        assert self.failed, nothing_failed
        assert self.lying == 0, (
            f"{self.lying} of {self.failed} failed seconds while it said True: {self.said}"
        )


def judge_each_second(port: int, model: str, until: float, said_now: Callable[[], dict[str, Any]]) -> Judged:
    """Until `until` (time.time()), a request for `model` through `port` and the condition `said_now`
    reads, a second apart."""
    judged = Judged()
    while time.time() < until:
        answer = chat(port, model)
        judged.said = said_now()
        judged.seconds += 1
        judged.failed += not answer.ok
        judged.lying += not answer.ok and judged.said.get("status") == "True"
        time.sleep(1)
    return judged


class Prober:
    """Probes in a thread of its own while scenarios run; `totals()` judges what it saw."""

    def __init__(
        self, kube: Kube, port_for: Callable[[str, str, int], int], keys: Callable[[], dict[str, str]]
    ) -> None:
        self.kube = kube
        # Where a client reaches a Gateway (namespace, name, listener port): the Service in front of its pods.
        self.port_for = port_for
        # The header and a valid key, for gateways that ask for one: {header: key}.
        self.keys = keys
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self.scenario = "-"
        self._ablation = False
        self._down = False
        self._fault_at: float | None = None
        self._detection_s: float = DETECTION_S
        # When the world was seen to have caught up with the last fault (`detected`): reads after it
        # are judged whatever the allowance left.
        self._detected_at: float | None = None
        # The XRs as last read: probed against while a fault holds the API server down.
        # What the prober read last, and when it began reading it.
        self._last: tuple[list[dict[str, Any]], list[dict[str, Any]], float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="prober", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def fault(self, detection_s: float = DETECTION_S) -> float:
        """An unplanned fault happens now: the next seconds are detection, not lies. DETECTION_S
        by default; longer only where the design's own bound is (a model check finds a model
        swap within one provider-http poll and the watch path), and then ended by `detected` as
        soon as the XR is seen to know. Returns when the allowance began."""
        with self._lock:
            self._fault_at = time.time()
            self._detection_s = detection_s
            self._detected_at = None
            return self._fault_at

    def detected(self) -> None:
        """The XRs were seen to know of the last fault now: what the prober reads from here on is
        judged, whatever is left of the allowance."""
        with self._lock:
            self._detected_at = time.time()

    def _allowance(self, read_at: float, answered: float) -> tuple[bool, float | None]:
        """(Whether an answer is inside the detection allowance, seconds from the fault to it), of
        the conditions read at `read_at` and the answer come at `answered`. Judged when the answer
        came, not when the probe began: a scenario's fault that lands between the two is detection
        (CI counted such a request as a lie); and a read from before `detected` still is."""
        with self._lock:
            fault_at, detection_s, detected_at = self._fault_at, self._detection_s, self._detected_at
        if fault_at is None:
            return False, None
        inside = answered - fault_at < detection_s and (detected_at is None or read_at < detected_at)
        return inside, round(answered - fault_at, 1)

    @contextlib.contextmanager
    def ablation(self) -> Iterator[None]:
        self._ablation = True
        try:
            yield
        finally:
            # The world the ablation left needs its detection time too.
            self.fault()
            self._ablation = False

    @contextlib.contextmanager
    def reporter_down(self) -> Iterator[None]:
        """A component that reports is down: what requests get meanwhile is counted apart."""
        self._down = True
        try:
            yield
        finally:
            # Back now: it needs its detection time to catch up with the world.
            self.fault()
            self._down = False

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            try:
                self._probe(int(started))
            except Exception as e:
                self._add(Sample(int(started), self.scenario, f"prober {e}", False, -1, False))
            self._stop.wait(max(0.0, 1.0 - (time.time() - started)))

    def _probe(self, second: int) -> None:
        try:
            read_at = time.time()
            gateways = self.kube.list(XR_API, "InferenceGateway", _request_timeout=READ_TIMEOUT_S)
            routes = self.kube.list(XR_API, "ModelRoute", _request_timeout=READ_TIMEOUT_S)
            self._last = (gateways, routes, read_at)
        except Exception:
            # The API server (or etcd behind it) is down on purpose: the data
            # plane goes on serving, so requests go on, judged against what the
            # XRs said last (they cannot have moved since). Otherwise an error.
            if not self._down or self._last is None:
                raise
            gateways, routes, read_at = self._last
        keys = self.keys()

        def add(
            subject: str,
            ans: Answer,
            xr: dict[str, Any],
            typ: str,
            *,
            refused: bool = False,
            read_at: float = read_at,
        ) -> None:
            ready, written_back = said(xr, typ)
            # A request that must be refused is judged by its leak alone. A leak is
            # a keyless answer while the route says both "a key is needed" and
            # RoutingReady: until Envoy Gateway has accepted the policy, GatewayReady
            # (so RoutingReady) says it is not in effect yet.
            ok = True if refused else ans.ok
            leak = refused and ans.ok and ready
            answered = time.time()
            allowance, after_fault = self._allowance(read_at, answered)
            self._add(
                Sample(
                    second,
                    self.scenario,
                    subject,
                    ok,
                    ans.status,
                    ready,
                    leak,
                    allowance,
                    self._ablation,
                    written_back=written_back and not ready,
                    down=self._down,
                    # A leak is never excused: deleting a route cannot make Envoy skip a key check.
                    deleted=not ok and ready and self._deleted_between(xr, read_at, answered),
                    why=f"{_reason(xr, typ)}: {ans.body[:80]!r}" if leak or not ok else "",
                    after_fault=after_fault,
                )
            )

        for gw in gateways:
            meta = gw["metadata"]
            at = ((gw.get("status") or {}).get("gateway")) or {}
            if not at.get("name"):
                continue  # no Gateway yet: nothing a client could reach
            to = via(gw)
            port = self.port_for(str(at.get("namespace") or meta["namespace"]), str(at["name"]), to.port)
            ans = request(
                port,
                "GET",
                "/v1/models",
                None,
                _bearer(keys) if _needs_key(gw) else {},
                tls=to.tls,
                hostname=to.hostname,
            )
            add(f"gateway {meta['namespace']}/{meta['name']}", ans, gw, "GatewayReady")
        for listed in routes:
            # Read again just before its requests: a round asks every route in turn, 20 s and more
            # at 100 routes, and a condition read at the round's start would judge requests sent
            # long after it turned (make scale judged 503s sent 20 s into a rollout against the
            # True read before it).
            rt, route_read_at = self._fresh(listed, read_at)
            if rt is None:
                continue  # deleted since the list
            meta = rt["metadata"]
            model = (rt.get("spec") or {}).get("model")
            if not model or meta.get("deletionTimestamp"):
                continue
            caller = (rt.get("status") or {}).get("callerAuth") or {}
            ref = (rt.get("spec") or {}).get("gatewayRef") or {}
            owner = next(
                (
                    g
                    for g in gateways
                    if g["metadata"]["name"] == ref.get("name")
                    and g["metadata"]["namespace"] == (ref.get("namespace") or meta["namespace"])
                ),
                None,
            )
            gw_status = ((owner or {}).get("status") or {}).get("gateway") or {}
            if not gw_status.get("name"):
                continue  # its gateway has no Gateway yet: a client has nowhere to send it
            to = via(owner)
            port = self.port_for(str(gw_status.get("namespace")), str(gw_status["name"]), to.port)
            ask = functools.partial(chat, port, model, tls=to.tls, hostname=to.hostname)
            subject = f"route {meta['namespace']}/{meta['name']}"
            judged = functools.partial(add, xr=rt, typ="RoutingReady", read_at=route_read_at)
            if caller.get("required"):
                header = str(caller.get("header") or "authorization")
                key = keys.get(header)
                judged(subject, ask({header: f"Bearer {key}"} if key else {}))
                # Auth turned off on the gateway (removedAt): a request without a key may be
                # refused or served until Envoy drops the check, and judges nothing.
                if not caller.get("removedAt"):
                    judged(f"{subject} keyless", ask(), refused=True)
                    judged(f"{subject} wrong key", ask({header: "Bearer not-a-key"}), refused=True)
            else:
                judged(subject, ask())

    def _fresh(self, listed: dict[str, Any], read_at: float) -> tuple[dict[str, Any] | None, float]:
        """The XR as the API server has it now, and when it was read; None if it is gone or cannot be
        read now (a prober error sample says so). While a reporter is down on purpose, the listed one
        and the round's read time: its conditions cannot move, and a hung API server would make every
        read wait out its timeout."""
        if self._down:
            return listed, read_at
        meta = listed["metadata"]
        at = time.time()
        try:
            got = self.kube.get(
                listed["apiVersion"],
                listed["kind"],
                meta["name"],
                meta.get("namespace"),
                _request_timeout=READ_TIMEOUT_S,
            )
        except Exception as e:
            self._add(Sample(int(at), self.scenario, f"prober {e}", False, -1, False))
            return None, at
        return got, at

    def _deleted_between(self, xr: dict[str, Any], read_at: float, answered: float) -> bool:
        """Whether the harness's delete of the XR overlapped the time from the prober's read to its
        answer: begun before the answer, and not returned before the read. The deletion takes effect
        somewhere inside the call, which returned after the answer on a loaded API server (make
        scale: a route's Backend was gone and its request answered 503 before the call returned)."""
        meta = xr["metadata"]
        key = (xr["kind"], meta.get("namespace"), meta["name"])
        began = self.kube.deleting_since.get(key)
        returned = self.kube.deleted_at.get(key)
        if began is None or began > answered:
            return False
        if returned is None or returned < began:
            # Still under way: for a while only, or a call that hangs would excuse the route for good.
            return answered - began <= DELETE_UNDER_WAY_S
        return returned >= read_at

    def _add(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)

    def history(self, lie: Sample, before_s: int = 12) -> str:
        """The lie's subject over the seconds before it, oldest first: what it answered and said each
        second, so one line of CI's log shows how the lie came about."""
        with self._lock:
            earlier = [
                s
                for s in self.samples
                if s.subject == lie.subject and lie.second - before_s <= s.second <= lie.second
            ]
        return ", ".join(
            f"{s.second - lie.second:+d} s {s.status} {'T' if s.ready else 'F'}" for s in earlier
        )

    def dump(self, path: Path) -> None:
        """Every sample, one JSON object a line: a run's whole record beside its processes' logs."""
        with self._lock:
            samples = list(self.samples)
        with path.open("w") as f:
            for s in samples:
                f.write(json.dumps(dataclasses.asdict(s), allow_nan=False) + "\n")

    def totals(self, since: int = 0) -> Totals:
        with self._lock:
            samples = [s for s in self.samples if s.second >= since]
        t = Totals()
        served: dict[str, int] = {}
        for s in sorted(samples, key=lambda s: (s.subject, s.second)):
            t.requests += 1
            _judge(t, s)
            if s.subject.startswith("route ") and " " not in s.subject[len("route ") :]:
                if s.ok and not s.ready:
                    served[s.subject] = served.get(s.subject, 0) + 1
                elif s.ready and s.subject in served:
                    t.late.append(served.pop(s.subject))
                elif not s.ok:
                    served.pop(s.subject, None)
        return t


def _judge(t: Totals, s: Sample) -> None:
    """Count one sample's failure, leak or lie in `t`, each in exactly one place."""
    if s.leak:
        t.leaks += 1
        t.lies.append(s)
    if s.ok:
        return
    t.failed += 1
    if s.allowance:
        return
    if s.written_back:
        t.written_back += 1
    if not s.ready:
        return
    if s.deleted:
        t.deleted += 1
    elif s.down:
        t.stale_down += 1
    elif s.ablation:
        t.ablation_lying += 1
    else:
        t.lying += 1
        t.lies.append(s)


def _reason(xr: dict[str, Any], typ: str) -> str:
    """The reason of what the XR last decided (status.serving), else of its condition."""
    serving = (xr.get("status") or {}).get("serving") or {}
    return str(serving.get("reason") or condition(xr, typ).get("reason"))


def decided(xr: dict[str, Any] | None) -> bool:
    """Whether the XR's function last decided it serves (its main condition, as `said` reads it)."""
    return (
        xr is not None and said(xr, "GatewayReady" if xr["kind"] == "InferenceGateway" else "RoutingReady")[0]
    )


def said(xr: dict[str, Any], typ: str) -> tuple[bool, bool]:
    """(what the XR's function last decided, whether its condition of that type says True).

    A decision that names the generation it was made for (status.serving.observedGeneration) is
    about that spec only: read beside a newer spec (a model just renamed), it says nothing of
    this one, as kstatus reads any status whose observedGeneration lags (and counts no lie).
    """
    condition_true = condition(xr, typ).get("status") == "True"
    serving = (xr.get("status") or {}).get("serving") or {}
    decided = serving.get("ready")
    made_for = serving.get("observedGeneration")
    if isinstance(made_for, int | float) and made_for != xr.get("metadata", {}).get("generation"):
        decided = False
    return (decided if isinstance(decided, bool) else condition_true), condition_true


def _bearer(keys: dict[str, str]) -> dict[str, str]:
    return {header: f"Bearer {key}" for header, key in keys.items()}


def _needs_key(gw: dict[str, Any]) -> bool:
    return bool(((gw.get("status") or {}).get("gateway") or {}).get("callerAuth"))
