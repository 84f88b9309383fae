"""The anchor: a backend-free AIGatewayRoute that keeps the ext-proc sidecar on the gateway.

Without it, removing the last model route makes Envoy AI Gateway roll the
Envoy pods to drop the ext-proc, and the next model route is served by
sidecar-less pods (HTTP 500) until a second rollout finishes. It matches one
exact header that is not the model header, so it never appears in
`/v1/models`, and a value no client sends.
"""

from __future__ import annotations

from typing import Any

from function.gateway.plan import GatewayPlan
from function.objects import gateway_ref, target_ref
from function.upstream import MODEL_HEADER


def build_anchor(plan: GatewayPlan) -> dict[str, Any]:
    header = plan.inp.anchor.header_name
    if header == MODEL_HEADER:  # Input validation forbids it; never list the anchor.
        raise ValueError(f"anchor header must not be {MODEL_HEADER}")
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "AIGatewayRoute",
        plan.anchor_name,
        plan.namespace,
    )
    listeners = plan.spec.listeners
    manifest["spec"] = {
        # Every listener, but one that redirects to HTTPS: there the catch-all 404
        # rule Envoy AI Gateway adds to the anchor's HTTPRoute would tie with the
        # redirect's, and the older route (the anchor) wins a tie.
        "parentRefs": [gateway_ref(plan.gateway_name)]
        if not plan.spec.redirecting
        else [gateway_ref(plan.gateway_name, section=it.name) for it in listeners if not it.https_redirect],
        # One rule with a header match (a rule without matches would become a
        # catch-all `/` prefix) and no backendRefs: it exists only to keep the
        # Gateway's route count above zero.
        "rules": [
            {"matches": [{"headers": [{"type": "Exact", "name": header, "value": plan.anchor_value}]}]}
        ],
    }
    return manifest
