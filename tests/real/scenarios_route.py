"""Integration scenarios of the ModelRoute: routes, backends, workloads, policies, claims, upgrades."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from function import naming, readiness, serving_record
from function import route as composer
from function.api import Input, ModelRouteSpec
from function.objects import Target
from function.outcome import Requirement
from function.route import plan as route_plan
from function.route.verdict import CONFIG_LOAD_BOUND
from function.route.view import GATEWAY_REQUIREMENT, SERVING_REQUIREMENT, read_gateway
from tests.real.costs import (
    Meter,
    Phase,
    at_rest,
    between,
    decided_true_again,
    follow_times,
    noisy_transitions,
)
from tests.real.dataplane import POD_PROCESS_PREFIX
from tests.real.envoy import AIGW_CONTROLLER
from tests.real.etcd_history import Etcd, Recorder
from tests.real.harness import (
    AIGW_API,
    CONVERGE_S,
    GATEWAY,
    INPUT_API,
    OBJECT_API,
    ROUTE,
    VLLM_PORT,
    XR_API,
    Env,
    Report,
    accepted_conditions,
    model_route_doc,
    model_server,
    pod_ready_at,
    rolled_out,
    route_doc,
    route_doc_one_backend,
    set_paused,
    true,
    ts,
)
from tests.real.kube import condition, wait
from tests.real.prober import chat, judge_each_second, said
from tests.real.report import scale_line, scale_record, spread
from tests.real.timeline import Outage, Seen, Waiting, Watcher, first_false_stamps, outage
from tests.real.upstreams import Upstream
from tests.support import EXAMPLES, ROOT


def model_route(env: Env, r: Report) -> None:
    """A ModelRoute: route and backends Accepted by the real controller; RoutingReady True after GatewayReady."""
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ROUTE[0]}})
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hosted-api-key", "namespace": ROUTE[0]},
            "stringData": {"apiKey": "sk-test"},
        }
    )
    env.kube.apply(route_doc())
    route = wait(
        "RoutingReady=True", lambda: (rt := env.route()) and true(rt, "RoutingReady") and rt, CONVERGE_S
    )
    gw = env.gateway()
    routing_at = ts(condition(route, "RoutingReady")["lastTransitionTime"])
    gateway_at = ts(condition(gw, "GatewayReady")["lastTransitionTime"])
    assert routing_at >= gateway_at, "RoutingReady turned True before GatewayReady"
    accepted = []
    for kind in ("AIGatewayRoute", "AIServiceBackend"):
        for obj in env.kube.list(AIGW_API, kind, ROUTE[0]):
            assert true(obj, "Accepted"), (
                f"{kind} {obj['metadata']['name']} not Accepted: {obj.get('status')}"
            )
            accepted.append(ts(condition(obj, "Accepted")["lastTransitionTime"]))
    r.lags.append(routing_at - max([gateway_at, *accepted]))
    # The route trusts a serving record only if its gateway controls it (fail closed): Crossplane
    # must write that controller reference, or every route would read the InferenceGateway instead.
    name = serving_record.record_name(GATEWAY[1])
    record = env.kube.get("v1", "ConfigMap", name, GATEWAY[0])
    assert record is not None, f"no serving record {GATEWAY[0]}/{name}"
    assert readiness.controlled_by(record, XR_API, "InferenceGateway", GATEWAY[1]), (
        f"the serving record's owners are {record['metadata'].get('ownerReferences')}"
    )
    r.notes.append(f"{len(accepted)} route and backend objects Accepted by Envoy AI Gateway")
    r.notes.append("its serving record controlled by its InferenceGateway")


def remove_backend(env: Env, r: Report) -> None:
    """Remove one backend: garbage collection deletes exactly its resources; delete the route: all of it goes."""
    before = env.objects(ROUTE[0])
    hosted = {n for n in before if "hosted" in n}
    assert len(hosted) == 3, f"want the hosted backend's 3 Objects, have {sorted(hosted)}"
    doc = route_doc()
    doc["spec"]["backends"] = [b for b in doc["spec"]["backends"] if b["name"] != "hosted"]
    env.kube.apply(doc)
    after = wait(
        "the hosted backend's Objects deleted",
        lambda: (o := env.objects(ROUTE[0])) and not (set(o) & hosted) and o,
        120,
    )
    assert set(after) == set(before) - hosted, f"kept {sorted(after)}, want {sorted(set(before) - hosted)}"
    backends = [b["metadata"]["name"] for b in env.kube.list(AIGW_API, "AIServiceBackend", ROUTE[0])]
    assert all("hosted" not in b for b in backends), backends
    env.kube.delete(XR_API, "ModelRoute", ROUTE[1], ROUTE[0])
    wait("every Object of the route deleted", lambda: not env.objects(ROUTE[0]), 120)
    wait("the AIGatewayRoute deleted", lambda: not env.kube.list(AIGW_API, "AIGatewayRoute", ROUTE[0]), 120)
    r.notes.append(f"{len(hosted)} Objects of one backend deleted, {len(after)} kept, then all deleted")


def route_before_gateway_ready(env: Env, r: Report) -> None:
    """A ModelRoute whose gateway is not ready yet: everything composed, RoutingReady False
    with GatewayNotReady, then True once the gateway is."""
    gw = yaml.safe_load((EXAMPLES / "inference-gateway" / "xr.yaml").read_text())
    gw["metadata"]["name"] = "inference-b"
    gw["spec"]["envoy"] = {"serviceType": "ClusterIP"}
    env.kube.apply(gw)
    # The gateway publishes where routes attach at once, long before it is ready.
    wait(
        "inference-b publishing status.gateway, not ready",
        lambda: (
            (g := env.xr("InferenceGateway", GATEWAY[0], "inference-b"))
            and ((g.get("status") or {}).get("gateway") or {}).get("name")
            and not true(g, "GatewayReady")
        ),
        60,
    )
    route = route_doc_one_backend()
    route["metadata"]["name"] = "mistral"
    route["spec"]["model"] = "mistral-7b"
    route["spec"]["gatewayRef"]["name"] = "inference-b"
    env.kube.apply(route)
    composed_while_not_ready = 0
    reasons: set[str] = set()
    deadline = time.monotonic() + CONVERGE_S
    while time.monotonic() < deadline:
        rt = env.route(ROUTE[0], "mistral")
        gb = env.xr("InferenceGateway", GATEWAY[0], "inference-b")
        if true(rt, "RoutingReady"):
            assert true(gb, "GatewayReady"), "RoutingReady True before its gateway's GatewayReady"
            break
        reasons.add(str(condition(rt, "RoutingReady").get("reason")))
        if not true(gb, "GatewayReady"):
            composed_while_not_ready = max(
                composed_while_not_ready, sum("mistral" in n for n in env.objects(ROUTE[0]))
            )
        time.sleep(0.25)
    else:
        raise AssertionError(
            f"RoutingReady never True: {condition(env.route(ROUTE[0], 'mistral'), 'RoutingReady')}"
        )
    # The route, its Backend and AIServiceBackend, its BackendTrafficPolicy and the gateway observer.
    assert composed_while_not_ready == 5, (
        f"{composed_while_not_ready} of 5 route resources composed before the gateway was ready"
    )
    gateway_at = ts(condition(gb, "GatewayReady")["lastTransitionTime"])
    r.lags.append(ts(condition(rt, "RoutingReady")["lastTransitionTime"]) - gateway_at)
    r.notes.append("all 5 route resources composed while the gateway was not ready")


# Every condition follows the world within this many seconds, both ways (README).
TRUTH_BOUND_S = 5
# How long an object must stay unchanged to be taken as settled before a scenario disturbs it.
QUIET_S = 10.0


def _restart_envoy(env: Env) -> float:
    """Roll the Envoy Deployment under a Ready route (kubectl rollout restart): when it began."""
    dep = env.deployment()
    assert dep is not None, "want the Envoy Deployment"
    # A precondition, waited for: the settle of the previous rollout can leave a condition
    # written back for a moment (issue #32), and this measures the next rollout, not that.
    wait(
        "a Ready route on a ready gateway",
        lambda: true(env.gateway(), "GatewayReady") and true(env.route(), "RoutingReady"),
        60,
    )
    started = time.time()
    annotations = {"example.org/restarted-at": str(int(started))}
    env.kube.merge_patch(
        "apps/v1",
        "Deployment",
        dep["metadata"]["name"],
        dep["metadata"]["namespace"],
        {"spec": {"template": {"metadata": {"annotations": annotations}}}},
    )
    return started


def _roll_and_follow(env: Env) -> dict[str, float]:
    """Roll the Envoy Deployment under a Ready route: how late each decision followed, in seconds.

    Read as decided (status.serving) and timed when seen (polled every 0.1 s),
    not from the conditions' lastTransitionTime: Crossplane can write a
    condition back from its cache for a moment (crossplane/crossplane#7062),
    and CI's run of f211f9d took a GatewayReady=True written back in the
    middle of the rollout, with the previous rollout's lastTransitionTime, for
    the gateway's return: "RoutingReady True after GatewayReady 28 s", where
    the function's log shows 0.15 s.
    """
    started = _restart_envoy(env)

    def flipped(get: Callable[[], dict[str, Any] | None], typ: str, ready: bool) -> float:
        wait(
            f"{typ} decided {ready}",
            lambda: (o := get()) is not None and said(o, typ)[0] == ready,
            300,
            interval=0.1,
        )
        return time.time()

    gw_down = flipped(env.gateway, "GatewayReady", False)
    rt_down = flipped(env.route, "RoutingReady", False)
    gw_up = flipped(env.gateway, "GatewayReady", True)
    rt_up = flipped(env.route, "RoutingReady", True)
    lags = {
        "GatewayReady False after the rollout began": gw_down - started,
        "RoutingReady False after GatewayReady": rt_down - gw_down,
        "RoutingReady True after GatewayReady": rt_up - gw_up,
    }
    wait(
        "the rollout settled", lambda: rolled_out(env.deployment()) and true(env.route(), "RoutingReady"), 120
    )
    return lags


def _gateway_observer(env: Env) -> dict[str, Any]:
    return next(o for n, o in env.objects(ROUTE[0]).items() if "gateway-observer" in n)


def route_follows_gateway(env: Env, r: Report) -> None:
    """An Envoy rollout under a Ready route: GatewayReady and RoutingReady turn False and back
    within seconds, driven by watch events (the route's gateway observer), not by the TTL."""
    observer = _gateway_observer(env)
    for typ in ("Synced", "Ready"):
        assert true(observer, typ), f"the route's gateway observer is not {typ}: {observer.get('status')}"
    lags = _roll_and_follow(env)
    r.lags.extend(lags.values())
    late = {k: v for k, v in lags.items() if v > TRUTH_BOUND_S}
    assert not late, f"conditions followed later than {TRUTH_BOUND_S} s: {late}"
    r.notes.append(", ".join(f"{k} {v:.0f} s" for k, v in lags.items()))


def observer_ablation(env: Env, r: Report) -> None:
    """Issue #27 item 4, measured: the same rollout with the route's gateway observer paused
    (crossplane.io/paused: the provider stops reading the gateway, so it wakes nobody). Crossplane
    v2.4 watches the resources a function required, so the route should follow as fast without it;
    v2.2 does not, and the route then follows at its next TTL-driven call, or not at all when the
    rollout is over first. A measurement, not a bound; the seconds a late route says True are an
    ablation's, counted apart."""
    observer = _gateway_observer(env)
    name = observer["metadata"]["name"]
    set_paused(env, OBJECT_API, "Object", name, ROUTE[0], paused=True)
    try:
        with env.prober.ablation():
            r.notes.append("with the observer paused: " + _follow_by_sampling(env))
    finally:
        set_paused(env, OBJECT_API, "Object", name, ROUTE[0], paused=False)
    wait("RoutingReady True again", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)


# How long to keep sampling after the gateway is back when the route has not turned False:
# long enough for a False decided during the outage to be written, and no longer, because
# every call after the gateway's return reads it ready and cannot decide False. A route
# that did turn False is sampled until it is True again (at most the 300 s deadline).
# (150 s here cost CI 2 minutes on v2.2, where the route never follows.)
FOLLOW_SETTLE_S = 20.0


def _follow_by_sampling(env: Env, settle_s: float = FOLLOW_SETTLE_S) -> str:
    """Roll the Envoy Deployment and sample both conditions until the route has had its chance."""
    started = _restart_envoy(env)
    seen: dict[str, float] = {}
    deadline = started + 300
    while time.time() < deadline:
        now = time.time()
        gw_ready, rt_ready = true(env.gateway(), "GatewayReady"), true(env.route(), "RoutingReady")
        if not gw_ready:
            seen.setdefault("gateway False", now)
        elif "gateway False" in seen:
            seen.setdefault("gateway True", now)
        if not rt_ready and "gateway False" in seen:
            seen.setdefault("route False", now)
        elif rt_ready and "route False" in seen:
            seen.setdefault("route True", now)
        never_followed = "route False" not in seen and "gateway True" in seen
        # Both back: the route reads the gateway's serving record, which Crossplane
        # applies before it writes the InferenceGateway's status, so the route can
        # be seen True first (CI of 039bfa7: the sampling stopped there and took
        # the rollout for unfinished).
        if ("route True" in seen and "gateway True" in seen) or (
            never_followed and now - seen["gateway True"] > settle_s
        ):
            break
        time.sleep(0.25)
    assert "gateway True" in seen, f"the rollout never finished: {seen}"
    outage = seen["gateway True"] - seen["gateway False"]
    if "route False" not in seen:
        return f"RoutingReady never turned False through the gateway's {outage:.0f} s outage"
    down = seen["route False"] - seen["gateway False"]
    up = seen.get("route True", float("nan")) - seen["gateway True"]
    return (
        f"RoutingReady False {down:.0f} s after GatewayReady, True {up:.0f} s after it "
        f"(negative: before the gateway's own condition was written; outage {outage:.0f} s)"
    )


def _route_on_own_server(env: Env) -> None:
    """A one-backend route whose backend names the model's server as its workload, served and True."""
    env.kube.apply(model_server("vllm-llama", 1))
    # The provider's dry-run patch of observed workloads in this application namespace, as shipped.
    env.kube.apply_file(EXAMPLES / "install" / "workload-rbac.yaml")
    doc = route_doc_one_backend()
    doc["spec"]["backends"][0]["workloadRef"] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "vllm-llama",
    }
    env.kube.apply(doc)
    wait(
        "RoutingReady=True with the server observed serving",
        lambda: (
            (rt := env.route())
            and true(rt, "RoutingReady")
            and "vllm: 1 of 1 replicas available" in str(condition(rt, "BackendsServing").get("message"))
        ),
        CONVERGE_S,
    )


def _scale_server(env: Env, replicas: int) -> float:
    env.kube.merge_patch("apps/v1", "Deployment", "vllm-llama", ROUTE[0], {"spec": {"replicas": replicas}})
    return time.time()


def _routing(env: Env, what: str, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return wait(  # type: ignore[no-any-return]
        f"the route {what}", lambda: (rt := env.route()) and holds(rt) and rt, 60, interval=0.1
    )


def _reason_is(reason: str) -> Callable[[dict[str, Any]], bool]:
    return lambda rt: condition(rt, "RoutingReady").get("reason") == reason


def _server_back(env: Env) -> float:
    """Wait for the server's new replica Ready; when it turned Ready."""

    def live() -> list[dict[str, Any]]:
        return [
            p
            for p in env.kube.list("v1", "Pod", ROUTE[0], label_selector="app=vllm-llama")
            if not p["metadata"].get("deletionTimestamp")
        ]

    wait("the new replica Ready", lambda: any(true(p, "Ready") for p in live()), 60, interval=0.1)
    env.vllm.down = False
    return max(pod_ready_at(p) for p in live())


def _stamp(route: dict[str, Any]) -> float:
    return ts(condition(route, "RoutingReady")["lastTransitionTime"])


def _followed(r: Report, lags: dict[str, float], what: str) -> None:
    r.lags.extend(lags.values())
    late = {k: v for k, v in lags.items() if v > TRUTH_BOUND_S}
    assert not late, f"RoutingReady followed {what} later than {TRUTH_BOUND_S} s: {late}"


def backend_scaled_to_zero(env: Env, r: Report) -> None:
    """A model's own server scaled to zero and back: RoutingReady follows within seconds
    (BackendNotServing, then Available), through the route's watched workload observer."""
    _route_on_own_server(env)
    # Its Service loses every endpoint at once; to the gateway this is a fault to detect. The
    # prober hears of the fault first: a request sent between the server going down and the
    # prober being told was counted as a lie (CI, both routes on this server, one second).
    env.prober.fault()
    env.vllm.down = True
    down_at = _scale_server(env, 0)
    down = _routing(env, "BackendNotServing", _reason_is("BackendNotServing"))
    message = condition(down, "RoutingReady")["message"]
    assert "vllm: " in message, message
    assert "of 0 replicas available" in message, message
    up_at = _scale_server(env, 1)
    server_ready = _server_back(env)
    up = _routing(env, "Available", _reason_is("Available"))
    lags = {
        "RoutingReady False after the scale to zero": _stamp(down) - int(down_at),
        "RoutingReady True after the new replica was Ready": _stamp(up) - server_ready,
    }
    assert up_at <= server_ready + 1
    _followed(r, lags, "the model's server")
    r.notes.append(", ".join(f"{k} {v:.0f} s" for k, v in lags.items()))


# The ClusterRole examples/install/rbac.yaml binds provider-kubernetes to, to read Deployments.
PROVIDER_READER = ("rbac.authorization.k8s.io/v1", "ClusterRole", "provider-kubernetes-inference-gateways")


def workload_unreadable(env: Env, r: Report) -> None:
    """provider-kubernetes loses the right to get Deployments (its RBAC edited; list and watch
    kept, so its informer goes on telling it of changes), then the model's only server scales to
    zero. Its GET is refused, and it keeps the observer's last Ready=True and manifest, saying
    only Synced=False (observe failed: cannot get object ... forbidden). RoutingReady must not
    stand on that read: the prober counts every second it says True while requests fail."""
    _route_on_own_server(env)
    api, kind, name = PROVIDER_READER
    rules = env.kube.get(api, kind, name)["rules"]
    revoked: list[dict[str, Any]] = []
    for rule in rules:
        if "deployments" not in rule.get("resources", ()) or "get" not in rule.get("verbs", ()):
            revoked.append(rule)
            continue
        others = [x for x in rule["resources"] if x != "deployments"]
        if others:
            revoked.append({**rule, "resources": others})
        verbs = [v for v in rule["verbs"] if v != "get"]
        revoked.append({**rule, "resources": ["deployments"], "verbs": verbs})
    assert revoked != rules, f"{name} grants no get of Deployments: {rules}"
    env.kube.merge_patch(api, kind, name, None, {"rules": revoked})
    try:
        env.prober.fault()
        env.vllm.down = True
        down_at = _scale_server(env, 0)
        down = _routing(
            env,
            "False with its workload unread",
            lambda rt: (
                condition(rt, "RoutingReady").get("status") == "False"
                and "vllm: provider-kubernetes cannot read it now"
                in str(condition(rt, "BackendsServing").get("message"))
            ),
        )
    finally:
        env.kube.merge_patch(api, kind, name, None, {"rules": rules})
    said_then = condition(down, "BackendsServing")["message"]
    assert "forbidden" in said_then, said_then
    _scale_server(env, 1)
    server_ready = _server_back(env)
    up = _routing(env, "Available", _reason_is("Available"))
    lags = {
        "RoutingReady False after the scale to zero": _stamp(down) - int(down_at),
        "RoutingReady True after the new replica was Ready": _stamp(up) - server_ready,
    }
    _followed(r, lags, "the model's server, unread")
    r.notes.append(
        "Deployments unreadable to provider-kubernetes, the server scaled to zero: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in lags.items())
        + f" (BackendsServing then: {said_then[:160]})"
    )


def missing_secret(env: Env, r: Report) -> None:
    """Issue #25 item 1: a backend's API-key Secret missing. Envoy AI Gateway accepts every object and
    drops the backend, so requests fail; RoutingReady says ReferenceNotFound, and True once the Secret
    exists and requests succeed (the prober judges both)."""
    key_name = "vllm-api-key"
    env.kube.delete("v1", "Secret", key_name, ROUTE[0])
    doc = route_doc_one_backend()
    doc["spec"]["backends"][0]["apiKeySecretRef"] = {"name": key_name}
    env.kube.apply(doc)
    wait(
        "RoutingReady=False ReferenceNotFound",
        lambda: condition(env.route(), "RoutingReady").get("reason") == "ReferenceNotFound",
        CONVERGE_S,
    )
    wait(
        "the BackendSecurityPolicy Accepted without its Secret",
        lambda: (
            (p := env.kube.list(AIGW_API, "BackendSecurityPolicy", ROUTE[0]))
            and all(true(x, "Accepted") for x in p)
        ),
        CONVERGE_S,
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = doc["spec"]["model"]
    failed = wait(
        "a request refused while the Secret is missing",
        lambda: (a := chat(port, model)) and not a.ok and a,
        60,
    )
    message = condition(env.route(), "RoutingReady")["message"]
    assert f"Secret {ROUTE[0]}/{key_name} not found" in message, message
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": key_name, "namespace": ROUTE[0]},
            "stringData": {"apiKey": "sk-vllm"},
        }
    )
    started = time.monotonic()
    wait("RoutingReady=True with the Secret in place", lambda: true(env.route(), "RoutingReady"), CONVERGE_S)
    wait("a request served", lambda: chat(port, model).ok, 60)
    r.notes.append(
        f"every object Accepted and requests answered {failed.status} while the Secret was missing; "
        f"True {time.monotonic() - started:.0f} s after it was created"
    )
    env.kube.apply(route_doc_one_backend())


def service_backend_status_dropped(env: Env, r: Report) -> None:
    """Envoy AI Gateway v1.1.0 gives up on an AIServiceBackend's status write after five conflicts and
    never reconciles it again (make scale at N=300: one route said BackendNotAccepted for 20 minutes
    while its requests were answered 200). Here the status is taken off as that leaves it: the
    backend carries Envoy AI Gateway's finalizer, so RoutingReady stays True, and requests succeed
    throughout (the prober judges them); Envoy AI Gateway does not write the status back itself."""
    doc = route_doc_one_backend()
    env.kube.apply(doc)
    backend_name = doc["spec"]["backends"][0]["name"]

    def ours(*, deleting: bool) -> dict[str, dict[str, Any]]:
        """The route's composed Objects by composition-resource-name, those being deleted too if asked."""
        return {
            o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: o
            for o in env.objects(ROUTE[0]).values()
            if o["metadata"].get("labels", {}).get("crossplane.io/composite") == ROUTE[1]
            and (deleting or not o["metadata"].get("deletionTimestamp"))
        }

    # Settled first: a BackendSecurityPolicy event (one deleted by an earlier scenario) would have
    # Envoy AI Gateway reconcile the backend and write its status back.
    wait(
        "the route serving, with no BackendSecurityPolicy of its own left",
        lambda: (
            true(env.route(), "RoutingReady")
            and not any(k.startswith("security-policy-") for k in ours(deleting=True))
        ),
        CONVERGE_S,
    )
    composed = ours(deleting=False)[f"service-backend-{backend_name}"]
    obj_name = composed["metadata"]["name"]
    name = composed["spec"]["forProvider"]["manifest"]["metadata"]["name"]
    # And the backend itself quiet: Envoy AI Gateway reconciles it when a BackendSecurityPolicy that
    # targeted it goes (the CI of cb1afc2 saw its status written back during the scenario otherwise).
    versions: list[tuple[float, str]] = []

    def quiet() -> bool:
        versions.append(
            (
                time.monotonic(),
                env.kube.get(AIGW_API, "AIServiceBackend", name, ROUTE[0])["metadata"]["resourceVersion"],
            )
        )
        since = next(at for at, v in versions if v == versions[-1][1])
        return versions[-1][0] - since >= QUIET_S

    wait(f"AIServiceBackend {name} unchanged for {QUIET_S:.0f} s", quiet, CONVERGE_S, interval=1)
    # The policy's removal rewrote the gateway's configuration: True again once the ext-proc has
    # loaded it (ConfigLoading before).
    wait(
        "RoutingReady=True after the configuration loaded",
        lambda: true(env.route(), "RoutingReady"),
        CONVERGE_S,
    )
    backend = env.kube.get(AIGW_API, "AIServiceBackend", name, ROUTE[0])
    assert "aigateway.envoyproxy.io/finalizer" in backend["metadata"].get("finalizers", []), backend[
        "metadata"
    ]
    before = backend.get("status")
    assert true(backend, "Accepted"), before
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = doc["spec"]["model"]
    said: list[str] = []
    env.kube.patch_status(AIGW_API, "AIServiceBackend", name, None, ROUTE[0])
    try:
        # provider-kubernetes watches the backend: its Object must show it without a status, or
        # nothing here tested the query.
        wait(
            "the Object to observe the backend without a status",
            lambda: (
                not ((env.objects(ROUTE[0])[obj_name].get("status") or {}).get("atProvider") or {})
                .get("manifest", {})
                .get("status", {})
                .get("conditions")
            ),
            20,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = condition(env.route(), "RoutingReady")
            said.append(f"{got.get('status')} ({got.get('reason')})")
            assert true(env.objects(ROUTE[0])[obj_name], "Ready"), f"{obj_name} not Ready without a status"
            assert chat(port, model).ok, "a request failed with the backend's status gone"
            time.sleep(1)
        still = env.kube.get(AIGW_API, "AIServiceBackend", name, ROUTE[0]).get("status")
    finally:
        env.kube.patch_status(AIGW_API, "AIServiceBackend", name, before, ROUTE[0])
    assert not (still or {}).get("conditions"), f"Envoy AI Gateway wrote the status back: {still}"
    assert set(said) == {"True (Available)"}, f"RoutingReady while the status was gone: {said}"
    r.notes.append(
        f"AIServiceBackend {name} without a status for 20 s, its Object re-read without it (Envoy AI "
        f"Gateway did not write it back): RoutingReady said {said[0]} {len(said)} times, every request answered"
    )


def traffic_policy_conflicted(env: Env, r: Report) -> None:
    """Issue #25 item 4: a ModelRoute whose first priority is dead (its Deployment scaled to zero, nothing
    listening) and whose fallback serves. An older BackendTrafficPolicy on its HTTPRoute makes ours
    Conflicted, so no retry reaches the fallback and every request fails: RoutingReady says
    BackendNotServing. The older policy deleted: ours Accepted, retries fail over, RoutingReady True
    and requests served (the prober judges both)."""
    name, model = "fallback", "fallback-model"
    http_route = naming.unique_name(name, identity=("route",))
    env.kube.apply(_btp("platform-older", http_route))
    time.sleep(2)  # Envoy Gateway resolves conflicts by age: this one is older by whole seconds.
    env.kube.apply(model_server("vllm-dead", 0))
    env.kube.apply_file(EXAMPLES / "install" / "workload-rbac.yaml")
    env.kube.apply(
        model_route_doc(
            (ROUTE[0], name),
            model,
            [
                {
                    "name": "dead",
                    # Nothing listens there: every request to it is refused.
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT + 1},
                    "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-dead"},
                },
                {
                    "name": "live",
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT},
                    "priority": 1,
                },
            ],
        )
    )
    route = lambda: env.kube.get(XR_API, "ModelRoute", name, ROUTE[0])  # noqa: E731
    ours = wait(
        "our BackendTrafficPolicy with Envoy Gateway's verdict",
        lambda: (
            (
                p := env.kube.get(
                    "gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", http_route, ROUTE[0]
                )
            )
            and accepted_conditions(p)
            and p
        ),
        CONVERGE_S,
    )
    verdict = accepted_conditions(ours)
    assert all(c["status"] == "False" for c in verdict), verdict
    wait(
        "RoutingReady BackendNotServing, saying the policy is not Accepted",
        lambda: (
            "BackendTrafficPolicy is not Accepted" in condition(route(), "RoutingReady").get("message", "")
        ),
        CONVERGE_S,
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    failed = wait(
        "a request refused without failover", lambda: (a := chat(port, model)) and not a.ok and a, 60
    )
    r.notes.append(
        f"ours {', '.join(c['reason'] for c in verdict)} under an older policy: requests {failed.status}, "
        "RoutingReady BackendNotServing"
    )
    started = time.monotonic()
    env.kube.delete("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", "platform-older", ROUTE[0])
    wait("RoutingReady True once ours is Accepted", lambda: true(route(), "RoutingReady"), CONVERGE_S)
    wait("a request served by the fallback", lambda: chat(port, model).ok, 60)
    r.notes.append(
        f"the older policy deleted: True and served through the fallback in {time.monotonic() - started:.0f} s"
    )
    env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])
    wait("the fallback ModelRoute gone", lambda: route() is None, CONVERGE_S)


