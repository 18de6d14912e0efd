"""Pod templates and GPU claims: what every engine pod gets, whatever the backend.

Backends decide how many pods and which controller runs them; this module decides what
is inside one pod, so every shape carries the same contracts: the four modelplane.ai
labels, the engine container's port named `http` (and no other container's), probes
sized for a model that takes minutes to load, a DRA claim per member pinned to the
chosen node pool, and the user's own labels, env, args and volumes kept as written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from functions.common.contracts import (
    ANNOTATION_DEFINITION_HASH,
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_PICKER_ENGINE_TYPE,
    LABEL_ROLE,
    LABEL_SERVING,
    PICKER_ENGINE_TYPES,
    PORT_NAME_HTTP,
)
from functions.common.modelcache import ENV_MODEL_PATH
from functions.common.modelcache import VOLUME_NAME as CACHE_VOLUME
from functions.common.naming import dns_label, label_value
from functions.compose_model_replica.engines import MultiNode, engine_args
from functions.compose_model_replica.model import (
    Engine,
    Member,
    ModelCacheMount,
    ModelReplica,
    engine_container_index,
)

# A model loads for minutes (weights download, compile, warm-up): the startup probe gives
# it 30 minutes before the kubelet restarts it; only then do liveness checks begin.
HEALTH_PATH = "/health"
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURE_THRESHOLD = 180
# Readiness means "serving": the engine answers on its serving port.
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURE_THRESHOLD = 3
LIVENESS_PERIOD_SECONDS = 10
LIVENESS_FAILURE_THRESHOLD = 6

DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"
ENV_MODEL_URI = "MODELPLANE_MODEL_URI"
ENV_MODEL_REVISION = "MODELPLANE_MODEL_REVISION"
ENV_MODEL_TOKEN = "HF_TOKEN"


def pod_labels(replica: ModelReplica, engine: Engine, role: str) -> dict[str, str]:
    labels = {
        LABEL_SERVING: replica.serving_label,
        LABEL_DEPLOYMENT: label_value(replica.deployment),
        LABEL_ENGINE: engine.type,
        LABEL_ROLE: role,
    }
    picker_type = PICKER_ENGINE_TYPES.get(engine.type)
    if picker_type is not None:
        labels[LABEL_PICKER_ENGINE_TYPE] = picker_type
    return labels


def claim_template_name(replica: ModelReplica, engine: Engine, member: Member) -> str:
    # Named after the deployment, not the replica: the member cluster holds one replica
    # of a deployment, and names that agree across members keep manifests comparable.
    return dns_label(replica.deployment, engine.name, member.role.lower(), "gpus")


def resource_claim_template(replica: ModelReplica, engine: Engine, member: Member) -> dict:
    """The member's device requests as a DRA ResourceClaimTemplate (one claim per pod)."""
    device_class = replica.node_pool.driver or DEFAULT_DEVICE_CLASS
    requests = []
    for device in member.devices:
        exactly: dict[str, Any] = {
            # A NIC beside the GPUs names its own class; the rest are the pool's devices.
            "deviceClassName": device.device_class or device_class,
            "allocationMode": "ExactCount",
            "count": device.count,
        }
        if device.selectors:
            exactly["selectors"] = [{"cel": {"expression": s}} for s in device.selectors]
        requests.append({"name": device.name, "exactly": exactly})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(replica, engine, member),
            "namespace": replica.namespace,
            "labels": {k: v for k, v in pod_labels(replica, engine, member.role).items()},
        },
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


@dataclass(frozen=True)
class Wiring:
    """What a backend adds to one member's pods beyond the common contracts."""

    serves_http: bool = True  # False for multi-node workers: they do not serve requests
    env: tuple[tuple[str, str], ...] = ()
    multinode: MultiNode | None = None  # set for a Leader's and its Workers' pods
    sidecars: tuple[dict, ...] = ()
    extra_labels: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    # The label the workload controller gives every pod of one multi-node group (and
    # only that group): how a gang's pods are kept in one fabric.
    gang_label: str = ""


def _probe(port: str | int, period: int, failures: int) -> dict:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def _merge_env(existing: list[dict], added: list[dict]) -> list[dict]:
    # Ours first (so the user's may refer to them with $(NAME)); the user's value wins
    # where a name is set twice.
    user_names = {e.get("name") for e in existing}
    return [e for e in added if e["name"] not in user_names] + existing


