"""A member's report, decided from plain values: what this cluster needs, what it could
still host, how it is doing.

The agent computes it every 30 s into `status.report` of the member's policy copy; the
hub decides from the reports alone. This module is the pure part (`compute_report`, and
`Report`, the `status.report` codec the hub reads back); `report_parse.py` turns pod,
node and NodePool objects into its inputs and `report.py` is the thin shell that reads
them from the member's API server and Prometheus.

- **needed**: replicas beyond what runs. Unschedulable replicas always count; with
  `signals.demand` and `capacity.replicaCapacity` the load's actual need counts too
  (`ceil(demand / replicaCapacity)` minus the replicas on a node), so a saturated
  cluster whose pods all fit still says how short it is.
- **staticRoom**: replicas that fit on *registered* existing nodes only: nodes of the
  listed NodePools and nodes no NodePool manages that match `nodeSelector`. Each node is
  fitted against the pod template's hard constraints (node selector, required node
  affinity, NoSchedule/NoExecute taints, resource requests); how many nodes were left
  out is kept for the agent's diagnostics.
- **nodePoolHeadroom**: replicas the registered NodePools can still launch (limits minus
  usage, divided by one replica's requests), voided by recurring launch failures since a
  pool that keeps failing to launch is not room.
- **signals**: each query must return exactly one sample; otherwise the signal is left
  out of the report and `Ready=False/ObservationFailed` names it.
- **safePressure**: the highest pressure per replica seen while the member was within
  its latency and error SLOs; the hub returns borrowed traffic only up to it.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Final

from functions.common.conditions import Condition
from functions.common.scheduling import Taint, Toleration
from functions.runtime.shared.policy import PolicySpec, parse_time, rfc3339, spec_hash

NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
REGION_LABEL: Final = "topology.kubernetes.io/region"
# Launch failures of one NodePool within the recent window that void its headroom.
RECURRING_LAUNCH_FAILURES: Final = 2
LAUNCH_FAILURE_WINDOW_SECONDS: Final = 900.0

CONDITION_READY: Final = "Ready"
REASON_OBSERVED: Final = "Observed"
REASON_OBSERVATION_FAILED: Final = "ObservationFailed"
REASON_NOT_A_MEMBER: Final = "NotAMember"
# Extra named metrics travel among the signals as `extra.<name>` (status.report.extra).
EXTRA_PREFIX: Final = "extra."


# --- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One matchExpression of a required node affinity term."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "In":
                return present and value in self.values
            case "NotIn":
                return not present or value not in self.values
            case "Exists":
                return present
            case "DoesNotExist":
                return not present
            case "Gt" | "Lt":
                try:
                    have, bound = int(value or ""), int(self.values[0])
                except (ValueError, IndexError):
                    return False
                return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True)
class PodNeeds:
    """The pod template's hard constraints: what a node must offer to take one pod."""

    requests: dict[str, float] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    # Required node affinity: any term matches when all of its requirements do.
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pods_per_replica: int = 1

    def admits(self, node: "NodeInfo") -> bool:
        if any(node.labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if self.affinity_terms and not any(
            all(r.matches(node.labels) for r in term) for term in self.affinity_terms
        ):
            return False
        hard = (t for t in node.taints if t.effect in {"NoSchedule", "NoExecute"})
        return all(any(tol.tolerates(t) for tol in self.tolerations) for t in hard)

    def pods_fitting(self, free: dict[str, float]) -> int:
        wanted = {r: q for r, q in self.requests.items() if q > 0}
        if not wanted:
            return max(0, int(free.get("pods", 0)))
        fits = min(math.floor(free.get(r, 0.0) / q + 1e-9) for r, q in wanted.items())
        if "pods" in free:
            fits = min(fits, int(free["pods"]))
        return max(0, fits)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, float]
    used: dict[str, float] = field(default_factory=dict)  # requests of the pods on it
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    def free(self) -> dict[str, float]:
        return {r: q - self.used.get(r, 0.0) for r, q in self.allocatable.items()}


@dataclass(frozen=True)
class NodePoolInfo:
    name: str
    limits: dict[str, float]
    usage: dict[str, float]
    recent_launch_failures: int = 0


@dataclass(frozen=True)
class PodState:
    """One workload pod as the report counts it."""

    name: str
    node: str | None
    ready: bool
    unschedulable: bool = False
    terminating: bool = False


@dataclass(frozen=True)
class SignalResult:
    """One instant query's answer: its samples' values, or why it failed."""

    values: tuple[float, ...] = ()
    error: str | None = None

    def single(self) -> tuple[float | None, str | None]:
        if self.error:
            return None, self.error
        if len(self.values) != 1:
            return None, f"returned {len(self.values)} samples, need exactly 1"
        value = self.values[0]
        if math.isnan(value) or math.isinf(value):
            return None, f"returned {value}"
        return value, None


@dataclass(frozen=True)
class MemberInputs:
    desired: int
    pods: tuple[PodState, ...]
    needs: PodNeeds
    nodes: tuple[NodeInfo, ...]
    node_pools: tuple[NodePoolInfo, ...] = ()
    signals: dict[str, SignalResult] = field(default_factory=dict)
    read_errors: tuple[str, ...] = ()  # what could not be read at all (e.g. NodePools)


# --- outputs ------------------------------------------------------------------------------


# The keys of status.report that are left out when unknown (a failed signal, no region):
# whoever merge-patches a report must clear these, or the last known value would stay.
REPORT_OPTIONAL_KEYS: Final = (
    "safePressure",
    "demand",
    "pressure",
    "latency",
    "errorRate",
    "saturation",
    "extra",
    "unobservedSignals",
    "region",
)


@dataclass(frozen=True)
class Report:
    """`status.report` of one member's copy; also what the hub reads back."""

    time: float
    spec_hash: str
    ready: int
    desired: int
    scheduled: int
    needed: int
    static_room: int
    node_pool_headroom: int
    safe_pressure: float | None = None
    demand: float | None = None
    pressure: float | None = None
    latency: float | None = None
    error_rate: float | None = None
    saturation: float | None = None
    # signals.extra by name: recorded for the decision log, never acted on.
    extra: dict[str, float] = field(default_factory=dict)
    # clusters[].region, else the one region its nodes are labelled with (shared cloud
    # capacity: the hub looks for NodePool headroom in other regions first).
    region: str | None = None
    # `name: why` for each signal the policy uses that could not be computed.
    unobserved_signals: tuple[str, ...] = ()

    def signal(self, name: str) -> float | None:
        return {
            "demand": self.demand,
            "pressure": self.pressure,
            "latency": self.latency,
            "errorRate": self.error_rate,
            "saturation": self.saturation,
        }.get(name)

    def to_status(self) -> dict:
        status: dict[str, Any] = {
            "time": rfc3339(self.time),
            "specHash": self.spec_hash,
            "ready": self.ready,
            "desired": self.desired,
            "scheduled": self.scheduled,
            "needed": self.needed,
            "staticRoom": self.static_room,
            "nodePoolHeadroom": self.node_pool_headroom,
        }
        optional = {  # REPORT_OPTIONAL_KEYS
            "safePressure": self.safe_pressure,
            "demand": self.demand,
            "pressure": self.pressure,
            "latency": self.latency,
            "errorRate": self.error_rate,
            "saturation": self.saturation,
            "extra": dict(sorted(self.extra.items())) or None,
            "region": self.region,
            "unobservedSignals": list(self.unobserved_signals) or None,
        }
        status.update({k: v for k, v in optional.items() if v is not None})
        return status

    @classmethod
    def from_status(cls, status: dict) -> "Report":
        def number(key: str) -> float | None:
            value = status.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(
            time=parse_time(status["time"]),
            spec_hash=str(status.get("specHash", "")),
            ready=int(status.get("ready", 0)),
            desired=int(status.get("desired", 0)),
            scheduled=int(status.get("scheduled", status.get("ready", 0))),
            needed=int(status.get("needed", 0)),
            static_room=int(status.get("staticRoom", 0)),
            node_pool_headroom=int(status.get("nodePoolHeadroom", 0)),
            safe_pressure=number("safePressure"),
            demand=number("demand"),
            pressure=number("pressure"),
            latency=number("latency"),
            error_rate=number("errorRate"),
            saturation=number("saturation"),
            extra={
                str(k): float(v)
                for k, v in (status.get("extra") or {}).items()
                if isinstance(v, int | float)
            },
            region=status.get("region") or None,
            unobserved_signals=tuple(status.get("unobservedSignals") or ()),
        )


@dataclass(frozen=True)
class StaticDiagnostics:
    registered_nodes: int
    filtered_nodes: int  # nodes left out: not registered, not ready, or not admitting the pod
    pods_fitting: int


@dataclass(frozen=True)
class ReportResult:
    report: Report | None  # None when this cluster is not in spec.clusters
    condition: Condition
    static: StaticDiagnostics | None = None


# --- the computation ----------------------------------------------------------------------


def _registered(node: NodeInfo, node_pools: tuple[str, ...], node_selector: dict) -> bool:
    pool = node.labels.get(NODEPOOL_LABEL)
    if pool is not None:
        return pool in node_pools
    # Unmanaged nodes count only when the member names them with a selector.
    return bool(node_selector) and all(node.labels.get(k) == v for k, v in node_selector.items())


def static_room(
    nodes: tuple[NodeInfo, ...], needs: PodNeeds, node_pools: tuple[str, ...], node_selector: dict
) -> tuple[int, StaticDiagnostics]:
    registered = [n for n in nodes if _registered(n, node_pools, node_selector)]
    usable = [n for n in registered if n.ready and not n.unschedulable and needs.admits(n)]
    pods = sum(needs.pods_fitting(n.free()) for n in sorted(usable, key=lambda n: n.name))
    replicas = pods // max(1, needs.pods_per_replica)
    return replicas, StaticDiagnostics(len(registered), len(nodes) - len(usable), pods)


