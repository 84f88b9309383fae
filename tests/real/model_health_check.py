"""What Envoy's active HTTP health check can tell of a model server's /v1/models (issue #30 item 3).

Envoy Gateway's BackendTrafficPolicy `healthCheck.active.http.expectedResponse`
becomes one `HttpHealthCheck.receive` payload (`internal/xds/translator/cluster.go`,
v1.8.3, which sets no `response_buffer_size`). Whether it could stop a model's
requests going to a server that does not list the model rests on what Envoy
matches, and in how many bytes; docs/api.md ("Envoy's own active health check,
considered and not built") says so from these checks, run on PyPI's Envoy:

- the expected text is found when it ends within the first 1024 bytes of
  the body (at byte 1024, yes; at 1025, no);
- it is a substring: quoted (`"id":"<model>"`) it tells a model from one whose
  name it begins, and a body written with spaces (`"id": "<model>"`) fails it;
- with every host of a cluster failing, Envoy sends to them anyway (panic
  routing); with a healthy lower priority, that level takes the requests.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.real.processes import Supervisor, free_port, port_open

MODEL = "qwen-32b"
# What the check would expect: the model's id, quoted, as compact JSON writes it.
EXPECTED = f'"id":"{MODEL}"'
# Envoy's default response_buffer_size, which Envoy Gateway leaves as it is.
BUFFER = 1024


def models_body(models: list[str], *, compact: bool = True, ends_at: int | None = None) -> bytes:
    """A /v1/models body as vLLM writes it: each model with its permission block (about 440 bytes).

    ends_at: the last model's id padded (a field before its list) so that EXPECTED ends at that byte.
    """
    data = [
        {
            "id": m,
            "object": "model",
            "created": 1733000000,
            "owned_by": "vllm",
            "root": m,
            "parent": None,
            "max_model_len": 32768,
            "permission": [
                {
                    "id": "modelperm-0123456789abcdef0123456789abcdef",
                    "object": "model_permission",
                    "created": 1733000000,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for m in models
    ]
    body: dict[str, Any] = {"object": "list", "data": data}
    if ends_at is not None:
        unpadded = models_body(models, compact=compact)
        pad = ends_at - (unpadded.find(EXPECTED.encode()) + len(EXPECTED)) - len(',"padding":""')
        body = {"object": "list", "padding": "p" * pad, "data": data}
    return (json.dumps(body, separators=(",", ":")) if compact else json.dumps(body)).encode()


# name -> (the body its server answers, whether Envoy should call the host healthy)
SERVERS: dict[str, tuple[bytes, bool]] = {
    "first": (models_body([MODEL]), True),
    "within-1024-bytes": (models_body(["llama-8b", "mistral-7b", MODEL]), True),
    "ending-at-byte-1024": (models_body(["llama-8b", "mistral-7b", MODEL], ends_at=BUFFER), True),
    "ending-at-byte-1025": (models_body(["llama-8b", "mistral-7b", MODEL], ends_at=BUFFER + 1), False),
    "past-1024-bytes": (models_body(["llama-8b", "mistral-7b", "phi-3", MODEL]), False),
    "a-longer-name": (models_body([f"{MODEL}-instruct"]), False),
    "written-with-spaces": (models_body([MODEL], compact=False), False),
    "another-model": (models_body(["mistral-7b"]), False),
}


def _fixtures_mean_what_they_say() -> None:
    """The bodies sit where their names say: a match ending within the buffer, one starting past it."""
    within = SERVERS["within-1024-bytes"][0].find(EXPECTED.encode())
    past = SERVERS["past-1024-bytes"][0].find(EXPECTED.encode())
    ends = {
        name: SERVERS[name][0].find(EXPECTED.encode()) + len(EXPECTED)
        for name in ("ending-at-byte-1024", "ending-at-byte-1025")
    }
    if ends != {"ending-at-byte-1024": BUFFER, "ending-at-byte-1025": BUFFER + 1}:
        raise AssertionError(f"fixtures moved: the boundary matches end at {ends}")
    if not (within > 0 and within + len(EXPECTED) <= BUFFER < past):
        raise AssertionError(
            f"fixtures moved: the match ends at {within + len(EXPECTED)}, the late one starts at {past}"
        )


@contextmanager
def _servers() -> Iterator[dict[str, int]]:
    running = []
    ports = {}
    for name, (body, _) in SERVERS.items():

        class Handler(http.server.BaseHTTPRequestHandler):
            answer = body

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(self.answer)))
                self.end_headers()
                self.wfile.write(self.answer)

            def log_message(self, *_args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running.append(server)
        ports[name] = server.server_address[1]
    try:
        yield ports
    finally:
        for server in running:
            server.shutdown()
            server.server_close()


def _cluster(name: str, ports: list[int]) -> dict[str, Any]:
    """A cluster with the check Envoy Gateway would configure; ports[i] at priority i."""
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "health_checks": [
            {
                # Generous: a slow answer must not pass for a body that did not match.
                "timeout": "5s",
                "interval": "0.5s",
                # Checked again and again before any traffic (Envoy's default waits 60 s).
                "no_traffic_interval": "0.5s",
                "unhealthy_threshold": 1,
                "healthy_threshold": 1,
                "http_health_check": {
                    "path": "/v1/models",
                    "host": "backend",
                    # Envoy's Payload.text is hex, as Envoy Gateway writes its Text payload.
                    "receive": [{"text": EXPECTED.encode().hex()}],
                },
            }
        ],
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "priority": i,
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}
                            }
                        }
                    ],
                }
                for i, p in enumerate(ports)
            ],
        },
    }


def _config(ports: dict[str, int], admin: int, listener: int) -> dict[str, Any]:
    routes = [
        # One backend, without the model: every host fails its check.
        ("alone", [ports["another-model"]]),
        # The same, with a fallback level that lists it.
        ("with-a-fallback", [ports["another-model"], ports["first"]]),
    ]
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "clusters": [_cluster(name, [port]) for name, port in ports.items()]
            + [_cluster(name, hosts) for name, hosts in routes],
            "listeners": [
                {
                    "name": "models",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listener}},
                    "filter_chains": [{"filters": [_routing(name for name, _ in routes)]}],
                }
            ],
        },
    }


def _routing(clusters: Iterable[str]) -> dict[str, Any]:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
            ".HttpConnectionManager",
            "stat_prefix": "models",
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": "all",
                        "domains": ["*"],
                        "routes": [
                            {
                                "match": {"prefix": f"/{name}"},
                                "route": {"cluster": name, "prefix_rewrite": "/v1/models"},
                            }
                            for name in clusters
                        ],
                    }
                ]
            },
            "http_filters": [
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                    },
                }
            ],
        },
    }


def _health(admin: int) -> dict[str, bool]:
    """cluster -> whether its first host is healthy, from Envoy's admin /clusters."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/clusters", timeout=2) as answer:
        lines = answer.read().decode().splitlines()
    flags = {}
    for line in lines:
        parts = line.split("::")
        if len(parts) == 4 and parts[2] == "health_flags":
            flags.setdefault(parts[0], parts[3] == "healthy")
    return flags


