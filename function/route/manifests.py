"""The ModelRoute's backend manifest bodies: typed plan in, manifest out.

Pinned by the expected renders and validated against the upstream CRDs, both
out of process; mutation testing covers what decides truth, so it skips this
module.
"""

from __future__ import annotations

from typing import Any

from function.api import Backend
from function.objects import target_ref
from function.route.plan import RoutePlan
from function.upstream import API_KEY_POLICY_BY_SCHEMA, BACKEND_GROUP


def build_backend(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    endpoint = backend.endpoint
    if endpoint.hostname is not None:
        address: dict[str, Any] = {"fqdn": {"hostname": endpoint.hostname, "port": endpoint.port}}
    else:
        address = {"ip": {"address": endpoint.ip, "port": endpoint.port}}
    manifest = target_ref(
        plan.inp.api_versions.envoy_gateway, "Backend", plan.backend_name(backend), plan.xr_namespace
    )
    spec: dict[str, Any] = {"endpoints": [address]}
    if backend.tls is not None:
        tls: dict[str, Any] = {}
        if backend.tls.ca_config_map_ref is not None:
            tls["caCertificateRefs"] = [
                {"group": "", "kind": "ConfigMap", "name": backend.tls.ca_config_map_ref.name}
            ]
        else:
            tls["wellKnownCACertificates"] = "System"
        if backend.tls.sni is not None:
            tls["sni"] = backend.tls.sni
        spec["tls"] = tls
    manifest["spec"] = spec
    return manifest


def build_service_backend(plan: RoutePlan, backend: Backend) -> dict[str, Any]:
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "AIServiceBackend",
        plan.service_backend_name(backend),
        plan.xr_namespace,
    )
    schema: dict[str, Any] = {"name": backend.schema_.name}
    if backend.schema_.prefix is not None:
        schema["prefix"] = backend.schema_.prefix
    if backend.schema_.version is not None:
        schema["version"] = backend.schema_.version
    manifest["spec"] = {
        "schema": schema,
        "backendRef": {
            "group": BACKEND_GROUP,
            "kind": "Backend",
            "name": plan.backend_name(backend),
        },
    }
    return manifest


def security_policy_auth(backend: Backend) -> dict[str, Any] | None:
    """The BackendSecurityPolicy type and its field for what the backend's provider accepts.

    The API validated the combination (api.API_KEY_POLICY_BY_SCHEMA and
    CREDENTIALS_BY_SCHEMA); None when the backend takes no credentials.
    """
    if backend.api_key_secret_ref is not None:
        policy, field = API_KEY_POLICY_BY_SCHEMA[backend.schema_.name]
        return {"type": policy, field: {"secretRef": {"name": backend.api_key_secret_ref.name}}}
    creds = backend.credentials
    if creds is None:
        return None
    if creds.aws is not None:
        aws: dict[str, Any] = {"secretRef": {"name": creds.aws.credentials_secret_ref.name}}
        if creds.aws.profile is not None:
            aws["profile"] = creds.aws.profile
        return {
            "type": "AWSCredentials",
            "awsCredentials": {"region": creds.aws.region, "credentialsFile": aws},
        }
    if creds.gcp is not None:
        return {
            "type": "GCPCredentials",
            "gcpCredentials": {
                "projectName": creds.gcp.project_name,
                "region": creds.gcp.region,
                "credentialsFile": {"secretRef": {"name": creds.gcp.credentials_secret_ref.name}},
            },
        }
    azure = creds.azure
    if azure is None:  # Credentials validates that exactly one is set.
        raise ValueError(f"backend {backend.name}: credentials name no cloud")
    return {
        "type": "AzureCredentials",
        "azureCredentials": {
            "tenantID": azure.tenant_id,
            "clientID": azure.client_id,
            "clientSecretRef": {"name": azure.client_secret_ref.name},
        },
    }


def build_security_policy(plan: RoutePlan, backend: Backend, auth: dict[str, Any]) -> dict[str, Any]:
    manifest = target_ref(
        plan.inp.api_versions.ai_gateway,
        "BackendSecurityPolicy",
        plan.security_policy_name(backend),
        plan.xr_namespace,
    )
    manifest["spec"] = {
        "targetRefs": [
            {
                "group": "aigateway.envoyproxy.io",
                "kind": "AIServiceBackend",
                "name": plan.service_backend_name(backend),
            }
        ],
        **auth,
    }
    return manifest
