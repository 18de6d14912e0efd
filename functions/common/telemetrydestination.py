"""What a TelemetryDestination asks for, checked, and which destination the fleet uses.

The XRD's patterns already reject most bad input on apply, but everything a user writes
here ends up inside a collector config the gateway loads (an endpoint, a header name),
so it is checked again here: a function must not trust that the API server ran the same
rules (render, an older XRD, a direct etcd write). Every check returns the field path
and the rule, all of them at once, so a person fixes the spec in one go.

Credentials: an endpoint carrying one (URL user-info, a credential-looking query
parameter) is refused with a message that names what was found but never its value, and
no refusal quotes an endpoint that could hold one. A TelemetryDestination is
cluster-scoped, and every Secret it references is copied to the gateway's cluster and
sent to the endpoint it names; so its Secret references are confined to the namespaces
the platform allows: `crossplane-system` and `modelplane-system` by default, or the
comma-separated list in the functions' MODELPLANE_SECRET_NAMESPACES environment variable
(set it in the DeploymentRuntimeConfig of compose-telemetry and compose-serving-stack).
Otherwise anyone who may create a destination could ship any Secret anywhere.

One destination per fleet: the oldest wins, by creationTimestamp and then by name, so
every reconcile of every destination reaches the same answer without talking to the
others.

Shared: compose-telemetry builds the gateway from it, and compose-serving-stack points
every cluster's collector at the destination this module picks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from functions.common.contracts import SYSTEM_NAMESPACE
from functions.common.redact import url_credentials

DEFAULT_GATEWAY_REPLICAS = 2
ENV_SECRET_NAMESPACES = "MODELPLANE_SECRET_NAMESPACES"
DEFAULT_SECRET_NAMESPACES: frozenset[str] = frozenset({"crossplane-system", SYSTEM_NAMESPACE})


def secret_namespaces_from(setting: str | None) -> frozenset[str]:
    """The namespaces a destination's Secrets may live in, from the environment variable's
    value (a comma-separated list); unset or empty means the default."""
    names = frozenset(n.strip() for n in (setting or "").split(",") if n.strip())
    return names or DEFAULT_SECRET_NAMESPACES


def _shown(value: str) -> str:
    """A user's value as a refusal may quote it: never one that may hold a credential."""
    if "@" in value or url_credentials(value):
        return "the value given"
    return repr(value if len(value) <= 100 else value[:100] + "…")


# A DNS name or IPv4 address and a port: what a gRPC client dials.
_HOST_PORT_RE = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)"
    r":(?P<port>[0-9]{1,5})$"
)
# RFC 7230 token characters are wider, but a header name here becomes a YAML key in the
# collector config and an HTTP header: letters, digits and hyphens are all anyone needs.
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,99}$")
# Characters that would let an endpoint escape its place in the config: whitespace,
# quotes, braces (the collector expands ${...} in every string), backslashes.
_UNSAFE_IN_ENDPOINT_RE = re.compile(r"[\s\"'`{}\\$<>^|]")
# Kubernetes object names and Secret keys.
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
# What the XRD allows for an endpoint (maxLength).
ENDPOINT_LIMIT = 2048
# Headers the exporter sets itself; a Secret must not override them.
_RESERVED_HEADERS = frozenset({"content-type", "content-length", "content-encoding", "host"})


class ExporterType(StrEnum):
    OTLP_GRPC = "OTLPGRPC"
    OTLP_HTTP = "OTLPHTTP"
    PROMETHEUS_REMOTE_WRITE = "PrometheusRemoteWrite"


@dataclass(frozen=True)
class SecretKeyRef:
    name: str
    namespace: str
    key: str


@dataclass(frozen=True)
class SecretRef:
    name: str
    namespace: str


@dataclass(frozen=True)
class ExporterHeader:
    name: str
    secret: SecretKeyRef


@dataclass(frozen=True)
class ExporterTLS:
    insecure: bool = False
    insecure_skip_verify: bool = False
    ca: SecretRef | None = None
    client_cert: SecretRef | None = None


@dataclass(frozen=True)
class Exporter:
    type: ExporterType
    endpoint: str
    headers: tuple[ExporterHeader, ...] = ()
    tls: ExporterTLS = ExporterTLS()

    @property
    def carries_traces_and_logs(self) -> bool:
        """OTLP carries all three signals; Prometheus remote write carries metrics only."""
        return self.type is not ExporterType.PROMETHEUS_REMOTE_WRITE


