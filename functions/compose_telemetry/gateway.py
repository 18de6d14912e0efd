"""The fleet's gateway collector: its config and the Kubernetes objects that run it.

Every cluster's collector pushes OTLP here with the fleet's bearer token; the gateway
refuses anything without it, bounds its memory, exports every cluster's series (and,
with an OTLP exporter, the engines' traces and logs) onward with the exporter the
destination names, and adds the fleet roll-up (rollup.py).

Credentials never enter the ConfigMap: the token is a mounted file the bearertokenauth
extension reads, exporter headers are `${env:...}` references to variables filled from
Secrets, TLS material is mounted files. The Secrets themselves are copied from the
control plane to the gateway's cluster by provider-kubernetes (`references.patchesFrom`),
so no credential passes through this function either.

Everything is delivered as provider-kubernetes namespaced Objects aimed at the provider
config the destination names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import yaml

from functions.common import sizing
from functions.common.contracts import (
    ANNOTATION_CONFIG_HASH,
    COLLECTOR_IMAGE,
    COLLECTOR_RUNTIME_ENV,
    GATEWAY_OTLP_GRPC_PORT,
    GATEWAY_OTLP_HTTP_PORT,
    TELEMETRY_TOKEN_SECRET_KEY,
    TELEMETRY_TOKEN_SECRET_NAME,
    memory_limiter,
)
from functions.common.naming import dns_label, resource_key, stable_hash
from functions.common.objects import provider_object
from functions.common.telemetrydestination import (
    Exporter,
    ExporterType,
    TelemetryDestination,
)
from functions.compose_telemetry import rollup

GATEWAY_NAMESPACE: Final = "modelplane-telemetry"
GATEWAY_NAME: Final = "modelplane-telemetry-gateway"
CONFIG_FILE: Final = "config.yaml"
CONFIG_DIR: Final = "/etc/modelplane/gateway"
TOKEN_DIR: Final = "/etc/modelplane/token"
EXPORTER_TLS_DIR: Final = "/etc/modelplane/exporter-tls"
EXPORTER_SECRET_NAME: Final = "modelplane-telemetry-exporter"
EXPORTER_TLS_SECRET_NAME: Final = "modelplane-telemetry-exporter-tls"
HEALTH_PORT: Final = 13133
TELEMETRY_PORT: Final = 8888
LABEL_APP: Final = "app.kubernetes.io/name"
LABEL_COMPONENT_VALUE: Final = "telemetry-gateway"

EXPORTER_IDS: Final = {
    ExporterType.OTLP_GRPC: "otlp_grpc/destination",
    ExporterType.OTLP_HTTP: "otlp_http/destination",
    ExporterType.PROMETHEUS_REMOTE_WRITE: "prometheus_remote_write/destination",
}


@dataclass(frozen=True)
class Listen:
    """Where the gateway listens and reads its token. Defaults are the in-cluster ones;
    tests running several collectors on one host pass free loopback ports."""

    host: str = "0.0.0.0"
    grpc_port: int = GATEWAY_OTLP_GRPC_PORT
    http_port: int = GATEWAY_OTLP_HTTP_PORT
    health_port: int = HEALTH_PORT
    telemetry_port: int = TELEMETRY_PORT
    snapshot_port: int = rollup.SNAPSHOT_PORT
    snapshot_scrape_interval: str = rollup.SNAPSHOT_SCRAPE_INTERVAL
    token_file: str = f"{TOKEN_DIR}/{TELEMETRY_TOKEN_SECRET_KEY}"
    exporter_tls_dir: str = EXPORTER_TLS_DIR
    # TLS served by the collector itself. In a cluster the endpoint clusters push to is
    # expected to be TLS-terminated in front of the Service (a bearer token over gRPC
    # needs TLS: the collector's client refuses to send it in plain text); the live test,
    # with nothing in front, serves TLS here.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None


def header_env(index: int) -> str:
    return f"MODELPLANE_EXPORTER_HEADER_{index}"


def _escape_config_string(value: str) -> str:
    # The collector expands ${...} in every config string; $$ is a literal $. Endpoints
    # are validated to carry no $ at all, this is the second line of defence.
    return value.replace("$", "$$")


def render_exporter(exporter: Exporter, listen: Listen = Listen()) -> dict[str, Any]:
    """The destination exporter's config block."""
    config: dict[str, Any] = {"endpoint": _escape_config_string(exporter.endpoint)}
    if exporter.headers:
        config["headers"] = {
            header.name: f"${{env:{header_env(i)}}}" for i, header in enumerate(exporter.headers)
        }
    tls: dict[str, Any] = {}
    if exporter.type is ExporterType.OTLP_GRPC:
        tls["insecure"] = exporter.tls.insecure
    if exporter.tls.insecure_skip_verify:
        tls["insecure_skip_verify"] = True
    if exporter.tls.ca is not None:
        tls["ca_file"] = f"{listen.exporter_tls_dir}/ca.crt"
    if exporter.tls.client_cert is not None:
        tls["cert_file"] = f"{listen.exporter_tls_dir}/tls.crt"
        tls["key_file"] = f"{listen.exporter_tls_dir}/tls.key"
    if tls:
        config["tls"] = tls
    if exporter.type is ExporterType.PROMETHEUS_REMOTE_WRITE:
        # Resource attributes (the cluster, the fleet scope) become labels, and names stay
        # the vocabulary's: no unit suffixes added on the way into Prometheus.
        config["resource_constant_labels"] = {"included": ["*"]}
        config["translation_strategy"] = "UnderscoreEscapingWithoutSuffixes"
        config["target_info"] = {"enabled": False}
    else:
        config["sending_queue"] = {"enabled": True}
        config["retry_on_failure"] = {"enabled": True}
    return config


