"""The model's AIGatewayRoute: which requests it matches, on which listener, to which backends."""

from __future__ import annotations

from typing import Any

from function.api import Backend
from function.objects import gateway_ref, target_ref
from function.route.plan import RoutePlan
from function.route.view import Attachment
from function.upstream import MODEL_HEADER, TOKEN_USAGE_COSTS


def build_route(plan: RoutePlan, attachment: Attachment) -> dict[str, Any]:
    parent = gateway_ref(attachment.name, namespace=attachment.namespace, section=attachment.listener)
    rule: dict[str, Any] = {
        # Exactly the model header: this is what `/v1/models` lists.
        "matches": [{"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": plan.model}]}],
        "backendRefs": [backend_ref(plan, b) for b in plan.spec.backends],
    }
    if plan.spec.timeouts.request is not None:
        rule["timeouts"] = {"request": plan.spec.timeouts.request}
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway, "AIGatewayRoute", plan.route_name, plan.xr_namespace
    )
    manifest["spec"] = {"parentRefs": [parent], "rules": [rule]}
    if plan.spec.record_token_usage:
        manifest["spec"]["llmRequestCosts"] = [
            {"metadataKey": key, "type": typ} for key, typ in TOKEN_USAGE_COSTS
        ]
    return manifest


def backend_ref(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "name": plan.service_backend_name(backend),
        "weight": backend.weight,
        "priority": backend.priority,
    }
    if backend.model_name_override is not None:
        ref["modelNameOverride"] = backend.model_name_override
    return ref
