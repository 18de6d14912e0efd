"""The typed ModelReplica: the function's only input, checked before anything is built.

compose-model-deployment writes ModelReplicas, so most input is already sound; what is
checked here is what the backends rely on and the XRD cannot say: which combinations of
roles make a serving shape, that a port does not collide with the routing sidecar, and
that nobody else's container claims the engine's port name. Every rejection names the
field and the rule (`InvalidReplica`), because a ModelReplica that cannot be composed
must say why in `kubectl describe`, not in a log.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from functions.common import answers, pod_shape, tenancy
from functions.common.adaptivepolicy import manages_traffic
from functions.common.contracts import (
    LABEL_DEPLOYMENT,
    LABEL_REVISION,
    LABEL_SERVING,
    PORT_DECODE_ENGINE,
    PORT_NAME_HTTP,
    PORT_SERVING,
    ROLE_DECODE,
    ROLE_LEADER,
    ROLE_PREFILL,
    ROLE_STANDALONE,
    ROLE_WORKER,
    SERVING_PREFILL_DECODE,
    SERVING_UNIFIED,
    STACK_DYNAMO,
    STACK_STANDARD,
)
from functions.common.naming import (
    cluster_name_problem,
    is_label_value,
    is_object_name,
    label_value,
)
from functions.common.pod_policy import LABEL_AUDIT as LABEL_PSA_AUDIT
from functions.common.pod_policy import LABEL_ENFORCE as LABEL_PSA_ENFORCE
from functions.common.pod_policy import LABEL_WARN as LABEL_PSA_WARN
from functions.common.quantity import parse_quantity
from functions.common.reader import InputError, Spec, read
from functions.common.redact import url_credentials
from functions.common.served_name import engine_container_index
from functions.compose_model_replica.adapters import AdapterCapacity

# The reason a replica waiting for its ModelCache gives (its conditions and its 503).
REASON_WAITING_FOR_CACHE = answers.REASON_WAITING_FOR_CACHE


class InvalidReplica(InputError):
    """A ModelReplica that cannot be composed: `path: rule`."""


def _whole_number(value: Any) -> Any:
    """The XRD's `integer`, checked again: a number without a fraction (a protobuf Struct
    sends 2 as 2.0), never a bool or a string, which pydantic's lax mode would convert."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be an integer, got {str(value)[:40]!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"must be a whole number, got {value!r}")
    return int(value)


# The XRD's bounds, checked again (apis/modelreplicas/definition.yaml).
Replicas = Annotated[int, BeforeValidator(_whole_number), Field(ge=0, le=1000)]
Port = Annotated[int, BeforeValidator(_whole_number), Field(ge=1, le=65535)]
WorkerNodes = Annotated[int, BeforeValidator(_whole_number), Field(ge=0, le=63)]
DeviceCount = Annotated[int, BeforeValidator(_whole_number), Field(ge=1)]


class ProviderConfigRef(Spec):
    name: str
    kind: str = "ClusterProviderConfig"


class PodSecurity(Spec):
    """The tenant Namespace's Pod Security Admission levels (functions/common/pod_policy.py)."""

    level: Literal["baseline", "restricted"] = "baseline"
    enforce: Literal["baseline", "restricted", "privileged"] = "baseline"

    def namespace_labels(self) -> dict[str, str]:
        return {
            LABEL_PSA_ENFORCE: self.enforce,
            LABEL_PSA_WARN: self.level,
            LABEL_PSA_AUDIT: self.level,
        }


class Cluster(Spec):
    name: str
    region: str = ""
    stack: str
    provider_config_ref: ProviderConfigRef = Field(alias="providerConfigRef")
    traces_endpoint: str = Field(default="", alias="tracesEndpoint")
    pod_security: PodSecurity = Field(default_factory=PodSecurity, alias="podSecurity")


class NodePool(Spec):
    name: str
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    driver: str = ""
    fabric_node_label: str = Field(default="", alias="fabricNodeLabel")
    fabrics: tuple[str, ...] = ()


