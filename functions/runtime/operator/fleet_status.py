"""The whole fleet in one answer: what `modelplane status` prints and the model-health
metrics export.

Derived only from what the control plane already says — the InferenceClusters' spec and
conditions, the ModelDeployments' status (placements, unplaceable, parked, conditions)
and the ModelReplicas' status (ready replicas, the agents' health records) — so it can
never disagree with the conditions an operator reads in `kubectl describe`: it is a
different question asked of the same facts.

A model is counted against what it should have *now* (`status.desiredReplicas`), never
against a minimum: a model that was asked for and fits nowhere is short, and a parked
model is never satisfied. A model whose status has not been written yet (a new claim)
is "pending", not "satisfied": not fetched yet is not empty.

Pure: it takes the objects as plain dicts (as the API returns them) and returns plain
dataclasses; the CLI and the metrics shell do the reading. The text it renders for a
terminal (`render_table`, `explain`) escapes every value's control characters
(terminal.py); `FleetStatus.to_dict` keeps them exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from functions.common import conditions, contracts
from functions.common.durations import parse_duration
from functions.common.health import HealthRecord, count_failures
from functions.common.inventory import IDLE_AFTER_SECONDS, device_class
from functions.runtime.operator.rollout import (
    ClusterRevision,
    Rollout,
    cluster_revisions,
    explain_lines,
    gate_words,
    read_rollout,
)
from functions.runtime.operator.terminal import escaped

# A model's state, one word each, in the order an operator should look at them.
STATE_PARKED: Final = "Parked"
STATE_UNPLACEABLE: Final = "Unplaceable"
STATE_SHORT: Final = "Short"
STATE_PENDING: Final = "Pending"  # status not written yet: nothing decided
STATE_SATISFIED: Final = "Satisfied"
STATES: Final = (STATE_PARKED, STATE_UNPLACEABLE, STATE_SHORT, STATE_PENDING, STATE_SATISFIED)
ON_DEMAND_IDLE: Final = "Idle"  # status.onDemand.state before the first request

SCHEMA_VERSION: Final = "modelplane.ai/fleet-status/v1"
CPU_POOL: Final = "CPU"  # the device class a CPU-only pool is listed under


@dataclass(frozen=True)
class PoolSummary:
    name: str
    device_class: str
    nodes: int
    max_nodes: int  # == nodes for a static pool
    devices_per_node: int
    devices: int  # nodes * devices_per_node: the registered nodes' devices
    # A CPU-only pool (no devices): the CPU and memory of each node, as declared; its
    # device class is CPU_POOL and it counts no devices.
    cpu_per_node: str = ""
    memory_per_node: str = ""

    @property
    def cpu_only(self) -> bool:
        return bool(self.cpu_per_node)

    def describe(self) -> str:
        """`name=NODESxPER CLASS`, or `name=NODESx(CPU CPU, MEMORY)` for a CPU pool."""
        if self.cpu_only:
            return f"{self.name}={self.nodes}x({self.cpu_per_node} CPU, {self.memory_per_node})"
        return f"{self.name}={self.nodes}x{self.devices_per_node} {self.device_class}"


@dataclass(frozen=True)
class ClusterSummary:
    name: str
    region: str
    stack: str
    ready: str  # the Ready condition's status: True, False or Unknown
    telemetry: str  # Push, Local, Disabled, or "" before compose-serving-stack said
    pools: list[PoolSummary]


@dataclass(frozen=True)
class DeviceClassTotal:
    device_class: str
    nodes: int
    devices: int


@dataclass(frozen=True)
class Placement:
    cluster: str
    node_pool: str
    replicas: int
    ready_replicas: int


@dataclass(frozen=True)
class Unplaceable:
    replicas: int
    reason: str
    since: str


@dataclass(frozen=True)
class Parked:
    since: str
    failures: int
    last_error: str
    definition_hash: str


@dataclass(frozen=True)
class ModelSummary:
    namespace: str
    name: str
    state: str
    desired: int
    placed: int
    ready: int
    # Consecutive start failures of the current definition, as parking counts them.
    start_failures: int
    last_error: str
    placements: list[Placement]
    unplaceable: Unplaceable | None
    parked: Parked | None
    # An on-demand model's activity (Idle or Active, status.onDemand.state); "" for a
    # model that always runs. An idle one wants 0 now, so at 0 it is satisfied.
    on_demand: str = ""
    # Where its last rollout stands (status.rollout, with each cluster's revision from
    # its ModelReplicas); None before the function wrote one.
    rollout: Rollout | None = None
    # Each cluster's revision as its ModelReplicas carry it, rollout recorded or not (a
    # cluster only the status names is in `rollout.clusters`, not here).
    revisions: list[ClusterRevision] = field(default_factory=list)

    @property
    def satisfied(self) -> bool:
        return self.state == STATE_SATISFIED


@dataclass(frozen=True)
class ModelTotals:
    total: int
    satisfied: int
    short: int  # every model that is not satisfied: short, unplaceable, parked, pending


@dataclass(frozen=True)
class ReplicaTotals:
    desired: int
    placed: int
    ready: int
    unplaceable: int


@dataclass(frozen=True)
class GpuUse:
    device_class: str
    total: int
    used: int
    unhealthy: int

    @property
    def free(self) -> int:
        # Unhealthy cards are neither used nor free: counting them free is how a fleet
        # looks like it has room it does not have.
        return max(0, self.total - self.used - self.unhealthy)


@dataclass(frozen=True)
class CpuPoolUse:
    """A CPU-only pool as its member's inventory reports it (quantities as written)."""

    cluster: str
    pool: str
    nodes: int
    cpu: str
    cpu_requested: str
    memory: str
    memory_requested: str


