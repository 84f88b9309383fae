"""Fake model servers for the traffic check: they answer like a provider and record what reached them.

Each server is one provider's wire format: OpenAI's chat completions (also
Azure OpenAI's, under `/openai/deployments/<deployment>/`) and Anthropic's
messages. Every request is recorded (path, headers, the model named in the
body), so the check can say which backend a request reached, with which
credentials and which model name. Each answer names its server, so the
client side can tell too.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-request (Envoy draining, a prober timing out) is no error of the backend's.

    The standard server prints a traceback for each; only other errors are printed.
    """

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]  # lower-cased names
    model: str | None
    body_bytes: int


@dataclass
class Upstream:
    """One fake provider on 127.0.0.1: `kind` is `openai` (OpenAI and Azure paths) or `anthropic`."""

    name: str
    kind: str
    # Where it listens: loopback on a free port unless a check needs it elsewhere
    # (the data plane's pods reach it at a host address, on the port the
    # ModelRoute names).
    host: str = "127.0.0.1"
    bind_port: int = 0
    seen: list[Seen] = field(default_factory=list)
    # While True, answers 503 as a server with no ready replica behind its Service would fail.
    down: bool = False
    # While set, answers every request, its model list's too, with this code: a server up and failing
    # (an engine crashed behind its HTTP front).
    failing: int | None = None
    # What the server has loaded, as a self-hosted server (vLLM) lists it at GET /v1/models and
    # refuses any other model (404 "The model ... does not exist"); None: it answers any model
    # and lists none.
    models: list[str] | None = None
    # Seconds every answer waits (a slowed server: a long prompt queue, a GPU shared).
    delay_s: float = 0.0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Connections open now (Envoy keeps them alive): a killed server's are reset with it.
    _open: set[socket.socket] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> Upstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with upstream._lock:
                    upstream._open.add(self.connection)

            def finish(self) -> None:
                with upstream._lock:
                    upstream._open.discard(self.connection)
                super().finish()

            def log_message(self, *_: Any) -> None:  # quiet: the checks read `seen`
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                model = body.get("model") if isinstance(body, dict) else None
                time.sleep(upstream.delay_s)
                if upstream.failing is not None:
                    self._answer(upstream.failing, {"error": {"message": f"{upstream.name} is failing"}})
                    return
                if upstream.down:
                    self._answer(503, {"error": {"message": f"{upstream.name} has no ready replica"}})
                    return
                loaded = upstream.models
                if loaded is not None and model not in loaded:
                    self._answer(
                        404, {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
                    )
                    return
                with upstream._lock:
                    upstream.seen.append(
                        Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, model, len(raw))
                    )
                self._answer(200, upstream.answer(model))

            def do_GET(self) -> None:
                time.sleep(upstream.delay_s)
                if upstream.failing is not None:
                    self._answer(upstream.failing, {"error": {"message": f"{upstream.name} is failing"}})
                    return
                loaded = upstream.models
                if self.path == "/v1/models" and loaded is not None:
                    self._answer(
                        200, {"object": "list", "data": [{"id": m, "object": "model"} for m in loaded]}
                    )
                    return
                self._answer(404, {"error": {"message": f"{upstream.name} serves no GET"}})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _QuietServer((self.host, self.bind_port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kill(self) -> None:
        """The server's process gone: its open connections reset, its port refusing connections
        until `revive`."""
        self.bind_port = self.port
        self.stop()
        self._server = None
        with self._lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                # Linger 0: what still arrives is answered with a reset, as for a killed process's
                # sockets; shutdown acts on the socket now (close waits for the handler's files).
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def revive(self) -> None:
        """Started again on the port it had."""
        self.start()

    def answer(self, model: str | None) -> dict[str, Any]:
        text = f"answered by {self.name}"
        if self.kind == "anthropic":
            return {
                "id": "msg_0",
                "type": "message",
                "role": "assistant",
                "model": model or "unknown",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 4},
            }
        return {
            "id": "chatcmpl-0",
            "object": "chat.completion",
            "created": 0,
            "model": model or "unknown",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }

    def count(self) -> int:
        with self._lock:
            return len(self.seen)