def _btp(name: str, http_route: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": {"name": name, "namespace": ROUTE[0]},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": http_route}],
            "timeout": {"http": {"streamIdleTimeout": "60s"}},
        },
    }


def gateway_rate_limit(env: Env, r: Report) -> None:
    """Issue #25 item 4: a platform's Gateway-level BackendTrafficPolicy (a local rate limit, for
    requests carrying one header the prober never sends) still limits a ModelRoute's requests: the
    route's own policy merges into it (mergeType StrategicMerge) instead of replacing it."""
    name = "platform-limits"
    env.kube.apply(
        {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "BackendTrafficPolicy",
            "metadata": {"name": name, "namespace": GATEWAY[0]},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY[1]}],
                "rateLimit": {
                    "type": "Local",
                    "local": {
                        "rules": [
                            {
                                "clientSelectors": [{"headers": [{"name": "x-limited", "value": "yes"}]}],
                                "limit": {"requests": 2, "unit": "Minute"},
                            }
                        ]
                    },
                },
            },
        }
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = route_doc()["spec"]["model"]
    limited = wait(
        "a limited request answered 429 through the ModelRoute",
        lambda: (a := chat(port, model, {"x-limited": "yes"})) and a.status == 429 and a,
        60,
        interval=0.5,
    )
    assert chat(port, model).ok  # the prober's kind of request is not limited
    r.notes.append(f"the Gateway-level limit answered {limited.status} through the route's merged policy")
    env.kube.delete("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", name, GATEWAY[0])