@dataclass(frozen=True)
class FabricUse:
    cluster: str
    name: str
    nodes: int
    largest_free_block: int


@dataclass(frozen=True)
class IdleReplica:
    cluster: str
    namespace: str
    name: str
    deployment: str
    idle_seconds: int
    gpus: int


@dataclass(frozen=True)
class InventoryReport:
    """Whose inventory the totals include, and how fresh each is."""

    cluster: str
    observed_at: str
    request_counters: str
    # The threshold its agent names replicas idle at (--idle-after); an agent that did not
    # say used the default.
    idle_after_seconds: int = IDLE_AFTER_SECONDS


@dataclass(frozen=True)
class Inventory:
    """The members' own reports (InferenceCluster status.inventory), summed over the fleet.
    A cluster whose agent has not reported is named under `missing`, never read as empty."""

    reports: list[InventoryReport]
    missing: list[str]
    nodes: dict[str, int]
    gpus: list[GpuUse]
    fabrics: list[FabricUse]
    replicas: dict[str, int]
    idle_replicas: list[IdleReplica]
    cpu_pools: list[CpuPoolUse] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reports": [_camel(asdict(r)) for r in self.reports],
            "missing": list(self.missing),
            "nodes": dict(self.nodes),
            "gpus": [_camel(asdict(g)) | {"free": g.free} for g in self.gpus],
            "fabrics": [_camel(asdict(f)) for f in self.fabrics],
            "replicas": dict(self.replicas),
            "idleReplicas": [_camel(asdict(i)) for i in self.idle_replicas],
            "cpuPools": [_camel(asdict(c)) for c in self.cpu_pools],
        }


NODE_STATES: Final = ("total", "ready", "cordoned", "draining", "unreachable")
REPLICA_STATES: Final = ("ready", "starting", "draining", "failed")


def read_inventory(clusters: Iterable[Mapping[str, Any]]) -> Inventory:
    """The fleet's inventory from each InferenceCluster's status.inventory."""
    reports, missing = [], []
    nodes = dict.fromkeys(NODE_STATES, 0)
    replicas = dict.fromkeys(REPLICA_STATES, 0)
    gpus: dict[str, list[int]] = {}
    fabrics, idle, cpu_pools = [], [], []
    for obj in sorted(clusters, key=lambda c: _key(c)[1]):
        name = _key(obj)[1]
        inventory = (obj.get("status") or {}).get("inventory")
        if not inventory:
            missing.append(name)
            continue
        reports.append(
            InventoryReport(
                name,
                str(inventory.get("observedAt", "")),
                str(inventory.get("requestCounters", "")),
                _int(inventory.get("idleAfterSeconds", IDLE_AFTER_SECONDS)),
            )
        )
        for state in NODE_STATES:
            nodes[state] += _int((inventory.get("nodes") or {}).get(state))
        for state in REPLICA_STATES:
            replicas[state] += _int((inventory.get("replicas") or {}).get(state))
        for gpu in inventory.get("gpus") or []:
            use = gpus.setdefault(str(gpu.get("deviceClass", "")), [0, 0, 0])
            for i, part in enumerate(("total", "used", "unhealthy")):
                use[i] += _int(gpu.get(part))
        fabrics += [
            FabricUse(
                name, str(f.get("name", "")), _int(f.get("nodes")), _int(f.get("largestFreeBlock"))
            )
            for f in inventory.get("fabrics") or []
        ]
        cpu_pools += [
            CpuPoolUse(
                name,
                str(c.get("pool", "")),
                _int(c.get("nodes")),
                *(str(c.get(k, "")) for k in ("cpu", "cpuRequested", "memory", "memoryRequested")),
            )
            for c in inventory.get("cpuPools") or []
            if isinstance(c, dict)
        ]
        idle += [
            IdleReplica(
                name,
                str(r.get("namespace", "")),
                str(r.get("name", "")),
                str(r.get("deployment", "")),
                _int(r.get("idleSeconds")),
                _int(r.get("gpus")),
            )
            for r in inventory.get("idleReplicas") or []
        ]
    return Inventory(
        reports=reports,
        missing=missing,
        nodes=nodes,
        gpus=[GpuUse(c, *use) for c, use in sorted(gpus.items())],
        fabrics=sorted(fabrics, key=lambda f: (f.cluster, f.name)),
        replicas=replicas,
        # Most GPUs held idle first: the first place to find room.
        idle_replicas=sorted(idle, key=lambda r: (-r.gpus, -r.idle_seconds, r.cluster, r.name)),
        cpu_pools=sorted(cpu_pools, key=lambda c: (c.cluster, c.pool)),
    )