def _answered_by(listener: int, route: str) -> list[str]:
    """The models the server that answered lists; an HTTP error as its status."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{listener}/{route}", timeout=5) as answer:
            return [m["id"] for m in json.loads(answer.read())["data"]]
    except urllib.error.HTTPError as e:
        return [f"HTTP {e.code}"]


def _network_failures(admin: int) -> dict[str, int]:
    """cluster -> health checks that failed to connect or time out: each must be a body judged."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{admin}/stats?filter=health_check.network_failure", timeout=2
    ) as answer:
        lines = answer.read().decode().splitlines()
    found = {}
    for line in lines:
        key, _, value = line.partition(": ")
        if key.startswith("cluster.") and key.endswith(".health_check.network_failure"):
            found[key.removeprefix("cluster.").removesuffix(".health_check.network_failure")] = int(value)
    return found


def model_health_check(envoy: Path, root: Path) -> str:
    """Envoy's active health check against model servers' /v1/models bodies; what it tells apart."""
    _fixtures_mean_what_they_say()
    want = {name: healthy for name, (_, healthy) in SERVERS.items()}
    root.mkdir(parents=True, exist_ok=True)
    admin, listener = free_port(), free_port()
    with _servers() as ports:
        path = root / "envoy-model-health-check.yaml"
        path.write_text(yaml.safe_dump(_config(ports, admin, listener)))
        sup = Supervisor(root / "logs")
        proc = sup.start(
            "envoy-model-health-check", [str(envoy), "-c", str(path), "--disable-hot-restart", "-l", "error"]
        )
        try:
            sup.wait_until(proc, "Envoy listening", lambda: port_open(listener), timeout=30)
            # Each host is checked once at start (then every no_traffic_interval, 60 s, until it
            # sees traffic): read until every host has its verdict, or the deadline.
            deadline = time.monotonic() + 15
            got = {name: _health(admin).get(name) for name in SERVERS}
            while got != want and time.monotonic() < deadline:
                time.sleep(0.5)
                got = {name: _health(admin).get(name) for name in SERVERS}
            alone = _answered_by(listener, "alone")
            fallback = _answered_by(listener, "with-a-fallback")
            failures = _network_failures(admin)
            unreached = {name: failures.get(name, "no count") for name in SERVERS if failures.get(name) != 0}
        finally:
            sup.stop_all()
    if unreached:
        raise AssertionError(f"health checks that reached no body (connect or timeout): {unreached}")
    if got != want:
        raise AssertionError(f"Envoy's health check said {got}, want {want}")
    if alone != ["mistral-7b"] or fallback != [MODEL]:
        raise AssertionError(
            f"requests went to {alone} with every host failing (want the failing one: panic routing) "
            f"and to {fallback} with a healthy fallback (want {MODEL})"
        )
    return (
        f"Envoy's health check finds {EXPECTED} ending at byte {BUFFER} of the body and not at {BUFFER + 1}, "
        "tells a longer name apart, fails a body written with spaces; a cluster whose every host fails "
        "is sent to anyway (panic), a fallback level takes the rest"
    )