def node_pool_headroom(
    pools: tuple[NodePoolInfo, ...], needs: PodNeeds, registered: tuple[str, ...], ceiling: int
) -> int:
    """Replicas the registered pools can launch; a pool without a limit on what a replica
    requests is bounded by `ceiling` (the member's maxReplicas: more is never used)."""
    per_replica = {r: q * needs.pods_per_replica for r, q in needs.requests.items() if q > 0}
    total = 0
    for pool in sorted(pools, key=lambda p: p.name):
        if pool.name not in registered or pool.recent_launch_failures >= RECURRING_LAUNCH_FAILURES:
            continue
        bounded = [
            math.floor(max(0.0, pool.limits[r] - pool.usage.get(r, 0.0)) / q + 1e-9)
            for r, q in per_replica.items()
            if r in pool.limits
        ]
        total += min(bounded) if bounded else ceiling
    return min(total, ceiling)


def update_safe_pressure(
    previous: float | None,
    pressure: float | None,
    latency: float | None,
    error_rate: float | None,
    spec: PolicySpec,
    *,
    short: bool = False,
) -> float | None:
    """Raise the safe pressure to what was just served within the SLOs; never lower it.

    A sample counts only when every configured SLO has its signal and is met, so a
    failing latency query never certifies a pressure as safe, and only while the member
    is not short: a saturated member's pressure is what it failed to serve, not what a
    replica serves safely (without SLOs this is the only test).
    """
    if pressure is None or short:
        return previous
    if spec.latency_slo is not None and (latency is None or latency > spec.latency_slo):
        return previous
    if spec.error_rate_slo is not None and (error_rate is None or error_rate > spec.error_rate_slo):
        return previous
    return pressure if previous is None else max(previous, pressure)


def compute_report(
    inputs: MemberInputs,
    spec: PolicySpec,
    member: str,
    previous_safe_pressure: float | None,
    now: float,
) -> ReportResult:
    entry = spec.cluster(member)
    if entry is None:
        return ReportResult(
            None,
            Condition(
                CONDITION_READY,
                "False",
                REASON_NOT_A_MEMBER,
                f"cluster {member!r} is not in spec.clusters "
                f"(members: {', '.join(spec.cluster_names)})",
            ),
        )

    values: dict[str, float] = {}
    failures: list[str] = list(inputs.read_errors)
    unobserved: list[str] = []
    for name in sorted(spec.effective_signals):
        value, error = inputs.signals.get(name, SignalResult(error="not queried")).single()
        if error:
            failures.append(f"signals.{name}: {error}")
            unobserved.append(f"{name}: {error}"[:1024])
        else:
            values[name] = value
    extra: dict[str, float] = {}
    for name in sorted(spec.extra_signals):
        key = EXTRA_PREFIX + name
        value, error = inputs.signals.get(key, SignalResult(error="not queried")).single()
        if error:
            failures.append(f"signals.extra[{name}]: {error}")
            unobserved.append(f"{key}: {error}"[:1024])
        else:
            extra[name] = value

    live = [p for p in inputs.pods if not p.terminating]
    per_replica = max(1, inputs.needs.pods_per_replica)
    ready = sum(1 for p in live if p.ready) // per_replica
    scheduled = sum(1 for p in live if p.node) // per_replica
    unschedulable = math.ceil(sum(1 for p in live if p.unschedulable) / per_replica)
    needed = unschedulable
    demand = values.get("demand")
    per_replica_capacity = spec.replica_capacity(member)
    if demand is not None and per_replica_capacity:
        load_need = math.ceil(demand / per_replica_capacity - 1e-9)
        needed = max(needed, load_need - scheduled)

    regions = sorted({n.labels[REGION_LABEL] for n in inputs.nodes if n.labels.get(REGION_LABEL)})
    room, diagnostics = static_room(
        inputs.nodes, inputs.needs, entry.node_pools, entry.node_selector
    )
    headroom = node_pool_headroom(
        inputs.node_pools, inputs.needs, entry.node_pools, entry.max_replicas
    )
    safe = update_safe_pressure(
        previous_safe_pressure,
        values.get("pressure"),
        values.get("latency"),
        values.get("errorRate"),
        spec,
        short=needed > 0,
    )
    report = Report(
        time=now,
        spec_hash=spec_hash(spec, member),
        ready=ready,
        desired=inputs.desired,
        scheduled=scheduled,
        needed=max(0, needed),
        static_room=room,
        node_pool_headroom=headroom,
        safe_pressure=safe,
        demand=demand,
        pressure=values.get("pressure"),
        latency=values.get("latency"),
        error_rate=values.get("errorRate"),
        saturation=values.get("saturation"),
        extra=extra,
        region=entry.region or (regions[0] if len(regions) == 1 else None),
        unobserved_signals=tuple(unobserved),
    )
    if failures:
        condition = Condition(
            CONDITION_READY,
            "False",
            REASON_OBSERVATION_FAILED,
            "; ".join(failures) + " (ignored in this report)",
        )
    else:
        condition = Condition(CONDITION_READY, "True", REASON_OBSERVED, "report is current")
    return ReportResult(report, condition, diagnostics)
