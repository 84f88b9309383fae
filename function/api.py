"""Typed models of the two XRs and of the function's Input.

Every request is validated against these models before anything is composed,
so a typo or an out-of-range value becomes one fatal result that names the
field, instead of a manifest the API server rejects later (or, worse, accepts
and misroutes). The XRDs in `examples/` carry the same constraints so that
`kubectl apply` rejects most mistakes first; these models are the last line.

Numbers arrive from protobuf Structs as floats; pydantic's lax mode accepts
`2.0` for an int and rejects `2.5`, which is the behaviour we want.
"""

from __future__ import annotations

import ipaddress
import json
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from function import cel_check
from function.upstream import (
    API_KEY_POLICY_BY_SCHEMA,
    CREDENTIALS_BY_SCHEMA,
    DEFAULT_EXTPROC_MARKER,
    DEFAULT_KEY_HEADER,
    MAX_BUFFER_LIMIT_BYTES,
    MODEL_HEADER,
)

# RFC 1123 label: what Kubernetes accepts for namespaces, Service-like names and
# Gateway listener names.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# RFC 1123 subdomain: object names of most kinds, and hostnames.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
IPV4 = r"^((25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)$"
# A Kubernetes annotation key: optional DNS prefix, then a name of at most 63.
ANNOTATION_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)
# An HTTP header name as Gateway API accepts it in a header match.
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"
# A Kubernetes resource quantity in binary or decimal units, as Envoy Gateway's
# bufferLimit takes it (no fractions, no exponents).
QUANTITY = r"^[1-9][0-9]{0,11}(Ki|Mi|Gi|k|M|G)?$"
_QUANTITY_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def quantity_bytes(value: str) -> int:
    """Bytes of a QUANTITY-shaped string ("50Mi")."""
    digits = value.rstrip("kKMGi")
    return int(digits) * _QUANTITY_UNITS[value[len(digits) :]]


# Gateway API / Envoy AI Gateway duration: up to four "<n><unit>" groups.
DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"


Name = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
Port = Annotated[int, Field(ge=1, le=65535, strict=False)]


class Model(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected, immutable.

    A field's docstring is its description in the XRDs and the Input CRD,
    which tools/schemas.py generates from these models.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )


# --- InferenceGateway -------------------------------------------------------


class DeploymentNaming(StrEnum):
    """How Envoy Gateway names the proxy Deployment, so the observer finds it."""

    # We set EnvoyProxy envoyDeployment.name to a name derived from the gateway.
    PINNED = "Pinned"
    # Envoy Gateway's default: a hash of the Gateway in its own namespace, the
    # Gateway's name in GatewayNamespace mode.
    GENERATED = "Generated"


class DeployMode(StrEnum):
    """Where Envoy Gateway places proxy Deployments: its own install's setting.

    Independent of naming (Envoy Gateway v1.8 `resource_provider.go`
    GetResourceNamespace): a pinned name is placed by this too.
    """

    # Envoy Gateway's own namespace (`envoyGatewayNamespace`), the default.
    CONTROLLER_NAMESPACE = "ControllerNamespace"
    # The Gateway's namespace.
    GATEWAY_NAMESPACE = "GatewayNamespace"


class ServiceType(StrEnum):
    """The Envoy Service type (EnvoyProxy envoyService.type).

    A Gateway is Programmed only once it has an address (Envoy Gateway v1.8
    `internal/gatewayapi/status/gateway.go`); a LoadBalancer Service gets one
    only where a load-balancer controller runs, so kind and bare metal need
    ClusterIP or NodePort for GatewayReady ever to turn True.
    """

    LOAD_BALANCER = "LoadBalancer"
    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"


class AvailabilityPolicy(StrEnum):
    """How many available pods make a finished rollout "ready"."""

    # One available pod serves traffic; a drained or evicted pod of two must not
    # take every model route down with it.
    AT_LEAST_ONE = "AtLeastOne"
    # Every desired replica available, as `kubectl rollout status` waits for.
    ALL = "All"


class CertificateRef(Model):
    name: ObjectName
    """The certificate Secret's name."""
    namespace: Name | None = None
    """The certificate Secret's namespace; the Gateway's when unset (another needs a ReferenceGrant)."""


class ListenerTLS(Model):
    certificate_refs: list[CertificateRef] = Field(min_length=1, max_length=64)
    """Secrets of type kubernetes.io/tls holding the listener's certificate."""


class Listener(Model):
    name: Name
    """The listener's name, unique on the Gateway; ModelRoutes attach to the first listener by it."""
    protocol: Literal["HTTP", "HTTPS"] = "HTTP"
    """HTTP or HTTPS (HTTPS needs tls.certificateRefs)."""
    port: Port = 80
    """The port clients connect to (on the node port for a NodePort Service)."""
    hostname: Annotated[str, Field(max_length=253, pattern=r"^(\*\.)?" + DNS_SUBDOMAIN[1:])] | None = None
    """The host the listener serves; a wildcard (*.example.com) lets clients choose the host under it."""
    tls: ListenerTLS | None = None
    """The certificate of an HTTPS listener; an HTTP listener takes none."""
    # Model routes live in their teams' namespaces, so the default admits them.
    allowed_routes: Literal["All", "Same"] = "All"
    """Which namespaces' routes may attach. ModelRoutes live in teams' namespaces."""
    https_redirect: bool = False
    """Answer every request on this HTTP listener with a 301 to the same host and path over HTTPS, at the
    port of the gateway's first HTTPS listener (an HTTPRoute with a RequestRedirect filter): inference only
    on HTTPS. Only an HTTP listener that is not the first (ModelRoutes attach to the first) may redirect."""

    @model_validator(mode="after")
    def _tls_matches_protocol(self) -> Listener:
        if self.protocol == "HTTPS" and self.tls is None:
            raise ValueError("an HTTPS listener needs tls.certificateRefs")
        if self.protocol == "HTTP" and self.tls is not None:
            raise ValueError("an HTTP listener takes no tls")
        if self.protocol == "HTTPS" and self.https_redirect:
            raise ValueError(
                "an HTTPS listener cannot redirect to HTTPS (httpsRedirect is for HTTP listeners)"
            )
        return self


