"""Integration scenarios of caller auth: requests with and without a key, a missing key Secret, refused coverage."""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any

from kubernetes.client.exceptions import ApiException

from function import naming
from function.gateway.verdict import AUTH_REMOVAL_BOUND, AUTH_REMOVAL_HOLD
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
    # By the name the function gives it (a label and annotation it once looked for matched nothing).
    wait("the SecurityPolicy's Object gone", lambda: _policy_object(env) is None, 60)
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


SECURITY_POLICY_API = "gateway.envoyproxy.io/v1alpha1"


def _told(xr: dict[str, Any] | None, path: str) -> dict[str, Any]:
    """The callerAuth an XR publishes: a gateway's at status.gateway, a route's at status."""
    status = (xr or {}).get("status") or {}
    return ((status.get("gateway") or {}) if path == "gateway" else status).get("callerAuth") or {}


def _policy_object(env: Env) -> dict[str, Any] | None:
    """The gateway's SecurityPolicy Object, by the name the function gives it."""
    name = naming.unique_name(GATEWAY[1], "security-policy", identity=("InferenceGateway",))
    return env.objects(GATEWAY[0]).get(name)


def auth_removal_stuck(env: Env, r: Report) -> None:
    """Caller auth turned off with provider-kubernetes hung from before the hold ends: Crossplane
    deletes the SecurityPolicy's Object, its finalizer holds it, the policy stays and Envoy goes on
    checking keys. Callers must be told to send one until the policy is gone and Envoy has dropped
    the check: the prober sends requests as the routes say (keyless once no key is asked for) and
    counts every refused one against RoutingReady. Before the Object was required by name, the
    gateway stopped asking for a key AUTH_REMOVAL_HOLD + AUTH_REMOVAL_BOUND after auth went off,
    whatever was still there (found in review)."""
    _auth_removal_stuck(env, r, refused=False)


def auth_removal_refused_stuck(env: Env, r: Report) -> None:
    """The same with a policy Envoy Gateway refused (its key Secret missing): Envoy answers every
    request 500 until the policy's deletion reaches it, so GatewayReady must stay AuthNotAccepted
    until then, and every route False. Before, once the policy left the desired state Crossplane
    observed it no more and GatewayReady said True while the 500s went on (found in review)."""
    _auth_removal_stuck(env, r, refused=True)