class DeviceRequest(Spec):
    name: str
    count: DeviceCount
    selectors: tuple[str, ...] = ()
    device_class: str = Field(default="", alias="deviceClassName")  # "": the pool's driver


class Member(Spec):
    role: str
    worker_nodes: WorkerNodes = Field(default=0, alias="workerNodes")
    devices: tuple[DeviceRequest, ...] = ()
    template: dict[str, Any] = Field(default_factory=dict)
    # A CPU member (on a CPU-only pool): what each pod asks for instead of devices.
    cpu: str = ""
    memory: str = ""

    @property
    def cpu_only(self) -> bool:
        return bool(self.cpu)

    @property
    def accelerators(self) -> int:
        """Accelerators per pod: the requests that name no DeviceClass of their own.

        The XRDs say so (`deviceClassName` unset: the pool's accelerators, the devices
        counted in whole nodes; set: a device beside them, such as an RDMA NIC), and
        placement counts nodes by the same rule. Only these are engine ranks: 8 GPUs and
        16 NICs are a tensor-parallel size of 8.
        """
        return sum(d.count for d in self.devices if not d.device_class)


class Engine(Spec):
    name: str
    type: str
    port: Port | None = None
    members: tuple[Member, ...] = Field(min_length=1, max_length=4)

    def member(self, role: str) -> Member | None:
        return next((m for m in self.members if m.role == role), None)


class SecretKeyRef(Spec):
    name: str
    key: str


class Source(Spec):
    uri: str
    revision: str = ""
    credentials_secret_ref: SecretKeyRef | None = Field(default=None, alias="credentialsSecretRef")


class ModelCacheMount(Spec):
    """The ModelCache volume on this cluster: engine pods mount it read-only."""

    name: str
    claim_name: str = Field(alias="claimName")
    mount_path: str = Field(alias="mountPath")
    # False: the weights are not on this cluster yet (the download is pending, running or
    # failed) and nothing serves here; no engine pod starts (or holds a GPU) until they
    # are. Absent (a ModelReplica written before the field): not gated.
    ready: bool = True
    # The cache's spec.size (a quantity): what the engine's startup budget is sized by.
    size: str = ""


class Unavailable(Spec):
    reason: str
    message: str


class Shape(StrEnum):
    """The serving shapes a ModelReplica can take; each has one backend per stack."""

    STANDALONE = "Standalone"
    LEADER_WORKER = "LeaderWorker"
    PREFILL_DECODE = "PrefillDecode"