def model_claimed(env: Env, r: Report) -> None:
    """Issue #25 item 3: a second ModelRoute, in another team's namespace, claims the model team-a's
    route already serves, with a backend where nothing listens. Envoy keeps serving the older route (the
    prober would count team-a's failures as lies otherwise); the younger says ModelClaimed naming it."""
    squat = ("team-b", "squat")
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": squat[0]}})
    model = route_doc()["spec"]["model"]
    env.kube.apply(
        model_route_doc(
            squat,
            model,
            [
                {
                    "name": "nothing",
                    "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT + 1},
                }
            ],
        )
    )
    squatter = lambda: env.kube.get(XR_API, "ModelRoute", squat[1], squat[0])  # noqa: E731
    said = wait(
        "the younger route says ModelClaimed",
        lambda: (c := condition(squatter(), "RoutingReady")).get("reason") == "ModelClaimed" and c,
        CONVERGE_S,
    )
    assert f"ModelRoute {ROUTE[0]}/{ROUTE[1]}" in said["message"], said
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    for _ in range(5):  # the older route keeps the model: its backend answers
        assert chat(port, model).ok
        assert true(env.route(), "RoutingReady"), condition(env.route(), "RoutingReady")
        time.sleep(1)
    r.notes.append(f"the younger route: {said['message'].split(':')[0]}; the older kept serving")
    env.kube.delete(XR_API, "ModelRoute", squat[1], squat[0])
    wait("the squatting ModelRoute gone", lambda: squatter() is None, CONVERGE_S)