@dataclass(frozen=True)
class FleetStatus:
    clusters: list[ClusterSummary]
    devices: list[DeviceClassTotal]
    replicas: ReplicaTotals
    models: ModelTotals
    model_list: list[ModelSummary]
    # The lines that turn "something is wrong" into a place to look.
    unplaceable: list[ModelSummary] = field(default_factory=list)
    parked: list[ModelSummary] = field(default_factory=list)
    inventory: Inventory = field(default_factory=lambda: read_inventory([]))

    def to_dict(self) -> dict[str, Any]:
        """The `-o json|yaml` document (fleet-status.schema.json describes it)."""
        return {
            "schema": SCHEMA_VERSION,
            "clusters": [_camel(asdict(c)) for c in self.clusters],
            "devices": [_camel(asdict(d)) for d in self.devices],
            "replicas": _camel(asdict(self.replicas)),
            "models": _camel(asdict(self.models)),
            "unplaceable": [
                {"namespace": m.namespace, "name": m.name, **_camel(asdict(m.unplaceable))}
                for m in self.unplaceable
                if m.unplaceable
            ],
            "parked": [
                {"namespace": m.namespace, "name": m.name, **_camel(asdict(m.parked))}
                for m in self.parked
                if m.parked
            ],
            "modelList": [_camel(asdict(m)) for m in self.model_list],
            "inventory": self.inventory.to_dict(),
        }


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel_key(k): _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


# --- readers: the API's dicts to typed values ------------------------------------------


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def read_cluster(obj: Mapping[str, Any]) -> ClusterSummary:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    pools = []
    for pool in spec.get("nodePools") or []:
        devices = pool.get("devices") or {}
        nodes = _int(pool.get("nodes"))
        per_node = _int(devices.get("perNode"))
        if not devices and pool.get("cpu") is not None:
            pools.append(
                PoolSummary(
                    name=str(pool.get("name", "")),
                    device_class=CPU_POOL,
                    nodes=nodes,
                    max_nodes=_int(pool.get("maxNodes", nodes)),
                    devices_per_node=0,
                    devices=0,
                    cpu_per_node=str(pool.get("cpu")),
                    memory_per_node=str(pool.get("memory", "")),
                )
            )
            continue
        pools.append(
            PoolSummary(
                name=str(pool.get("name", "")),
                device_class=device_class(
                    devices.get("attributes"), str(devices.get("driver", "unknown"))
                ),
                nodes=nodes,
                max_nodes=_int(pool.get("maxNodes", nodes)),
                devices_per_node=per_node,
                devices=nodes * per_node,
            )
        )
    return ClusterSummary(
        name=str((obj.get("metadata") or {}).get("name", "")),
        region=str(spec.get("region", "")),
        stack=str(spec.get("stack", "")),
        ready=conditions.condition_status(obj, conditions.READY) or conditions.UNKNOWN,
        telemetry=str((status.get("telemetry") or {}).get("mode", "")),
        pools=sorted(pools, key=lambda p: p.name),
    )


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace", "")), str(metadata.get("name", ""))


def _replica_failures(
    replicas: Iterable[Mapping[str, Any]], retried: Mapping[str, Any]
) -> tuple[int, str]:
    """Start failures of the current definition across the model's ModelReplicas.

    The current definition is the one the ModelReplicas were composed with; failures a
    retry already spent (status.retried) do not count again, as in parking.
    """
    replicas = list(replicas)
    definitions = {str((r.get("spec") or {}).get("definitionHash", "")) for r in replicas}
    if len(definitions) != 1:
        return 0, ""  # none yet, or mid-rollout of a new definition: nothing counted
    definition = definitions.pop()
    records = [
        HealthRecord.from_status(health, lambda value, _path: _int(value))
        for r in replicas
        if (health := (r.get("status") or {}).get("health"))
    ]
    total, last_error = count_failures(records, definition)
    spent = _int(retried.get("failures")) if retried.get("definitionHash") == definition else 0
    return (total - spent if total >= spent else total), last_error