def render_gateway_config(
    destination: TelemetryDestination, listen: Listen = Listen()
) -> dict[str, Any]:
    """The gateway collector's config for this destination."""
    exporter_id = EXPORTER_IDS[destination.exporter.type]
    server: dict[str, Any] = {"auth": {"authenticator": "bearertokenauth"}}
    if listen.tls_cert_file and listen.tls_key_file:
        server["tls"] = {"cert_file": listen.tls_cert_file, "key_file": listen.tls_key_file}
    receivers: dict[str, Any] = {
        "otlp": {
            "protocols": {
                "grpc": {"endpoint": f"{listen.host}:{listen.grpc_port}", **server},
                "http": {"endpoint": f"{listen.host}:{listen.http_port}", **server},
            }
        }
    }
    processors: dict[str, Any] = {
        "memory_limiter": memory_limiter(),
        "batch": {"send_batch_size": 8192, "timeout": "5s"},
    }
    exporters: dict[str, Any] = {exporter_id: render_exporter(destination.exporter, listen)}
    pipelines: dict[str, Any] = {
        "metrics/clusters": {
            "receivers": ["otlp"],
            "processors": ["memory_limiter", "batch"],
            "exporters": [exporter_id],
        }
    }
    if destination.exporter.carries_traces_and_logs:
        # Engines' traces and logs, as the clusters' collectors attributed them: onward
        # unchanged. (Prometheus remote write carries neither, and the clusters then
        # collect neither: compose-serving-stack reads the same exporter type.)
        for signal in ("traces", "logs"):
            pipelines[signal] = {
                "receivers": ["otlp"],
                "processors": ["memory_limiter", "batch"],
                "exporters": [exporter_id],
            }
    if destination.rollup_enabled:
        receivers[rollup.RECEIVER_SNAPSHOT] = rollup.snapshot_receiver(
            listen.snapshot_port, listen.snapshot_scrape_interval
        )
        processors.update(rollup.processors(destination.slo))
        exporters[rollup.EXPORTER_SNAPSHOT] = rollup.snapshot_exporter(listen.snapshot_port)
        pipelines["metrics/snapshot"] = {
            "receivers": ["otlp"],
            "processors": ["memory_limiter", *rollup.snapshot_pipeline_processors()],
            "exporters": [rollup.EXPORTER_SNAPSHOT],
        }
        pipelines["metrics/fleet"] = {
            "receivers": [rollup.RECEIVER_SNAPSHOT],
            "processors": ["memory_limiter", *rollup.fleet_pipeline_processors(), "batch"],
            "exporters": [exporter_id],
        }
    return {
        "extensions": {
            "health_check": {"endpoint": f"{listen.host}:{listen.health_port}"},
            "bearertokenauth": {"filename": listen.token_file},
        },
        "receivers": receivers,
        "processors": processors,
        "exporters": exporters,
        "service": {
            "extensions": ["health_check", "bearertokenauth"],
            "telemetry": {
                "metrics": {
                    "readers": [
                        {
                            "pull": {
                                "exporter": {
                                    "prometheus": {
                                        "host": listen.host,
                                        "port": listen.telemetry_port,
                                    }
                                }
                            }
                        }
                    ]
                }
            },
            "pipelines": pipelines,
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """YAML a person reads in a ConfigMap: no &anchors for repeated blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def config_yaml(config: dict[str, Any]) -> str:
    return yaml.dump(
        config, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=120
    )


# --- Manifests ----------------------------------------------------------------------------


def _labels() -> dict[str, str]:
    return {LABEL_APP: GATEWAY_NAME, "app.kubernetes.io/component": LABEL_COMPONENT_VALUE}


def _object(
    destination: TelemetryDestination,
    part: str,
    manifest: dict[str, Any],
    *,
    references: list[dict[str, Any]] | None = None,
    derive_readiness: bool = False,
) -> dict[str, Any]:
    return provider_object(
        name=dns_label(destination.name, "gateway", part),
        # Beside the token Secret, so the references that copy it stay in-namespace.
        namespace=destination.gateway.token.namespace,
        manifest=manifest,
        provider_config_ref={
            "name": destination.gateway.provider_config_name,
            "kind": destination.gateway.provider_config_kind,
        },
        references=references,
        derive_readiness=derive_readiness,
    )


def _copy_key(source_namespace: str, source_name: str, source_key: str, to_key: str) -> dict:
    return {
        "patchesFrom": {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": source_name,
            "namespace": source_namespace,
            "fieldPath": f"data[{source_key}]",
        },
        "toFieldPath": f"data[{to_key}]",
    }


def _secret_manifest(name: str) -> dict[str, Any]:
    # Data arrives through references; the manifest itself carries none.
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": GATEWAY_NAMESPACE, "labels": _labels()},
        "type": "Opaque",
    }


def render_gateway_objects(destination: TelemetryDestination) -> dict[str, dict[str, Any]]:
    """Every composed resource, by its composed-resource key."""
    config_text = config_yaml(render_gateway_config(destination))
    exporter = destination.exporter
    token = destination.gateway.token
    objects: dict[str, dict[str, Any]] = {}

    objects[resource_key("gateway", "namespace")] = _object(
        destination,
        "namespace",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE}},
    )
    objects[resource_key("gateway", "serviceaccount")] = _object(
        destination,
        "serviceaccount",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "labels": _labels()},
            "automountServiceAccountToken": False,
        },
    )
    objects[resource_key("gateway", "config")] = _object(
        destination,
        "config",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "labels": _labels()},
            "data": {CONFIG_FILE: config_text},
        },
    )
    objects[resource_key("gateway", "token")] = _object(
        destination,
        "token",
        _secret_manifest(TELEMETRY_TOKEN_SECRET_NAME),
        references=[_copy_key(token.namespace, token.name, token.key, TELEMETRY_TOKEN_SECRET_KEY)],
    )
    if exporter.headers:
        objects[resource_key("gateway", "exporter-headers")] = _object(
            destination,
            "exporter-headers",
            _secret_manifest(EXPORTER_SECRET_NAME),
            references=[
                _copy_key(h.secret.namespace, h.secret.name, h.secret.key, header_env(i))
                for i, h in enumerate(exporter.headers)
            ],
        )
    tls_references = []
    if exporter.tls.ca is not None:
        tls_references.append(
            _copy_key(exporter.tls.ca.namespace, exporter.tls.ca.name, "ca.crt", "ca.crt")
        )
    if exporter.tls.client_cert is not None:
        cert = exporter.tls.client_cert
        tls_references.append(_copy_key(cert.namespace, cert.name, "tls.crt", "tls.crt"))
        tls_references.append(_copy_key(cert.namespace, cert.name, "tls.key", "tls.key"))
    if tls_references:
        objects[resource_key("gateway", "exporter-tls")] = _object(
            destination,
            "exporter-tls",
            _secret_manifest(EXPORTER_TLS_SECRET_NAME),
            references=tls_references,
        )
    objects[resource_key("gateway", "deployment")] = _object(
        destination,
        "deployment",
        _deployment(destination, config_text, has_tls=bool(tls_references)),
        derive_readiness=True,
    )
    objects[resource_key("gateway", "service")] = _object(
        destination,
        "service",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "labels": _labels()},
            "spec": {
                "selector": _labels(),
                "ports": [
                    {
                        "name": "otlp-grpc",
                        "port": GATEWAY_OTLP_GRPC_PORT,
                        "targetPort": "otlp-grpc",
                        "appProtocol": "grpc",
                    },
                    {
                        "name": "otlp-http",
                        "port": GATEWAY_OTLP_HTTP_PORT,
                        "targetPort": "otlp-http",
                    },
                ],
            },
        },
    )
    return objects


def _deployment(destination: TelemetryDestination, config_text: str, *, has_tls: bool) -> dict:
    env: list[dict[str, Any]] = [
        *({"name": name, "value": value} for name, value in COLLECTOR_RUNTIME_ENV),
        {"name": rollup.POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    env += [
        {
            "name": header_env(i),
            "valueFrom": {"secretKeyRef": {"name": EXPORTER_SECRET_NAME, "key": header_env(i)}},
        }
        for i, _ in enumerate(destination.exporter.headers)
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": GATEWAY_NAME}},
        {
            "name": "token",
            "secret": {
                "secretName": TELEMETRY_TOKEN_SECRET_NAME,
                "items": [{"key": TELEMETRY_TOKEN_SECRET_KEY, "path": TELEMETRY_TOKEN_SECRET_KEY}],
            },
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
    ]
    if has_tls:
        volumes.append({"name": "exporter-tls", "secret": {"secretName": EXPORTER_TLS_SECRET_NAME}})
        mounts.append({"name": "exporter-tls", "mountPath": EXPORTER_TLS_DIR, "readOnly": True})
    probe = {"httpGet": {"path": "/", "port": "health"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "labels": _labels()},
        "spec": {
            "replicas": destination.gateway.replicas,
            "selector": {"matchLabels": _labels()},
            "template": {
                "metadata": {
                    "labels": _labels(),
                    # A changed config rolls the pods; the collector does not reload it.
                    "annotations": {ANNOTATION_CONFIG_HASH: stable_hash(config_text)},
                },
                "spec": {
                    "serviceAccountName": GATEWAY_NAME,
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "collector",
                            "image": COLLECTOR_IMAGE,
                            "args": [f"--config={CONFIG_DIR}/{CONFIG_FILE}"],
                            "env": env,
                            "ports": [
                                {"name": "otlp-grpc", "containerPort": GATEWAY_OTLP_GRPC_PORT},
                                {"name": "otlp-http", "containerPort": GATEWAY_OTLP_HTTP_PORT},
                                {"name": "health", "containerPort": HEALTH_PORT},
                                {"name": "telemetry", "containerPort": TELEMETRY_PORT},
                            ],
                            "readinessProbe": probe,
                            "livenessProbe": probe,
                            "resources": sizing.resources(sizing.COLLECTOR),
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }
