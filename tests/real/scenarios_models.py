"""Issue #30: RoutingReady knows what the backend's server has loaded.

One OpenAI-compatible server, as a self-hosted server behaves (it lists what it
has loaded at GET /v1/models and answers 404 for any other model), and two
ModelRoutes on it, each with a modelCheck: provider-http's observe-only
Request GETs the list every --poll (examples/install/provider-http.yaml). The
scenario swaps what the server has loaded (Mistral, then Qwen, then nothing,
then Mistral again); each route must say the truth within one poll and the
watch path after every swap, and the prober judges every second of it.
"""

from __future__ import annotations

import time
from typing import Any

from tests.real.crossplane import runtime_args
from tests.real.harness import (
    CONVERGE_S,
    GATEWAY,
    ROUTE,
    VLLM_PORT,
    Env,
    model_route_doc,
    route_doc_one_backend,
    true,
)
from tests.real.kube import condition, wait
from tests.real.prober import XR_API, chat, judge_each_second
from tests.real.report import Report
from tests.real.upstreams import Upstream

MISTRAL = "mistralai/Mistral-7B-Instruct-v0.3"
QWEN = "Qwen/Qwen2.5-32B-Instruct"
# Names no other scenario uses: applying over an earlier scenario's route (a team-a/mistral on
# another gateway) changed its model while its status still said True, and the prober counted
# that second as a lie (CI of 31ace23).
ROUTES = {MISTRAL: "swap-mistral", QWEN: "swap-qwen"}


def poll_s() -> float:
    """provider-http's --poll as the shipped install manifest sets it."""
    poll = next(
        a.removeprefix("--poll=") for a in runtime_args("provider-http.yaml") if a.startswith("--poll=")
    )
    assert poll.endswith("s"), poll
    return float(poll.removesuffix("s"))


# From a swap to the truth: the swap can land just after a probe, so one whole
# poll, then provider-http's status write, Crossplane's watch of the composed
# Request and one reconcile (the watch path: under a second when measured here
# alone, 2026-12-04; CI runs this beside mutation testing and the image build).
WATCH_PATH_S = 8.0


def _serving(env: Env, name: str) -> tuple[bool, str]:
    """RoutingReady as the function last decided it (status.serving): ready, reason."""
    return _decided(env, name)[:2]


def _decided(env: Env, name: str) -> tuple[bool, str, bool]:
    """status.serving as a client reads it: ready, reason, and whether it is about the spec now."""
    rt = env.route(ROUTE[0], name) or {}
    serving = (rt.get("status") or {}).get("serving") or {}
    current = serving.get("observedGeneration") == rt.get("metadata", {}).get("generation")
    return serving.get("ready") is True, str(serving.get("reason") or ""), current


def _told(env: Env, loaded: list[str]) -> bool:
    """Every route says what the server has: Available for a loaded model, ModelNotLoaded otherwise."""
    return all(
        _serving(env, name) == ((True, "Available") if model in loaded else (False, "ModelNotLoaded"))
        for model, name in ROUTES.items()
    )


def model_swapped(env: Env, r: Report) -> None:
    bound = poll_s() + WATCH_PATH_S
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ROUTE[0]}})
    # The models earlier scenarios' routes (without a modelCheck), in any namespace, send to this
    # server: it keeps them loaded, so only the swapped models change (CI: the example route's
    # llama got 404 while it said True, as a route without a modelCheck cannot know; the prober
    # counted 20 lies).
    others = sorted(
        {
            str(m)
            for rt in env.kube.list(XR_API, "ModelRoute")
            if (m := (rt.get("spec") or {}).get("model"))
            and (rt["metadata"]["namespace"], rt["metadata"]["name"])
            not in {(ROUTE[0], n) for n in ROUTES.values()}
        }
    )
    env.vllm.models = [MISTRAL, *others]
    try:
        for model, name in ROUTES.items():
            backends: list[dict[str, Any]] = route_doc_one_backend()["spec"]["backends"]
            backends[0]["modelCheck"] = {}
            env.kube.apply(model_route_doc((ROUTE[0], name), model, backends))
        wait(
            "the Mistral route serving and the Qwen route ModelNotLoaded",
            lambda: _told(env, [MISTRAL]),
            CONVERGE_S,
        )
        took = []
        for loaded in ([QWEN], [], [MISTRAL]):
            # To the gateway a swap is a fault no one announces: the next poll finds it.
            env.prober.fault(detection_s=bound)
            swapped = time.time()
            env.vllm.models = [*loaded, *others]
            wait(
                f"every route told the server has {loaded or 'nothing'}",
                lambda now=loaded: _told(env, now),
                bound,
            )
            took.append(time.time() - swapped)
            r.lags.append(took[-1])
        r.notes.append(
            f"the server swapped Mistral to Qwen, to nothing, to Mistral: both routes told the truth "
            f"{', '.join(f'{t:.0f} s' for t in took)} after each swap (bound {bound:.0f} s: provider-http "
            f"--poll {poll_s():.0f} s and the watch path); a route for a model the server has not loaded "
            "says ModelNotLoaded"
        )
    finally:
        env.vllm.models = None
        for name in ROUTES.values():
            env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])
        wait(
            "the model routes gone",
            lambda: all(env.route(ROUTE[0], n) is None for n in ROUTES.values()),
            CONVERGE_S,
        )


def server_error_not_retried(env: Env, r: Report) -> None:
    """Found in review: a first backend answering 500, a code the route does not retry, with ejection off.
    Every request fails with it while the fallback serves nothing; before the fix the route said True
    once its model check saw the 500 (every 5xx counted as moved on). The server starts failing, the
    prober judges every second past the probe's bound, the route must say BackendNotServing, and True
    again once the server answers again."""
    bound = poll_s() + WATCH_PATH_S
    where, model = (ROUTE[0], "erring"), "erring-model"
    host = "vllm.team-a.svc.cluster.local"
    own = Upstream("erring", "openai", host="0.0.0.0", bind_port=VLLM_PORT + 2, models=[model]).start()
    try:
        backends = [
            {"name": "own", "endpoint": {"hostname": host, "port": VLLM_PORT + 2}, "modelCheck": {}},
            {"name": "shared", "endpoint": {"hostname": host, "port": VLLM_PORT}, "priority": 1},
        ]
        doc = model_route_doc(where, model, backends)
        # The default retries (502, 503, 504) and no ejection: a 500 is nobody's to move on.
        doc["spec"]["resilience"] = {"outlierDetection": {"consecutiveErrors": 0}}
        env.kube.apply(doc)
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        assert all(chat(port, model).ok for _ in range(4))
        assert own.seen, "the first backend got none of the model's requests"
        env.prober.fault(detection_s=bound)
        started = time.time()
        own.failing = 500
        # Judged to the end whatever the route says, so a route that never leaves True is counted.
        took = None
        while took is None and time.time() < started + bound:
            if not true(env.route(*where), "RoutingReady"):
                took = time.time() - started
            time.sleep(0.5)
        judged = judge_each_second(
            port, model, time.time() + ERRING_S, lambda: condition(env.route(*where), "RoutingReady")
        )
        judged.assert_truthful("no request failed: the 500 was moved on")
        failed, said_then = judged.failed, judged.said
        assert failed == judged.seconds, (
            f"{judged.seconds - failed} of {judged.seconds} requests served: the 500 was moved on"
        )
        assert took is not None, f"the route still True {bound:.0f} s after its server began answering 500"
        assert said_then.get("reason") == "BackendNotServing", said_then
        assert "own are answered 500" in said_then.get("message", ""), said_then
        env.prober.fault(detection_s=bound)
        own.failing = None
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), bound)
        assert all(chat(port, model).ok for _ in range(4))
        r.lags.append(took)
        r.notes.append(
            f"a first backend answering 500 (not retried, ejection off): BackendNotServing {took:.0f} s after "
            f"(bound {bound:.0f} s), then {failed} of {judged.seconds} requests failed, none while it said True"
        )
    finally:
        env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
        wait("the ModelRoute gone", lambda: env.route(*where) is None, CONVERGE_S)
        own.stop()


# How long server_error_not_retried judges the failing server, past the route's word.
ERRING_S = 20


STOPPED = "probe-stopped"