class ModelReplica(Spec):
    name: str
    namespace: str
    deployment: str
    cluster: Cluster
    node_pool: NodePool = Field(alias="nodePool")
    replicas: Replicas
    definition_hash: str = Field(alias="definitionHash")
    # The deployment's revision this replica runs (compose-model-deployment's rollout.py);
    # "" for a replica composed before rollouts.
    revision: str = Field(default="", max_length=64, pattern=r"^[a-z0-9]*$")
    source: Source
    profile: str = ""
    serving_mode: str = Field(default=SERVING_UNIFIED, alias="servingMode")
    tolerations: tuple[dict[str, Any], ...] = ()
    pod_metadata: dict[str, Any] = Field(default_factory=dict, alias="podMetadata")
    engines: tuple[Engine, ...]
    # The AdaptivePolicy spec without `workload`; kept as data because it is copied,
    # not interpreted, except for this member's ceiling.
    autoscaling: dict[str, Any] | None = None
    unavailable: Unavailable | None = None
    model_cache: ModelCacheMount | None = Field(default=None, alias="modelCache")
    # An on-demand model with no ready replica here: its route leads to the member's
    # activator, which asks for a placement attempt and holds the request for it.
    activator: bool = False
    # The base accepts LoRA adapters (engine flags and the adapters' volume); None: not.
    adapters: AdapterCapacity | None = None
    # metadata.uid, as the API server gave it ("" where there is none, as in a render
    # without one): the on-demand route's token comes from it.
    uid: str = Field(default="", max_length=64, pattern=r"^[0-9A-Za-z-]*$")

    @property
    def serving_label(self) -> str:
        """The LABEL_SERVING value of everything this replica composes (label-safe)."""
        return label_value(self.name)

    def labels(self) -> dict[str, str]:
        """The labels every object this replica composes carries, as valid label values
        for any valid name (a 253-character deployment name is shortened)."""
        return {LABEL_SERVING: self.serving_label, LABEL_DEPLOYMENT: label_value(self.deployment)}

    def workload_labels(self) -> dict[str, str]:
        """A workload's labels: the revision besides, so its observed copy says which
        revision was applied (on the workload's metadata only: a label on the pod
        template would restart every pod)."""
        return {**self.labels(), **({LABEL_REVISION: self.revision} if self.revision else {})}

    @property
    def shape(self) -> Shape:
        if self.serving_mode == SERVING_PREFILL_DECODE:
            return Shape.PREFILL_DECODE
        if self.engines[0].member(ROLE_LEADER) is not None:
            return Shape.LEADER_WORKER
        return Shape.STANDALONE

    @property
    def waiting_for_cache(self) -> bool:
        """The model's weights are not on this cluster yet: no engine pod starts."""
        return self.model_cache is not None and not self.model_cache.ready

    @property
    def routes_elsewhere(self) -> bool:
        """The route also carries other clusters' backends (managed traffic), which may
        serve while this cluster cannot."""
        return manages_traffic(self.autoscaling) and any(
            c.get("name") != self.cluster.name
            for c in (self.autoscaling or {}).get("clusters") or []
        )

    @property
    def answer(self) -> Unavailable | None:
        """Why requests are answered at once with a 503 instead of being routed: the
        model is parked or fits nowhere (compose-model-deployment says so), or its
        weights are not on this cluster yet and no other cluster's backend is on the
        route."""
        if self.unavailable is not None:
            return self.unavailable
        if self.waiting_for_cache and not self.routes_elsewhere:
            assert self.model_cache is not None
            return Unavailable(
                reason=REASON_WAITING_FOR_CACHE,
                message=(
                    f"the model's weights (ModelCache {self.model_cache.name}) are not on "
                    f"cluster {self.cluster.name} yet; it starts serving once they are"
                ),
            )
        return None

    @property
    def desired_replicas(self) -> int:
        """What should run now: nothing while parked or unplaceable, or until the
        ModelCache is Ready here."""
        return 0 if self.unavailable is not None or self.waiting_for_cache else self.replicas

    def member_port(self, engine: Engine, member: Member) -> int:
        """The `http` port of a member's engine container.

        `engines[].port` is the engine's; an engine holding both the prefill and the
        decode member of PrefillDecode serves decode on 8001 (behind the sidecar) and
        prefill on 8000, since the two run in different pods.
        """
        shared = len(engine.members) > 1 and self.shape is Shape.PREFILL_DECODE
        if member.role == ROLE_DECODE:
            return engine.port if engine.port is not None and not shared else PORT_DECODE_ENGINE
        return engine.port if engine.port is not None and not shared else PORT_SERVING

    def member_max_replicas(self) -> int | None:
        """This member's ceiling from the autoscaling member list, if it is listed."""
        for cluster in (self.autoscaling or {}).get("clusters", []):
            if cluster.get("name") == self.cluster.name:
                return int(cluster.get("maxReplicas", 0))
        return None


_ROLES_BY_SHAPE = {
    frozenset({ROLE_STANDALONE}): Shape.STANDALONE,
    frozenset({ROLE_LEADER, ROLE_WORKER}): Shape.LEADER_WORKER,
}


