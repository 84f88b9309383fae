"""Integration scenarios of caller auth: requests with and without a key, a missing key Secret, refused coverage."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.real.harness import (
    GATEWAY,
    ROUTE,
    XR_API,
    Env,
    Report,
    accepted_conditions,
    gateway_follows,
    route_doc,
    true,
)
from tests.real.kube import condition, wait
from tests.real.prober import chat


def _set_auth(env: Env, api_keys: dict[str, Any] | None) -> None:
    # A gateway change reaches its routes through Crossplane (the route's
    # gateway observer, then a reconcile): requests see Envoy's new
    # configuration up to a second before RoutingReady can follow, as after
    # any change a route cannot know of beforehand. Detection, not a lie.
    env.prober.fault()
    # A merge patch: Crossplane's own updates of the XR co-own its spec
    # fields, so leaving a field out of a server-side apply would not remove it.
    env.kube.merge_patch(
        XR_API, "InferenceGateway", GATEWAY[1], GATEWAY[0], {"spec": {"auth": {"apiKeys": api_keys}}}
    )


def _narrowed_coverage_refused(env: Env, r: Report) -> None:
    """routeNamespaces narrower than All: the API server refuses it (the XRD's rule), and
    nothing changes: the Gateway's SecurityPolicy stays, the route still needs a key (issue #23)."""
    sp = ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy")
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in env.kube.list(*sp, GATEWAY[0])}
    for covers in ({"from": "Same"}, {"from": "Names", "names": [ROUTE[0]]}):
        refusal: ApiException | None = None
        try:
            _set_auth(env, {"secretRefs": [{"name": "client-keys"}], "routeNamespaces": covers})
        except ApiException as e:
            refusal = e
        assert refusal is not None, f"the API server took routeNamespaces {covers}"
        assert refusal.status == 422, (refusal.status, refusal.body)
        assert "only from All" in str(refusal.body), refusal.body
    time.sleep(3)
    assert not env.kube.list(*sp, ROUTE[0]), "a SecurityPolicy appeared in the route's namespace"
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in env.kube.list(*sp, GATEWAY[0])}
    assert after == before, (before, after)
    assert ((env.route() or {}).get("status") or {}).get("callerAuth", {}).get("required") is True
    r.notes.append("routeNamespaces Same and Names refused by the API server; the Gateway's policy kept")


def _no_key_no_model(env: Env, r: Report) -> None:
    """Issue #23's requests through the real Envoy pods: no key or a wrong one never reaches a model,
    whatever x-ai-eg-model the client sends (none, the body's model, another gateway's, the anchor's
    header); the right key does."""
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    model = route_doc()["spec"]["model"]
    answers: dict[tuple[str, str], int] = {}
    for key_label, key in (
        ("no key", None),
        ("wrong key", "Bearer not-a-key"),
        ("right key", "Bearer client-key-1"),
    ):
        for header_label, extra in (
            ("no model header", {}),
            ("the body's model", {"x-ai-eg-model": model}),
            ("another gateway's model", {"x-ai-eg-model": "mistral-7b"}),
            ("an unknown model", {"x-ai-eg-model": "no-such-model"}),
            ("the anchor's header", {"x-gateway-readiness-anchor": "anything"}),
        ):
            headers = dict(extra) | ({"authorization": key} if key else {})
            answers[key_label, header_label] = chat(port, model, headers).status
    leaks = {k: v for k, v in answers.items() if k[0] != "right key" and 200 <= v < 300}
    assert not leaks, f"answered without a valid key: {leaks}"
    served = [k[1] for k, v in answers.items() if k[0] == "right key" and v == 200]
    assert "no model header" in served, answers
    r.notes.append(
        f"{sum(1 for k in answers if k[0] != 'right key')} keyless or wrong-key requests refused "
        f"({sorted({v for k, v in answers.items() if k[0] != 'right key'})}), "
        f"right key served with {', '.join(served)}"
    )


def caller_auth(env: Env, r: Report) -> None:
    """Caller auth whose key Secret is missing: GatewayReady False (AuthNotAccepted) on Envoy Gateway's own
    verdict; the Secret created: True again; coverage narrower than All refused, nothing changed;
    auth turned off: the SecurityPolicy goes."""
    _set_auth(env, {"secretRefs": [{"name": "client-keys"}]})
    gateway_follows(env, r, "AuthNotAccepted")
    # GatewayReady says AuthNotAccepted on the call that composes the policy,
    # before provider-kubernetes has created it.
    policies = wait(
        f"one SecurityPolicy in {GATEWAY[0]}, with Envoy Gateway's verdict",
        lambda: (
            (found := env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0]))
            and len(found) == 1
            and accepted_conditions(found[0])
            and found
        ),
        60,
    )
    refused = accepted_conditions(policies[0])
    r.notes.append(
        "without the Secret Envoy Gateway says "
        + (", ".join(f"Accepted={c['status']} ({c.get('reason')})" for c in refused) or "nothing yet")
    )
    # The prober sends this key wherever a route says a key is needed.
    env.keys = {"authorization": "client-key-1"}
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "client-keys", "namespace": GATEWAY[0]},
            "stringData": {"team-a": "client-key-1"},
        }
    )
    assert true(gateway_follows(env, r, "Available"), "GatewayReady")
    _no_key_no_model(env, r)
    _narrowed_coverage_refused(env, r)
    port, model = env.plane.gateway_port(GATEWAY[0], GATEWAY[1]), route_doc()["spec"]["model"]
    _set_auth(env, None)
    off = time.monotonic()
    # Keys stay checked until the route tells its callers auth was removed (AUTH_REMOVAL_HOLD): the
    # CI of 6b5b602 saw a keyless request served while the route still said a key was needed.
    wait(
        "the route telling its callers auth was removed",
        lambda: (((env.route() or {}).get("status") or {}).get("callerAuth") or {}).get("removedAt"),
        60,
    )
    told = time.monotonic() - off
    kept = [
        p
        for p in env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0])
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert kept, (
        f"the SecurityPolicy was deleted before the route said removedAt ({told:.0f} s after auth off)"
    )
    assert chat(port, model).status == 401, "a keyless request served while the policy is kept"
    wait(
        "the SecurityPolicy deleted with auth off",
        lambda: not env.kube.list("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", GATEWAY[0]),
        120,
    )
    gone = time.monotonic() - off
    wait(
        "the SecurityPolicy's Object gone",
        lambda: (
            not any(
                o["metadata"].get("annotations", {}).get("crossplane.io/composition-resource-name")
                == "security-policy"
                and o["metadata"].get("labels", {}).get("crossplane.io/composite") == GATEWAY[1]
                for o in env.objects(GATEWAY[0]).values()
            )
        ),
        60,
    )
    wait("a keyless request served once Envoy drops the check", lambda: chat(port, model).ok, 60)
    served = time.monotonic() - off
    # And the scenario ends settled: no caller told to send a key (AUTH_REMOVAL_BOUND after the
    # hold), so the next scenario's gateway and route see no change of ours in flight.
    wait(
        "callers no longer told to send a key",
        lambda: (
            not (((env.gateway() or {}).get("status") or {}).get("gateway") or {}).get("callerAuth")
            and (((env.route() or {}).get("status") or {}).get("callerAuth") or {}).get("required") is False
        ),
        90,
    )
    r.notes.append(
        f"auth turned off: the route said removedAt after {told:.0f} s, keyless refused until then; "
        f"the SecurityPolicy deleted after {gone:.0f} s, keyless served after {served:.0f} s, "
        f"no key asked for after {time.monotonic() - off:.0f} s"
    )
    assert true(env.gateway(), "GatewayReady"), condition(env.gateway(), "GatewayReady")