class PodDisruptionBudget(Model):
    min_available: Annotated[int, Field(ge=0)] | None = None
    """Envoy pods that must stay available during voluntary disruptions (node drains)."""
    max_unavailable: Annotated[int, Field(ge=0)] | None = None
    """Envoy pods that may be unavailable at once during voluntary disruptions."""

    @model_validator(mode="after")
    def _exactly_one(self) -> PodDisruptionBudget:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("set exactly one of minAvailable and maxUnavailable")
        return self


# An absolute URL path without query or fragment, in the ASCII RFC 3986 allows
# (the API server's Go regexp and Python's must agree on every character).
URLPath = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$")]
# The first path segments under which Envoy AI Gateway v1.1.0 serves (OpenAI's
# /v1/..., /tokenize, Cohere's /cohere/..., Anthropic's /anthropic/...).
AI_PATH_SEGMENTS = ("v1", "tokenize", "cohere", "anthropic")


def _default_listeners() -> list[Listener]:
    return [Listener(name="http")]


def _default_pdb() -> PodDisruptionBudget:
    return PodDisruptionBudget(min_available=1)


class SpreadPolicy(StrEnum):
    """How Envoy's replicas are spread across the topology key's domains."""

    # ScheduleAnyway: spread when it can, schedule anyway on a one-node cluster.
    PREFERRED = "Preferred"
    # DoNotSchedule: a replica stays Pending rather than share a domain, so
    # the rollout (and GatewayReady) waits for a node.
    REQUIRED = "Required"
    NONE = "None"


class Spread(Model):
    policy: SpreadPolicy = SpreadPolicy.PREFERRED
    """Preferred (ScheduleAnyway), Required (DoNotSchedule: a replica waits Pending, and GatewayReady with it,
    rather than share a node) or None.
    """
    topology_key: Annotated[str, Field(min_length=1, max_length=316, pattern=ANNOTATION_KEY)] = (
        "kubernetes.io/hostname"
    )
    """The node label whose values are the domains replicas spread over."""


class Shutdown(Model):
    """Envoy's graceful drain when a pod stops (EnvoyProxy spec.shutdown)."""

    # How long Envoy drains open connections before it exits. Envoy Gateway
    # gives the pod this plus 5 minutes to terminate. Two minutes lets most
    # streamed answers finish (Envoy Gateway's default is 60 s).
    drain_timeout: Annotated[str, Field(pattern=DURATION)] = "120s"
    """How long Envoy drains open connections (streamed answers) before it exits; Envoy Gateway gives the pod
    this plus 5 minutes to terminate.
    """
    # The least Envoy waits before exiting, for load balancers to stop
    # sending it new connections.
    min_drain_duration: Annotated[str, Field(pattern=DURATION)] = "10s"
    """The least Envoy waits before exiting, for load balancers to stop sending it new connections."""


class AccessLog(Model):
    # One JSON line per request to Envoy's stdout with the model and the token
    # counts a ModelRoute records (recordTokenUsage), in place of Envoy
    # Gateway's default line. Off: Envoy Gateway's default access log.
    model_and_tokens: bool = False
    """One JSON access-log line per request to Envoy's stdout with the model and the input, output and total
    tokens (a ModelRoute's recordTokenUsage), in place of Envoy Gateway's default line.
    """


class Envoy(Model):
    # Two replicas by default: with one, every Envoy restart is an outage.
    replicas: Annotated[int, Field(ge=1, le=100)] = 2
    """Envoy proxy replicas. Two by default, so one restarting pod is no outage."""
    pod_disruption_budget: PodDisruptionBudget = Field(default_factory=_default_pdb)
    """The Envoy pods' PodDisruptionBudget: exactly one of minAvailable and maxUnavailable."""
    gateway_namespace: Name = Field(default="envoy-gateway-system", alias="envoyGatewayNamespace")
    """Where Envoy Gateway runs (and, in ControllerNamespace mode, the proxy Deployments)."""
    deployment_naming: DeploymentNaming = DeploymentNaming.PINNED
    """How the Envoy Deployment is named. Pinned sets EnvoyProxy envoyDeployment.name; Generated is Envoy
    Gateway's default (a hash of the Gateway, or the Gateway's name in GatewayNamespace mode).
    """
    deploy_mode: DeployMode = DeployMode.CONTROLLER_NAMESPACE
    """Where Envoy Gateway places proxy Deployments, as its install is configured: ControllerNamespace
    (envoyGatewayNamespace) or GatewayNamespace (the Gateway's).
    """
    service_type: ServiceType = ServiceType.LOAD_BALANCER
    """The Envoy Service type. A Gateway is Programmed only once it has an address: LoadBalancer needs a
    load-balancer controller; use ClusterIP or NodePort on kind or bare metal.
    """
    availability_policy: AvailabilityPolicy = AvailabilityPolicy.AT_LEAST_ONE
    """AtLeastOne (one available pod is enough) or All (every desired replica)."""
    # Replicas on different nodes by default: with the PodDisruptionBudget, a
    # node drain then takes one replica at a time and the others serve.
    spread: Spread = Field(default_factory=Spread)
    """How Envoy's replicas spread across nodes (a topologySpreadConstraint over this gateway's Envoy pods):
    with the PodDisruptionBudget, a node drain takes one replica at a time.
    """
    shutdown: Shutdown = Field(default_factory=Shutdown)
    """Envoy's graceful drain when a pod stops (EnvoyProxy spec.shutdown)."""
    """Envoy's graceful drain when a pod stops (EnvoyProxy spec.shutdown)."""
    access_log: AccessLog = Field(default_factory=AccessLog)
    """Envoy's access log."""