@contextlib.contextmanager
def two_routes_of_one_model(
    env: Env, model: str, prefix: str
) -> Iterator[tuple[Upstream, tuple[str, str], tuple[str, str]]]:
    """Two ModelRoutes of one model: the older in team-a, with its own server (VLLM_PORT + 2), True;
    the younger in team-b, on the shared vLLM, ModelClaimed naming the older. Yields (the older's
    server, older, younger); both routes are deleted after, and the server stopped."""
    older, younger = (ROUTE[0], f"{prefix}-old"), ("team-b", f"{prefix}-new")
    server = Upstream(prefix, "openai", host="0.0.0.0", bind_port=VLLM_PORT + 2).start()
    try:
        env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": younger[0]}})
        host = "vllm.team-a.svc.cluster.local"
        env.kube.apply(
            model_route_doc(
                older, model, [{"name": "own", "endpoint": {"hostname": host, "port": VLLM_PORT + 2}}]
            )
        )
        wait("the older route RoutingReady=True", lambda: true(env.route(*older), "RoutingReady"), CONVERGE_S)
        env.kube.apply(
            model_route_doc(
                younger, model, [{"name": "vllm", "endpoint": {"hostname": host, "port": VLLM_PORT}}]
            )
        )
        said = wait(
            "the younger route ModelClaimed",
            lambda: (
                (c := condition(env.route(*younger), "RoutingReady")).get("reason") == "ModelClaimed" and c
            ),
            CONVERGE_S,
        )
        assert f"ModelRoute {older[0]}/{older[1]}" in said["message"], said
        yield server, older, younger
        for where in (older, younger):
            env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
        wait(
            "both ModelRoutes gone",
            lambda: env.route(*older) is None and env.route(*younger) is None,
            CONVERGE_S,
        )
    finally:
        server.stop()


def model_taken_over(env: Env, r: Report) -> None:
    """A ModelRoute kept from its model by an older one (ModelClaimed) takes it over when the older
    one renames its model. The older one's claim label changes as Crossplane applies its Object, at
    once; Envoy serves the older route for the old name until provider-kubernetes, Envoy AI Gateway
    and Envoy Gateway have moved it. Its server has loaded the new name only (404 for the old):
    the younger must not say True while the model's requests still reach it (the prober judges
    every second)."""
    model, renamed = "takeover-model", "takeover-renamed"
    with two_routes_of_one_model(env, model, "takeover") as (server, older, younger):
        # Past the younger's own configuration hold, so only the takeover can hold it back.
        time.sleep(CONFIG_LOAD_BOUND.total_seconds() + 2)
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        # The older team's server swaps to the new name as its route is renamed.
        server.models = [renamed]
        env.kube.merge_patch(XR_API, "ModelRoute", older[1], older[0], {"spec": {"model": renamed}})
        renamed_at = time.time()
        wait(
            "the younger route RoutingReady=True",
            lambda: true(env.route(*younger), "RoutingReady"),
            CONVERGE_S,
        )
        took = time.time() - renamed_at
        assert chat(port, model).ok, "the younger route said True while its model's requests failed"
        r.lags.append(took)
        r.notes.append(
            f"the older route renamed its model: the younger said True {took:.0f} s later, "
            f"its requests judged every second meanwhile"
        )


