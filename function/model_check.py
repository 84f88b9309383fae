"""Whether a backend has the model loaded: what its `GET /v1/models` lists (issue #30).

A backend can be up and serving another model: self-hosted servers (vLLM,
SGLang, llama.cpp's server, Ollama, TGI) list what they serve at
`/v1/models`, and one GPU URL often serves whichever model was loaded last.
Its workload is Available either way, and a request for a model it has not
loaded gets 404, or the wrong model's answer from a server that ignores the
`model` field.

The probe is provider-http's namespaced `Request` (v1.0.13+), observe-only:
it GETs the URL every `--poll` and keeps the last answer in its status. Read
in v1.0.14's source, its status says less than it seems:

- `Ready` says nothing about health: it stays True after a failure.
- A connection error keeps the last body and status code, sets `status.error`,
  counts `status.failed` up and turns `Synced` False.
- A 404 after an answer keeps the old body too, without counting: the
  Request "does not exist", `Synced` False, `status.error` untouched.
- A 5xx overwrites the body and code; `Synced` stays True.
- `status.requestDetails.url` is the URL of the answer kept: after the URL
  changes, the status is the old URL's until the new one answers.
- Every 2xx answer stamps `status.cache.lastUpdated` (RFC 3339, to the
  second: `SetCache`, `status_setters.go`), and a failure turns `Synced`
  False: so a 2xx answer kept with `Synced` True and an old stamp means
  provider-http has stopped polling, and nothing says what the server has
  loaded since (found in review: RoutingReady stayed True on it).

So a body is an answer only while `Synced` is True and its code is 2xx.
The decision is what this module returns; the composed route stays exactly
what the spec says whatever it decides (a probe says whether a route serves,
never what it is).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from function.readiness import condition, get_path, stamp, target_gone, timestamp

REQUEST_API_VERSION = "http.m.crossplane.io/v1alpha2"
# The longest a probe waits for an answer (provider-http's default is 5
# minutes, for which a worker of the provider is held per hung server).
PROBE_TIMEOUT = "5s"


class ProbeState(StrEnum):
    """What the last probes say of the model, as a closed set: messages and tests name these."""

    # No answer yet: the Request is new, or has never been answered with 2xx.
    UNTRIED = "untried"
    # The last answer lists the model.
    LOADED = "loaded"
    # The last answer lists other models, not this one.
    NOT_LOADED = "not loaded"
    # The last answer lists no model at all.
    KNOWN_EMPTY = "known empty"
    # The last probes failed (connection refused, timed out); the answer
    # before them is kept until failureThreshold of them in a row.
    PROBING_FAILED = "probing failed"
    # No answer can be kept: failureThreshold failures in a row, a 404 (the
    # server no longer answers there), a 5xx, or a body that is no model list.
    EXPIRED = "expired"


@dataclass(frozen=True)
class Probe:
    state: ProbeState
    # Whether the backend counts as having the model: LOADED, or PROBING_FAILED
    # with a kept answer that listed it.
    loaded: bool
    # `<state>` and the numbers behind it, for BackendsServing's message.
    detail: str
    # Whether the server may answer the model's requests at once without it (404, or another
    # model's answer), which no retry or ejection moves on. True unless the last thing known is
    # that it lists the model, or that it fails in a way Envoy retries and ejects (refused
    # connections, 5xx): an untried probe, or one whose failures keep an answer that did not list
    # the model, knows nothing better, and a fallback must not be trusted on it.
    answers_without_it: bool
    # The 5xx the server answered the probe with, where that is the answer kept: whether Envoy
    # moves its requests on is the route's policy's to say (a retried code, or ejection), which
    # the verdict reads; answers_without_it is False for it.
    server_error: int | None = None


def listed(body: Any) -> list[str] | None:
    """The ids a `/v1/models` body lists; None when it is not a model list.

    A body without a `data` list is a parse error, not an empty list: a server
    that answers something else at that path has told nothing about models.
    """
    if not isinstance(body, str):
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        return None
    data = parsed.get("data") if isinstance(parsed, dict) else None
    if not isinstance(data, list):
        return None
    return [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _answered(models: list[str], want: str) -> ProbeState:
    # Exact, case-sensitive equality: no aliases, no prefix match.
    if want in models:
        return ProbeState.LOADED
    return ProbeState.NOT_LOADED if models else ProbeState.KNOWN_EMPTY


@dataclass(frozen=True)
class Clock:
    """This call's time and provider-http's --poll: how old an answer may be before it expires."""

    now: datetime
    poll: timedelta

    def expires_in(self, request: Mapping[str, Any] | None, failure_threshold: int) -> timedelta | None:
        """How long the answer kept may still be trusted (not positive: expired); None where the
        Request carries no stamp to judge by."""
        renewed = timestamp(get_path(request, "status", "cache", "lastUpdated"))
        if renewed is None:
            return None
        return renewed + self.poll * (failure_threshold + 1) - self.now


def _expired(request: Mapping[str, Any] | None, failure_threshold: int, clock: Clock | None) -> Probe | None:
    """EXPIRED where the answer kept has not been renewed for failure_threshold + 1 polls."""
    left = clock.expires_in(request, failure_threshold) if clock is not None else None
    if clock is None or left is None or left > timedelta(0):
        return None
    # The answer's own stamp, not its age: a message that changed with every call would be a status
    # write with every call, each calling again (route/verdict.py), for as long as provider-http is down.
    renewed = clock.now + left - clock.poll * (failure_threshold + 1)
    return Probe(
        ProbeState.EXPIRED,
        False,
        f"{ProbeState.EXPIRED}: provider-http has renewed no answer since {stamp(renewed)} (its --poll is "
        f"{int(clock.poll.total_seconds())} s; an answer expires after {failure_threshold + 1} of them): "
        "is it running?",
        True,
    )


def judge(  # noqa: PLR0911 - one return per state, in order
    request: Mapping[str, Any] | None,
    want: str,
    failure_threshold: int,
    url: str,
    clock: Clock | None = None,
) -> Probe:
    """What an observed provider-http Request of `url` says of the model `want`; with `clock`, an
    answer kept past failure_threshold + 1 polls has expired."""
    code = get_path(request, "status", "response", "statusCode")
    body = get_path(request, "status", "response", "body")
    synced = condition(request, "Synced")
    models = listed(body) if isinstance(code, int | float) and 200 <= code < 300 else None
    failed = get_path(request, "status", "failed")
    failures = int(failed) if isinstance(failed, int | float) else 0
    error = get_path(request, "status", "error")
    if request is None:
        return Probe(ProbeState.UNTRIED, False, f"{ProbeState.UNTRIED}: no answer yet", True)
    # provider-http writes the URL it asked beside every answer; after the
    # backend's endpoint changes, the answer (and failures) in the status are
    # the old URL's until the new one answers.
    asked = get_path(request, "status", "requestDetails", "url")
    if code is not None and asked != url:
        return Probe(ProbeState.UNTRIED, False, f"{ProbeState.UNTRIED}: no answer from {url} yet", True)
    if synced is not None and synced.get("status") != "True":
        erred = isinstance(error, str) and bool(error)
        # A 404 after a refused connection leaves provider-http's error and count as they were
        # and only says the Request "does not exist": the server answers, with no model list.
        gone = target_gone(request)
        # Refused from the first probe on, up to the threshold: down, as after an answer (found in
        # review: it stayed "before any answer" and held a serving fallback back for good).
        if code is None and not (erred and not gone and failures >= failure_threshold):
            return Probe(
                ProbeState.PROBING_FAILED, False, f"{ProbeState.PROBING_FAILED} before any answer", True
            )
        if erred and not gone and failures < failure_threshold:
            # provider-http retries a failure within seconds: a kept answer this old, it has stopped.
            stopped = _expired(request, failure_threshold, clock)
            if stopped is not None:
                return stopped
            state = _answered(models, want) if models is not None else None
            return Probe(
                ProbeState.PROBING_FAILED,
                state is ProbeState.LOADED,
                f"{ProbeState.PROBING_FAILED} {failures} of {failure_threshold} times in a row, "
                + (f"the last answer ({state}) kept" if state is not None else "no model list to keep"),
                # A kept 5xx said the server fails; anything else kept, or nothing, says no better.
                state is not ProbeState.LOADED and not _server_error(code),
            )
        why = (
            f"{failures} failures in a row"
            if erred and not gone
            else "the URL no longer answers with a model list"
        )
        # Down: refused or timed out, retried on the next level. A 404 at the path: it answers.
        return Probe(ProbeState.EXPIRED, False, f"{ProbeState.EXPIRED}: {why}", not (erred and not gone))
    if code is None:
        return Probe(ProbeState.UNTRIED, False, f"{ProbeState.UNTRIED}: no answer yet", True)
    if not (isinstance(code, int | float) and 200 <= code < 300):
        # A code that is no number (a hostile or broken status) is said as it is, never a crash.
        said_code = int(code) if isinstance(code, int | float) and math.isfinite(code) else repr(code)
        failing = _server_error(code)
        return Probe(
            ProbeState.EXPIRED,
            False,
            f"{ProbeState.EXPIRED}: the probe was answered {said_code}",
            not failing,
            int(code) if failing else None,
        )
    if models is None:
        return Probe(ProbeState.EXPIRED, False, f"{ProbeState.EXPIRED}: the answer is not a model list", True)
    stopped = _expired(request, failure_threshold, clock)
    if stopped is not None:
        return stopped
    state = _answered(models, want)
    return Probe(
        state, state is ProbeState.LOADED, f"{state} ({len(models)} listed)", state is not ProbeState.LOADED
    )


def _server_error(code: object) -> bool:
    """A 5xx: Envoy moves it on where the route retries that code or ejects a backend that keeps
    answering it (the verdict's to judge), not at once like a 404."""
    return isinstance(code, int | float) and 500 <= code < 600


def build_request(*, name: str, namespace: str, url: str, provider_config: str) -> dict[str, Any]:
    """The observe-only Request that GETs `url` every provider-http `--poll`."""
    return {
        "apiVersion": REQUEST_API_VERSION,
        "kind": "Request",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            # Observe never sends anything but the GET of its OBSERVE mapping.
            "managementPolicies": ["Observe"],
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": provider_config},
            "forProvider": {
                # A mapping's url is a jq expression: the URL goes in the payload, read as data.
                "payload": {"baseUrl": url},
                "mappings": [{"action": "OBSERVE", "method": "GET", "url": ".payload.baseUrl"}],
                "waitTimeout": PROBE_TIMEOUT,
            },
        },
    }
