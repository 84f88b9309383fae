"""provider-http: the observe-only `Request`s of the function's model checks, polled.

Written from provider-http v1.0.14's source (its observe path, read for issue
#30), not from function/model_check.py, so the simulation can disagree with
the function's reading of it:

- every `--poll` it GETs each Request's URL (the OBSERVE mapping's url, a jq
  expression the function points at `.payload.baseUrl`), Observe-only too;
- a 2xx answer writes the status code, the body and the URL asked, resets
  `failed` and `error`, stamps `cache.lastUpdated` (so the Request changes on
  every poll, and wakes its XR), and says Ready and Synced;
- a connection refused keeps the last code and body, sets `error`, counts
  `failed` up, and turns Synced False (Ready stays as it was);
- a non-2xx first answer, or a 404 after answers, leaves the status as it was
  but for Synced False: the Request "does not exist";
- any other non-2xx after answers overwrites the code and body; Synced stays True.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.sim.world import Key, World

# examples/install/provider-http.yaml runs it with --poll=10s.
POLL_SECONDS = 10
NOT_FOUND = 404
# crossplane-runtime's managed reconciler, for an observe-only resource that does not exist.
DOES_NOT_EXIST = "cannot observe external resource: external resource does not exist"


def _condition(typ: str, ok: bool, reason: str, message: str = "") -> dict[str, Any]:
    out = {"type": typ, "status": "True" if ok else "False", "reason": reason}
    if message:
        out["message"] = message
    return out


def _with(status: dict[str, Any], *conditions: dict[str, Any]) -> dict[str, Any]:
    kept = [c for c in status.get("conditions", []) if c["type"] not in {c["type"] for c in conditions}]
    return {**status, "conditions": sorted([*kept, *conditions], key=lambda c: c["type"])}


def observe(status: dict[str, Any], url: str, answer: tuple[int, str] | None, now: int) -> dict[str, Any]:
    """The status after one poll of `url` that got `answer` (None: connection refused)."""
    answered = "response" in status
    if answer is None:
        out = {**status, "error": f'Get "{url}": dial tcp: connect: connection refused'}
        out["failed"] = int(status.get("failed", 0)) + 1
        return _with(out, _condition("Synced", False, "ReconcileError", f"observe failed: {out['error']}"))
    code, body = answer
    if 200 <= code < 300:
        out = {
            **{k: v for k, v in status.items() if k not in ("error", "failed")},
            "response": {"statusCode": code, "body": body},
            "requestDetails": {"url": url, "method": "GET"},
            "cache": {"lastUpdated": now},
        }
        return _with(
            out, _condition("Ready", True, "Available"), _condition("Synced", True, "ReconcileSuccess")
        )
    if not answered or code == NOT_FOUND:
        return _with(status, _condition("Synced", False, "ReconcileError", DOES_NOT_EXIST))
    out = {
        **status,
        "response": {"statusCode": code, "body": body},
        "requestDetails": {"url": url, "method": "GET"},
    }
    return _with(out, _condition("Synced", True, "ReconcileSuccess"))


class ProviderHTTP:
    """Polls every Request in the world; `changed` holds the Requests whose status it changed."""

    def __init__(self, world: World, poll_seconds: int = POLL_SECONDS) -> None:
        self.world = world
        self.poll_seconds = poll_seconds
        self.next_poll: dict[Key, int] = {}
        self.changed: set[Key] = set()

    def step(self) -> None:
        now = self.world.now
        for key, obj in sorted(self.world.objects.items()):
            if key[0] != "Request" or now < self.next_poll.get(key, now):
                continue
            self.next_poll[key] = now + self.poll_seconds
            url = str(obj["spec"]["forProvider"]["payload"]["baseUrl"])
            status = observe(copy.deepcopy(obj.get("status") or {}), url, self.world.get_url(url), now)
            if status != obj.get("status"):
                self.world.objects[key] = {**obj, "status": status}
                self.changed.add(key)
        for key in [k for k in self.next_poll if k not in self.world.objects]:
            del self.next_poll[key]
