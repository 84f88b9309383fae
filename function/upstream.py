"""What the upstream components expect on the wire: header names, metadata keys,
policy types and condition names, each read at the pinned versions.

One place, so that a fact that changes upstream changes here once, and the
API models, the builders and the verdicts read the same value.
"""

from __future__ import annotations

import hashlib

# Envoy's per-connection buffer limit is a uint32.
MAX_BUFFER_LIMIT_BYTES = 2**32 - 1


# The dynamic-metadata keys (namespace TOKEN_METADATA_NAMESPACE) a ModelRoute
# records token usage under (recordTokenUsage), with their cost types: what
# BackendTrafficPolicy rate limits and the gateway's access log read.
TOKEN_METADATA_NAMESPACE = "io.envoy.ai_gateway"  # noqa: S105 - a metadata namespace, no secret


TOKEN_USAGE_COSTS = (
    ("llm_input_token", "InputToken"),
    ("llm_output_token", "OutputToken"),
    ("llm_total_token", "TotalToken"),
)


# The header Envoy AI Gateway's ext-proc writes the request's model into; a
# model route matches on it, and `/v1/models` lists exactly these matches. The
# anchor must never use it, or the anchor would show up as a model.
MODEL_HEADER = "x-ai-eg-model"


# The header callers send their API key in unless the gateway names another.
DEFAULT_KEY_HEADER = "authorization"


# What each provider accepts as an API key, as Envoy AI Gateway v1.1.0 sends
# it (`internal/backendauth/`): `Authorization: Bearer` for APIKey
# (api_key.go), `x-api-key` for AnthropicAPIKey (anthropicapikey.go), Azure's
# `api-key` for AzureAPIKey. A schema missing here takes no plain key: AWS
# signs requests with SigV4 and GCP takes OAuth tokens, so a key sent to them
# fails every request while every resource reports Accepted. Each entry is
# the policy type and the field that carries its Secret.
API_KEY_POLICY_BY_SCHEMA = {
    "OpenAI": ("APIKey", "apiKey"),
    "Cohere": ("APIKey", "apiKey"),
    "Anthropic": ("AnthropicAPIKey", "anthropicAPIKey"),
    "AzureOpenAI": ("AzureAPIKey", "azureAPIKey"),
}


# Which credentials each cloud's schemas take.
CREDENTIALS_BY_SCHEMA = {
    "AWSBedrock": "aws",
    "AWSAnthropic": "aws",
    "GCPVertexAI": "gcp",
    "GCPAnthropic": "gcp",
    "AzureOpenAI": "azure",
}


# Envoy AI Gateway (v1.1.0+) stamps this on the pod template when it rolls
# pods for an effective route; with the anchor present it means "rolled with
# the ext-proc sidecar".
DEFAULT_EXTPROC_MARKER = "aigateway.envoyproxy.io/extproc-config-hash"


# The condition each controller sets when a resource is in effect: Envoy
# Gateway's Gateway (Programmed); Envoy AI Gateway's kinds, and Envoy
# Gateway's Backend and policies per ancestor (Accepted).
PROGRAMMED = "Programmed"
ACCEPTED = "Accepted"
# The condition Envoy AI Gateway sets instead of Accepted when it cannot take a
# resource (api/v1beta1/status.go, v1.1.0).
NOT_ACCEPTED = "NotAccepted"
# Envoy AI Gateway's finalizer (internal/controller/controller.go, v1.1.0). Its
# AIServiceBackend controller adds it once the backend has passed its one check
# (at most one BackendSecurityPolicy targets it), then tells the routes that
# reference it, then writes Accepted: a backend that carries it has been taken
# in, whether or not that last write landed (docs/operations.md, "A route that
# says BackendNotAccepted while it serves").
AIGW_FINALIZER = "aigateway.envoyproxy.io/finalizer"

# The API group of Envoy Gateway's Backend, as a route's backendRef names it.
BACKEND_GROUP = "gateway.envoyproxy.io"


def extproc_config_index_name(gateway_name: str, gateway_namespace: str) -> str:
    """The Secret Envoy AI Gateway writes a Gateway's ext-proc configuration index to, in the Envoy
    pods' namespace: `<gateway>-<namespace>-<hash>`, the hash the first 12 hex digits of the SHA-256 of
    `<namespace>/<gateway>`, the whole cut to 253 characters from the front part's end (v1.1.0
    `internal/controller/secret_name.go`, FilterConfigBundleIndexSecretName). It holds the bundle's
    uuid, its checksum and its parts' names: no credentials, which sit in the parts."""
    digest = hashlib.sha256(f"{gateway_namespace}/{gateway_name}".encode()).hexdigest()[:12]
    base = f"{gateway_name}-{gateway_namespace}".strip("-")[: _MAX_NAME - 1 - len(digest)].strip("-")
    return f"{base}-{digest}" if base else digest


_MAX_NAME = 253