def _credential_in(node: Any, path: str, depth: int = 0) -> tuple[str, list[str]] | None:
    """The first string under `node` that carries a URL credential: its path and what."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, str):
        found = url_credentials(node)
        if not found and _BARE_USERINFO.search(node):
            found = ["user-info (user:password@)"]  # host:port without a scheme
        return (path, found) if found else None
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in items:
        step = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{str(key)[:63]}"
        hit = _credential_in(value, step, depth + 1)
        if hit is not None:
            return hit
    return None


_MAX_DEPTH = 64
_BARE_USERINFO = re.compile(r"(^|[\s=,;'\"])[^\s/@:'\"]+:[^\s/@'\"]+@[^\s/@]")


def parse(xr: dict) -> ModelReplica:
    """The ModelReplica in an observed XR, or InvalidReplica naming the field and rule."""
    meta = xr.get("metadata", {})
    spec = xr.get("spec") or {}
    leaked = _credential_in(spec, "spec")
    if leaked is not None:
        path, found = leaked
        # Every string here may be copied onto the member or into a message: a URL with a
        # password is refused by path, its value never repeated.
        raise InvalidReplica(path, f"must not carry credentials (found {', '.join(found)})")
    replica = read(
        ModelReplica,
        {
            **spec,
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
        },
        error=InvalidReplica,
        root="spec",
    )
    _check(replica)
    return replica


def _check(replica: ModelReplica) -> None:
    if not replica.name or not replica.namespace:
        raise InvalidReplica("metadata", "a ModelReplica needs a name and a namespace")
    problem = tenancy.namespace_problem(replica.namespace, "run models")
    if problem is not None:
        raise InvalidReplica("metadata.namespace", problem)
    if not is_object_name(replica.deployment):
        # It names objects and labels on the member; never echoed (it may be anything).
        raise InvalidReplica(
            "spec.deployment", "must be a ModelDeployment's name (a DNS subdomain, at most 253)"
        )
    for key, value in replica.node_pool.node_selector.items():
        if not is_label_value(value):
            # Not echoed: it is copied onto pods, and may be anything.
            raise InvalidReplica(
                f"spec.nodePool.nodeSelector[{key[:63]}]", "must be a label value (at most 63)"
            )
    if replica.node_pool.driver and not (
        len(replica.node_pool.driver) <= 63 and is_object_name(replica.node_pool.driver)
    ):
        raise InvalidReplica("spec.nodePool.driver", "must be a DRA driver name (a DNS subdomain)")
    cluster_problem = cluster_name_problem(replica.cluster.name)
    if cluster_problem is not None:
        raise InvalidReplica("spec.cluster.name", cluster_problem)
    if replica.cluster.stack not in (STACK_STANDARD, STACK_DYNAMO):
        raise InvalidReplica("spec.cluster.stack", f"must be {STACK_STANDARD} or {STACK_DYNAMO}")
    if not replica.engines:
        raise InvalidReplica("spec.engines", "at least one engine is required")
    names = [e.name for e in replica.engines]
    if len(set(names)) != len(names):
        raise InvalidReplica("spec.engines", "engine names must be unique")
    for i, engine in enumerate(replica.engines):
        for j, member in enumerate(engine.members):
            _check_cpu_member(member, f"spec.engines[{i}].members[{j}]")
    if replica.serving_mode == SERVING_PREFILL_DECODE:
        _check_prefill_decode(replica)
    elif replica.serving_mode == SERVING_UNIFIED:
        _check_unified(replica)
    else:
        raise InvalidReplica(
            "spec.servingMode", f"must be {SERVING_UNIFIED} or {SERVING_PREFILL_DECODE}"
        )
    for e, engine in enumerate(replica.engines):
        decode = engine.member(ROLE_DECODE)
        if (
            replica.shape is Shape.PREFILL_DECODE
            and decode is not None
            and replica.member_port(engine, decode) == PORT_SERVING
        ):
            raise InvalidReplica(
                f"spec.engines[{e}].port",
                f"the decode engine cannot listen on {PORT_SERVING}: the routing sidecar "
                f"serves there (use {PORT_DECODE_ENGINE})",
            )
        for m, member in enumerate(engine.members):
            _check_template(
                f"spec.engines[{e}].members[{m}].template",
                member.template,
                serves=member.role != ROLE_WORKER,
            )
    if replica.adapters is not None:
        try:
            replica.adapters.check(
                [(f"spec.engines[{i}]", engine.type) for i, engine in enumerate(replica.engines)]
            )
        except InputError as err:
            raise InvalidReplica(err.path, err.rule) from None
    if replica.autoscaling is not None and replica.member_max_replicas() is None:
        raise InvalidReplica(
            "spec.autoscaling.clusters",
            f"this cluster ({replica.cluster.name}) must be in the member list",
        )


def _check_unified(replica: ModelReplica) -> None:
    if len(replica.engines) != 1:
        raise InvalidReplica("spec.engines", "Unified serving takes exactly one engine per replica")
    engine = replica.engines[0]
    roles = [m.role for m in engine.members]
    if len(set(roles)) != len(roles):
        raise InvalidReplica("spec.engines[0].members", "each role may appear once")
    if frozenset(roles) not in _ROLES_BY_SHAPE:
        raise InvalidReplica(
            "spec.engines[0].members",
            f"Unified serving is one {ROLE_STANDALONE} member, or a {ROLE_LEADER} and a "
            f"{ROLE_WORKER} member (got {', '.join(roles)})",
        )
    leader = engine.member(ROLE_LEADER)
    if leader is not None and leader.worker_nodes < 1:
        raise InvalidReplica(
            f"spec.engines[0].members[{roles.index(ROLE_LEADER)}].workerNodes",
            "a Leader needs at least one worker node",
        )


def _check_prefill_decode(replica: ModelReplica) -> None:
    seen: dict[str, str] = {}
    for e, engine in enumerate(replica.engines):
        for m, member in enumerate(engine.members):
            if member.role not in (ROLE_PREFILL, ROLE_DECODE):
                raise InvalidReplica(
                    f"spec.engines[{e}].members[{m}].role",
                    f"PrefillDecode serving takes only {ROLE_PREFILL} and {ROLE_DECODE} "
                    "members (multi-node prefill or decode is not supported)",
                )
            if member.role in seen:
                raise InvalidReplica(
                    f"spec.engines[{e}].members[{m}].role",
                    f"{member.role} appears twice (first in engine {seen[member.role]})",
                )
            seen[member.role] = engine.name
    for role in (ROLE_PREFILL, ROLE_DECODE):
        if role not in seen:
            raise InvalidReplica("spec.engines", f"PrefillDecode serving needs a {role} member")


def _check_template(path: str, template: dict, *, serves: bool) -> None:
    try:
        pod_shape.check_pod_template(template, path)
    except InputError as err:
        raise InvalidReplica(err.path, err.rule) from None
    spec = template.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise InvalidReplica(f"{path}.spec.containers", "a pod template needs a container")
    engine_index = engine_container_index(spec["containers"])
    for c, container in enumerate(spec["containers"]):
        for p, port in enumerate(container.get("ports") or []):
            if port.get("name") != PORT_NAME_HTTP:
                continue
            if c != engine_index:
                raise InvalidReplica(
                    f"{path}.spec.containers[{c}].ports[{p}].name",
                    f"'{PORT_NAME_HTTP}' is reserved for the engine container (scraped as "
                    "an engine's metrics); name this port otherwise",
                )
            if not serves:
                raise InvalidReplica(
                    f"{path}.spec.containers[{c}].ports[{p}].name",
                    f"'{PORT_NAME_HTTP}' is the serving port, and a Worker does not serve "
                    "(its Leader does); remove it or name it otherwise",
                )


def _check_cpu_member(member: Member, path: str) -> None:
    """A CPU member asks for cpu and memory (both positive quantities) and no devices:
    they become its engine container's requests and limits."""
    if not member.cpu and not member.memory:
        return
    if member.devices:
        raise InvalidReplica(f"{path}.devices", "a member with cpu and memory asks for no devices")
    for name, text in (("cpu", member.cpu), ("memory", member.memory)):
        if not text:
            raise InvalidReplica(f"{path}.{name}", "cpu and memory are set together")
        try:
            positive = parse_quantity(text) > 0
        except ValueError:
            positive = False
        if not positive:
            raise InvalidReplica(f"{path}.{name}", "must be a resource quantity more than 0")