def model_claim_httproute_remade(env: Env, r: Report) -> None:
    """Security (found in review): Envoy serves the route of a model whose HTTPRoute Envoy Gateway
    sorts first, and the HTTPRoutes' ages need not follow the AIGatewayRoutes'. The older of two
    routes of one model loses its HTTPRoute; Envoy AI Gateway makes it again, now the younger, and
    Envoy sends the model's requests to the other team's backend. The older must stop saying True
    (ModelClaimed, naming the other) while its own server gets none of the model's requests, and the
    younger say True. Judged every second: a request, whose server answered it, what each says."""
    model = "remade-model"
    with two_routes_of_one_model(env, model, "remade") as (own, older, younger):
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        before = len(own.seen)
        assert chat(port, model).ok
        assert len(own.seen) > before, "the older route's server serves the model"
        [route] = [
            a
            for a in env.kube.list("aigateway.envoyproxy.io/v1beta1", "AIGatewayRoute", older[0])
            if any(
                h.get("value") == model
                for rule in a["spec"]["rules"]
                for m in rule.get("matches") or []
                for h in m.get("headers") or []
            )
        ]
        name = route["metadata"]["name"]
        # Made again in the same second as the other's, team-a's would still sort first (by namespace):
        # the first run of this scenario met exactly that, and the function rightly kept it the holder.
        wait(
            "the younger route's HTTPRoute made",
            lambda: any(
                h["metadata"]["name"].startswith(younger[1])
                for h in env.kube.list("gateway.networking.k8s.io/v1", "HTTPRoute", younger[0])
            ),
            CONVERGE_S,
        )
        time.sleep(2)
        # Someone deleting an HTTPRoute Envoy AI Gateway owns is a fault the function cannot see
        # coming: Envoy drops the route, and the model's requests fail (ext-proc answered 500 at
        # once in the CI of 4cd91bc) until the route says ModelClaimed. The prober's detection
        # allowance covers the seconds before that, as after every unplanned fault; the loop below
        # still counts each second the older said True while another team's server answered.
        env.prober.fault()
        env.kube.delete("gateway.networking.k8s.io/v1", "HTTPRoute", name, older[0])
        deleted_at = time.time()
        lying = 0
        while True:
            elapsed = time.time() - deleted_at
            assert elapsed < 90, (  # 17 s on the first run of the code that judges HTTPRoutes
                f"the older route still says {condition(env.route(*older), 'RoutingReady')} {elapsed:.0f} s "
                f"after its HTTPRoute was made again, younger than the other's ({lying} s while its server "
                "got none of the model's requests)"
            )
            before = len(own.seen)
            answer = chat(port, model)
            ours = len(own.seen) > before
            says = true(env.route(*older), "RoutingReady")
            lying += says and answer.ok and not ours
            if not says and true(env.route(*younger), "RoutingReady") and answer.ok and not ours:
                break
            time.sleep(1)
        took = time.time() - deleted_at
        claimed = condition(env.route(*older), "RoutingReady")
        assert claimed.get("reason") == "ModelClaimed", claimed
        assert f"{younger[0]}/{younger[1]}" in claimed["message"], claimed
        remade = env.kube.get("gateway.networking.k8s.io/v1", "HTTPRoute", name, older[0])
        assert remade is not None, "Envoy AI Gateway made the HTTPRoute again"
        assert lying <= 2, (
            f"the older route said True for {lying} s while another team's backend got its requests"
        )
        r.lags.append(took)
        r.notes.append(
            f"the older route's HTTPRoute made again: it said ModelClaimed and the younger True {took:.0f} s "
            f"later; {lying} s True while the other's backend answered"
        )


def model_renamed_while_ai_gateway_stopped(env: Env, r: Report) -> None:
    """Security (found in review): a route that renames its model leaves the claim of the old one in
    its Object's label at once, while Envoy routes the old model to it until Envoy AI Gateway has
    made its HTTPRoute again (never, while a backend it names is missing). Of two routes of one
    model, the older (its own server) renames it while Envoy AI Gateway's controller is hung: for
    30 s Envoy still sends the old model to the older's server, and the younger must not say True
    (nor the older, for a name Envoy does not route to it yet). Resumed, the younger takes the model
    and the older its new name."""
    model, renamed = "held-model", "held-renamed"
    controller = env.sup.find(AIGW_CONTROLLER)
    with two_routes_of_one_model(env, model, "held") as (own, older, younger):
        # Past the younger's own configuration hold, so only the claim can hold it back.
        time.sleep(CONFIG_LOAD_BOUND.total_seconds() + 2)
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        env.sup.hang(controller)
        try:
            env.kube.merge_patch(XR_API, "ModelRoute", older[1], older[0], {"spec": {"model": renamed}})
            renamed_at = time.time()
            while time.time() < renamed_at + 30:
                before = len(own.seen)
                answer = chat(port, model)
                assert answer.ok, answer
                assert len(own.seen) > before, f"Envoy stopped sending {model} to the older route's server"
                # Judged every second: the first seconds too, before Crossplane has seen the rename.
                young = condition(env.route(*younger), "RoutingReady")
                assert young.get("reason") == "ModelClaimed", (
                    f"the younger route left ModelClaimed while Envoy sent {model} to the older's server: {young}"
                )
                old = condition(env.route(*older), "RoutingReady")
                # Its True of the model before stands until the function has seen the rename (the prober
                # judges the new name meanwhile, past its detection time).
                assert time.time() - renamed_at < 5 or old.get("status") != "True", (
                    f"the renamed route said True before Envoy routes {renamed}: {old}"
                )
                time.sleep(1)
            assert f"still routes model {model}" in old.get("message", ""), old
        finally:
            env.sup.resume(controller)
        resumed = time.time()
        wait(
            "the younger route RoutingReady=True",
            lambda: true(env.route(*younger), "RoutingReady"),
            CONVERGE_S,
        )
        wait(
            "the renamed route RoutingReady=True", lambda: true(env.route(*older), "RoutingReady"), CONVERGE_S
        )
        took = time.time() - resumed
        before = len(own.seen)
        assert chat(port, model).ok
        assert len(own.seen) == before, "the younger route's server answers the model now"
        assert chat(port, renamed).ok
        assert len(own.seen) > before, "the renamed route's server answers its new name"
        r.lags.append(took)
        r.notes.append(
            f"Envoy AI Gateway hung 30 s through a rename: the younger route said ModelClaimed all along "
            f"({old.get('reason')} for the renamed one); both True {took:.0f} s after it resumed"
        )


def backend_removed_while_ai_gateway_stopped(env: Env, r: Report) -> None:
    """Found in review: a spec change Envoy AI Gateway never answers. A route of two backends (the shared
    vLLM and its own server) takes its own out, and its server is shut down, while Envoy AI Gateway's
    controller is hung; the route retries nothing. The AIGatewayRoute keeps the Accepted of the spec before, its HTTPRoute still names
    both, and Envoy keeps sending the removed one its share: Envoy Gateway's translation waits on Envoy AI
    Gateway's extension server, so Envoy's configuration stays as it was (seen here: no xDS update until
    the resume). Judged every second for HUNG_S: requests fail, and never while the route says True.
    Resumed, the route says True again once Envoy routes the spec, and every request succeeds."""
    where, model = (ROUTE[0], "split"), "split-model"
    host = "vllm.team-a.svc.cluster.local"
    server = Upstream("split", "openai", host="0.0.0.0", bind_port=VLLM_PORT + 2).start()
    controller = env.sup.find(AIGW_CONTROLLER)
    try:
        both = [
            {"name": "shared", "endpoint": {"hostname": host, "port": VLLM_PORT}},
            {"name": "own", "endpoint": {"hostname": host, "port": VLLM_PORT + 2}},
        ]
        doc = model_route_doc(where, model, both)
        # Retries would send the removed share on to the shared server (the default: 2 on a connection
        # failure), and the requests would succeed (the first run here); without them they fail.
        doc["spec"]["resilience"] = {"retry": {"attempts": 0}, "outlierDetection": {"consecutiveErrors": 0}}
        env.kube.apply(doc)
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
        # Past its configuration hold, so only the HTTPRoute can hold it back.
        time.sleep(CONFIG_LOAD_BOUND.total_seconds() + 2)
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        for _ in range(4):
            assert chat(port, model).ok
        assert server.seen, "its own server got none of the model's requests before"
        env.sup.hang(controller)
        try:
            env.kube.merge_patch(XR_API, "ModelRoute", where[1], where[0], {"spec": {"backends": both[:1]}})
            # Once the route has seen its spec change, its team shuts the removed server down (its open
            # connections reset too): the route's True of the spec before cannot speak for this one.
            wait("the route RoutingReady not True", lambda: not true(env.route(*where), "RoutingReady"), 30)
            removed_at = time.time()
            server.kill()
            judged = judge_each_second(
                port, model, removed_at + HUNG_S, lambda: condition(env.route(*where), "RoutingReady")
            )
        finally:
            env.sup.resume(controller)
        resumed = time.time()
        judged.assert_truthful(
            f"no request failed in {HUNG_S} s: Envoy no longer sent the removed backend its share"
        )
        failed, said_then = judged.failed, judged.said
        assert said_then.get("reason") == "RouteNotAccepted", (
            f"after {HUNG_S} s of Envoy AI Gateway hung: {said_then}"
        )
        assert "its HTTPRoute sends requests to" in said_then.get("message", ""), said_then
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
        took = time.time() - resumed
        answers = [chat(port, model) for _ in range(6)]
        assert all(a.ok for a in answers), f"after the route said True: {answers}"
        r.lags.append(took)
        r.notes.append(
            f"Envoy AI Gateway hung {HUNG_S} s after a backend was taken out and its server stopped: "
            f"{failed} of {HUNG_S} requests failed, none while the route said True ({said_then.get('reason')} "
            f"by the end); True {took:.0f} s after the resume"
        )
        env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
        wait("the ModelRoute gone", lambda: env.route(*where) is None, CONVERGE_S)
    finally:
        server.stop()


# How long backend_removed_while_ai_gateway_stopped keeps Envoy AI Gateway hung: past the 18 s hold.
HUNG_S = 35


