"""Pod templates and GPU claims: what every engine pod gets, whatever the backend.

Backends decide how many pods and which controller runs them; this module decides what
is inside one pod, so every shape carries the same contracts: the four modelplane.ai
labels, the engine container's port named `http` (and no other container's), the
engine's model on every process, probes sized for the model, a memory-backed /dev/shm,
a DRA claim per member pinned to the chosen node pool, a termination message that
falls back to the container's last log lines (`TERMINATION_MESSAGE_POLICY`), and the
user's own labels, env, args, probes and volumes kept as written.

Two sizes are decided here:
- The startup probe's budget. With a ModelCache the weights are on a volume of known
  size: `STARTUP_BASE_SECONDS` for the engine's own start (CUDA graphs, compilation,
  warm-up) plus `STARTUP_SECONDS_PER_GIB` for each GiB read (about 100 MiB/s from a
  ReadWriteMany volume, the slow end of what such volumes give). Without one the
  weights download at start at a speed nobody knows: 30 minutes, as before. A probe
  the user wrote is never replaced.
- /dev/shm. A container's default is 64 MiB, and NCCL (and vLLM's shared-memory
  broadcast between its processes) fails or falls back far slower over that with more
  than one GPU. Every engine pod gets a memory-backed emptyDir there of
  `SHM_GIB_PER_ACCELERATOR` GiB per accelerator in the pod (at least one's worth): the
  buffers grow with the local ranks, and the limit keeps a runaway writer from taking
  the node's memory (a memory-backed volume counts against the pod's memory). A user's
  own /dev/shm mount wins. A CPU pod (a member on a CPU-only pool) has no accelerator to
  size it by and its /dev/shm counts against the memory it asked for: it gets a quarter
  of that memory, at most `SHM_GIB_PER_ACCELERATOR` GiB (vLLM's CPU build moves tensors
  between its processes there; a single-process engine uses little of it).

A CPU member asks for cpu and memory instead of devices: its engine container gets them
as requests and as limits (a pod with equal requests and limits is Guaranteed, so the
kubelet's static CPU manager can pin its cores, which vLLM's CPU build's OpenMP threads
want), no ResourceClaim, and the engine's CPU image (engines.cpu_image). A limit the user
wrote stays; the request is ours, because placement counted room by it.
"""

from __future__ import annotations

import copy
import math
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
from functions.common.modelcache import ENV_MODEL_PATH, engine_argv, model_named_in
from functions.common.modelcache import VOLUME_NAME as CACHE_VOLUME
from functions.common.naming import dns_label, label_value
from functions.common.quantity import parse_quantity
from functions.compose_model_replica import adapters
from functions.compose_model_replica.engines import (
    Model,
    MultiNode,
    cpu_image,
    drain_seconds,
    launch_args,
    layout_flags,
)
from functions.compose_model_replica.model import (
    Engine,
    Member,
    ModelCacheMount,
    ModelReplica,
    engine_container_index,
)

# A model loads for minutes (weights download, compile, warm-up): the startup probe gives
# it its budget (see the module docstring) before the kubelet restarts it; only then do
# liveness checks begin.
HEALTH_PATH = "/health"
# An engine that exits on a bad flag or a bad model says why on its output, never in the
# termination-message file: with this policy the kubelet puts the output's last lines in
# the container's terminated state, where the member's health agent reads the start
# failure's reason (and the parked model's status and 503 show it). A user's own policy
# wins.
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURE_THRESHOLD = 180  # 30 minutes: the budget when the model's size is unknown
STARTUP_BASE_SECONDS = 600
STARTUP_SECONDS_PER_GIB = 10
GIB = 1024**3
# SGLang's /health generates one token and waits up to 20 s for it
# (SGLANG_HEALTH_CHECK_TIMEOUT) before it answers 503; the kubelet's default 1 s timeout
# would count every slow answer as a failure. vLLM's /health answers at once.
PROBE_TIMEOUT_SECONDS = {"sglang": 30}
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
SHM_GIB_PER_ACCELERATOR = 2
# vLLM's NIXL side channel (the KV handshake between prefill and decode pods) listens on
# this address, `localhost` by default: the other pod must reach it on the pod's own.
ENV_NIXL_SIDE_CHANNEL_HOST = "VLLM_NIXL_SIDE_CHANNEL_HOST"
# Readiness means "serving": the engine answers on its serving port.
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURE_THRESHOLD = 3
LIVENESS_PERIOD_SECONDS = 10
LIVENESS_FAILURE_THRESHOLD = 6
# Taking a serving pod out of rotation loses no request. A pod being deleted leaves its
# Service's and InferencePool's endpoints at once (EndpointSlice ready false; the
# endpoint picker drops a terminating pod), but whatever routes a request learns it a
# moment later, and until then requests still arrive. The kubelet runs a container's
# preStop hook first and sends SIGTERM only once it returns: the engine keeps serving
# for PRESTOP_SLEEP_SECONDS while the routes catch up, then finishes what it was given
# (its drain, engines.DRAIN_FLAG) and exits. The pod's grace period, which counts from
# the deletion and so includes the hook, covers the hook, the drain and the teardown;
# the kubelet kills what is left after it. The `sleep` action needs no program in the
# image (Kubernetes 1.30+, on by default). A hook or grace period the user wrote wins.
PRESTOP_SLEEP_SECONDS = 10
SHUTDOWN_MARGIN_SECONDS = 10

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
    # Environment entries, in order (a later one may refer to an earlier with $(NAME)).
    env: tuple[dict, ...] = ()
    multinode: MultiNode | None = None  # set for a Leader's and its Workers' pods
    sidecars: tuple[dict, ...] = ()
    extra_labels: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    # The label the workload controller gives every pod of one multi-node group (and
    # only that group): how a gang's pods are kept in one fabric.
    gang_label: str = ""
    # A prefill or decode pod: the engine moves KV between pods, as this side of the
    # transfer (vLLM's `kv_role`: engines.VLLM_KV_ROLES); "" for any other pod.
    kv_role: str = ""

    @property
    def kv_transfer(self) -> bool:
        return bool(self.kv_role)