class ProviderConfigRef(Model):
    kind: Literal["ClusterProviderConfig", "ProviderConfig"] = "ClusterProviderConfig"
    """ClusterProviderConfig or ProviderConfig of provider-kubernetes."""
    name: ObjectName = "default"
    """The provider-kubernetes config the composed Objects use."""


def _default_provider_config() -> ProviderConfigRef:
    return ProviderConfigRef()


class SecretRef(Model):
    name: ObjectName
    """The Secret's name, in the namespace of what names it."""


class RouteNamespacesFrom(StrEnum):
    """Which namespaces' model routes the gateway's caller auth covers."""

    # Every route on the gateway, whatever its namespace: the only one accepted.
    ALL = "All"
    # Refused (see RouteNamespaces); named so that an XR using them gets a
    # fatal that says why, not "not a valid enum member".
    SAME = "Same"
    NAMES = "Names"


class RouteNamespaces(Model):
    """Whose routes the gateway's caller auth covers: every route, for now."""

    from_: RouteNamespacesFrom = Field(default=RouteNamespacesFrom.ALL, alias="from")
    """Whose routes need a key: All (every route on the gateway) is the only value accepted."""
    names: Annotated[list[Name], Field(max_length=64)] = Field(default_factory=list)
    """Refused; must be empty (only from All is accepted)."""

    @model_validator(mode="after")
    def _every_route_covered(self) -> RouteNamespaces:
        if self.from_ is not RouteNamespacesFrom.ALL:
            # Fails closed (issue #23): Envoy decides caller auth on the route a
            # request matches as it arrives, before Envoy AI Gateway's ext-proc
            # reads the model from the body and re-selects the route. A
            # per-route exemption therefore opens covered models to callers
            # that send an exempt model's x-ai-eg-model header, and refuses SDK
            # callers of the exempt model. Refused until an exemption is proven
            # with requests.
            raise ValueError(
                f"from: {self.from_.value} is refused: a route outside the caller auth would let callers "
                "without a key reach covered models (Envoy decides auth before Envoy AI Gateway picks the "
                "model's route); only from: All is accepted, every route on the gateway needs a key"
            )
        if self.names:
            raise ValueError("names is refused: only from: All is accepted, and it lists no namespaces")
        return self


class APIKeyAuth(Model):
    """Callers authenticate with an API key: an Envoy Gateway SecurityPolicy (apiKeyAuth) on the Gateway."""

    # Secrets in the gateway's namespace: each key of a Secret is a client's
    # id, its value that client's API key.
    secret_refs: Annotated[list[SecretRef], Field(min_length=1, max_length=16)]
    """Secrets in the gateway's namespace; each key is a client id, its value that client's API key."""
    # The header clients send their key in. With Authorization, Envoy takes
    # `Bearer <key>` (as OpenAI's SDKs send it) as well as the bare key.
    header: Annotated[str, Field(min_length=1, max_length=256, pattern=HEADER_NAME)] = DEFAULT_KEY_HEADER
    """The header clients send their key in; with authorization, Bearer <key> works as OpenAI SDKs send it."""
    # A header that tells backends which client called (the Secret key), if any.
    # Spelt as Envoy Gateway spells it, not as to_camel would ("forwardClientIdHeader").
    forward_client_id_header: (
        Annotated[str, Field(min_length=1, max_length=256, pattern=HEADER_NAME)] | None
    ) = Field(default=None, alias="forwardClientIDHeader")
    """A header telling backends which client called (its Secret key)."""
    # Whose routes need a key: every route on the gateway. Kept in the API
    # so that XRs written for Same or Names get a fatal naming it (see
    # RouteNamespaces) instead of a schema error on every later update.
    route_namespaces: RouteNamespaces = Field(default_factory=RouteNamespaces)
    """Whose routes need a key: All, every route on the gateway. Same and Names are refused: Envoy decides
    caller auth on the route a request first matches, before Envoy AI Gateway picks the model's route from
    the body, so a route left open would let callers without a key reach covered models.
    """


class Auth(Model):
    # Off unless set: every route on the gateway is open to whoever reaches it.
    api_keys: APIKeyAuth | None = None
    """Callers send an API key (an Envoy Gateway SecurityPolicy with apiKeyAuth on the Gateway: every route on
    it). Until the SecurityPolicy is Accepted (a Secret missing), Envoy Gateway answers every request 500
    and GatewayReady is False with AuthNotAccepted.
    """