def read_model(
    deployment: Mapping[str, Any], replicas: Iterable[Mapping[str, Any]]
) -> ModelSummary:
    namespace, name = _key(deployment)
    replicas = list(replicas)
    status = deployment.get("status") or {}
    placements = sorted(
        (
            Placement(
                cluster=str(p.get("cluster", "")),
                node_pool=str(p.get("nodePool", "")),
                replicas=_int(p.get("replicas")),
                ready_replicas=_int(p.get("readyReplicas")),
            )
            for p in status.get("placements") or []
        ),
        key=lambda p: (p.cluster, p.node_pool),
    )
    raw_unplaceable = status.get("unplaceable") or {}
    unplaceable = (
        Unplaceable(
            replicas=_int(raw_unplaceable.get("replicas")),
            reason=str(raw_unplaceable.get("reason", "")),
            since=str(raw_unplaceable.get("since", "")),
        )
        if _int(raw_unplaceable.get("replicas"))
        else None
    )
    raw_parked = status.get("parked") or {}
    parked = (
        Parked(
            since=str(raw_parked.get("since", "")),
            failures=_int(raw_parked.get("failures")),
            last_error=str(raw_parked.get("lastError", "")),
            definition_hash=str(raw_parked.get("definitionHash", "")),
        )
        if raw_parked.get("definitionHash")
        else None
    )
    if parked:
        failures, last_error = parked.failures, parked.last_error
    else:
        failures, last_error = _replica_failures(replicas, status.get("retried") or {})

    written = "desiredReplicas" in status
    desired = _int(status.get("desiredReplicas"))
    ready = _int(status.get("readyReplicas"))
    if parked:
        state = STATE_PARKED
    elif unplaceable:
        state = STATE_UNPLACEABLE
    elif not written:
        state = STATE_PENDING
    elif ready >= desired:
        state = STATE_SATISFIED
    else:
        state = STATE_SHORT
    return ModelSummary(
        namespace=namespace,
        name=name,
        state=state,
        desired=desired,
        placed=_int(status.get("placedReplicas")),
        ready=ready,
        start_failures=failures,
        last_error=last_error,
        placements=placements,
        unplaceable=unplaceable,
        parked=parked,
        on_demand=(
            str((status.get("onDemand") or {}).get("state") or ON_DEMAND_IDLE)
            if (deployment.get("spec") or {}).get("onDemand") is not None
            else ""
        ),
        rollout=read_rollout(deployment, replicas),
        revisions=cluster_revisions(replicas),
    )


# --- the summary ------------------------------------------------------------------------


def summarize(
    clusters: Iterable[Mapping[str, Any]],
    deployments: Iterable[Mapping[str, Any]],
    replicas: Iterable[Mapping[str, Any]],
) -> FleetStatus:
    """The fleet summary from the three kinds as listed (any order)."""
    clusters = list(clusters)
    cluster_list = sorted((read_cluster(c) for c in clusters), key=lambda c: c.name)

    by_deployment: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for replica in replicas:
        namespace, _ = _key(replica)
        owner = str((replica.get("spec") or {}).get("deployment", ""))
        by_deployment.setdefault((namespace, owner), []).append(replica)
    models = sorted(
        (read_model(d, by_deployment.get(_key(d), [])) for d in deployments),
        key=lambda m: (m.namespace, m.name),
    )

    by_class: dict[str, tuple[int, int]] = {}
    for cluster in cluster_list:
        for pool in cluster.pools:
            if pool.cpu_only:
                continue  # no devices: listed with its cluster's pools, not counted here
            nodes, devices = by_class.get(pool.device_class, (0, 0))
            by_class[pool.device_class] = (nodes + pool.nodes, devices + pool.devices)

    satisfied = sum(1 for m in models if m.satisfied)
    return FleetStatus(
        clusters=cluster_list,
        devices=[DeviceClassTotal(c, n, d) for c, (n, d) in sorted(by_class.items())],
        replicas=ReplicaTotals(
            desired=sum(m.desired for m in models),
            placed=sum(m.placed for m in models),
            ready=sum(m.ready for m in models),
            unplaceable=sum(m.unplaceable.replicas for m in models if m.unplaceable),
        ),
        models=ModelTotals(total=len(models), satisfied=satisfied, short=len(models) - satisfied),
        model_list=models,
        unplaceable=[m for m in models if m.unplaceable and not m.parked],
        parked=[m for m in models if m.parked],
        inventory=read_inventory(clusters),
    )