def env_value(name: str, value: str) -> dict:
    return {"name": name, "value": value}


def env_from_field(name: str, field_path: str) -> dict:
    """A variable the kubelet fills from the pod itself (downward API): it never depends
    on the order of the container's other variables."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def env_from_label(name: str, label: str) -> dict:
    return env_from_field(name, f"metadata.labels['{label}']")


def _probe(port: str | int, period: int, failures: int, timeout: int | None = None) -> dict:
    probe: dict[str, Any] = {
        "httpGet": {"path": HEALTH_PATH, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
    }
    if timeout is not None:
        probe["timeoutSeconds"] = timeout
    return probe


def _add_probes(container: dict, engine_type: str, cache: ModelCacheMount | None) -> None:
    """Startup, readiness and liveness on /health, each only where the user has none."""
    timeout = PROBE_TIMEOUT_SECONDS.get(engine_type)
    container.setdefault(
        "startupProbe",
        _probe(PORT_NAME_HTTP, STARTUP_PERIOD_SECONDS, startup_failure_threshold(cache), timeout),
    )
    container.setdefault(
        "readinessProbe",
        _probe(PORT_NAME_HTTP, READINESS_PERIOD_SECONDS, READINESS_FAILURE_THRESHOLD, timeout),
    )
    container.setdefault(
        "livenessProbe",
        _probe(PORT_NAME_HTTP, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURE_THRESHOLD, timeout),
    )


def _add_prestop_sleep(spec: dict, container: dict) -> None:
    """Unless the user wrote a preStop hook, or a grace period no longer than the sleep
    (the API server refuses a sleep that is not shorter than the grace period; such a
    pod is meant to stop fast)."""
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace <= PRESTOP_SLEEP_SECONDS:
        return
    lifecycle = container.setdefault("lifecycle", {})
    lifecycle.setdefault("preStop", {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}})


def _serve(
    spec: dict, container: dict, engine_type: str, cache: ModelCacheMount | None, args: list[str]
) -> None:
    """A serving engine's way into rotation (its probes) and out of it (its drain)."""
    _add_probes(container, engine_type, cache)
    _add_drain(spec, container, engine_type, args)


def _sidecars(spec: dict, wiring: Wiring) -> list[dict]:
    """The backend's sidecars; in front of a serving engine (PrefillDecode's routing
    sidecar) each keeps forwarding for as long as the engine keeps serving."""
    sidecars = copy.deepcopy(list(wiring.sidecars))
    if wiring.serves_http:
        for sidecar in sidecars:
            _add_prestop_sleep(spec, sidecar)
    return sidecars


def _add_drain(spec: dict, container: dict, engine_type: str, args: list[str]) -> None:
    """A serving engine's way out of rotation (see PRESTOP_SLEEP_SECONDS): a grace
    period that covers the preStop sleep, the engine's drain and its teardown, and the
    sleep."""
    grace = PRESTOP_SLEEP_SECONDS + drain_seconds(engine_type, args) + SHUTDOWN_MARGIN_SECONDS
    spec.setdefault("terminationGracePeriodSeconds", grace)
    _add_prestop_sleep(spec, container)


def startup_failure_threshold(cache: ModelCacheMount | None) -> int:
    """Startup probe failures allowed (each `STARTUP_PERIOD_SECONDS` apart): the
    budget the model's weights need (see the module docstring)."""
    if cache is None or not cache.size:
        return STARTUP_FAILURE_THRESHOLD
    try:
        gib = math.ceil(parse_quantity(cache.size) / GIB)
    except ValueError:
        return STARTUP_FAILURE_THRESHOLD
    seconds = STARTUP_BASE_SECONDS + max(0, gib) * STARTUP_SECONDS_PER_GIB
    return math.ceil(seconds / STARTUP_PERIOD_SECONDS)


def shm_size_limit(accelerators: int) -> str:
    return f"{SHM_GIB_PER_ACCELERATOR * max(1, accelerators)}Gi"


