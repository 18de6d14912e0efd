"""Typed values compose-model-deployment decides with, and how they are read.

The shell hands plain dicts (the XR, the required InferenceClusters and ModelReplicas) to
the readers here; everything downstream — device matching, placement, parking, status —
sees only these frozen values. A reader that meets input it cannot act on raises
InputError (functions/common/reader.py) with the field's path and the rule, which the
shell turns into a fatal result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from functions.common import adapters, contracts, ledger, pod_shape, tenancy
from functions.common.durations import parse_duration
from functions.common.health import HealthRecord
from functions.common.launch_warnings import LaunchWarning, from_status
from functions.common.naming import cluster_name_problem, is_object_name
from functions.common.pod_policy import DEFAULT_POLICY, PodPolicy, read_policy
from functions.common.quantity import parse_quantity
from functions.common.reader import InputError
from functions.common.redact import url_credentials
from functions.common.scheduling import Taint, Toleration
from functions.compose_model_deployment import cpu, ondemand, parking, rollout
from functions.compose_model_deployment.cel_env import (
    DeviceProfile,
    Semver,
    qualify,
)

# No count in this API comes near it (the XRDs bound them far lower); a value past it is
# refused before it reaches arithmetic that would grow with it.
INT_LIMIT = 2**31 - 1
# The InferenceCluster XRD's bounds, checked again (apis/inferenceclusters/definition.yaml).
POOLS_MAX = 32
NODES_MAX = 10000
PER_NODE_MAX = 64
FABRICS_MAX = 64


# --- Label selectors, taints, tolerations ------------------------------------------------


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # NotIn


@dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector; empty selects everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


# --- The deployment -------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    count: int
    selectors: tuple[str, ...]
    path: str  # spec.template.spec.engines[i].members[j].nodeSelector.devices[k]
    # A device beside the pool's accelerators (a NIC), matched against the pool's
    # additionalDevices entry of this driver; "" for the accelerators themselves.
    device_class: str = ""


@dataclass(frozen=True)
class Member:
    role: str
    worker_nodes: int  # on a Leader: worker nodes per replica besides the leader
    pods: int  # pods of this member per replica (a Worker: the leader's worker.nodes)
    devices: tuple[DeviceRequest, ...]
    path: str
    template: dict = field(compare=False, hash=False, repr=False)
    # A CPU member (nodeSelector.cpu and .memory instead of devices): what each pod asks
    # for, as written and in millicores and bytes; empty and 0 for a device member.
    cpu: str = ""
    memory: str = ""
    cpu_milli: int = 0
    memory_bytes: int = 0

    @property
    def cpu_only(self) -> bool:
        return self.cpu_milli > 0

    @property
    def devices_per_pod(self) -> int:
        """Accelerators per pod: what whole nodes are counted in (NICs are not)."""
        return sum(d.count for d in self.devices if not d.device_class)


@dataclass(frozen=True)
class Engine:
    name: str
    type: str
    members: tuple[Member, ...]
    port: int

    @property
    def multi_node(self) -> bool:
        return any(m.role == contracts.ROLE_LEADER for m in self.members)


@dataclass(frozen=True)
class ParkingPolicy:
    enabled: bool = True
    max_consecutive_failures: int = parking.DEFAULT_MAX_CONSECUTIVE_FAILURES


@dataclass(frozen=True, eq=False)
class Deployment:
    name: str
    namespace: str
    replicas: int
    source: dict
    profile: str
    serving_mode: str
    cluster_selector: LabelSelector
    tolerations: tuple[Toleration, ...]
    raw_tolerations: list
    engines: tuple[Engine, ...]
    pod_metadata: dict
    autoscaling: dict | None
    parking: ParkingPolicy
    retry: str  # the modelplane.ai/retry annotation ("" if unset)
    definition_hash: str
    model_cache: str = ""  # spec.modelCacheRef.name ("" without a cache)
    on_demand: ondemand.OnDemand | None = None
    activate: str = ""  # the modelplane.ai/activate annotation ("" if unset)
    rollout: rollout.Policy = rollout.DEFAULT_POLICY  # spec.rollout
    rollout_paused: bool = False  # the modelplane.ai/rollout-paused annotation is "true"
    rollout_undo: str = ""  # the modelplane.ai/rollout-undo annotation ("" if unset)
    # spec.template.spec.adapters: the engines' LoRA capacity (None: no adapters).
    adapters: adapters.Capacity | None = None

    def tolerates(self, taint: Taint) -> bool:
        return any(t.tolerates(taint) for t in self.tolerations)

    @property
    def cpu_only(self) -> bool:
        """Every member asks for CPU and memory (the reader refuses a mix)."""
        return all(m.cpu_only for e in self.engines for m in e.members)


def _bool(value: Any, path: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(path, f"must be true or false, got {str(value)[:40]!r}")
    return value


def _bounded(value: int, path: str, low: int, high: int) -> int:
    """The XRD's minimum and maximum, checked again (the function must not rely on them)."""
    if not low <= value <= high:
        raise InputError(path, f"{value} is outside {low}-{high}")
    return value