# --- the table ----------------------------------------------------------------------------


def duration(seconds: int) -> str:
    """45s, 10m, 2m30s, 1h05m: short enough for a column, exact enough to compare."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _inventory_lines(inventory: Inventory) -> list[str]:
    n, r = inventory.nodes, inventory.replicas
    lines = []
    if inventory.missing:
        lines.append(f"No inventory reported yet by: {', '.join(inventory.missing)}")
    if not inventory.reports:
        return [*lines, ""]
    lines += [
        f"Nodes:     {n['total']} total, {n['ready']} ready, {n['cordoned']} cordoned, "
        f"{n['draining']} draining, {n['unreachable']} unreachable",
        f"Serving:   {r['ready']} ready, {r['starting']} starting, {r['draining']} draining, "
        f"{r['failed']} failed",
        "",
    ]
    lines += _table(
        ["GPU CLASS", "TOTAL", "USED", "UNHEALTHY", "FREE"],
        [
            [g.device_class, str(g.total), str(g.used), str(g.unhealthy), str(g.free)]
            for g in inventory.gpus
        ],
    )
    lines.append("")
    if inventory.cpu_pools:
        lines += _table(
            ["CLUSTER", "CPU POOL", "NODES", "CPU", "REQUESTED", "MEMORY", "REQUESTED"],
            [
                [
                    c.cluster,
                    c.pool,
                    str(c.nodes),
                    c.cpu,
                    c.cpu_requested,
                    c.memory,
                    c.memory_requested,
                ]
                for c in inventory.cpu_pools
            ],
        )
        lines.append("")
    if inventory.fabrics:
        lines += _table(
            ["CLUSTER", "FABRIC", "NODES", "LARGEST FREE BLOCK"],
            [
                [f.cluster, f.name, str(f.nodes), str(f.largest_free_block)]
                for f in inventory.fabrics
            ],
        )
        lines.append("")
    if inventory.idle_replicas:
        thresholds = sorted({r.idle_after_seconds for r in inventory.reports})
        lines.append(
            f"IDLE (serving, nothing asked for {' or '.join(map(duration, thresholds))}; "
            "holding GPUs):"
        )
        lines += _table(
            ["  REPLICA", "CLUSTER", "MODEL", "IDLE", "GPUS"],
            [
                [
                    f"  {i.namespace}/{i.name}",
                    i.cluster,
                    i.deployment or "-",
                    duration(i.idle_seconds),
                    str(i.gpus),
                ]
                for i in inventory.idle_replicas
            ],
        )
        lines.append("")
    return lines


def _rollout_lines(models: Iterable[ModelSummary]) -> list[str]:
    """Every rollout that is not Complete: in progress, paused or rolled back, with each
    cluster's revision and, for a stopped one, the gate that failed or the engine's words."""
    rows = []
    for m in models:
        r = m.rollout
        if r is None or r.phase == contracts.ROLLOUT_PHASE_COMPLETE:
            continue
        # The failed gate with its numbers, then the words (the engine's, for a start
        # failure): the gate alone does not say what the engine refused.
        why = "; ".join(
            x for x in (r.failed_gate and gate_words(r.failed_gate), r.message or r.reason) if x
        )
        rows.append(
            [
                f"  {m.namespace}/{m.name}",
                r.phase
                + (
                    " (pause asked)"
                    if r.paused and r.phase != contracts.ROLLOUT_PHASE_PAUSED
                    else ""
                ),
                f"{r.revision} <- {r.previous or '-'}",
                f"{r.wave}/{r.waves}" if r.in_progress else "-",
                ", ".join(f"{c.cluster}={c.revision}" for c in r.clusters) or "-",
                why or "-",
            ]
        )
    if not rows:
        return []
    return [
        "ROLLOUTS (in progress, paused or rolled back):",
        *_table(["  MODEL", "PHASE", "REVISION <- PREVIOUS", "WAVE", "CLUSTERS", "WHY"], rows),
        "",
    ]


def render_table(fleet: FleetStatus) -> str:
    """The readable answer: totals first, then what needs a look, then the details."""
    fleet = escaped(fleet)
    r, m = fleet.replicas, fleet.models
    lines = [
        f"Models:    {m.total} total, {m.satisfied} satisfied, {m.short} short",
        f"Replicas:  {r.ready} ready of {r.desired} desired "
        f"({r.placed} placed, {r.unplaceable} unplaceable)",
        f"Clusters:  {len(fleet.clusters)} "
        f"({sum(1 for c in fleet.clusters if c.ready == conditions.TRUE)} ready)",
        "",
    ]
    lines += _inventory_lines(fleet.inventory)
    if fleet.parked:
        lines.append("PARKED (not placed again until the definition changes or a retry):")
        lines += _table(
            ["  MODEL", "FAILURES", "SINCE", "LAST ERROR"],
            [
                [
                    f"  {p.namespace}/{p.name}",
                    str(p.parked.failures),
                    p.parked.since,
                    p.parked.last_error or "-",
                ]
                for p in fleet.parked
                if p.parked
            ],
        )
        lines.append("")
    if fleet.unplaceable:
        lines.append("UNPLACEABLE (fits nowhere now):")
        lines += _table(
            ["  MODEL", "REPLICAS", "SINCE", "REASON"],
            [
                [
                    f"  {u.namespace}/{u.name}",
                    str(u.unplaceable.replicas),
                    u.unplaceable.since,
                    u.unplaceable.reason or "-",
                ]
                for u in fleet.unplaceable
                if u.unplaceable
            ],
        )
        lines.append("")
    lines += _rollout_lines(fleet.model_list)
    lines += _table(
        ["MODEL", "STATE", "READY", "DESIRED", "PLACED", "FAILURES", "PLACEMENTS"],
        [
            [
                f"{x.namespace}/{x.name}",
                f"{x.state} (on demand: {x.on_demand.lower()})" if x.on_demand else x.state,
                str(x.ready),
                str(x.desired),
                str(x.placed),
                str(x.start_failures),
                ", ".join(
                    f"{p.cluster}/{p.node_pool}={p.ready_replicas}/{p.replicas}"
                    for p in x.placements
                )
                or "-",
            ]
            for x in fleet.model_list
        ],
    )
    lines.append("")
    lines += _table(
        ["CLUSTER", "REGION", "STACK", "READY", "TELEMETRY", "POOLS"],
        [
            [
                c.name,
                c.region or "-",
                c.stack or "-",
                c.ready,
                c.telemetry or "-",
                ", ".join(p.describe() for p in c.pools) or "-",
            ]
            for c in fleet.clusters
        ],
    )
    lines.append("")
    lines += _table(
        ["DEVICE CLASS", "NODES", "DEVICES"],
        [[d.device_class, str(d.nodes), str(d.devices)] for d in fleet.devices],
    )
    return "\n".join(lines) + "\n"


# --- one model, explained -------------------------------------------------------------------


def next_step(model: ModelSummary) -> str:
    """What an operator can do about a model in this state."""
    model = escaped(model)
    if model.parked:
        return (
            f"Fix the cause ({model.parked.last_error or 'see the ModelReplicas'}) and change "
            f"source, profile or engines, or run `modelplane retry "
            f"{model.namespace}/{model.name}`."
        )
    if model.unplaceable:
        return (
            "Make room (free or add nodes in a matching pool, or raise maxNodes) or relax "
            "the device selectors (or the cpu and memory asked for); the next reconcile "
            "places it."
        )
    if model.state == STATE_PENDING:
        return "Its status is not written yet: compose-model-deployment has not reconciled it."
    if model.rollout and model.rollout.in_progress:
        where = f"{model.namespace}/{model.name}"
        if model.rollout.phase == contracts.ROLLOUT_PHASE_PAUSED and not model.rollout.paused:
            return (
                f"Its rollout of {model.rollout.revision} was paused by its policy "
                f"(onFailure: Pause) at wave {model.rollout.wave}/{model.rollout.waves}: "
                f"fix the cause above and change the template (a new revision), or "
                f"`modelplane rollout undo {where}` returns its clusters to "
                f"{model.rollout.previous or 'the last good revision'}."
            )
        if model.rollout.phase == contracts.ROLLOUT_PHASE_PAUSED:
            return (
                f"Its rollout of {model.rollout.revision} is paused: `modelplane rollout "
                f"resume {where}` continues it, `modelplane rollout undo {where}` returns "
                f"its clusters to {model.rollout.previous or 'the last good revision'}."
            )
        return (
            f"Its rollout of {model.rollout.revision} is in progress (wave "
            f"{model.rollout.wave}/{model.rollout.waves}): `modelplane rollout pause "
            f"{where}` holds it, `modelplane rollout undo {where}` rolls it back."
        )
    if model.rollout and model.rollout.phase == contracts.ROLLOUT_PHASE_ROLLED_BACK:
        return (
            f"Revision {model.rollout.revision} was rolled back; its clusters serve "
            f"{model.rollout.previous or 'the last good revision'}. Fix the cause above and "
            "change the template again: a new revision rolls out from the first wave."
        )
    if model.state == STATE_SHORT:
        return "Replicas are placed but not ready yet; a start failure shows under FAILURES."
    if model.on_demand and model.on_demand != "Active":
        return "Nothing to do: it starts when it is asked for."
    return "Nothing to do."


def room_lines(clusters: Iterable[Mapping[str, Any]]) -> list[str]:
    """What each member says is free now (its inventory), for a model that is short."""
    clusters = escaped(list(clusters))
    lines = []
    for cluster in sorted(clusters, key=lambda c: _key(c)[1]):
        name = _key(cluster)[1]
        inventory = read_inventory([cluster])
        if not inventory.reports:
            lines.append(f"  room on {name}: no inventory reported yet")
            continue
        gpus = ", ".join(f"{g.device_class} {g.free} free of {g.total}" for g in inventory.gpus)
        cpus = ", ".join(
            f"pool {c.pool} {c.cpu_requested} of {c.cpu} CPU and {c.memory_requested} of "
            f"{c.memory} requested"
            for c in inventory.cpu_pools
        )
        cpu_pools = [p.describe() for p in read_cluster(cluster).pools if p.cpu_only]
        if cpus:
            gpus = f"{gpus}; {cpus}" if gpus else cpus
        elif not gpus and cpu_pools:
            # An agent that does not report its CPU pools yet.
            gpus = f"CPU-only pools {', '.join(cpu_pools)} (CPU use not reported)"
        fabrics = "".join(
            f"; fabric {f.name}: {f.largest_free_block} whole nodes free" for f in inventory.fabrics
        )
        lines.append(
            f"  room on {name} (as of {inventory.reports[0].observed_at}): "
            f"{gpus or 'no GPUs'}{fabrics}"
        )
    return lines


# spec.onDemand's defaults (compose-model-deployment's ondemand.py applies them).
ON_DEMAND_IDLE_AFTER_SECONDS: Final = 600.0
ON_DEMAND_ACTIVATION_TIMEOUT_SECONDS: Final = contracts.DEFAULT_ACTIVATION_TIMEOUT_SECONDS


def _seconds(raw: Any, default: float) -> float:
    try:
        return parse_duration(raw) if raw else default
    except (ValueError, TypeError):
        return default


def _timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def on_demand_lines(
    deployment: Mapping[str, Any],
    model: ModelSummary,
    clusters: Iterable[Mapping[str, Any]],
    now: datetime,
) -> list[str]:
    """What an on-demand model does now and next: idle at zero (the first request
    activates it) or active (and when it can go back to idle), and the last attempt.
    ondemand.py decides; this says it in the same terms from the same fields."""
    spec = (deployment.get("spec") or {}).get("onDemand") or {}
    state = (deployment.get("status") or {}).get("onDemand") or {}
    idle_after = _seconds(spec.get("idleAfter"), ON_DEMAND_IDLE_AFTER_SECONDS)
    timeout = _seconds(spec.get("activationTimeout"), ON_DEMAND_ACTIVATION_TIMEOUT_SECONDS)
    activation = (
        f"the first request through the inference Gateway activates it: the member's "
        f"activator asks for one placement attempt and holds the request until a replica "
        f"is ready (at most activationTimeout, {duration(int(timeout))}; how long it "
        f"takes: modelplane_activator_activation_duration_seconds)"
    )
    lines = []
    activated_at = str(state.get("activatedAt", ""))
    if model.on_demand != "Active":
        where = "scaled to zero (no pod, no GPU held)" if not model.ready else "scaling to zero"
        lines += [f"  on demand: idle, {where}", f"  {activation}"]
    else:
        lines.append(f"  on demand: active since {activated_at or 'an unrecorded time'}")
        lines.append(f"  {_until_idle(model, activated_at, idle_after, clusters, now)}")
    attempt = state.get("attempt") or {}
    if attempt.get("id"):
        reason = f": {attempt['reason']}" if attempt.get("reason") else ""
        lines.append(
            f"  last placement attempt {attempt['id']} at {attempt.get('at', '?')}: "
            f"{attempt.get('result', '?')}{reason}"
        )
    elif model.on_demand != "Active" and not activated_at:
        lines.append("  never activated yet")
    if model.on_demand != "Active" and activated_at:
        lines.append(f"  last activated at {activated_at}")
    return lines


def _until_idle(
    model: ModelSummary,
    activated_at: str,
    idle_after: float,
    clusters: Iterable[Mapping[str, Any]],
    now: datetime,
) -> str:
    """When an active model can go back to idle: idleAfter past its last activation, and
    idleAfter without requests on every cluster where it is ready."""
    rule = f"back to idle (zero) after idleAfter ({duration(int(idle_after))}) without requests"
    since = _timestamp(activated_at)
    waits = []
    if since is not None:
        waits.append(idle_after - (now - since).total_seconds())
    idle = _idle_seconds(clusters, model.namespace, model.name)
    serving = [p.cluster for p in model.placements if p.ready_replicas > 0]
    busy = [c for c in serving if c not in idle]
    waits += [idle_after - idle[c] for c in serving if c in idle]
    if busy:
        return f"{rule}; still asked for on {', '.join(sorted(busy))}"
    left = max(waits, default=0.0)
    if left > 0:
        return f"{rule}; idle in {duration(int(left))} at the earliest if no request comes"
    return f"{rule}; due now: the next reconcile scales it to zero"


def _idle_seconds(
    clusters: Iterable[Mapping[str, Any]], namespace: str, deployment: str
) -> dict[str, int]:
    """Per cluster, how long the model's replicas there have been idle (its least idle
    one), as its inventory last said; absent: not idle there."""
    out: dict[str, int] = {}
    for cluster in clusters:
        name = _key(cluster)[1]
        inventory = (cluster.get("status") or {}).get("inventory") or {}
        for entry in inventory.get("idleReplicas") or []:
            if not isinstance(entry, Mapping):
                continue
            if (entry.get("namespace"), entry.get("deployment")) != (namespace, deployment):
                continue
            seconds = _int(entry.get("idleSeconds"))
            out[name] = min(out.get(name, seconds), seconds)
    return out


def launch_warning_lines(deployment: Mapping[str, Any]) -> list[str]:
    """The deployment's launch warnings (status.warnings), one line each, with the
    clusters whose ModelReplica reported it."""
    lines = []
    for warning in (deployment.get("status") or {}).get("warnings") or []:
        if not isinstance(warning, Mapping):
            continue
        clusters = [str(c) for c in warning.get("clusters") or []]
        where = f" (on {', '.join(clusters)})" if clusters else ""
        lines.append(
            f"  launch warning {warning.get('reason', '?')}{where}: "
            f"{warning.get('field', '?')}: {warning.get('message', '')}"
        )
    return lines


def explain(
    deployment: Mapping[str, Any],
    replicas: Iterable[Mapping[str, Any]],
    clusters: Iterable[Mapping[str, Any]] = (),
    *,
    now: datetime | None = None,
) -> str:
    """Why a model is where it is, from its status and its ModelReplicas', and for a model
    that is short, what room each member reports; for an on-demand model, whether it is
    idle or active and what its next request or its idleness does."""
    deployment, replicas, clusters = escaped((deployment, list(replicas), list(clusters)))
    replicas = sorted(replicas, key=_key)
    model = read_model(deployment, replicas)
    lines = [
        f"{model.namespace}/{model.name}: {model.state} — {model.ready} of {model.desired} "
        f"ready, {model.placed} placed",
    ]
    for condition in (deployment.get("status") or {}).get("conditions") or []:
        if condition.get("type") in (
            conditions.REPLICAS_SCHEDULED,
            conditions.REPLICAS_READY,
            conditions.PARKED,
        ):
            lines.append(
                f"  {condition['type']}={condition.get('status')} "
                f"({condition.get('reason', '')}): {condition.get('message', '')}"
            )
    if model.parked:
        lines.append(
            f"  parked since {model.parked.since} after {model.parked.failures} consecutive "
            f"start failures of definition {model.parked.definition_hash}: "
            f"{model.parked.last_error or 'no error was reported'}"
        )
    if model.unplaceable:
        lines.append(
            f"  {model.unplaceable.replicas} replicas fit nowhere since "
            f"{model.unplaceable.since}: {model.unplaceable.reason}"
        )
    for placement in model.placements:
        lines.append(
            f"  {placement.cluster}/{placement.node_pool}: {placement.ready_replicas} of "
            f"{placement.replicas} ready"
        )
    for replica in replicas:
        health = (replica.get("status") or {}).get("health") or {}
        if _int(health.get("consecutiveStartFailures")):
            lines.append(
                f"  {_key(replica)[1]}: {health['consecutiveStartFailures']} consecutive "
                f"start failures (definition {health.get('definitionHash', '?')}, "
                f"{health.get('observedAt', '?')}): {health.get('lastError', '')}"
            )
    lines += launch_warning_lines(deployment)
    if model.rollout:
        lines += explain_lines(model.rollout)
    if model.on_demand:
        lines += on_demand_lines(deployment, model, clusters, now or datetime.now(UTC))
    if model.state in (STATE_UNPLACEABLE, STATE_SHORT):
        lines += room_lines(clusters)
    lines.append(f"Next: {next_step(model)}")
    return "\n".join(lines) + "\n"
