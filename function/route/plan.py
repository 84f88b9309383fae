"""A ModelRoute's plan: what each composed resource is called and where it lives.

Pure: derived from the XR, the Input and the targets existing Objects hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from function import claims, naming
from function.api import Backend, Input, ModelCheck, ModelRouteSpec, WorkloadRef
from function.objects import Target, held_name, target_ref
from function.route.view import Attachment

# composition-resource-names. Per-backend names carry the backend's name, so a
# backend taken out of the spec is recognisable among the observed resources.
ROUTE = "route"


TRAFFIC_POLICY = "traffic-policy"


# Composed by v0.x for routes outside a narrowed caller auth; only ever removed now.
AUTH_EXEMPTION = "auth-exemption"


GATEWAY_OBSERVER = "gateway-observer"


BACKEND_PREFIX = "backend-"


SERVICE_BACKEND_PREFIX = "service-backend-"


SECURITY_POLICY_PREFIX = "security-policy-"


WORKLOAD_PREFIX = "workload-"


MODEL_CHECK_PREFIX = "model-check-"


@dataclass(frozen=True)
class RoutePlan:
    xr_name: str
    xr_namespace: str
    spec: ModelRouteSpec
    inp: Input
    # This call's clock: how long ago Envoy AI Gateway wrote the route's configuration.
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    # What existing Objects already point at (objects.held_targets): a target
    # keeps its name for its Object's life; references follow the held names.
    held: Mapping[str, Target] = field(default_factory=dict)

    def _held(self, key: str, derived: str) -> str:
        return held_name(self.held, key, derived)

    @property
    def model(self) -> str:
        return self.spec.model or f"{self.xr_namespace}/{self.xr_name}"

    def claimant(self, attachment: Attachment | None) -> claims.Claimant:
        """This route as claims.py reads every claimant of its model, attached where `attachment` says."""
        ref = self.spec.gateway_ref
        return claims.Claimant(
            target=(self.xr_namespace, self.route_name),
            gateway=(ref.namespace or self.xr_namespace, ref.name),
            model=self.model,
            parent=None
            if attachment is None
            else (attachment.namespace, attachment.name, attachment.listener or ""),
        )

    @property
    def route_name(self) -> str:
        return self._held(ROUTE, naming.unique_name(self.xr_name, identity=("route",)))

    @property
    def traffic_policy_name(self) -> str:
        return self._held(TRAFFIC_POLICY, self.route_name)

    def _target_name(self, backend: Backend) -> str:
        return naming.unique_name(self.xr_name, backend.name, identity=("backend",))

    def backend_name(self, backend: Backend) -> str:
        return self._held(BACKEND_PREFIX + backend.name, self._target_name(backend))

    def service_backend_name(self, backend: Backend) -> str:
        return self._held(SERVICE_BACKEND_PREFIX + backend.name, self._target_name(backend))

    def security_policy_name(self, backend: Backend) -> str:
        return self._held(SECURITY_POLICY_PREFIX + backend.name, self._target_name(backend))

    def checked_model(self, backend: Backend, check: ModelCheck) -> str:
        """The id a backend's model list must hold: modelCheck.model, else the name sent to it."""
        return check.model or backend.model_name_override or self.model

    def probe_url(self, backend: Backend, check: ModelCheck) -> str:
        """The URL of the backend's model list, as its Request GETs it."""
        end = backend.endpoint
        scheme = "https" if backend.tls is not None else "http"
        return f"{scheme}://{end.hostname or end.ip}:{end.port}{check.path}"

    def workload_target(self, ref: WorkloadRef) -> dict[str, Any]:
        """What a backend's workload observer observes: its workload, in the route's namespace."""
        return target_ref(ref.api_version, ref.kind, ref.name, self.xr_namespace)

    def object_name(self, *suffix: str) -> str:
        return naming.unique_name(self.xr_name, *suffix, identity=("ModelRoute",))