def endpoint_moved_while_envoy_gateway_down(env: Env, r: Report) -> None:
    """Found in review: a Backend whose endpoint changed while Envoy Gateway's controller is down keeps the
    Accepted of the endpoint before, and Envoy, whose configuration nothing rewrites, keeps sending there.
    A route of one backend moves it to another server, and the old server is shut down, with Envoy
    Gateway killed; the route retries nothing. Judged every second for HUNG_S: requests fail, and never
    while the route says True (the Backend's Accepted is of an older generation). Envoy Gateway back,
    the route says True once Envoy sends to the new server, and every request succeeds there."""
    where, model = (ROUTE[0], "moved"), "moved-model"
    host = "vllm.team-a.svc.cluster.local"
    old = Upstream("moved-old", "openai", host="0.0.0.0", bind_port=VLLM_PORT + 2).start()
    new = Upstream("moved-new", "openai", host="0.0.0.0", bind_port=VLLM_PORT + 3).start()
    try:
        doc = model_route_doc(
            where, model, [{"name": "own", "endpoint": {"hostname": host, "port": VLLM_PORT + 2}}]
        )
        doc["spec"]["resilience"] = {"retry": {"attempts": 0}, "outlierDetection": {"consecutiveErrors": 0}}
        env.kube.apply(doc)
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
        port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
        for _ in range(4):
            assert chat(port, model).ok
        assert old.seen, "the old server got none of the model's requests before"
        controller = env.sup.find("envoy-gateway")
        env.sup.kill(controller)
        try:
            moved = [{"name": "own", "endpoint": {"hostname": host, "port": VLLM_PORT + 3}}]
            env.kube.merge_patch(XR_API, "ModelRoute", where[1], where[0], {"spec": {"backends": moved}})
            # Once provider-kubernetes has applied the new endpoint, its team shuts the old server down.
            wait(
                "the Backend's new endpoint applied",
                lambda: any(
                    f"{VLLM_PORT + 3}"
                    in json.dumps(readiness.get_path(o, "status", "atProvider", "manifest", "spec"))
                    for name, o in env.objects(where[0]).items()
                    if readiness.get_path(o, "spec", "forProvider", "manifest", "kind") == "Backend"
                ),
                30,
            )
            moved_at = time.time()
            old.kill()
            judged = judge_each_second(
                port, model, moved_at + HUNG_S, lambda: condition(env.route(*where), "RoutingReady")
            )
        finally:
            env.sup.restart(controller)
        back = time.time()
        judged.assert_truthful(f"no request failed in {HUNG_S} s: Envoy no longer sent to the old endpoint")
        failed, said_then = judged.failed, judged.said
        assert said_then.get("reason") == "BackendNotAccepted", (
            f"after {HUNG_S} s of Envoy Gateway down: {said_then}"
        )
        assert "of an older generation" in said_then.get("message", ""), said_then
        wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
        took = time.time() - back
        answers = [chat(port, model) for _ in range(6)]
        assert all(a.ok for a in answers), f"after the route said True: {answers}"
        assert new.seen, "the new server got none of the model's requests"
        r.lags.append(took)
        r.notes.append(
            f"Envoy Gateway down {HUNG_S} s after a backend's endpoint moved and its old server stopped: "
            f"{failed} of {HUNG_S} requests failed, none while the route said True ({said_then.get('reason')} "
            f"by the end); True {took:.0f} s after it came back"
        )
        env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
        wait("the ModelRoute gone", lambda: env.route(*where) is None, CONVERGE_S)
    finally:
        old.stop()
        new.stop()


def model_renamed_while_envoy_gateway_down(env: Env, r: Report) -> None:
    """Found in review: a route changed while Envoy Gateway's controller is down. Envoy AI Gateway
    (up) rewrites the HTTPRoute and stamps the AIGatewayRoute Accepted; nothing translates the
    HTTPRoute for Envoy, which routes the model before: a route renames its model, and the new
    name's requests are answered 404. Judged every second for HUNG_S from the HTTPRoute's rewrite:
    they fail, and never while the route says True (Envoy Gateway's Accepted of the HTTPRoute is
    of the generation before). Envoy Gateway back, the route says True once Envoy routes the new
    name, and every request for it succeeds."""
    where, before, after = (ROUTE[0], "eg-renamed"), "eg-before", "eg-after"
    backend = [{"name": "vllm", "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT}}]
    env.kube.apply(model_route_doc(where, before, backend))
    wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    assert chat(port, before).ok
    controller = env.sup.find("envoy-gateway")
    env.sup.kill(controller)
    try:
        env.kube.merge_patch(XR_API, "ModelRoute", where[1], where[0], {"spec": {"model": after}})
        # Envoy AI Gateway rewrites the HTTPRoute; from then on only Envoy Gateway's status tells.
        wait(
            "the HTTPRoute rewritten for the new name",
            lambda: any(
                f'"value": "{after}"' in json.dumps(h.get("spec"))
                for h in env.kube.list("gateway.networking.k8s.io/v1", "HTTPRoute", where[0])
            ),
            30,
        )
        rewritten = time.time()
        judged = judge_each_second(
            port, after, rewritten + HUNG_S, lambda: condition(env.route(*where), "RoutingReady")
        )
    finally:
        env.sup.restart(controller)
    back = time.time()
    judged.assert_truthful(f"no request for {after} failed in {HUNG_S} s: Envoy routed the new name")
    said_then = judged.said
    assert said_then.get("reason") == "RouteNotAccepted", (
        f"after {HUNG_S} s of Envoy Gateway down: {said_then}"
    )
    assert "has not translated it" in said_then.get("message", ""), said_then
    wait("the route RoutingReady=True", lambda: true(env.route(*where), "RoutingReady"), CONVERGE_S)
    took = time.time() - back
    answers = [chat(port, after) for _ in range(6)]
    assert all(a.ok for a in answers), f"after the route said True: {answers}"
    r.lags.append(took)
    r.notes.append(
        f"Envoy Gateway down {HUNG_S} s after a route renamed its model and Envoy AI Gateway rewrote the "
        f"HTTPRoute: {judged.failed} of {judged.seconds} requests for the new name failed, none while the "
        f"route said True ({said_then.get('reason')} by the end); True {took:.0f} s after it came back"
    )
    env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
    wait("the ModelRoute gone", lambda: env.route(*where) is None, CONVERGE_S)


def upgraded_from_v0_1_0(env: Env, r: Report) -> None:
    """Issue #25 item 6: a ModelRoute whose resources v0.1.0 composed (target names without a hash)
    is taken over by this version. No target is renamed, so no second AIGatewayRoute appears beside
    the old one; deleting the ModelRoute deletes what v0.1.0 created, and the model stops being routed."""
    where, model = ("team-up", "legacy"), "legacy-model"
    env.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": where[0]}})
    doc = model_route_doc(
        where,
        model,
        [{"name": "vllm", "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT}}],
    )
    # Paused until v0.1.0's resources are in place, so this version composes nothing first.
    doc["metadata"]["annotations"] = {"crossplane.io/paused": "true"}
    env.kube.apply(doc)
    xr = wait("the paused ModelRoute", lambda: env.route(*where), 30)
    refs = []
    for obj in _v0_1_0_objects(env, xr):
        env.kube.apply(obj)
        refs.append({"apiVersion": OBJECT_API, "kind": "Object", "name": obj["metadata"]["name"]})
    env.kube.merge_patch(
        XR_API, "ModelRoute", where[1], where[0], {"spec": {"crossplane": {"resourceRefs": refs}}}
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    wait("v0.1.0's route serves the model", lambda: chat(port, model).ok, CONVERGE_S)
    set_paused(env, XR_API, "ModelRoute", where[1], where[0], paused=False)
    wait(
        "RoutingReady=True after the upgrade",
        lambda: (rt := env.route(*where)) and true(rt, "RoutingReady") and rt,
        CONVERGE_S,
    )
    # RoutingReady may read an Object's status from before the provider applied
    # this version's manifest: judge once every Object reports the manifest it holds now.
    wait("the provider applied every Object", lambda: _applied(env.objects(where[0])), CONVERGE_S)
    routes = sorted(o["metadata"]["name"] for o in env.kube.list(AIGW_API, "AIGatewayRoute", where[0]))
    assert routes == [where[1]], f"AIGatewayRoutes after the upgrade: {routes} (v0.1.0 named it {where[1]!r})"
    backends = sorted(o["metadata"]["name"] for o in env.kube.list(AIGW_API, "AIServiceBackend", where[0]))
    assert backends == [f"{where[1]}-vllm"], backends
    assert chat(port, model).ok
    objects = env.objects(where[0])
    assert {ref["name"] for ref in refs} <= set(objects), sorted(objects)
    env.kube.delete(XR_API, "ModelRoute", where[1], where[0])
    wait("every Object of the route deleted", lambda: not env.objects(where[0]), 120)
    wait("no AIGatewayRoute left", lambda: not env.kube.list(AIGW_API, "AIGatewayRoute", where[0]), 120)
    wait("the model no longer routed", lambda: not chat(port, model).ok, CONVERGE_S)
    r.notes.append(
        f"v0.1.0's {len(refs)} Objects taken over: AIGatewayRoute {routes[0]} kept its name, "
        f"{len(objects) - len(refs)} Objects added; deleting the route removed every target"
    )


def _applied(objects: dict[str, dict[str, Any]]) -> bool:
    """Every Object Synced, its observed target the one its manifest names."""
    for obj in objects.values():
        wanted = obj["spec"]["forProvider"]["manifest"]["metadata"]["name"]
        seen = (((obj.get("status") or {}).get("atProvider") or {}).get("manifest") or {}).get(
            "metadata"
        ) or {}
        if not true(obj, "Synced") or seen.get("name") != wanted:
            return False
    return bool(objects)


def _v0_1_0_objects(env: Env, xr: dict[str, Any]) -> list[dict[str, Any]]:
    """The Objects v0.1.0 composed for `xr`: its names (`<xr>-<backend>`, the route `<xr>`), no
    BackendTrafficPolicy or gateway observer, owned by the XR as Crossplane owns composed resources."""
    meta = xr["metadata"]
    ns, name = meta["namespace"], meta["name"]
    spec = ModelRouteSpec.model_validate({k: v for k, v in xr["spec"].items() if k != "crossplane"})
    held = {route_plan.ROUTE: Target(ns, name)}
    for b in spec.backends:
        for prefix in (route_plan.BACKEND_PREFIX, route_plan.SERVICE_BACKEND_PREFIX):
            held[prefix + b.name] = Target(ns, f"{name}-{b.name}")
    plan = route_plan.RoutePlan(
        xr_name=name,
        xr_namespace=ns,
        spec=spec,
        inp=Input.model_validate({"apiVersion": INPUT_API, "kind": "Input", "compose": "ModelRoute"}),
        held=held,
    )
    ref = Requirement(api_version=XR_API, kind="InferenceGateway", name=GATEWAY[1], namespace=GATEWAY[0])
    # Read from the InferenceGateway itself, as a route does when there is no serving record.
    view = read_gateway({SERVING_REQUIREMENT: [], GATEWAY_REQUIREMENT: [env.gateway() or {}]}, ref)
    assert view.attachment is not None, view.missing
    objects = composer.build_objects(plan, view.attachment, {})  # v0.1.0 wrote no claim labels
    out = []
    for key in sorted(held):
        obj = objects[key]
        obj["metadata"] = {
            "name": f"{name}-{key}",
            "namespace": ns,
            "annotations": {"crossplane.io/composition-resource-name": key},
            "labels": {"crossplane.io/composite": name},
            "ownerReferences": [
                {
                    "apiVersion": XR_API,
                    "kind": "ModelRoute",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        out.append(obj)
    return out


# The number of ModelRoutes rollout_at_scale creates (FGR_ROUTES; make scale).
SCALE_ROUTES = int(os.environ.get("FGR_ROUTES", "100"))
# Where each scale run writes its figures (routes-<N>.json), which tools/cost_model.py fits.
SCALE_OUT = Path(os.environ.get("FGR_SCALE_OUT", str(ROOT / "_output" / "scale")))
# How late a route may learn that its gateway is not ready, at scale: each of
# SCALE_ROUTES reconciles applies its composed resources before its status, on
# one API server. Measured at 100 routes on 2 cores (docs/operations.md):
# max 13 s with the gateway observer off (make scale), 19 to 22 s with it on;
# a tripped circuit breaker (30 s half-open probes) would exceed it.
SCALE_FOLLOW_BOUND_S = 20.0
# Issue #31's goal for this machine: every route False within 5 s (p99) of its gateway, "from the
# API server's timestamps": the conditions' lastTransitionTime, and the function's decisions where
# a stamp truncated to the second would read early. What a client reads comes later (published).
# It names N=300; CI runs N=100 and fails past it (make scale).
SCALE_P99_GOAL_S = 5.0
# How long the gateway must say ready before its outage is over (it may flap back for a moment).
SCALE_SETTLE_S = 3.0
# The routes at rest before the rollout issue #31's goal is judged on (costs.at_rest): no write of a
# route or its gateway for this long, and few calls; waited for at most SCALE_REST_WAIT_S.
SCALE_REST_WINDOW_S = 10.0
SCALE_REST_WAIT_S = 240.0
# Where the API server keeps the scale routes' XRs and their Objects in etcd.
SCALE_XR_KEYS = f"/registry/ai.example.org/modelroutes/{ROUTE[0]}/scale-"
SCALE_OBJECT_KEYS = f"/registry/kubernetes.m.crossplane.io/objects/{ROUTE[0]}/scale-"


def rollout_at_scale(env: Env, r: Report) -> None:
    """Issues #31 and #32: SCALE_ROUTES ModelRoutes on one gateway, then two Envoy rollouts, every
    XR's word watched as the API server publishes it (tests/real/timeline.py): one begun as soon as
    every route says True, while Crossplane is still writing their statuses, and one once they are
    at rest. In neither do status.serving or the RoutingReady condition, which Crossplane wrote
    back from its cache before the answer was conditional on the XR's version
    (crossplane/crossplane#7062), say True again while the gateway says it is not ready. In the
    second every route says False within SCALE_FOLLOW_BOUND_S of its gateway, as decided and as
    published, and within issue #31's goal (SCALE_P99_GOAL_S at the 99th percentile, decided), a
    gateway transition's; the first's follow times are recorded and printed. The prober judges
    every route's requests meanwhile."""
    backend = route_doc_one_backend()["spec"]["backends"]
    names = [f"scale-{i:03d}" for i in range(SCALE_ROUTES)]
    meter = _meter(env)
    # Every write of the routes' XRs and Objects from here on, by writer (etcd_history).
    recorder = Recorder(env.etcd_url, [SCALE_XR_KEYS, SCALE_OBJECT_KEYS])
    recorder.start()
    dns_late = len(env.dns.late()) if env.dns is not None else 0
    try:
        before = meter.read()
        for name in names:
            env.kube.apply(model_route_doc((ROUTE[0], name), f"scale/model-{name}", backend))
        waiting = Waiting(set(names))
        wait(
            f"{SCALE_ROUTES} routes RoutingReady",
            # One list a poll, not a read per route: the run's own load on the API server stays flat.
            lambda: waiting.see(env.kube.list(XR_API, "ModelRoute", ROUTE[0]), time.monotonic()),
            # Creation grows faster than N here (about 160 s per 100 routes at N=100, 350 at N=300).
            max(900, 6 * SCALE_ROUTES),
            interval=2,
        )
    except BaseException:
        # Its watches' threads would outlive the run's stack, and read its teardown as a broken watch;
        # the routes created so far would outlive the scenario.
        recorder.stop()
        for name in names:
            with contextlib.suppress(Exception):
                env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])
        raise
    created = meter.read()
    creation = between(
        "creation", before, created, SCALE_ROUTES, calls_made=meter.calls("ModelRoute", before.at, created.at)
    )
    r.notes.append(f"{SCALE_ROUTES} routes ready in {creation.seconds:.0f} s")
    r.notes.append(creation.summary())
    r.notes.append(waiting.summary())
    try:
        # Routes created in a burst turn True together, once their gateway's ext-proc configuration
        # is left alone (docs/design.md, "A young route also waits"), and each such turn is three
        # writes of the XR, each a reconcile: a rollout begun now meets them in flight. Judged for
        # truth, not for issue #31's goal or the bound: the forge's CI of ff3021a began it 10 s
        # after the last route turned True, and the first route decided False 5 s after its
        # gateway, p99 11 s, behind that queue on an API server at two cores.
        _, early, early_published, _ = _count_stale_truth(env, r, set(names), meter, "right after creation: ")
        rested = _wait_at_rest(env, meter, len(names))
        r.notes.append(f"at rest {rested:.0f} s after the routes were True again")
        rollout, follow, published, back = _count_stale_truth(env, r, set(names), meter, "at rest: ")
        r.notes.append(rollout.summary())
        writes = {
            "creation": _writes(recorder, r, creation, SCALE_ROUTES, "per route"),
            "rollout": _writes(
                recorder, r, rollout, SCALE_ROUTES * rollout.transitions, "per route per transition"
            ),
        }
        objects = sum(o["metadata"]["name"].startswith("scale-") for o in env.objects(ROUTE[0]).values())
        record = scale_record(
            SCALE_ROUTES,
            follow,
            back,
            creation,
            rollout,
            published=published,
            objects=objects,
            right_after_creation=(early, early_published),
            stored=writes,
        )
        SCALE_OUT.mkdir(parents=True, exist_ok=True)
        (SCALE_OUT / f"routes-{SCALE_ROUTES}.json").write_text(json.dumps(record, indent=2) + "\n")
        r.line = scale_line(record)
        # The gates come after the figures are written: make scale-curve fits them whatever N did.
        # The first rollout's follow is reported, not bounded: it is how long Crossplane's queue of
        # the routes' own status writes holds their reconciles (max 11 to 13 s in three runs, 21 s
        # in the fresh-clone CI of 945562f), not a gateway transition's cost.
        assert record["follow_s"]["max"] <= SCALE_FOLLOW_BOUND_S, r.line
        assert record["published_s"]["max"] <= SCALE_FOLLOW_BOUND_S, r.line
        assert record["follow_s"]["p99"] <= SCALE_P99_GOAL_S, (
            f"issue #31's goal: every route False within {SCALE_P99_GOAL_S:.0f} s (p99) of its gateway; "
            f"{r.line}"
        )
    finally:
        if env.dns is not None:
            # Queries lost for seconds can empty a backend's cluster in Envoy for 30 s while its route
            # says True (docs/design.md, Limitations): said beside the prober's lying seconds, pass or fail.
            r.notes.append(f"from creation on, the pods' {env.dns.summary(dns_late)}")
        recorder.stop()
        for name in names:
            env.kube.delete(XR_API, "ModelRoute", name, ROUTE[0])

        wait(
            "the scale routes gone",
            lambda: (
                not any(o["metadata"]["name"].startswith("scale-") for o in env.objects(ROUTE[0]).values())
            ),
            900,
            interval=2,
        )


def _writes(recorder: Recorder, r: Report, phase: Phase, n: int, per: str) -> dict[str, Any]:
    """Who wrote the scale routes' XRs and Objects in a phase (its etcd revisions), divided by n:
    noted in `r`, and returned for the scale record. A read that fails is said, not skipped."""
    found: dict[str, Any] = {}
    since, until = phase.revisions
    for kind, prefix in (("ModelRoute", SCALE_XR_KEYS), ("Object", SCALE_OBJECT_KEYS)):
        try:
            tally = recorder.tally(prefix, since, until)
        except (OSError, RuntimeError) as e:  # TimeoutError is an OSError
            r.notes.append(
                f"{phase.name}: {kind} writes by writer not read from etcd: {type(e).__name__}: {e}"
            )
            found[kind] = {"error": f"{type(e).__name__}: {e}"}
            continue
        r.notes.append(tally.summary(f"{phase.name}: the routes' {kind}s written", n, per))
        found[kind] = {"writes": round(tally.writes / n, 2), "by_writer": tally.per(n)}
    return found


def _meter(env: Env) -> Meter:
    """The stack's meters: each component's session, the API server's counters, the function's calls."""
    return Meter(
        lambda: {p.name: p.popen.pid for p in env.sup.processes if not p.name.startswith(POD_PROCESS_PREFIX)},
        lambda: env.kube.raw("/metrics"),
        env.sup.find("function").log,
        Etcd(env.etcd_url).revision,
    )


def _scale_watcher(env: Env) -> Watcher:
    """A watch of the gateway's and the routes' XRs, as the API server publishes them."""
    return Watcher(env.kube, [(XR_API, "InferenceGateway", GATEWAY[0]), (XR_API, "ModelRoute", ROUTE[0])])


def _wait_at_rest(env: Env, meter: Meter, routes: int) -> float:
    """Wait until the routes are at rest (costs.at_rest): how long that took."""
    watcher = _scale_watcher(env)
    began = time.time()
    watcher.start()

    def rested() -> bool:
        watcher.check()
        now = time.time()
        calls = meter.calls("ModelRoute", now - SCALE_REST_WINDOW_S, now)
        return at_rest(calls, watcher.last_event, now, routes, SCALE_REST_WINDOW_S)

    try:
        wait(
            f"no route or gateway written for {SCALE_REST_WINDOW_S:.0f} s and at most one call per "
            "five routes in it",
            rested,
            SCALE_REST_WAIT_S,
            interval=1,
        )
    finally:
        watcher.stop()
    return time.time() - began


def _count_stale_truth(
    env: Env, r: Report, names: set[str], meter: Meter, phase: str = ""
) -> tuple[Phase, list[float], list[float], float]:
    """Roll Envoy and watch every route through the gateway's outage; `phase` heads its notes.
    Returns the rollout's cost;
    how late each route followed its gateway by issue #31's measure (the function's decisions
    and the conditions' lastTransitionTime: costs.follow_times) and as published (each XR's word
    as a watch delivered it: timeline.outage); and the seconds from the gateway's return until
    every route said True again, as published."""
    gateway_xr = f"InferenceGateway {GATEWAY[0]}/{GATEWAY[1]}"
    routes = [f"ModelRoute {ROUTE[0]}/{n}" for n in sorted(names)]
    watcher = _scale_watcher(env)
    watcher.start()
    started = math.inf

    def through(by: Callable[[Seen], bool]) -> Outage | None:
        return outage(watcher.words(), gateway_xr, routes, started, until=time.time(), by=by)

    def over() -> bool:
        watcher.check()
        o = through(decided)
        # Settled: every route back, and the gateway ready for a while (a gateway that flaps back
        # for a moment is still rolling out).
        return o is not None and o.back < math.inf and time.time() - o.up >= SCALE_SETTLE_S

    try:
        wait("the watches' first word of every route", lambda: watcher.knows([gateway_xr, *routes]), 60)

        before = meter.read()
        # From when the rollout began: _restart_envoy first waits out any word the last one left.
        started = _restart_envoy(env)
        wait("the gateway not ready, ready again, and every route True again", over, 600, interval=0.5)
    finally:
        watcher.stop()
    watcher.check()
    gaps = [t for t in watcher.gaps if t >= started]
    assert not gaps, (
        f"a watch started afresh during the rollout (410 Gone): the words in between are lost {gaps}"
    )
    after = meter.read()
    rollout = between(
        "rollout",
        before,
        after,
        len(names),
        calls_made=meter.calls("ModelRoute", before.at, after.at),
        transitions=2,
    )
    # What the function itself decided, call by call (its --debug lines): a route it judged not
    # serving must not be judged serving again while it judges the gateway down. status.serving
    # is what Crossplane wrote of those decisions; it can come back older (below, named).
    calls_made = meter.answered()
    # The routes' published words are judged against the gateway's decisions: a route reads the
    # serving record, applied before the gateway's status, and can rightly say ready first.
    judge = [Seen(c.at, c.xr, c.ready, c.ready) for c in calls_made if c.xr == gateway_xr]
    published = outage(watcher.words(), gateway_xr, routes, started, until=after.at, by=decided, judge=judge)
    condition_said = outage(
        watcher.words(), gateway_xr, routes, started, until=after.at, by=lambda s: s.condition, judge=judge
    )
    assert published is not None, "the gateway's outage was seen"
    assert condition_said is not None, "the gateway's outage was seen"
    again, _, _ = decided_true_again(calls_made, gateway_xr, started)
    ours = sorted(x.rsplit("/", 1)[-1] for x in again if x.startswith("ModelRoute "))
    # Issue #31's measure: from the function's decision that the gateway is not ready to each
    # route's decision or its condition's lastTransitionTime. The published word comes after
    # Crossplane has applied the route's composed resources and written its status.
    stamps = first_false_stamps(watcher.words(), started)
    follow = follow_times(calls_made, gateway_xr, started, stamps, routes)
    r.notes.append(
        f"{phase}the function's calls: {len(ours)} routes decided True again after False"
        + (f" ({', '.join(ours[:5])})" if ours else "")
        + f", each decided not ready (or its condition stamped so) {_spread(follow)} after the gateway was"
        + f"; as published (status.serving): {_outage_summary(published)}"
        + "; the RoutingReady condition (written back by Crossplane before #32, #7062): "
        + _outage_summary(condition_said)
    )
    assert not ours, r.notes[-1]
    # Issue #32: a "condition changed" line only where the function changed its decision, and
    # none of a gateway not found while it exists (what a call before Crossplane fetched it once
    # logged, 4,412 of 5,713 lines at 100 routes).
    transitions = meter.transitions()
    lines = [t for t in transitions if t.xr in routes and before.at <= t.at < after.at]
    noisy = noisy_transitions(
        calls_made, [t for t in transitions if t.xr in routes], "ModelRoute", before.at, after.at
    )
    not_found = [t for t in lines if "(GatewayNotFound)" in t.condition]
    r.notes.append(
        f"{phase}'condition changed' lines {len(lines)} for {len(routes)} routes through the rollout "
        f"({len(lines) / len(routes) / 2:.1f} per route per transition), "
        f"{len(noisy)} saying no change, {len(not_found)} of a gateway not found"
    )
    # Every route went False and back: fewer lines than routes means the lines were not read.
    assert len(lines) >= len(routes), r.notes[-1]
    assert not noisy, f"{r.notes[-1]}: {noisy[:3]}"
    assert not not_found, f"{r.notes[-1]}: {not_found[:3]}"
    # Issue #32: with the answer conditional on the XR's version, Crossplane can no longer write
    # an older decision or condition back over a newer one: neither may say True again.
    assert not published.true_again, r.notes[-1]
    assert not condition_said.true_again, r.notes[-1]
    return rollout, follow, published.follow, published.back


def decided(word: Seen) -> bool:
    return word.decided


def _spread(seconds: list[float]) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in spread(seconds).items()) if seconds else "-"


def _outage_summary(o: Outage) -> str:
    turned = sum(f < math.inf for f in o.follow)
    again = [x.rsplit("/", 1)[-1] for x in o.true_again]
    return (
        f"{turned} of {len(o.follow)} turned False ({_spread(o.follow)} after the gateway), "
        f"{o.route_seconds:.0f} route-seconds True meanwhile, {len(again)} True again after False"
        + (f" ({', '.join(again[:5])})" if again else "")
    )