def _list_of(value: Any, path: str, limit: int) -> list[dict]:
    """A list of objects of at most `limit` entries (the XRD's maxItems)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InputError(path, "must be a list of objects")
    if len(value) > limit:
        raise InputError(path, f"has {len(value)} entries; at most {limit}")
    return value


def _int(value: Any, path: str, default: int | None = None) -> int:
    if value is None:
        if default is None:
            raise InputError(path, "is required")
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())
    ):
        raise InputError(path, f"must be an integer, got {str(value)[:40]!r}")
    if not -INT_LIMIT <= value <= INT_LIMIT:
        raise InputError(path, f"{value:.0f} is outside ±{INT_LIMIT}")
    return int(value)


def _labels(value: Any, path: str) -> dict[str, str]:
    """A label map (string to string), as a node selector is; it is copied into every
    ModelReplica placed on the pool, so anything else is refused here."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InputError(path, "must map label keys to label values (strings)")
    return dict(value)


def read_selector(raw: dict | None, path: str) -> LabelSelector:
    raw = raw or {}
    labels = tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items()))
    requirements = []
    for i, expr in enumerate(raw.get("matchExpressions") or []):
        operator = expr.get("operator")
        values = tuple(str(v) for v in expr.get("values") or [])
        if operator in ("In", "NotIn") and not values:
            raise InputError(f"{path}.matchExpressions[{i}].values", f"{operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InputError(f"{path}.matchExpressions[{i}].values", f"{operator} takes no values")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise InputError(f"{path}.matchExpressions[{i}].operator", f"unknown {operator!r}")
        requirements.append(LabelRequirement(str(expr.get("key", "")), operator, values))
    return LabelSelector(labels, tuple(requirements))


def system_namespace_rule(what: str) -> str:
    """A tenant's object in the suite's own namespace would land beside the runtime on
    every member: the rule that refuses it, naming what to do instead."""
    return (
        f"{contracts.SYSTEM_NAMESPACE} is the suite's own namespace on every member; "
        f"{what} in a tenant namespace"
    )


def refuse_system_namespace(meta: dict, what: str) -> None:
    """Every reserved namespace (functions/common/tenancy.py), the suite's own among them."""
    problem = tenancy.namespace_problem(str(meta.get("namespace") or ""), what)
    if problem is not None:
        raise InputError("metadata.namespace", problem)


def read_deployment(xr: dict) -> Deployment:
    """The ModelDeployment XR as typed values (the XRD has already validated its shape)."""
    meta = xr.get("metadata") or {}
    refuse_system_namespace(meta, "deploy models")
    spec = xr.get("spec") or {}
    template = spec.get("template") or {}
    pod_shape.check_pod_metadata(template.get("metadata"), "spec.template.metadata")
    tspec = template.get("spec") or {}
    mode = (tspec.get("serving") or {}).get("mode") or contracts.SERVING_UNIFIED
    raw_engines = _list_of(tspec.get("engines"), "spec.template.spec.engines", 4)
    if not raw_engines:
        raise InputError("spec.template.spec.engines", "needs at least one engine")
    engines = tuple(
        _read_engine(raw, f"spec.template.spec.engines[{i}]", mode)
        for i, raw in enumerate(raw_engines)
    )
    if len({m.cpu_only for e in engines for m in e.members}) > 1:
        raise InputError(
            "spec.template.spec.engines",
            "every member asks for cpu and memory, or every member for devices: a "
            "replica runs on one node pool, a CPU-only pool or an accelerator pool",
        )
    tolerations = tuple(
        Toleration(
            key=str(t.get("key", "")),
            operator=str(t.get("operator", "Equal")),
            value=str(t.get("value", "")),
            effect=str(t.get("effect", "")),
        )
        for t in tspec.get("tolerations") or []
    )
    raw_parking = spec.get("parking") or {}
    source = spec.get("source") or {}
    if not isinstance(source, dict):
        # Named, never echoed: it is copied to every ModelReplica (a URL may carry a password).
        raise InputError("spec.source", "must be an object with a uri")
    uri = source.get("uri")
    if isinstance(uri, str) and url_credentials(uri):
        # Named, never echoed: the URI is copied to every ModelReplica and its pods.
        raise InputError(
            "spec.source.uri",
            f"must not carry credentials (found {', '.join(url_credentials(uri))}); "
            "use spec.source.credentialsSecretRef",
        )
    profile = str(spec.get("profile") or "default")
    return Deployment(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        replicas=_bounded(
            _int(spec.get("replicas"), "spec.replicas", default=1), "spec.replicas", 0, 1000
        ),
        source=source,
        profile=profile,
        serving_mode=mode,
        cluster_selector=read_selector(
            tspec.get("clusterSelector"), "spec.template.spec.clusterSelector"
        ),
        tolerations=tolerations,
        raw_tolerations=list(tspec.get("tolerations") or []),
        engines=engines,
        pod_metadata=template.get("metadata") or {},
        autoscaling=spec.get("autoscaling"),
        parking=ParkingPolicy(
            enabled=_bool(raw_parking.get("enabled"), "spec.parking.enabled", True),
            max_consecutive_failures=_bounded(
                _int(
                    raw_parking.get("maxConsecutiveFailures"),
                    "spec.parking.maxConsecutiveFailures",
                    default=parking.DEFAULT_MAX_CONSECUTIVE_FAILURES,
                ),
                "spec.parking.maxConsecutiveFailures",
                1,
                100,
            ),
        ),
        retry=str((meta.get("annotations") or {}).get(contracts.ANNOTATION_RETRY, "")),
        definition_hash=parking.definition_hash(source, profile, raw_engines),
        model_cache=str((spec.get("modelCacheRef") or {}).get("name") or ""),
        on_demand=_read_on_demand(spec.get("onDemand")),
        activate=str((meta.get("annotations") or {}).get(contracts.ANNOTATION_ACTIVATE, "")),
        rollout=rollout.read_policy(spec.get("rollout")),
        rollout_paused=str(
            (meta.get("annotations") or {}).get(contracts.ANNOTATION_ROLLOUT_PAUSED, "")
        ).lower()
        == "true",
        rollout_undo=str(
            (meta.get("annotations") or {}).get(contracts.ANNOTATION_ROLLOUT_UNDO, "")
        ),
        adapters=adapters.read_capacity(
            tspec.get("adapters"),
            [(f"spec.template.spec.engines[{i}]", e.type) for i, e in enumerate(engines)],
            "spec.template.spec.adapters",
        ),
    )


def _duration(value: Any, path: str, default: float, low: float, high: float) -> float:
    if value is None:
        return default
    try:
        seconds = parse_duration(value)
    except ValueError as err:
        raise InputError(path, str(err)) from None
    if not low <= seconds <= high:
        raise InputError(path, f"{value} is outside {low:.0f}s-{high:.0f}s")
    return seconds


def _read_on_demand(raw: Any) -> ondemand.OnDemand | None:
    """spec.onDemand, its bounds checked again (the XRD's CEL says the same)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError("spec.onDemand", "must be an object")
    return ondemand.OnDemand(
        idle_after=_duration(
            raw.get("idleAfter"),
            "spec.onDemand.idleAfter",
            ondemand.DEFAULT_IDLE_AFTER,
            ondemand.DEFAULT_IDLE_AFTER,
            7 * 24 * 3600,
        ),
        activation_timeout=_duration(
            raw.get("activationTimeout"),
            "spec.onDemand.activationTimeout",
            ondemand.DEFAULT_ACTIVATION_TIMEOUT,
            10,
            3600,
        ),
    )


def _read_engine(raw: dict, path: str, mode: str) -> Engine:
    raw_members = _list_of(raw.get("members"), f"{path}.members", 4)
    leader = next((m for m in raw_members if m.get("role") == contracts.ROLE_LEADER), None)
    leader_workers = (
        _bounded(
            _int((leader.get("worker") or {}).get("nodes"), f"{path}.members[leader].worker.nodes"),
            f"{path}.members[leader].worker.nodes",
            1,
            63,
        )
        if leader
        else 0
    )
    members = []
    for j, m in enumerate(raw_members):
        mpath = f"{path}.members[{j}]"
        pod_shape.check_pod_template(m.get("template"), f"{mpath}.template")
        role = m.get("role")
        if role not in contracts.ROLES:
            raise InputError(f"{mpath}.role", f"must be one of {', '.join(contracts.ROLES)}")
        if role == contracts.ROLE_WORKER and leader is None:
            raise InputError(f"{mpath}.role", "a Worker member needs a Leader member")
        devices = []
        raw_devices = _list_of(
            (m.get("nodeSelector") or {}).get("devices"), f"{mpath}.nodeSelector.devices", 4
        )
        for k, d in enumerate(raw_devices):
            dpath = f"{mpath}.nodeSelector.devices[{k}]"
            count = _bounded(_int(d.get("count"), f"{dpath}.count"), f"{dpath}.count", 1, 64)
            selectors = tuple(
                str(s.get("cel", "")) for s in _list_of(d.get("selectors"), f"{dpath}.selectors", 8)
            )
            devices.append(
                DeviceRequest(
                    str(d.get("name", "")),
                    count,
                    selectors,
                    dpath,
                    str(d.get("deviceClassName") or ""),
                )
            )
        cpu_text, memory_text, milli, size = _cpu_request(m.get("nodeSelector") or {}, mpath)
        if not devices and not milli:
            raise InputError(
                f"{mpath}.nodeSelector",
                "needs devices (an accelerator pool) or cpu and memory (a CPU-only pool)",
            )
        workers = leader_workers if role == contracts.ROLE_LEADER else 0
        pods = leader_workers if role == contracts.ROLE_WORKER else 1
        members.append(
            Member(
                role,
                workers,
                pods,
                tuple(devices),
                mpath,
                m.get("template") or {},
                cpu_text,
                memory_text,
                milli,
                size,
            )
        )
    decode = mode == contracts.SERVING_PREFILL_DECODE and any(
        m.role == contracts.ROLE_DECODE for m in members
    )
    port = contracts.PORT_DECODE_ENGINE if decode else contracts.PORT_SERVING
    return Engine(str(raw.get("name", "")), str(raw.get("type", "")), tuple(members), port)


def _cpu_request(node_selector: dict, mpath: str) -> tuple[str, str, int, int]:
    """nodeSelector.cpu and .memory (set together, never with devices), as written and
    in millicores and bytes; ("", "", 0, 0) for a device member."""
    has_cpu, has_memory = "cpu" in node_selector, "memory" in node_selector
    if not has_cpu and not has_memory:
        return "", "", 0, 0
    path = f"{mpath}.nodeSelector"
    if node_selector.get("devices"):
        raise InputError(
            path,
            "takes devices or cpu and memory, not both: devices for an accelerator pool, "
            "cpu and memory for a CPU-only pool",
        )
    if not (has_cpu and has_memory):
        raise InputError(path, "cpu and memory are set together (a CPU pod asks for both)")
    cpu_text, milli = _quantity(node_selector["cpu"], f"{path}.cpu", cpu.millicores)
    memory_text, size = _quantity(node_selector["memory"], f"{path}.memory", cpu.bytes_of)
    return cpu_text, memory_text, milli, size


def _quantity(value: Any, path: str, convert: Any) -> tuple[str, int]:
    """A positive resource quantity, as written and converted; InputError otherwise."""
    text = str(value)
    try:
        amount = convert(text)
    except ValueError:
        raise InputError(path, f"{text[:40]!r} is not a resource quantity") from None
    if amount <= 0:
        raise InputError(path, f"must be more than 0, got {text[:40]!r}")
    return text, amount


# --- InferenceClusters ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fabric:
    name: str
    nodes: int


@dataclass(frozen=True)
class ExtraDevices:
    """Another kind of device on each node of a pool (NICs beside GPUs)."""

    per_node: int
    profile: DeviceProfile  # its driver is the DeviceClass a request names


@dataclass(frozen=True, eq=False)
class Pool:
    name: str
    nodes: int  # nodes placement may count: maxNodes if the pool can grow, else nodes
    node_selector: dict
    driver: str
    per_node: int
    profile: DeviceProfile
    fabrics: tuple[Fabric, ...]  # empty: the whole pool is one fabric
    taints: tuple[Taint, ...]
    # The node label whose value names a node's fabric; "" when fabrics are not labelled
    # (then nothing pins a multi-node replica's pods to its fabric).
    fabric_label: str = ""
    cost_rank: int = 0  # lower is preferred when placement would otherwise tie
    extra_devices: tuple[ExtraDevices, ...] = ()
    # A CPU-only pool (cpu and memory per node, no devices): as written and in
    # millicores and bytes; empty and 0 for an accelerator pool. Its `per_node` is 1
    # until a CPU deployment's placement counts it in that deployment's slots (cpu.py).
    cpu: str = ""
    memory: str = ""
    cpu_milli: int = 0
    memory_bytes: int = 0

    @property
    def cpu_only(self) -> bool:
        return self.cpu_milli > 0

    @cached_property
    def shape(self) -> tuple:
        """What room in the pool depends on (nodes per fabric, devices per node), as
        plain values: cheap to hash for the planner's per-shape answers."""
        return (
            self.per_node,
            self.nodes,
            tuple((f.name, f.nodes) for f in self.fabrics),
            self.cpu_milli,
            self.memory_bytes,
        )

    @property
    def match_key(self) -> tuple:
        """What a device match depends on: pools alike in it match alike."""
        return (self.profile, self.extra_devices)

    @property
    def device_label(self) -> str:
        """How a person names the pool's devices: the product name, or the driver."""
        if self.cpu_only:
            return "CPU"
        for qualified, _kind, value in self.profile.attributes:
            if qualified == f"{self.driver}/productName":
                return str(value)
        return self.driver


@dataclass(frozen=True, eq=False)
class Cluster:
    name: str
    labels: dict
    region: str
    stack: str
    provider_config_ref: dict
    pools: tuple[Pool, ...]
    # The collector's OTLP traces receiver (status.telemetry.tracesEndpoint), if any.
    traces_endpoint: str = ""
    # DeviceClasses its pools name that the member does not have (status.deviceClasses,
    # compose-serving-stack's): a claim on one would stay pending.
    missing_device_classes: frozenset[str] = frozenset()
    # spec.podSecurity: what tenants' pod templates may do here (functions/common/pod_policy.py).
    pod_policy: PodPolicy = DEFAULT_POLICY
    pools_by_name: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools_by_name", {p.name: p for p in self.pools})

    def pool(self, name: str) -> Pool | None:
        return self.pools_by_name.get(name)


def cluster_name(ic: Any) -> str:
    """An InferenceCluster's name, whatever else is wrong with it ("" if it has none)."""
    meta = ic.get("metadata") if isinstance(ic, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


# The fields read_cluster reads (as HOLDING_FIELDS): not its managedFields or conditions.
CLUSTER_FIELDS: Final = {
    "metadata": {"name": None, "labels": None},
    "spec": None,
    "status": {"telemetry": {"tracesEndpoint": None}, "deviceClasses": None},
}


def read_cluster(ic: dict) -> Cluster:
    """An InferenceCluster as typed values; InputError naming the field for any shape it
    cannot be read from (wrong types included), never another exception."""
    try:
        return _read_cluster(ic)
    except InputError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
        raise InputError(
            f"InferenceCluster {cluster_name(ic) or '<unnamed>'}",
            f"cannot be read ({type(err).__name__}: a field has the wrong type)",
        ) from None


def _device_profile(devices: dict, path: str) -> DeviceProfile:
    """One kind of device as a DRA driver publishes it; InputError naming a bad value."""
    driver = str(devices.get("driver", ""))
    attributes = []
    for attr, typed in sorted((devices.get("attributes") or {}).items()):
        (kind, value), *_ = typed.items() if typed else (("string", ""),)
        if kind == "int":
            value = _int(value, f"{path}.attributes.{attr}.int")
        elif kind == "version":
            try:
                Semver(str(value))
            except ValueError:
                raise InputError(
                    f"{path}.attributes.{attr}.version",
                    f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH)",
                ) from None
        attributes.append((qualify(attr, driver), kind, value))
    capacity = []
    for k, v in sorted((devices.get("capacity") or {}).items()):
        try:
            parse_quantity(str(v))
        except ValueError:
            raise InputError(f"{path}.capacity.{k}", f"{v!r} is not a resource quantity") from None
        capacity.append((qualify(k, driver), str(v)))
    return DeviceProfile(driver, tuple(attributes), tuple(capacity))


_HOST_PORT = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?:[0-9]{1,5}$")


def _traces_endpoint(ic: dict) -> str:
    """compose-serving-stack's status.telemetry.tracesEndpoint; it becomes an engine's
    argument, so anything but a plain host:port is ignored (no traces, never an odd arg)."""
    value = ((ic.get("status") or {}).get("telemetry") or {}).get("tracesEndpoint")
    return value if isinstance(value, str) and _HOST_PORT.fullmatch(value) else ""


def _missing_device_classes(ic: dict) -> frozenset[str]:
    """The classes compose-serving-stack reports Missing; anything else (Present, Unknown,
    a shape it cannot read) is not held against the cluster."""
    reported = (ic.get("status") or {}).get("deviceClasses")
    if not isinstance(reported, list):
        return frozenset()
    return frozenset(
        str(r["name"])
        for r in reported
        if isinstance(r, dict) and r.get("state") == "Missing" and isinstance(r.get("name"), str)
    )


def _pool_cpu(raw: dict, path: str) -> tuple[str, str, int, int]:
    """A CPU-only pool's cpu and memory per node (both, and no devices); ("", "", 0, 0)
    for an accelerator pool. The XRD's CEL says the same."""
    has_cpu, has_memory = "cpu" in raw, "memory" in raw
    if raw.get("devices"):
        if has_cpu or has_memory:
            raise InputError(
                f"{path}.{'cpu' if has_cpu else 'memory'}",
                "cpu and memory describe a CPU-only pool: set them without devices",
            )
        return "", "", 0, 0
    if not (has_cpu and has_memory):
        raise InputError(
            path,
            "a node pool needs devices (an accelerator pool) or both cpu and memory per "
            "node (a CPU-only pool)",
        )
    cpu_text, milli = _quantity(raw["cpu"], f"{path}.cpu", cpu.millicores)
    memory_text, size = _quantity(raw["memory"], f"{path}.memory", cpu.bytes_of)
    return cpu_text, memory_text, milli, size


def _provider_config_ref(raw: Any, path: str) -> dict:
    """{name, kind} as every ModelReplica on the cluster names it; never echoed."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(path, "must be an object")
    if "name" in raw and not is_object_name(raw["name"]):
        raise InputError(f"{path}.name", "must be a provider config's name (a DNS subdomain)")
    if raw.get("kind") not in (None, "ClusterProviderConfig", "ProviderConfig"):
        raise InputError(f"{path}.kind", "must be ClusterProviderConfig or ProviderConfig")
    return {k: raw[k] for k in ("name", "kind") if raw.get(k) is not None}


def _read_cluster(ic: dict) -> Cluster:
    meta = ic.get("metadata") or {}
    spec = ic.get("spec") or {}
    name = str(meta.get("name", ""))
    problem = cluster_name_problem(meta.get("name"))
    if problem is not None:
        # The rule compose-serving-stack installs by: never place where it cannot install.
        raise InputError(f"InferenceCluster {name[:80] or '<unnamed>'}: metadata.name", problem)
    pools = []
    raw_pools = _list_of(
        spec.get("nodePools"), f"InferenceCluster {name}: spec.nodePools", POOLS_MAX
    )
    for i, raw in enumerate(raw_pools):
        path = f"InferenceCluster {name}: spec.nodePools[{i}]"
        devices = raw.get("devices") or {}
        cpu_text, memory_text, milli, size = _pool_cpu(raw, path)
        driver = str(devices.get("driver", ""))
        extra = tuple(
            ExtraDevices(
                _bounded(
                    _int(e.get("perNode"), f"{path}.additionalDevices[{k}].perNode", default=1),
                    f"{path}.additionalDevices[{k}].perNode",
                    1,
                    PER_NODE_MAX,
                ),
                _device_profile(e, f"{path}.additionalDevices[{k}]"),
            )
            for k, e in enumerate(
                _list_of(raw.get("additionalDevices"), f"{path}.additionalDevices", FABRICS_MAX)
            )
        )
        nodes = _bounded(
            _int(raw.get("nodes"), f"{path}.nodes", default=0), f"{path}.nodes", 0, NODES_MAX
        )
        max_nodes = _bounded(
            _int(raw.get("maxNodes"), f"{path}.maxNodes", default=nodes),
            f"{path}.maxNodes",
            0,
            NODES_MAX,
        )
        pools.append(
            Pool(
                name=str(raw.get("name", "")),
                nodes=max(nodes, max_nodes),
                node_selector=_labels(raw.get("nodeSelector"), f"{path}.nodeSelector"),
                driver=driver,
                per_node=1
                if milli
                else _bounded(
                    _int(devices.get("perNode"), f"{path}.devices.perNode", default=1),
                    f"{path}.devices.perNode",
                    1,
                    PER_NODE_MAX,
                ),
                profile=_device_profile(devices, f"{path}.devices"),
                fabrics=tuple(
                    Fabric(
                        str(f.get("name", "")),
                        _bounded(
                            _int(f.get("nodes"), f"{path}.fabrics.nodes"),
                            f"{path}.fabrics.nodes",
                            0,
                            NODES_MAX,
                        ),
                    )
                    for f in _list_of(raw.get("fabrics"), f"{path}.fabrics", FABRICS_MAX)
                ),
                taints=tuple(
                    Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
                    for t in raw.get("taints") or []
                ),
                fabric_label=str(raw.get("fabricNodeLabel") or ""),
                cost_rank=_int(raw.get("costRank"), f"{path}.costRank", default=0),
                extra_devices=extra,
                cpu=cpu_text,
                memory=memory_text,
                cpu_milli=milli,
                memory_bytes=size,
            )
        )
    return Cluster(
        name=name,
        labels=dict(meta.get("labels") or {}),
        region=str(spec.get("region", "")),
        stack=str(spec.get("stack") or contracts.STACK_STANDARD),
        provider_config_ref=_provider_config_ref(
            spec.get("providerConfigRef"), f"InferenceCluster {name}: spec.providerConfigRef"
        ),
        pools=tuple(sorted(pools, key=lambda p: p.name)),
        traces_endpoint=_traces_endpoint(ic),
        missing_device_classes=_missing_device_classes(ic),
        pod_policy=read_policy(
            spec.get("podSecurity"), f"InferenceCluster {name}: spec.podSecurity"
        ),
    )


# --- ModelReplicas (what every deployment already holds) ----------------------------------


@dataclass(frozen=True)
class Footprint:
    """What one replica occupies: gangs of whole nodes (each in one fabric) and pods."""

    gangs: tuple[int, ...] = ()  # whole nodes per multi-node engine
    pods: tuple[int, ...] = ()  # devices per single-node pod, largest first
    # A CPU replica: each pod's (millicores, bytes), largest first; its `pods` are then
    # slots (see cpu.py), and every pod is counted alone (no whole-node gangs: CPU ranks
    # talk over the pod network, no fabric is promised).
    requests: tuple[tuple[int, int], ...] = ()

    @property
    def multi_node(self) -> bool:
        return bool(self.gangs)


def footprint_of(engines: tuple[Engine, ...]) -> Footprint:
    requests = tuple(
        sorted(
            (
                (m.cpu_milli, m.memory_bytes)
                for e in engines
                for m in e.members
                for _ in range(m.pods)
            ),
            reverse=True,
        )
    )
    if requests and all(m.cpu_only for e in engines for m in e.members):
        return Footprint(pods=cpu.pod_slots(requests), requests=requests)
    gangs: list[int] = []
    pods: list[int] = []
    for engine in engines:
        if engine.multi_node:
            gangs.append(sum(m.pods for m in engine.members))
        else:
            pods.extend(m.devices_per_pod for m in engine.members for _ in range(m.pods))
    return Footprint(tuple(sorted(gangs, reverse=True)), tuple(sorted(pods, reverse=True)))


@dataclass(frozen=True)
class Holding:
    """One ModelReplica: a deployment's replicas on one cluster and pool."""

    namespace: str
    name: str
    deployment: str
    cluster: str
    pool: str
    replicas: int
    footprint: Footprint
    order: tuple[str, str, str]  # (creationTimestamp, namespace, name): older holds first
    ready_replicas: int = 0
    health: HealthRecord | None = None
    # The launch warnings its function found (functions/common/launch_warnings.py).
    warnings: tuple[LaunchWarning, ...] = ()


# The fields read_holding reads (a shape for structs.plain_only: None is a whole value).
# A ModelReplica as listed is mostly managedFields, conditions and pod templates, which
# placement never reads; a shell converts only these. Keep in step with _read_holding
# and ledger.footprint.
HOLDING_FIELDS: Final = {
    "metadata": {"namespace": None, "name": None, "creationTimestamp": None},
    "spec": {
        "deployment": None,
        "cluster": {"name": None},
        "nodePool": {"name": None},
        "replicas": None,
        "engines": {
            "members": {
                "role": None,
                "workerNodes": None,
                "devices": None,
                "cpu": None,
                "memory": None,
            }
        },
    },
    "status": {"health": None, "readyReplicas": None, "warnings": None},
}


def read_holding(mr: dict) -> Holding:
    """A ModelReplica as typed values; InputError naming it for any shape it cannot be
    read from."""
    meta = mr.get("metadata") if isinstance(mr, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    who = f"ModelReplica {meta.get('namespace', '')}/{meta.get('name', '<unnamed>')}"
    try:
        return _read_holding(mr)
    except InputError as err:
        raise InputError(f"{who}: {err.path}", err.rule) from None
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
        raise InputError(
            who, f"cannot be read ({type(err).__name__}: a field has the wrong type)"
        ) from None


def _count(value: Any, path: str) -> int:
    """A non-negative count a controller or the agent wrote (0 when unset)."""
    return max(0, _int(value, path, default=0))


def _read_holding(mr: dict) -> Holding:
    meta = mr.get("metadata") or {}
    spec = mr.get("spec") or {}
    status = mr.get("status") or {}
    gangs, pods, requests = ledger.footprint(spec)
    raw_health = status.get("health")
    health = HealthRecord.from_status(raw_health, _count) if raw_health else None
    namespace = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    return Holding(
        namespace=namespace,
        name=name,
        deployment=str(spec.get("deployment", "")),
        cluster=str((spec.get("cluster") or {}).get("name", "")),
        pool=str((spec.get("nodePool") or {}).get("name", "")),
        replicas=_count(spec.get("replicas"), "spec.replicas"),
        footprint=Footprint(gangs, pods)
        if not requests
        else Footprint(pods=cpu.pod_slots(requests), requests=requests),
        order=(str(meta.get("creationTimestamp", "")), namespace, name),
        ready_replicas=_count(status.get("readyReplicas"), "status.readyReplicas"),
        health=health,
        warnings=from_status(status.get("warnings")),
    )