def cpu_shm_size_limit(memory: str) -> str:
    """A CPU pod's /dev/shm: a quarter of its memory, at most one accelerator's worth."""
    mib = max(1, min(int(parse_quantity(memory) / 4 / 2**20), SHM_GIB_PER_ACCELERATOR * 1024))
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _cpu_resources(container: dict, member: Member) -> None:
    """A CPU member's request, as the container's requests and (unless written) limits."""
    resources = container.setdefault("resources", {})
    ours = {"cpu": member.cpu, "memory": member.memory}
    resources["requests"] = {**(resources.get("requests") or {}), **ours}
    resources["limits"] = {**ours, **(resources.get("limits") or {})}
    container["image"] = cpu_image(str(container.get("image") or ""))
    if not container["image"]:
        del container["image"]


def _size_engine(spec: dict, container: dict, member: Member) -> None:
    """/dev/shm for the engine; a CPU member's requests, limits and CPU image."""
    if member.cpu_only:
        _cpu_resources(container, member)
        _mount_shm(spec, container, 0, cpu_shm_size_limit(member.memory))
    else:
        _mount_shm(spec, container, member.accelerators)


def _mount_shm(spec: dict, container: dict, accelerators: int, size: str = "") -> None:
    """A memory-backed /dev/shm for the engine, unless the user mounts one."""
    if any(m.get("mountPath") == SHM_PATH for m in container.get("volumeMounts") or []):
        return
    if any(v.get("name") == SHM_VOLUME for v in spec.get("volumes") or []):
        return
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": SHM_VOLUME, "mountPath": SHM_PATH},
    ]
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {
            "name": SHM_VOLUME,
            "emptyDir": {"medium": "Memory", "sizeLimit": size or shm_size_limit(accelerators)},
        },
    ]


def source_model(replica: ModelReplica) -> Model:
    """The deployment's source as an engine loads it: a Hugging Face repository by its
    id (with the revision), any other URI as written (vLLM streams `s3://`/`gs://`)."""
    uri = replica.source.uri
    if uri.startswith("hf://"):
        return Model(uri.removeprefix("hf://"), replica.source.revision)
    return Model(uri, replica.source.revision)


def _member_argv(member: Member) -> tuple[list[str], list[str]]:
    """The engine container's command and args as the user wrote them."""
    containers = (member.template.get("spec") or {}).get("containers") or []
    if not containers:
        return [], []
    container = containers[engine_container_index(containers)]
    return (
        [str(a) for a in container.get("command") or []],
        [str(a) for a in container.get("args") or []],
    )


def engine_layout(engine: Engine) -> tuple[str, ...]:
    """The parallel layout a member of the engine spells out (the first that does), for
    the members that spell out none: ranks that disagree on it do not start."""
    for member in engine.members:
        found = layout_flags(engine.type, _member_argv(member)[1])
        if found:
            return tuple(found)
    return ()


def engine_model(replica: ModelReplica, engine: Engine) -> Model:
    """What every process of an engine loads, so every rank agrees: the model a member's
    template names (the user's flag wins on every member, not only its own), else the
    ModelCache's mount, else the deployment's source."""
    for member in engine.members:
        named = model_named_in(engine.type, engine_argv(engine.type, *_member_argv(member)))
        if named:
            return Model(named)
    if replica.model_cache is not None:
        return Model(replica.model_cache.mount_path)
    return source_model(replica)


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
        container["env"] = _merge_env(
            container.get("env") or [], _engine_env(replica, engine, wiring)
        )
        args = [str(a) for a in container.get("args") or []]
        command = [str(a) for a in container.get("command") or []]
        args = launch_args(
            engine.type,
            command,
            args,
            model=engine_model(replica, engine),
            port=port,
            served_name=replica.deployment,
            wiring=wiring,
            traces_endpoint=replica.cluster.traces_endpoint,
            accelerators=member.accelerators,
            written=engine_layout(engine) if wiring.multinode is not None else (),
        )
        _mount_cache(container, replica.model_cache)
        args = adapters.apply(
            spec,
            container,
            engine.type,
            replica,
            command=command,
            args=args,
            serves_http=wiring.serves_http,
        )
        _size_engine(spec, container, member)
        if args:
            container["args"] = args
        if wiring.serves_http:
            ports = [p for p in container.get("ports") or [] if p.get("name") != PORT_NAME_HTTP]
            container["ports"] = [
                {"name": PORT_NAME_HTTP, "containerPort": port, "protocol": "TCP"},
                *ports,
            ]
            _serve(spec, container, engine.type, replica.model_cache, args)
        if member.devices:
            resources = container.setdefault("resources", {})
            claims = [c for c in resources.get("claims") or [] if c.get("name") != claim]
            resources["claims"] = [{"name": claim}, *claims]
    containers.extend(_sidecars(spec, wiring))
    for container in containers:
        container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)
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


def _engine_env(replica: ModelReplica, engine: Engine, wiring: Wiring) -> list[dict]:
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
    if wiring.kv_transfer and engine.type == "vllm":
        env.append(env_from_field(ENV_NIXL_SIDE_CHANNEL_HOST, "status.podIP"))
    env += [dict(e) for e in wiring.env]
    return env