def pod_template(
    replica: ModelReplica, engine: Engine, member: Member, wiring: Wiring | None = None
) -> dict:
    """One member's pod template with every contract applied."""
    wiring = wiring or Wiring()
    template = copy.deepcopy(member.template)
    metadata = template.setdefault("metadata", {})
    user_meta = replica.pod_metadata or {}
    labels = {**(user_meta.get("labels") or {}), **(metadata.get("labels") or {})}
    labels.update(wiring.extra_labels)
    labels.update(pod_labels(replica, engine, member.role))
    metadata["labels"] = dict(sorted(labels.items()))
    annotations = {**(user_meta.get("annotations") or {}), **(metadata.get("annotations") or {})}
    # The member's agent counts start failures per definition from this annotation; the
    # deployment parks a model on failures of the definition it is running now.
    annotations[ANNOTATION_DEFINITION_HASH] = replica.definition_hash
    metadata["annotations"] = dict(sorted(annotations.items()))

    spec = template["spec"]
    port = replica.member_port(engine, member)
    containers = spec["containers"]
    engine_index = engine_container_index(containers)
    claim = "gpus"
    for i, container in enumerate(containers):
        if i != engine_index:
            continue
        container["env"] = _merge_env(container.get("env") or [], _engine_env(replica, wiring))
        args = list(container.get("args") or [])
        command = list(container.get("command") or [])
        args += engine_args(
            engine.type,
            command,
            args,
            port=port,
            served_name=replica.deployment,
            wiring=wiring,
            model_path=replica.model_cache.mount_path if replica.model_cache else "",
            traces_endpoint=replica.cluster.traces_endpoint,
        )
        _mount_cache(container, replica.model_cache)
        if args:
            container["args"] = args
        if wiring.serves_http:
            ports = [p for p in container.get("ports") or [] if p.get("name") != PORT_NAME_HTTP]
            container["ports"] = [
                {"name": PORT_NAME_HTTP, "containerPort": port, "protocol": "TCP"},
                *ports,
            ]
            container.setdefault(
                "startupProbe",
                _probe(PORT_NAME_HTTP, STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD),
            )
            container.setdefault(
                "readinessProbe",
                _probe(PORT_NAME_HTTP, READINESS_PERIOD_SECONDS, READINESS_FAILURE_THRESHOLD),
            )
            container.setdefault(
                "livenessProbe",
                _probe(PORT_NAME_HTTP, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURE_THRESHOLD),
            )
        if member.devices:
            resources = container.setdefault("resources", {})
            claims = [c for c in resources.get("claims") or [] if c.get("name") != claim]
            resources["claims"] = [{"name": claim}, *claims]
    containers.extend(copy.deepcopy(list(wiring.sidecars)))
    _add_cache_volume(spec, replica.model_cache)

    if member.devices:
        pod_claims = [c for c in spec.get("resourceClaims") or [] if c.get("name") != claim]
        spec["resourceClaims"] = [
            {
                "name": claim,
                "resourceClaimTemplateName": claim_template_name(replica, engine, member),
            },
            *pod_claims,
        ]
    if replica.node_pool.node_selector:
        spec["nodeSelector"] = {
            **(spec.get("nodeSelector") or {}),
            **replica.node_pool.node_selector,
        }
    if wiring.gang_label and replica.node_pool.fabrics and replica.node_pool.fabric_node_label:
        _pin_to_fabrics(spec, replica, wiring.gang_label)
    if replica.tolerations:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *replica.tolerations]
    if wiring.scheduler_name:
        spec["schedulerName"] = wiring.scheduler_name
    return {"metadata": metadata, "spec": spec}


def _pin_to_fabrics(spec: dict, replica: ModelReplica, gang_label: str) -> None:
    """Keep a multi-node group on the fabrics placement chose, all of it on one.

    One fabric: a nodeSelector says it. Several (the cluster's groups were spread over
    them): node affinity allows only those, and a required pod affinity with the fabric
    label as topology key and the group's own label as `matchLabelKeys` keeps each
    group's pods together. The group's first pod has no peer yet; kube-scheduler lets a
    pod that matches its own affinity term go first, and the rest follow it.
    """
    label, fabrics = replica.node_pool.fabric_node_label, list(replica.node_pool.fabrics)
    if len(fabrics) == 1:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), label: fabrics[0]}
        return
    affinity = spec.setdefault("affinity", {})
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {}
    )
    ours = {"key": label, "operator": "In", "values": fabrics}
    # Terms are ORed and expressions in a term ANDed: ours goes into every user term.
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), ours]}
        for term in terms
    ]
    pod_terms = affinity.setdefault("podAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    )
    pod_terms.append(
        {
            "labelSelector": {"matchLabels": {LABEL_SERVING: replica.serving_label}},
            "matchLabelKeys": [gang_label],
            "topologyKey": label,
        }
    )


def _add_cache_volume(spec: dict, cache: ModelCacheMount | None) -> None:
    if cache is None:
        return
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != CACHE_VOLUME]
    spec["volumes"] = [
        *volumes,
        {
            "name": CACHE_VOLUME,
            "persistentVolumeClaim": {"claimName": cache.claim_name, "readOnly": True},
        },
    ]


def _mount_cache(container: dict, cache: ModelCacheMount | None) -> None:
    """The cache's weights, read-only, where the engine's model path points."""
    if cache is None:
        return
    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != CACHE_VOLUME]
    container["volumeMounts"] = [
        *mounts,
        {"name": CACHE_VOLUME, "mountPath": cache.mount_path, "readOnly": True},
    ]


def _engine_env(replica: ModelReplica, wiring: Wiring) -> list[dict]:
    env: list[dict] = [{"name": ENV_MODEL_URI, "value": replica.source.uri}]
    if replica.source.revision:
        env.append({"name": ENV_MODEL_REVISION, "value": replica.source.revision})
    secret = replica.source.credentials_secret_ref
    if secret is not None:
        # A reference, never the value: the token stays in the Secret.
        env.append(
            {
                "name": ENV_MODEL_TOKEN,
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }
        )
    if replica.model_cache is not None:
        env.append({"name": ENV_MODEL_PATH, "value": replica.model_cache.mount_path})
    env += [{"name": name, "value": value} for name, value in wiring.env]
    return env