def _auth_removal_stuck(env: Env, r: Report, *, refused: bool) -> None:
    # Refused: the keys' Secret missing, so Envoy Gateway refuses the policy (a 500 for every request).
    secret = "client-keys-missing" if refused else "client-keys"
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "client-keys", "namespace": GATEWAY[0]},
            "stringData": {"team-a": "client-key-1"},
        }
    )
    env.keys = {"authorization": "client-key-1"}
    _set_auth(env, {"secretRefs": [{"name": secret}]})
    verdict = "AuthNotAccepted" if refused else "Available"
    wait(
        f"the route telling its callers to send a key, its gateway {verdict}",
        lambda: (
            _told(env.route(), "route").get("required") is True
            and not _told(env.route(), "route").get("removedAt")
            and condition(env.gateway(), "GatewayReady").get("reason") == verdict
        ),
        120,
    )
    r.fault = True
    port, model = env.plane.gateway_port(GATEWAY[0], GATEWAY[1]), route_doc()["spec"]["model"]
    provider = env.sup.find("provider-kubernetes")
    policy_object = _policy_object(env)
    assert policy_object is not None, "no SecurityPolicy Object with caller auth on"
    # Every other Object, by its UID: turning auth off takes the policy's only.
    before = {
        (ns, name): o["metadata"]["uid"]
        for ns in (GATEWAY[0], ROUTE[0])
        for name, o in env.objects(ns).items()
        if name != policy_object["metadata"]["name"]
    }
    _set_auth(env, None)
    off = time.monotonic()
    # Hung before the hold ends, so nothing deletes the policy once its Object is deleted.
    time.sleep(AUTH_REMOVAL_HOLD.total_seconds() - 5)
    env.sup.hang(provider)
    try:
        try:
            deleting = wait(
                "Crossplane deleting the SecurityPolicy's Object, its finalizer holding it",
                lambda: (o := _policy_object(env)) and o["metadata"].get("deletionTimestamp") and o,
                30,
            )
        except TimeoutError as e:
            found = _policy_object(env)
            raise TimeoutError(f"{e}; the Object: {found and found['metadata']}") from None
        # Well past where the gateway used to stop asking for a key.
        past = (AUTH_REMOVAL_HOLD + AUTH_REMOVAL_BOUND).total_seconds() + 10
        time.sleep(max(0.0, past - (time.monotonic() - off)))
        assert env.kube.list(SECURITY_POLICY_API, "SecurityPolicy", GATEWAY[0]), "the policy went"
        answered = chat(port, model).status
        # A refused policy answers every request 500 (Envoy Gateway's direct response), and the
        # gateway must say so; an accepted one refuses a keyless request 401.
        expected = HTTPStatus.INTERNAL_SERVER_ERROR if refused else HTTPStatus.UNAUTHORIZED
        assert answered == expected, f"a keyless request answered {answered} while the policy is there"
        said = condition(env.gateway(), "GatewayReady")
        assert said.get("reason") == verdict, said
        gateway_told = _told(env.gateway(), "gateway")
        assert gateway_told.get("header") == "authorization", gateway_told
        assert gateway_told.get("policyDeleting") is True, gateway_told
        assert _told(env.route(), "route").get("required") is True, _told(env.route(), "route")
        stuck = time.monotonic() - off
    finally:
        env.sup.resume(provider)
    resumed = time.time()
    wait("the SecurityPolicy's Object gone", lambda: _policy_object(env) is None, 60)
    gone = time.monotonic() - off
    gone_at = wait(
        "the gateway remembering when it found the Object gone",
        lambda: _told(env.gateway(), "gateway").get("policyGoneAt"),
        30,
    )

    def keyless_served() -> bool:
        # Read before the request: told no key is needed while one is still refused is the lie.
        still_told = _told(env.route(), "route").get("required") is True
        served = chat(port, model).ok
        assert served or still_told, "the route said no key was needed while a keyless request was refused"
        return served

    wait("a keyless request served once Envoy drops the check", keyless_served, 60)
    served = time.monotonic() - off
    wait(
        "callers no longer told to send a key",
        lambda: not _told(env.gateway(), "gateway") and _told(env.route(), "route").get("required") is False,
        90,
    )
    untold = time.monotonic() - off
    # With callers told nothing, nothing holds the gateway: a refused policy's 500s are over.
    wait(
        "GatewayReady Available",
        lambda: condition(env.gateway(), "GatewayReady").get("reason") == "Available",
        30,
    )
    # Told for the bound after the Object went (a second's slack: the stamp is whole seconds).
    assert untold - gone >= AUTH_REMOVAL_BOUND.total_seconds() - 1, (
        f"callers told no key is needed {untold - gone:.0f} s after the Object went"
    )
    # The truth after provider-kubernetes' return: no key needed, and callers told so.
    r.recovery = time.time() - resumed
    after = {
        (ns, n): o["metadata"]["uid"] for ns in (GATEWAY[0], ROUTE[0]) for n, o in env.objects(ns).items()
    }
    lost = sorted(k for k, uid in before.items() if after.get(k) != uid)
    r.lost = len(lost)
    assert not lost, f"Objects lost or re-created: {lost}"
    r.notes.append(
        f"auth turned off, the policy {'refused' if refused else 'accepted'}, provider-kubernetes hung from "
        f"{AUTH_REMOVAL_HOLD.total_seconds() - 5:.0f} s: the Object deleted at "
        f"{deleting['metadata']['deletionTimestamp']} and held; at {stuck:.0f} s the policy still there, "
        f"keyless answered {answered}, GatewayReady {verdict}, callers still told to send a key "
        "(policyDeleting); resumed: "
        f"the Object gone at {gone:.0f} s (policyGoneAt {gone_at}), keyless served at {served:.0f} s, "
        f"no key asked for at {untold:.0f} s"
    )