@dataclass(frozen=True)
class Gateway:
    provider_config_name: str
    provider_config_kind: str
    endpoint: str
    token: SecretKeyRef
    replicas: int = DEFAULT_GATEWAY_REPLICAS


@dataclass(frozen=True)
class SloTargets:
    """Latency targets in seconds; None where the destination sets none."""

    time_to_first_token: float | None = None
    time_per_output_token: float | None = None


@dataclass(frozen=True)
class TelemetryDestination:
    name: str
    creation_timestamp: str
    gateway: Gateway
    exporter: Exporter
    rollup_enabled: bool = True
    slo: SloTargets = SloTargets()


class InvalidDestination(ValueError):
    """The destination cannot be used; `errors` name each field and the rule it breaks."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


# --- Parsing --------------------------------------------------------------------------


class _Reader:
    """Walks a plain dict, collecting every error with its field path."""

    def __init__(self, secret_namespaces: frozenset[str] = DEFAULT_SECRET_NAMESPACES) -> None:
        self.errors: list[str] = []
        self.secret_namespaces = secret_namespaces

    def secret_namespace(self, value: Any, path: str) -> str:
        namespace = self.string(value, path, _DNS_LABEL_RE, "a namespace name")
        if (
            namespace
            and _DNS_LABEL_RE.fullmatch(namespace)
            and (namespace not in self.secret_namespaces)
        ):
            self.fail(
                path,
                f"Secrets of a TelemetryDestination must be in one of "
                f"{', '.join(sorted(self.secret_namespaces))} (the platform's "
                f"{ENV_SECRET_NAMESPACES}), not {namespace!r}",
            )
        return namespace

    def fail(self, path: str, rule: str) -> None:
        self.errors.append(f"{path}: {rule}")

    def obj(self, value: Any, path: str, *, required: bool = True) -> dict | None:
        if value is None:
            if required:
                self.fail(path, "is required")
            return None
        if not isinstance(value, dict):
            self.fail(path, "must be an object")
            return None
        return value

    def string(
        self, value: Any, path: str, pattern: re.Pattern | None = None, what: str = ""
    ) -> str:
        if value is None or value == "":
            self.fail(path, "is required")
            return ""
        if not isinstance(value, str):
            self.fail(path, "must be a string")
            return ""
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(path, f"{_shown(value)} is not {what}")
        return value

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(path, "must be true or false")
            return default
        return value

    def secret_key_ref(self, value: Any, path: str) -> SecretKeyRef:
        ref = self.obj(value, path) or {}
        return SecretKeyRef(
            name=self.string(ref.get("name"), f"{path}.name", _DNS_SUBDOMAIN_RE, "a Secret name"),
            namespace=self.secret_namespace(ref.get("namespace"), f"{path}.namespace"),
            key=self.string(ref.get("key"), f"{path}.key", _SECRET_KEY_RE, "a Secret key"),
        )

    def secret_ref(self, value: Any, path: str) -> SecretRef | None:
        ref = self.obj(value, path, required=False)
        if ref is None:
            return None
        return SecretRef(
            name=self.string(ref.get("name"), f"{path}.name", _DNS_SUBDOMAIN_RE, "a Secret name"),
            namespace=self.secret_namespace(ref.get("namespace"), f"{path}.namespace"),
        )


def parse_destination(
    xr: dict, secret_namespaces: frozenset[str] = DEFAULT_SECRET_NAMESPACES
) -> TelemetryDestination:
    """A TelemetryDestination XR as typed values, or InvalidDestination listing every error.

    `secret_namespaces`: where its Secret references may point (the module docstring).
    Any shape at all gives a destination or InvalidDestination, never another exception:
    compose-serving-stack reads it for every cluster in the fleet."""
    try:
        return _parse_destination(xr, secret_namespaces)
    except InvalidDestination:
        raise
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
        raise InvalidDestination(
            [f"cannot be read ({type(err).__name__}: a field has the wrong type)"]
        ) from None


def _parse_destination(xr: Any, secret_namespaces: frozenset[str]) -> TelemetryDestination:
    read = _Reader(secret_namespaces)
    meta = read.obj(xr.get("metadata"), "metadata") or {}
    spec = read.obj(xr.get("spec"), "spec") or {}

    gateway_spec = read.obj(spec.get("gateway"), "spec.gateway") or {}
    provider = read.obj(gateway_spec.get("providerConfigRef"), "spec.gateway.providerConfigRef")
    provider = provider or {}
    provider_kind = provider.get("kind") or "ClusterProviderConfig"
    if provider_kind not in ("ClusterProviderConfig", "ProviderConfig"):
        read.fail(
            "spec.gateway.providerConfigRef.kind",
            f"{_shown(str(provider_kind))} is not one of ClusterProviderConfig, ProviderConfig",
        )
    replicas = gateway_spec.get("replicas", DEFAULT_GATEWAY_REPLICAS)
    if isinstance(replicas, float) and replicas.is_integer():
        replicas = int(replicas)  # protobuf Structs carry every number as a float
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 10:
        read.fail(
            "spec.gateway.replicas", f"{_shown(str(replicas))} is not an integer from 1 to 10"
        )
        replicas = DEFAULT_GATEWAY_REPLICAS
    gateway = Gateway(
        provider_config_name=read.string(
            provider.get("name"),
            "spec.gateway.providerConfigRef.name",
            _DNS_SUBDOMAIN_RE,
            "a provider config name",
        ),
        provider_config_kind=provider_kind,
        endpoint=read.string(
            gateway_spec.get("endpoint"),
            "spec.gateway.endpoint",
            _HOST_PORT_RE,
            "host:port (a DNS name or IPv4 address and a port)",
        ),
        token=read.secret_key_ref(
            gateway_spec.get("tokenSecretRef"), "spec.gateway.tokenSecretRef"
        ),
        replicas=replicas,
    )
    _check_port(read, gateway.endpoint, "spec.gateway.endpoint")

    exporter = _parse_exporter(read, read.obj(spec.get("exporter"), "spec.exporter") or {})

    rollup = read.obj(spec.get("rollup"), "spec.rollup", required=False) or {}
    slo_spec = read.obj(spec.get("slo"), "spec.slo", required=False) or {}
    slo = SloTargets(
        time_to_first_token=_positive_seconds(
            read, slo_spec.get("timeToFirstToken"), "spec.slo.timeToFirstToken"
        ),
        time_per_output_token=_positive_seconds(
            read, slo_spec.get("timePerOutputToken"), "spec.slo.timePerOutputToken"
        ),
    )
    destination = TelemetryDestination(
        name=meta.get("name", ""),
        creation_timestamp=meta.get("creationTimestamp", "") or "",
        gateway=gateway,
        exporter=exporter,
        rollup_enabled=read.boolean(rollup.get("enabled"), "spec.rollup.enabled", True),
        slo=slo,
    )
    if read.errors:
        raise InvalidDestination(read.errors)
    return destination


def _parse_exporter(read: _Reader, spec: dict) -> Exporter:
    raw_type = spec.get("type")
    try:
        exporter_type = ExporterType(raw_type)
    except ValueError:
        read.fail(
            "spec.exporter.type",
            f"{_shown(str(raw_type))} is not one of {', '.join(t.value for t in ExporterType)}",
        )
        exporter_type = ExporterType.OTLP_GRPC

    tls_spec = read.obj(spec.get("tls"), "spec.exporter.tls", required=False) or {}
    tls = ExporterTLS(
        insecure=read.boolean(tls_spec.get("insecure"), "spec.exporter.tls.insecure", False),
        insecure_skip_verify=read.boolean(
            tls_spec.get("insecureSkipVerify"), "spec.exporter.tls.insecureSkipVerify", False
        ),
        ca=read.secret_ref(tls_spec.get("caSecretRef"), "spec.exporter.tls.caSecretRef"),
        client_cert=read.secret_ref(
            tls_spec.get("clientCertSecretRef"), "spec.exporter.tls.clientCertSecretRef"
        ),
    )

    endpoint = read.string(spec.get("endpoint"), "spec.exporter.endpoint")
    if endpoint:
        _check_exporter_endpoint(read, exporter_type, endpoint, tls)

    headers: list[ExporterHeader] = []
    raw_headers = spec.get("headers") or []
    if not isinstance(raw_headers, list):
        read.fail("spec.exporter.headers", "must be a list")
        raw_headers = []
    if len(raw_headers) > 16:
        read.fail("spec.exporter.headers", f"has {len(raw_headers)} entries; at most 16")
    seen: set[str] = set()
    for i, raw in enumerate(raw_headers):
        path = f"spec.exporter.headers[{i}]"
        entry = read.obj(raw, path) or {}
        name = read.string(
            entry.get("name"), f"{path}.name", _HEADER_NAME_RE, "a header name ([A-Za-z0-9-]+)"
        )
        if name.lower() in _RESERVED_HEADERS:
            read.fail(f"{path}.name", f"{_shown(name)} is set by the exporter itself")
        if name and name.lower() in seen:
            read.fail(f"{path}.name", f"{_shown(name)} is listed twice (header names ignore case)")
        seen.add(name.lower())
        headers.append(
            ExporterHeader(
                name, read.secret_key_ref(entry.get("secretKeyRef"), f"{path}.secretKeyRef")
            )
        )
    return Exporter(exporter_type, endpoint, tuple(headers), tls)


def _check_exporter_endpoint(
    read: _Reader, kind: ExporterType, endpoint: str, tls: ExporterTLS
) -> None:
    path = "spec.exporter.endpoint"
    credentials = url_credentials(endpoint)
    if credentials or "@" in endpoint:
        # Named, never echoed: the refusal reaches a condition, an event and a log.
        found = ", ".join(credentials) or "an @ (user-info)"
        read.fail(
            path,
            f"must not carry credentials (found {found}); put them in a Secret and "
            "reference it from spec.exporter.headers",
        )
        return
    if _UNSAFE_IN_ENDPOINT_RE.search(endpoint):
        read.fail(path, "must not contain whitespace, quotes, braces, $, \\, <, >, ^ or |")
        return
    if len(endpoint) > ENDPOINT_LIMIT:
        read.fail(path, f"is {len(endpoint)} characters; at most {ENDPOINT_LIMIT}")
        return
    if kind is ExporterType.OTLP_GRPC:
        if not _HOST_PORT_RE.fullmatch(endpoint):
            read.fail(path, f"{_shown(endpoint)} is not host:port, which OTLPGRPC dials")
            return
        _check_port(read, endpoint, path)
        return
    try:
        parts = urlsplit(endpoint)
        hostname = parts.hostname
    except ValueError as err:  # e.g. an unclosed [IPv6 literal
        read.fail(path, f"{_shown(endpoint)} is not a URL ({err})")
        return
    if parts.scheme not in ("http", "https") or not hostname:
        read.fail(
            path,
            f"{_shown(endpoint)} is not an http:// or https:// URL, which {kind.value} posts to",
        )
        return
    try:
        parts.port  # noqa: B018  (raises on a port outside 0-65535)
    except ValueError:
        read.fail(path, f"{_shown(endpoint)} has a port outside 1-65535")
    if parts.scheme == "http" and not tls.insecure:
        read.fail(
            path,
            "http:// sends the fleet's telemetry in plain text; use https:// or set "
            "spec.exporter.tls.insecure: true to allow it",
        )


def _check_port(read: _Reader, endpoint: str, path: str) -> None:
    match = _HOST_PORT_RE.fullmatch(endpoint)
    if match and not 1 <= int(match["port"]) <= 65535:
        read.fail(path, f"port {match['port']} is outside 1-65535")


def _positive_seconds(read: _Reader, value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        read.fail(path, "must be a number of seconds")
        return None
    if not math.isfinite(value) or value <= 0:
        read.fail(path, f"{value!r} must be a positive, finite number of seconds")
        return None
    return float(value)


# --- One destination per fleet ----------------------------------------------------------


@dataclass(frozen=True)
class DestinationIdentity:
    """What deciding the winner needs: nothing from the spec, so a broken spec still counts."""

    name: str
    creation_timestamp: str  # RFC 3339 as the API server writes it; "" if unknown


def identity_of(xr: Any) -> DestinationIdentity:
    """Read from any shape: a destination whose metadata is broken still counts, by what
    can be read of it."""
    meta = xr.get("metadata") if isinstance(xr, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name, created = meta.get("name"), meta.get("creationTimestamp")
    return DestinationIdentity(
        name if isinstance(name, str) else "", created if isinstance(created, str) else ""
    )


def active_destination(destinations: list[DestinationIdentity]) -> DestinationIdentity:
    """The destination the fleet uses: the oldest, then the first by name.

    RFC 3339 timestamps in UTC (what the API server writes) sort as strings. A destination
    without a timestamp (not yet persisted, or a hand-written render input) sorts after
    every persisted one, so it can never displace a destination already in use.
    """
    if not destinations:
        raise ValueError("no TelemetryDestination to choose from")
    return min(
        destinations, key=lambda d: (d.creation_timestamp == "", d.creation_timestamp, d.name)
    )
