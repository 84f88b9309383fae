"""An InferenceGateway's plan: what each composed resource is called and where it lives.

Pure: derived from the XR, the Input and the targets existing Objects hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from function import naming, readiness, serving_record
from function.api import DeploymentNaming, InferenceGatewaySpec, Input
from function.objects import Target, held_name, target_ref
from function.upstream import extproc_config_index_name

# composition-resource-names: stable keys Crossplane tracks composed resources by.
ENVOY_PROXY = "envoy-proxy"


GATEWAY = "gateway"


ANCHOR = "anchor-route"


OBSERVER = "envoy-deployment"


CLIENT_TRAFFIC_POLICY = "client-traffic-policy"


SECURITY_POLICY = "security-policy"


# Composed only while a listener redirects to HTTPS (listeners[].httpsRedirect).
HTTPS_REDIRECT = "https-redirect"


# Observed only for serviceType NodePort: the node port clients use.
ENVOY_SERVICE = "envoy-service"


# A ConfigMap, composed directly: what the gateway's routes read (function/serving_record.py).
SERVING_RECORD = "serving-record"


# The XR kind, in the identity our hashed names carry.
_KIND = "InferenceGateway"


@dataclass(frozen=True)
class GatewayPlan:
    """Names and places everything for one InferenceGateway; pure, derived from the XR.

    `held` is what existing Objects already point at (objects.held_targets):
    a target keeps its name for its Object's life, and only what nothing
    holds yet gets the name derived here.
    """

    xr_name: str
    xr_namespace: str
    spec: InferenceGatewaySpec
    inp: Input
    # This call's clock: how long ago Envoy Gateway accepted the SecurityPolicy.
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    held: Mapping[str, Target] = field(default_factory=dict)
    # The pinned Envoy Deployment name the existing EnvoyProxy carries: kept,
    # or Envoy Gateway would replace the Deployment when the derivation changes.
    held_deployment: str | None = None

    def _held(self, key: str, derived: str) -> str:
        return held_name(self.held, key, derived)

    @property
    def namespace(self) -> str:
        return self.spec.namespace or self.xr_namespace

    @property
    def gateway_name(self) -> str:
        # In the XR's own namespace the XR's name is unique. Placed elsewhere
        # (spec.namespace), gateways of XRs from different namespaces meet, so
        # the name carries the XR's namespace and a hash. An XR whose own name
        # has that shape is hashed too: named `team-foo-60571ba9` in `shared`,
        # it would otherwise share every target with `team/foo` placed there,
        # and provider-kubernetes would apply each XR's SecurityPolicy over the
        # other's (its API keys on the other's gateway: found in review).
        if self.namespace == self.xr_namespace and not naming.looks_derived(self.xr_name):
            derived = self.xr_name
        else:
            derived = naming.unique_name(self.xr_namespace, self.xr_name, identity=("Gateway",))
        return self._held(GATEWAY, derived)

    @property
    def envoy_proxy_name(self) -> str:
        return self._held(ENVOY_PROXY, self.gateway_name)

    @property
    def client_traffic_policy_name(self) -> str:
        return self._held(CLIENT_TRAFFIC_POLICY, self.gateway_name)

    @property
    def security_policy_name(self) -> str:
        return self._held(SECURITY_POLICY, self.gateway_name)

    @property
    def https_redirect_name(self) -> str:
        return self._held(
            HTTPS_REDIRECT,
            naming.unique_name(self.gateway_name, "https-redirect", identity=("https-redirect",)),
        )

    @property
    def deployment(self) -> tuple[str, str]:
        namespace, name = naming.deployment_ref(
            self.spec.envoy.deployment_naming,
            self.spec.envoy.deploy_mode,
            gateway_namespace=self.namespace,
            gateway_name=self.gateway_name,
            envoy_gateway_namespace=self.spec.envoy.gateway_namespace,
        )
        if self.spec.envoy.deployment_naming is DeploymentNaming.PINNED and self.held_deployment:
            return namespace, self.held_deployment
        return namespace, name

    @property
    def extproc_config(self) -> serving_record.ExtProcConfig:
        """(namespace, name) of the index of the ext-proc configuration Envoy AI Gateway writes for the
        Gateway: beside the Envoy pods (its controller writes it where it finds them). Before v1.1.0
        (the Input's marker empty, as documented for those releases) it writes no bundle, only one
        Secret, which the pods mount whole."""
        if not self.inp.ext_proc_marker_annotation:
            return serving_record.WHOLE
        return self.deployment[0], extproc_config_index_name(self.gateway_name, self.namespace)

    @property
    def observer_target(self) -> dict[str, Any]:
        """What the observer observes: the Envoy Deployment, by identity only (an observe-only
        Object must not carry desired fields; provider watches match on metadata.namespace, so it
        is always explicit)."""
        namespace, name = self.deployment
        return target_ref("apps/v1", "Deployment", name, namespace)

    @property
    def service(self) -> tuple[str, str]:
        """(namespace, name) of the Envoy Service Envoy Gateway creates for the Gateway.

        Always the derived name: the EnvoyProxy pins only the Deployment's,
        and without `envoyService.name` Envoy Gateway names the Service as it
        would an unpinned Deployment (internal/infrastructure/kubernetes/proxy/
        resource_provider.go, Service and Name).
        """
        return naming.deployment_ref(
            DeploymentNaming.GENERATED,
            self.spec.envoy.deploy_mode,
            gateway_namespace=self.namespace,
            gateway_name=self.gateway_name,
            envoy_gateway_namespace=self.spec.envoy.gateway_namespace,
        )

    @property
    def anchor_value(self) -> str:
        # Deterministic per gateway (so the desired state is stable) and
        # meaningless to any client, which would get a 500 if it sent it.
        digest = hashlib.sha256(f"{self.namespace}/{self.gateway_name}".encode()).hexdigest()
        return f"never-sent-{digest[:32]}"

    @property
    def anchor_name(self) -> str:
        return self._held(ANCHOR, naming.unique_name(self.gateway_name, "anchor", identity=("anchor",)))

    def object_name(self, suffix: str) -> str:
        return naming.unique_name(self.xr_name, suffix, identity=(_KIND,))


def moved_from(plan: GatewayPlan) -> Target | None:
    """A target an existing Object holds in another namespace than spec.namespace now says.

    Moving would leave the old Gateway and its policies serving, unowned
    (objects.held_targets): refused, with one fatal naming the field.
    """
    for key in (GATEWAY, ENVOY_PROXY, ANCHOR, CLIENT_TRAFFIC_POLICY, SECURITY_POLICY, HTTPS_REDIRECT):
        target = plan.held.get(key)
        if target is not None and target.namespace != plan.namespace:
            return target
    return None


def held_deployment(envoy_proxy: Mapping[str, Any] | None) -> str | None:
    """The pinned Deployment name in an existing EnvoyProxy Object's manifest."""
    name = readiness.get_path(
        envoy_proxy,
        "spec",
        "forProvider",
        "manifest",
        "spec",
        "provider",
        "kubernetes",
        "envoyDeployment",
        "name",
    )
    return name if isinstance(name, str) and name else None