class InferenceGatewaySpec(Model):
    gateway_class_name: ObjectName = "envoy-ai-gateway"
    """The GatewayClass of Envoy Gateway's controller."""
    # Where the Gateway, its EnvoyProxy and the anchor live; the XR's own
    # namespace when unset.
    namespace: Name | None = None
    """Namespace of the Gateway, its EnvoyProxy and anchor route; the XR's namespace when unset. It cannot
    change: a gateway does not move (create another InferenceGateway).
    """
    listeners: list[Listener] = Field(default_factory=_default_listeners, min_length=1, max_length=64)
    """Gateway listeners. Model routes attach to the first."""
    envoy: Envoy = Field(default_factory=Envoy)
    """The Envoy proxy: replicas, disruption budget, placement, Service type, drain and access log."""
    # Envoy buffers a request body up to this size; its 32 KiB default is too
    # small for AI request bodies, and Envoy AI Gateway's own example raises
    # it to 50Mi (`examples/basic/basic.yaml`).
    request_buffer_limit: Annotated[str, Field(pattern=QUANTITY)] = "50Mi"
    """Envoy's per-connection request buffer (ClientTrafficPolicy connection.bufferLimit). Envoy's 32 KiB
    default is too small for AI request bodies. At most 4294967295 bytes (4Gi - 1): Envoy Gateway refuses
    more.
    """
    # Envoy's own health_check filter (ClientTrafficPolicy healthCheck): it answers
    # before any route is chosen, so it says the proxy is up and taking
    # connections, and turns 503 when Envoy drains (docs/operations.md).
    health_check_path: URLPath | None = None
    """A path Envoy itself answers on every listener, for an edge or geo-DNS check: 200 while this proxy
    takes connections, 503 once it drains. It says nothing about any model (each ModelRoute's RoutingReady
    does). Off when unset."""
    auth: Auth = Field(default_factory=Auth)
    """Caller authentication; off unless apiKeys is set."""
    provider_config_ref: ProviderConfigRef = Field(default_factory=_default_provider_config)
    """The provider-kubernetes (namespaced) ProviderConfig the Objects use."""

    @property
    def redirecting(self) -> list[Listener]:
        """The listeners that answer every request with a redirect to HTTPS."""
        return [listener for listener in self.listeners if listener.https_redirect]

    @field_validator("request_buffer_limit")
    @classmethod
    def _within_envoys_range(cls, value: str) -> str:
        # Envoy Gateway refuses a ClientTrafficPolicy whose bufferLimit exceeds
        # a uint32 (v1.8.1 internal/gatewayapi/clienttrafficpolicy.go); Envoy
        # then keeps its 32 KiB default and larger bodies get 413.
        if quantity_bytes(value) > MAX_BUFFER_LIMIT_BYTES:
            raise ValueError(
                f"{value} is more than Envoy's largest buffer limit, {MAX_BUFFER_LIMIT_BYTES} bytes "
                "(4Gi - 1): Envoy Gateway would refuse the policy and keep the 32 KiB default"
            )
        return value

    @field_validator("listeners")
    @classmethod
    def _unique_listeners(cls, listeners: list[Listener]) -> list[Listener]:
        names = [listener.name for listener in listeners]
        if len(set(names)) != len(names):
            raise ValueError("listener names must be unique")
        # The Gateway API CRD refuses a Gateway whose listeners repeat port,
        # protocol and hostname: the Gateway would keep its old listeners.
        keys = [(listener.port, listener.protocol, listener.hostname) for listener in listeners]
        if len(set(keys)) != len(keys):
            raise ValueError(
                "the combination of port, protocol and hostname must be unique for each listener"
            )
        # A redirect sends clients where the models are: ModelRoutes attach to the first listener only.
        if any(listener.https_redirect for listener in listeners) and listeners[0].protocol != "HTTPS":
            raise ValueError(
                "httpsRedirect sends clients to the first listener, where ModelRoutes attach: "
                "it must be HTTPS"
            )
        return listeners

    @model_validator(mode="after")
    def _redirect_reaches_clients(self) -> InferenceGatewaySpec:
        # The redirect would name the listener's port; NodePort clients use another.
        if self.redirecting and self.envoy.service_type is ServiceType.NODE_PORT:
            raise ValueError(
                "listeners: httpsRedirect cannot name the node port NodePort clients use; "
                "use LoadBalancer or ClusterIP, or redirect in front of the gateway"
            )
        return self

    @field_validator("health_check_path")
    @classmethod
    def _not_a_model_path(cls, value: str | None) -> str | None:
        # Envoy's health check answers its path before any route: on a path Envoy AI
        # Gateway serves (its ext-proc's, v1.1.0 cmd/extproc/mainlib/main.go), every
        # request would get an empty 200 while RoutingReady says True.
        if value is not None and value.split("/")[1] in AI_PATH_SEGMENTS:
            raise ValueError(
                f"{value} is under a path Envoy AI Gateway serves "
                f"({', '.join('/' + p for p in AI_PATH_SEGMENTS)}): "
                "its requests would get the health check's 200"
            )
        return value


# --- ModelRoute ---------------------------------------------------------------


class GatewayRef(Model):
    name: ObjectName
    """The InferenceGateway's name."""
    # The ModelRoute's own namespace when unset.
    namespace: Name | None = None
    """The ModelRoute's namespace when unset."""