def provider_http_stopped(env: Env, r: Report) -> None:
    """provider-http hung (SIGSTOP: alive, polling nothing), then the server drops the route's model.
    The Request keeps its last answer, Synced True; the function must find the answer expired
    (failureThreshold + 1 polls without a renewal, the route calling itself back then) and say
    ModelNotLoaded, while the prober judges every second past that bound. Before (found in review),
    RoutingReady stayed True for as long as provider-http was down."""
    bound = (3 + 1) * poll_s() + WATCH_PATH_S
    others = sorted(
        {
            str(m)
            for rt in env.kube.list(XR_API, "ModelRoute")
            if (m := (rt.get("spec") or {}).get("model")) and rt["metadata"]["name"] != STOPPED
        }
    )
    env.vllm.models = [MISTRAL, *others]
    provider = env.sup.find("provider-http")
    try:
        backends: list[dict[str, Any]] = route_doc_one_backend()["spec"]["backends"]
        backends[0]["modelCheck"] = {}
        env.kube.apply(model_route_doc((ROUTE[0], STOPPED), MISTRAL, backends))
        wait("the checked route serving", lambda: _serving(env, STOPPED) == (True, "Available"), CONVERGE_S)
        # The answer's age counts from its last renewal: a poll at most before this.
        env.sup.hang(provider)
        hung = time.time()
        env.prober.fault(detection_s=bound)
        env.vllm.models = list(others)
        said = wait(
            "the route ModelNotLoaded with provider-http hung",
            lambda: (
                _serving(env, STOPPED) == (False, "ModelNotLoaded")
                and "provider-http has renewed no answer" in _message(env, STOPPED)
                and _message(env, STOPPED)
            ),
            bound + 10,
        )
        took = time.time() - hung
        r.lags.append(took)
        r.notes.append(
            f"provider-http hung, the server's model dropped: RoutingReady False {took:.0f} s later "
            f"(bound {bound:.0f} s: 4 polls of {poll_s():.0f} s and the watch path): "
            f"{said.split('; ')[0][:160]}"
        )
    finally:
        env.sup.resume(provider)
        env.vllm.models = None
        env.kube.delete(XR_API, "ModelRoute", STOPPED, ROUTE[0])
        wait("the checked route gone", lambda: env.route(ROUTE[0], STOPPED) is None, CONVERGE_S)


def _message(env: Env, name: str) -> str:
    """BackendsServing's message as the route last says it (it names each backend's probe state)."""
    rt = env.route(ROUTE[0], name) or {}
    found = [
        c for c in (rt.get("status") or {}).get("conditions") or [] if c.get("type") == "BackendsServing"
    ]
    return str(found[0].get("message") or "") if found else ""


RENAMED = ("renamed-before", "renamed-after")


def model_renamed(env: Env, r: Report) -> None:
    """A route's model renamed in place: Envoy AI Gateway's Accepted, and the Object's Ready, are of
    the old model until the change is applied and loaded; the new model's requests fail until then,
    and the route must not say True of them (CI of 31ace23 counted 2 lying seconds on such a change)."""
    name = "rename-me"
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ROUTE[0]}})
    backends = route_doc_one_backend()["spec"]["backends"]
    try:
        env.kube.apply(model_route_doc((ROUTE[0], name), RENAMED[0], backends))
        wait(
            "the route serving its first model", lambda: _decided(env, name)[::2] == (True, True), CONVERGE_S
        )
        renamed = time.time()
        env.kube.apply(model_route_doc((ROUTE[0], name), RENAMED[1], backends))
        seen: set[str] = set()

        def served_again() -> bool:
            ready, reason, current = _decided(env, name)
            if current and not ready:
                seen.add(reason)
            return ready and current

        wait("the renamed route serving", served_again, CONVERGE_S)
        took = time.time() - renamed
        r.lags.append(took)
        # Proof the rule was exercised: between the two, the route said it was not serving yet.
        assert seen, "the renamed route never said it was not serving yet"
        r.notes.append(
            f"the model renamed in place: {', '.join(sorted(seen))} until the new model was loaded, "
            f"True again {took:.0f} s after the rename"
        )
    finally:
        env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])
        wait("the renamed route gone", lambda: env.route(ROUTE[0], name) is None, CONVERGE_S)
