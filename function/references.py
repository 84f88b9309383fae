"""The Secrets and ConfigMaps a model's backends name, and whether upstream can read them.

Every object says Accepted while one of these is missing (issue #25 item 1):
Envoy AI Gateway v1.1.0 accepts a BackendSecurityPolicy without reading its
Secret, then leaves the backend out of the ext-proc's configuration ("failed
to get backend auth from backend security policy. Skipping this backend",
`internal/controller/gateway.go`), and the ext-proc answers 500 for requests
routed to it; Envoy Gateway v1.8.1 accepts a Backend whose CA ConfigMap is
missing and fails the route's backend at translation
(`internal/gatewayapi/backendtlspolicy.go`). So the function asks Crossplane
for each one as a required resource and checks what upstream checks: that
it exists and holds the key upstream reads.

A Secret's data is only looked at for its key names, in memory, for this
call: it is never composed, observed through an Object (whose status would
copy it into the XR's namespace), logged or put in a message. Crossplane's
own ClusterRole already reads Secrets and ConfigMaps in every namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.api import Backend
from function.outcome import Requirement

# The data key each reference is read at, as upstream reads it.
# Envoy AI Gateway v1.1.0 internal/controller/ai_gateway_route.go (apiKeyInSecret)
# and gateway.go bspToFilterAPIBackendAuth: one key for APIKey, AzureAPIKey, AnthropicAPIKey.
API_KEY = "apiKey"
# internal/controller/rotators/aws_common.go (AwsCredentialsKey).
AWS_CREDENTIALS = "credentials"
# internal/controller/rotators/gcp_oidc_token_rotator.go (GCPServiceAccountJSON).
GCP_SERVICE_ACCOUNT = "service_account.json"
# internal/controller/backend_security_policy.go (clientSecretKey).
AZURE_CLIENT_SECRET = "client-secret"  # noqa: S105 - the name of a data key, not a secret
# Envoy Gateway v1.8.1 internal/gatewayapi (CACertKey); a ConfigMap with a
# single key is read whatever that key is called (getOrFirstFromData).
CA_CERT = "ca.crt"


@dataclass(frozen=True)
class Reference:
    """One object a backend's policy names, in the route's namespace."""

    kind: str  # "Secret" or "ConfigMap"
    name: str
    key: str

    @property
    def requirement(self) -> str:
        """The required-resource name Crossplane fetches it under; one per object."""
        return f"{self.kind.lower()}-{self.name}"

    def describe(self, namespace: str) -> str:
        return f"{self.kind} {namespace}/{self.name}"


def of_backend(backend: Backend) -> list[Reference]:
    """What this backend's BackendSecurityPolicy and Backend make upstream read."""
    found: list[tuple[str, str, str]] = []
    if backend.api_key_secret_ref is not None:
        found.append(("Secret", backend.api_key_secret_ref.name, API_KEY))
    creds = backend.credentials
    if creds is not None and creds.aws is not None:
        found.append(("Secret", creds.aws.credentials_secret_ref.name, AWS_CREDENTIALS))
    if creds is not None and creds.gcp is not None:
        found.append(("Secret", creds.gcp.credentials_secret_ref.name, GCP_SERVICE_ACCOUNT))
    if creds is not None and creds.azure is not None:
        found.append(("Secret", creds.azure.client_secret_ref.name, AZURE_CLIENT_SECRET))
    if backend.tls is not None and backend.tls.ca_config_map_ref is not None:
        found.append(("ConfigMap", backend.tls.ca_config_map_ref.name, CA_CERT))
    return [Reference(kind, name, key) for kind, name, key in found]


def requirements(backends: Sequence[Backend], namespace: str) -> dict[str, Requirement]:
    """Every referenced object as a required resource, declared on every call."""
    return {
        ref.requirement: Requirement(api_version="v1", kind=ref.kind, name=ref.name, namespace=namespace)
        for backend in backends
        for ref in of_backend(backend)
    }


def problem(ref: Reference, obj: Mapping[str, Any] | None, namespace: str) -> str | None:
    """Why upstream cannot read `ref` from `obj` (None: it can). Names keys, never values."""
    if obj is None:
        return f"{ref.describe(namespace)} not found"
    if ref.kind == "ConfigMap":
        data = obj.get("data") or {}
        if ref.key in data or len(data) == 1:
            return None
        return f"{ref.describe(namespace)} has no key {ref.key} (and more than one other key)"
    # The API server returns stringData merged into data; upstream reads both.
    if ref.key in (obj.get("data") or {}) or ref.key in (obj.get("stringData") or {}):
        return None
    return f"{ref.describe(namespace)} has no key {ref.key}"


def unresolved(
    backends: Sequence[Backend],
    namespace: str,
    required: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, list[str]]:
    """Backend name -> what upstream cannot read for it, for the references Crossplane fetched.

    A reference not fetched yet (its requirement is new on this call) is not
    judged: Crossplane calls again with it before the reconcile ends.
    """
    found: dict[str, list[str]] = {}
    for backend in backends:
        for ref in of_backend(backend):
            if ref.requirement not in required:
                continue
            items = required[ref.requirement]
            why = problem(ref, items[0] if items else None, namespace)
            if why is not None:
                found.setdefault(backend.name, []).append(why)
    return found