# The clouds' instance metadata services: a route to one would hand callers (and, with a
# modelCheck, the route's author) the node's credentials. By name, with the short names a pod's DNS
# search list completes (GKE's lists google.internal); by address, Alibaba Cloud's, outside the
# link-local range the others use (refused by range below).
METADATA_HOSTNAMES = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
)
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("100.100.100.200")})
# A last label that is a number (decimal, octal or 0x hex) makes a host an IPv4 address to
# resolvers that parse as inet_aton does and to the WHATWG URL standard ("ends in a number"):
# "2852039166" and "0xa9fea9fe" are 169.254.169.254. No DNS name ends so.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class Endpoint(Model):
    """Exactly one of hostname (FQDN) or ip, as an Envoy Gateway Backend takes."""

    hostname: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)] | None = None
    """The backend's DNS name (a Service's cluster name, a provider's API host); not an address (a last
    label that is a number), nor a cloud's instance metadata service."""
    ip: Annotated[str, Field(pattern=IPV4)] | None = None
    """The backend's IP address; not link-local (169.254.0.0/16, where clouds serve instance metadata),
    Alibaba Cloud's metadata address (100.100.100.200), nor 0.0.0.0."""
    port: Port
    """The backend's port."""

    @field_validator("hostname")
    @classmethod
    def _a_name_not_a_metadata_service(cls, hostname: str | None) -> str | None:
        """An address written as a name would pass the checks on `ip`: Envoy Gateway refuses it
        for the Backend (validateHostname), but a modelCheck's probe would be sent there."""
        if hostname is None:
            return hostname
        if _NUMERIC_LABEL.match(hostname.rsplit(".", 1)[-1]):
            raise ValueError(
                f"{hostname} ends in a number, so it is an IP address, not a name: refused (set ip)"
            )
        # The pattern above admits neither a trailing dot nor capitals: one spelling each.
        if hostname in METADATA_HOSTNAMES:
            raise ValueError(f"{hostname} is a cloud's instance metadata service: refused")
        return hostname

    @field_validator("ip")
    @classmethod
    def _not_the_nodes_own(cls, ip: str | None) -> str | None:
        """Whoever writes a ModelRoute chooses this address, and Envoy (and provider-http, for a
        modelCheck) sends requests there from inside the cluster. Envoy Gateway v1.8.3 refuses
        loopback, except where Envoy runs on the host (internal/gatewayapi/backend.go, validateIP):
        that is left to it. It lets through a link-local address, where AWS, GCP, Azure and
        others serve instance metadata, and 0.0.0.0, which Linux connects to this host (Envoy's
        admin port in its own pod): both refused here, fail closed."""
        if ip is None:
            return ip
        address = ipaddress.ip_address(ip)
        for refused, what in (
            (address.is_link_local, "link-local (169.254.0.0/16, where clouds serve instance metadata)"),
            (address in METADATA_ADDRESSES, "a cloud's instance metadata service"),
            (address.is_unspecified, "unspecified (Linux connects it to the proxy's own host)"),
        ):
            if refused:
                raise ValueError(f"{ip} is {what}: refused")
        return ip

    @model_validator(mode="after")
    def _exactly_one(self) -> Endpoint:
        if (self.hostname is None) == (self.ip is None):
            raise ValueError("set exactly one of hostname and ip")
        return self


class BackendTLS(Model):
    # Verify the upstream against the system CA bundle, or against a CA in a
    # ConfigMap in the route's namespace; never both (the Backend CRD forbids it).
    ca_config_map_ref: SecretRef | None = Field(default=None, alias="caConfigMapRef")
    """A ConfigMap in the route's namespace whose ca.crt verifies the backend; the system CAs when unset."""
    sni: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)] | None = None
    """The server name sent in TLS and checked against the backend's certificate."""


class APISchema(Model):
    name: Literal[
        "OpenAI",
        "Cohere",
        "AWSBedrock",
        "AzureOpenAI",
        "GCPVertexAI",
        "GCPAnthropic",
        "Anthropic",
        "AWSAnthropic",
    ] = "OpenAI"
    """The API the backend speaks (its enum lists the schemas Envoy AI Gateway translates)."""
    prefix: Annotated[str, Field(max_length=253)] | None = None
    """A path prefix the backend's API is served under."""
    # Azure OpenAI's `api-version`. Without it Envoy AI Gateway v1.0.0 sends
    # `?api-version=` empty (seen in `make traffic`), which Azure's
    # deployments API does not accept: every request would fail.
    version: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """Azure OpenAI's api-version (such as 2025-01-01-preview); required for AzureOpenAI."""

    @model_validator(mode="after")
    def _azure_names_its_api_version(self) -> APISchema:
        if self.name == "AzureOpenAI" and self.version is None:
            raise ValueError(
                "the AzureOpenAI schema needs version, Azure's api-version (such as 2025-01-01-preview): "
                "without it every request is sent with an empty api-version"
            )
        return self


def _default_schema() -> APISchema:
    return APISchema()


class AWSCredentials(Model):
    """AWSCredentials: an AWS credentials file held in a Secret; requests are signed with SigV4."""

    region: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
    """The AWS region of the backend."""
    credentials_secret_ref: SecretRef
    """A Secret whose key credentials holds an AWS credentials file."""
    profile: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")] | None = None
    """The profile of the credentials file to use."""


class GCPCredentials(Model):
    """GCPCredentials: a service-account credentials file held in a Secret."""

    project_name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
    """The GCP project."""
    region: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
    """The GCP region of the backend."""
    credentials_secret_ref: SecretRef
    """A Secret whose key service_account.json holds a service-account credentials file."""


class AzureCredentials(Model):
    """AzureCredentials: an Entra ID app (client secret in a Secret, key `client-secret`)."""

    tenant_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")] = Field(
        alias="tenantID"
    )
    """The Entra ID tenant."""
    client_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")] = Field(
        alias="clientID"
    )
    """The Entra ID application (client) ID."""
    client_secret_ref: SecretRef
    """A Secret whose key client-secret holds the client secret."""


class Credentials(Model):
    """Cloud credentials for the schemas that take no plain API key; exactly one."""

    aws: AWSCredentials | None = None
    """An AWS credentials file; requests are signed (AWSCredentials)."""
    gcp: GCPCredentials | None = None
    """A service-account credentials file (GCPCredentials)."""
    azure: AzureCredentials | None = None
    """An Entra ID client (AzureCredentials)."""

    @property
    def cloud(self) -> str:
        return next(name for name in ("aws", "gcp", "azure") if getattr(self, name) is not None)

    @model_validator(mode="after")
    def _exactly_one(self) -> Credentials:
        if sum(c is not None for c in (self.aws, self.gcp, self.azure)) != 1:
            raise ValueError("set exactly one of aws, gcp and azure")
        return self


# Kinds whose observed copy would hand a tenant data it may not read: the
# observer's status holds the whole object, in the route's namespace.
DATA_KINDS = {("", "Secret"), ("", "ConfigMap")}


class WorkloadRef(Model):
    """The Kubernetes object that serves a backend: a Deployment or StatefulSet of an
    inference server, a KServe InferenceService, ... in the ModelRoute's own namespace."""

    # Bounded lengths keep the XRD's CEL rules on them within the API server's cost budget.
    api_version: Annotated[
        str,
        Field(max_length=253, pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?$"),
    ]
    """The workload's apiVersion (apps/v1, serving.kserve.io/v1beta1, ...)."""
    kind: Annotated[str, Field(max_length=63, pattern=r"^[A-Z][A-Za-z0-9]{0,62}$")]
    """The workload's kind (Deployment, StatefulSet, InferenceService, ...)."""
    name: ObjectName
    """The workload's name, in the ModelRoute's namespace."""
    # Never set: present only so that setting it gets a clear refusal.
    namespace: Annotated[str, Field(max_length=63)] | None = None
    """Refused when set; the workload is always in this namespace."""
    # A CEL expression over `object` that is true while the workload serves;
    # a built-in one per well-known kind when unset.
    readiness_query: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """A boolean CEL expression over `object`, true while the workload serves. Built in when unset: at least
    one available replica (Deployment, StatefulSet), else the Ready condition.
    """

    @field_validator("namespace")
    @classmethod
    def _own_namespace(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                "a workload must be in the ModelRoute's own namespace (its observed copy lands there): "
                "leave namespace out"
            )
        return value

    @field_validator("kind")
    @classmethod
    def _not_data(cls, value: str, info: ValidationInfo) -> str:
        group = str(info.data.get("api_version", "")).rpartition("/")[0]
        if (group, value) in DATA_KINDS:
            raise ValueError(
                f"{value} holds data, not a workload: its observed copy would expose it to whoever reads "
                "the ModelRoute's namespace"
            )
        return value

    @field_validator("readiness_query")
    @classmethod
    def _boolean(cls, value: str | None) -> str | None:
        if value is not None:
            problem = cel_check.boolean_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value


class ModelCheck(Model):
    """Probe what the backend's server has loaded: RoutingReady needs the model listed at GET <path>."""

    # Bounded for the XRD's CEL cost budget, as the model name is.
    model: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """The id /v1/models must list, compared exactly (case-sensitive, no aliases). Default: the name sent to
    this backend (modelNameOverride, else the route's model).
    """
    path: URLPath = "/v1/models"
    """The path that lists the server's models (OpenAI's list-models endpoint; vLLM, SGLang, llama.cpp,
    Ollama and TGI answer it).
    """
    failure_threshold: Annotated[int, Field(ge=1, le=100)] = 3
    """Failed probes in a row (connection refused, timed out) at which the last answer is no longer
    trusted. provider-http retries a failed probe sooner than its --poll (backing off from 1 s), so the
    threshold is reached in seconds, not polls.
    """


class Backend(Model):
    name: Name
    """The backend's name, unique in the route; it names the backend's composed resources."""
    endpoint: Endpoint
    """Where the backend listens: exactly one of hostname and ip, and a port."""
    tls: BackendTLS | None = None
    """TLS to the backend, verified with the system CAs unless caConfigMapRef is set."""
    schema_: APISchema = Field(default_factory=_default_schema, alias="schema")
    """The API the backend speaks; OpenAI by default."""
    weight: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    """The share of requests among backends of the same priority."""
    priority: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    """Backends of priority 0 take requests; higher priorities are fallbacks, tried on retries."""
    # An API key in a Secret (key `apiKey`); the header it is sent in follows
    # the schema (API_KEY_POLICY_BY_SCHEMA).
    api_key_secret_ref: SecretRef | None = None
    """A Secret in this namespace whose key apiKey is sent as the schema's provider expects it: Authorization
    Bearer (OpenAI, Cohere), x-api-key (Anthropic), api-key (AzureOpenAI). AWS and GCP schemas take
    credentials instead.
    """
    credentials: Credentials | None = None
    """Cloud credentials (exactly one) for AWS*, GCP* and AzureOpenAI schemas."""
    # The model name sent to this backend, when it differs from the one clients
    # ask for (an Azure deployment name, a provider-versioned name).
    model_name_override: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """The model name sent to this backend when it differs from the one clients send (an Azure deployment
    name, a provider-versioned name).
    """
    # What serves this backend, if it runs in the cluster: RoutingReady then
    # needs it serving. Unset for external providers (nothing to observe).
    workload_ref: WorkloadRef | None = None
    """What serves this backend in the cluster (a Deployment or StatefulSet of an inference server, a KServe
    InferenceService, ...) in this namespace. RoutingReady then needs it serving; observed by an
    observe-only, watched Object. Leave unset for external providers.
    """
    # Off unless set: a probe of the server's model list (provider-http, issue #30).
    model_check: ModelCheck | None = None
    """Probe the server's /v1/models and count this backend as serving only while it lists the model
    (provider-http's Request, observe-only). For servers without credentials; off when unset.
    """

    @field_validator("api_key_secret_ref")
    @classmethod
    def _schema_takes_a_key(cls, value: SecretRef | None, info: ValidationInfo) -> SecretRef | None:
        schema = info.data.get("schema_")
        if (
            value is not None
            and isinstance(schema, APISchema)
            and schema.name not in API_KEY_POLICY_BY_SCHEMA
        ):
            cloud = CREDENTIALS_BY_SCHEMA[schema.name]
            raise ValueError(
                f"the {schema.name} schema takes no API key (its provider would reject every "
                f"request); set credentials.{cloud} instead"
            )
        return value

    @field_validator("model_check")
    @classmethod
    def _probe_needs_no_credentials(cls, value: ModelCheck | None, info: ValidationInfo) -> ModelCheck | None:
        # The probe sends no key: a server that needs one would answer 401 and
        # the check would never pass. A self-hosted server without a key is what
        # it is for; a hosted provider serves the models it lists by contract.
        if value is not None and (
            info.data.get("api_key_secret_ref") is not None or info.data.get("credentials") is not None
        ):
            raise ValueError(
                "a backend with apiKeySecretRef or credentials cannot be probed (no key is sent)"
            )
        tls = info.data.get("tls")
        if value is not None and isinstance(tls, BackendTLS) and (tls.ca_config_map_ref or tls.sni):
            # provider-http verifies with the system CAs and the URL's host: the
            # probe of such a backend would fail however well it serves.
            raise ValueError("a backend verified with caConfigMapRef or sni cannot be probed")
        return value

    @field_validator("credentials")
    @classmethod
    def _schema_takes_these_credentials(
        cls, value: Credentials | None, info: ValidationInfo
    ) -> Credentials | None:
        schema = info.data.get("schema_")
        if value is None or not isinstance(schema, APISchema):
            return value
        if info.data.get("api_key_secret_ref") is not None:
            raise ValueError("set apiKeySecretRef or credentials, not both")
        if CREDENTIALS_BY_SCHEMA.get(schema.name) != value.cloud:
            wanted = CREDENTIALS_BY_SCHEMA.get(schema.name)
            instead = f"credentials.{wanted}" if wanted else "apiKeySecretRef"
            raise ValueError(
                f"the {schema.name} schema does not take {value.cloud} credentials; use {instead}"
            )
        return value


class Timeouts(Model):
    # The whole request, first byte to last (Envoy AI Gateway's default when
    # unset); "0s" turns it off.
    request: Annotated[str, Field(pattern=DURATION)] | None = None
    """The whole request, first byte to last; Envoy AI Gateway's default when unset; 0s turns it off."""
    # The longest pause between two bytes of a request or a streamed answer: a
    # model that stops streaming mid-answer is cut off after it. "0s" turns
    # it off. Five minutes leaves room for a long first token.
    stream_idle: Annotated[str, Field(pattern=DURATION)] = "300s"
    """The longest pause between two bytes of a request or a streamed answer (BackendTrafficPolicy
    timeout.http.streamIdleTimeout); 0s turns it off.
    """


class Retry(Model):
    """Retries of one request on another endpoint, and on the next priority (fallback)."""

    # Retries after the first attempt; 0 turns retrying off.
    attempts: Annotated[int, Field(ge=0, le=10)] = 2
    """Retries after the first attempt, each on the next priority; 0 turns retrying off."""
    # Answers retried besides connection failures (a request that never
    # reached the model). The default is the gateway-side 5xx: the model
    # never answered; a 500 from the model itself is not retried twice over.
    status_codes: Annotated[list[Annotated[int, Field(ge=500, le=599)]], Field(max_length=16)] = Field(
        default_factory=lambda: [502, 503, 504]
    )
    """Answers retried besides connection failures (which are always retried while attempts > 0)."""


class OutlierDetection(Model):
    """Passive health checking: an endpoint that keeps failing is ejected for a while."""

    # Consecutive 5xx answers, or consecutive connection failures, that eject
    # an endpoint; 0 turns ejection off.
    consecutive_errors: Annotated[int, Field(ge=0, le=1000)] = 5
    """Consecutive 5xx answers or connection failures that eject an endpoint; 0 turns ejection off."""
    ejection_time: Annotated[str, Field(pattern=DURATION)] = "30s"
    """How long an ejected endpoint takes no requests."""


class Resilience(Model):
    retry: Retry = Field(default_factory=Retry)
    """Retries: what makes a lower-priority backend a fallback."""
    outlier_detection: OutlierDetection = Field(default_factory=OutlierDetection)
    """Ejecting endpoints that keep failing."""


class ModelRouteSpec(Model):
    gateway_ref: GatewayRef
    """The InferenceGateway this model is served through."""
    # What clients send in the model field; `<namespace>/<name>` when unset.
    model: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """The model name clients send; <namespace>/<name> when unset."""
    # An AIGatewayRoute rule takes at most 128 backendRefs.
    backends: list[Backend] = Field(min_length=1, max_length=128)
    """Where requests for the model go: by priority (lower first, the next as fallback), then by weight."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    """Request and stream-idle timeouts."""
    resilience: Resilience = Field(default_factory=Resilience)
    """Retries, fallback to the next priority and passive outlier ejection, set on the route's
    BackendTrafficPolicy. Fallback to a backend of a higher priority number needs retries.
    """
    # Record input, output and total tokens of each request in Envoy's dynamic
    # metadata (llmRequestCosts), for token rate limits and usage accounting.
    record_token_usage: bool = True
    """Record input, output and total tokens per request (llmRequestCosts, Envoy dynamic metadata namespace
    io.envoy.ai_gateway, keys llm_input_token, llm_output_token, llm_total_token) for token rate limits and
    usage accounting.
    """
    provider_config_ref: ProviderConfigRef = Field(default_factory=_default_provider_config)
    """The provider-kubernetes config the composed Objects use."""

    @model_validator(mode="after")
    def _unique_backends(self) -> ModelRouteSpec:
        names = [backend.name for backend in self.backends]
        if len(set(names)) != len(names):
            raise ValueError("backend names must be unique")
        return self


# --- Input ------------------------------------------------------------------


class Composes(StrEnum):
    """What the function composes for the XR at hand; the XR kind never decides."""

    GATEWAY = "InferenceGateway"
    ROUTE = "ModelRoute"


class APIVersions(Model):
    ai_gateway: Literal["aigateway.envoyproxy.io/v1beta1", "aigateway.envoyproxy.io/v1alpha1"] = (
        "aigateway.envoyproxy.io/v1beta1"
    )
    """Envoy AI Gateway's API version."""
    envoy_gateway: Literal["gateway.envoyproxy.io/v1alpha1"] = "gateway.envoyproxy.io/v1alpha1"
    """Envoy Gateway's API version."""
    # Spelt as Kubernetes spells acronyms, not as to_camel would ("gatewayApi").
    gateway_api: Literal["gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1beta1"] = Field(
        default="gateway.networking.k8s.io/v1", alias="gatewayAPI"
    )
    """The Gateway API version of the Gateway."""


class XRType(Model):
    """apiVersion and kind of the InferenceGateway XR a ModelRoute reads."""

    api_version: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9]+$")] = "ai.example.org/v1alpha1"
    """The InferenceGateway XR's apiVersion."""
    kind: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]*$")] = "InferenceGateway"
    """The InferenceGateway XR's kind."""


class Anchor(Model):
    # Any header but the model header: the anchor must match nothing a client
    # sends and must stay out of `/v1/models`.
    header_name: Annotated[str, Field(min_length=1, max_length=256, pattern=HEADER_NAME)] = (
        "x-gateway-readiness-anchor"
    )
    """Header the anchor route matches exactly. Never x-ai-eg-model."""

    @model_validator(mode="after")
    def _not_model_header(self) -> Anchor:
        # Header names are case-insensitive: Envoy matches X-AI-EG-Model as the model header.
        if self.header_name.lower() == MODEL_HEADER:
            raise ValueError(f"the anchor must not match on {MODEL_HEADER}: it would be listed as a model")
        return self


def _default_anchor() -> Anchor:
    return Anchor()


def _default_api_versions() -> APIVersions:
    return APIVersions()


def _default_xr_type() -> XRType:
    return XRType()


class Input(Model):
    api_version: Literal["gatewayreadiness.fn.crossplane.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Input"]
    metadata: dict[str, object] | None = None
    compose: Composes
    """What to compose for the XR at hand: an InferenceGateway (Gateway, EnvoyProxy, anchor route, Deployment
    observer) or a ModelRoute (route and backends). The XR's kind is never consulted, so XR kinds may be
    named freely.
    """
    anchor: Anchor = Field(default_factory=_default_anchor)
    """The anchor route's match."""
    # Empty string disables the marker clause (for Envoy AI Gateway < v1.1.0).
    ext_proc_marker_annotation: Annotated[
        str, Field(max_length=316, pattern="^$|" + ANNOTATION_KEY[1:].join("()") + "$")
    ] = DEFAULT_EXTPROC_MARKER
    """Pod-template annotation Envoy AI Gateway stamps when it rolls pods with the ext-proc sidecar. Empty
    disables the check (Envoy AI Gateway before v1.1.0).
    """
    api_versions: APIVersions = Field(default_factory=_default_api_versions)
    """The upstream API versions to compose, as the installed components serve them."""
    gateway_type: XRType = Field(default_factory=_default_xr_type)
    """apiVersion and kind of the InferenceGateway XR that ModelRoutes reference."""
    observe_gateway: bool = True
    """Compose, per ModelRoute, an observe-only, watched Object of its InferenceGateway, which wakes the
    route when the gateway changes. Crossplane before v2.4 needs it for a route to follow its gateway
    within seconds; v2.4 and later watch the resources a function requires, and a route follows as fast
    without it. false (Crossplane v2.4+) saves an Object, a watched target and a provider reconcile per
    route, and removes the observer of routes that have one.
    """
    model_check_provider_config: Name = "default"
    """The provider-http ClusterProviderConfig the backends' model checks use (credentials source None:
    the probes send no key).
    """
    model_check_poll_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    """provider-http's --poll, in seconds (its default is 60; examples/install runs 10). A model check's
    answer not renewed for failureThreshold + 1 polls has expired: provider-http is not polling (down,
    or far behind), and the server may have loaded another model since. Set it no lower than the real
    --poll, or answers expire while provider-http is fine.
    """


# --- errors -----------------------------------------------------------------


class InvalidError(ValueError):
    """A request the function refuses; the message names the field."""


# pydantic puts union members and validator names into an error's location
# ("function-after[...]", "constrained-str", "literal['']"); they mean nothing
# to a user, and no field of ours is spelt like them.
_NOT_A_FIELD = re.compile(r"^(str|int|float|bool|none|constrained-.*|literal\[.*|function-.*|.*\[.*)$")


_PLAIN_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def _location(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _NOT_A_FIELD.match(part):
            continue
        elif _PLAIN_FIELD.match(part):
            path += f".{part}"
        else:
            # A key a user typed by mistake, shown quoted and escaped so the
            # message stays on one line.
            path += f"[{json.dumps(part)}]"
    return path


def describe(prefix: str, error: ValidationError) -> str:
    """One clause per problem: `spec.listeners[0].port: Input should be ...`."""
    problems = {
        f"{_location(prefix, tuple(item['loc']))}: {item['msg'].removeprefix('Value error, ')}".replace(
            "\n", " "
        )
        for item in error.errors(include_url=False)
    }
    return "; ".join(sorted(problems))
