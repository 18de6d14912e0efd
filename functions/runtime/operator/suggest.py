"""`modelplane suggest`: a first autoscaling policy for one ModelDeployment.

Every knob the operations guide's checklist says to set per model, in `shadow` mode (the
guide: run shadow through a few real peaks and read the decision log before `auto`),
each with a comment saying what goes wrong when it is off. The result is a merge patch
of the deployment's `spec.autoscaling`, valid for the ModelDeployment XRD, to apply with
`kubectl patch md NAME --type merge --patch-file FILE` once reviewed.

What is derived, and from what:
- the clusters the model may run on (its clusterSelector against the InferenceClusters'
  labels) and the devices one replica takes (devices x nodes of every engine member);
- maxReplicas: the most replicas the largest eligible pool holds at its NodePool limit —
  the one ceiling on the floor the hub raises, so it is what you would pay for there;
- escalation.after: the time from a pending pod to a ready one in the cluster itself,
  estimated from whether a node must be launched first (any eligible pool below its
  maxNodes) and how many nodes one replica spans; readyTimeout twice that, at least 10m;
- cooldown: the signals' lag (the query window plus a report interval);
- the signals, named in the metric vocabulary: each member's agent computes them from
  its cluster collector, scoped to this one model, whatever engine serves it.
What cannot be derived is marked MEASURE: replicaCapacity and the SLOs are properties of
the model on your hardware; the values given are placeholders to replace, and the
comment says how to measure them. A value already set on the deployment is kept.

Pure: the objects in, the text out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common import cpu_slots as cpu
from functions.runtime.operator.terminal import escape
from functions.runtime.shared.policy import REPORT_INTERVAL_SECONDS

QUERY_WINDOW: Final = "2m"
QUERY_WINDOW_SECONDS: Final = 120
NODE_LAUNCH_SECONDS: Final = 300  # a GPU node from NodePool to Ready, driver loaded
LOAD_SECONDS: Final = 120  # image pull and weights load on a node that has neither
PER_EXTRA_NODE_SECONDS: Final = 60  # each further node a multi-node replica waits for
MIN_READY_TIMEOUT_SECONDS: Final = 600
CALM_FOR: Final = "15m"


def _duration(seconds: float) -> str:
    seconds = math.ceil(seconds)
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


@dataclass(frozen=True)
class Pool:
    cluster: str
    name: str
    nodes: int
    max_nodes: int
    per_node: int
    # A CPU-only pool (no devices): each node's CPU (millicores) and memory (bytes).
    cpu_milli: int = 0
    memory_bytes: int = 0


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def eligible_pools(
    deployment: Mapping[str, Any], clusters: Iterable[Mapping[str, Any]]
) -> list[Pool]:
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    wanted = (template.get("clusterSelector") or {}).get("matchLabels") or {}
    pools = []
    for cluster in clusters:
        metadata = cluster.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if any(labels.get(k) != v for k, v in wanted.items()):
            continue
        for pool in (cluster.get("spec") or {}).get("nodePools") or []:
            nodes = _int(pool.get("nodes"))
            pools.append(
                Pool(
                    cluster=str(metadata.get("name", "")),
                    name=str(pool.get("name", "")),
                    nodes=nodes,
                    max_nodes=_int(pool.get("maxNodes"), nodes),
                    per_node=_int((pool.get("devices") or {}).get("perNode")),
                    **_cpu_of(pool),
                )
            )
    return sorted(pools, key=lambda p: (p.cluster, p.name))


def _cpu_of(pool: Mapping[str, Any]) -> dict[str, int]:
    """A CPU-only pool's per-node CPU and memory; {} for a device pool (or bad values)."""
    if pool.get("devices") or pool.get("cpu") is None:
        return {}
    try:
        return {
            "cpu_milli": cpu.millicores(str(pool.get("cpu"))),
            "memory_bytes": cpu.bytes_of(str(pool.get("memory", "0"))),
        }
    except ValueError:
        return {}


def cpu_requests(deployment: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """A CPU deployment's pods as (millicores, bytes), a Leader's workers included; ()
    when a member asks for devices (or a request does not read)."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    requests: list[tuple[int, int]] = []
    for engine in template.get("engines") or []:
        members = engine.get("members") or []
        workers = max(
            (_int((m.get("worker") or {}).get("nodes")) for m in members if m.get("worker")),
            default=0,
        )
        for member in members:
            selector = member.get("nodeSelector") or {}
            if selector.get("cpu") is None:
                return ()
            try:
                request = (
                    cpu.millicores(str(selector["cpu"])),
                    cpu.bytes_of(str(selector.get("memory", "0"))),
                )
            except ValueError:
                return ()
            if min(request) <= 0:
                return ()
            requests += [request] * (workers if member.get("role") == "Worker" else 1)
    return tuple(requests)


def _cpu_fits(pool: Pool, nodes: int, requests: tuple[tuple[int, int], ...]) -> int:
    """Replicas of a CPU deployment `nodes` nodes of a CPU pool hold, counted as
    placement counts them (cpu.py's slots of the smallest request)."""
    if not pool.cpu_milli:
        return 0
    unit = cpu.unit_of(requests)
    per_replica = sum(cpu.pod_slots(requests, unit))
    return nodes * cpu.slots_per_node(pool.cpu_milli, pool.memory_bytes, unit) // per_replica


def replica_shape(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """(devices per node of the widest member, nodes one replica spans)."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    per_node, nodes = 1, 1
    for engine in template.get("engines") or []:
        for member in engine.get("members") or []:
            devices = sum(
                _int(d.get("count"), 1)
                for d in (member.get("nodeSelector") or {}).get("devices") or []
            )
            per_node = max(per_node, devices)
            # A Leader's worker.nodes are besides itself: the replica takes nodes + 1.
            worker = member.get("worker")
            if worker:
                nodes = max(nodes, _int(worker.get("nodes"), 0) + 1)
    return per_node, nodes


def _shape(requests: tuple[tuple[int, int], ...], per_node: int, span: int) -> str:
    if requests:
        return f"{cpu.describe(max(requests))} x {len(requests)} pod(s)"
    return f"{per_node} devices x {span} node(s)"


@dataclass(frozen=True)
class Knob:
    path: tuple[str, ...]
    value: Any
    why: str  # what goes wrong when it is off


def knobs(deployment: Mapping[str, Any], clusters: Iterable[Mapping[str, Any]]) -> list[Knob]:
    existing = (deployment.get("spec") or {}).get("autoscaling") or {}
    replicas = _int((deployment.get("spec") or {}).get("replicas"), 1)
    pools = eligible_pools(deployment, clusters)
    per_node, span = replica_shape(deployment)
    requests = cpu_requests(deployment)

    def fits(pool: Pool, nodes: int) -> int:
        if requests:
            return _cpu_fits(pool, nodes, requests)
        return (nodes // span) * (pool.per_node // per_node) if pool.per_node else 0

    ceiling = max((fits(p, p.max_nodes) for p in pools), default=0)
    grows = any(p.max_nodes > p.nodes for p in pools)
    after = (NODE_LAUNCH_SECONDS if grows else 0) + LOAD_SECONDS
    after += PER_EXTRA_NODE_SECONDS * (span - 1)
    ready_timeout = max(MIN_READY_TIMEOUT_SECONDS, 2 * after)
    cooldown = QUERY_WINDOW_SECONDS + REPORT_INTERVAL_SECONDS

    def keep(path: tuple[str, ...], suggested: Any) -> Any:
        value: Any = existing
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                return suggested
            value = value[key]
        return value

    minimum = keep(("minReplicas",), 1 if replicas else 0)
    maximum = keep(("maxReplicas",), max(ceiling, replicas, minimum, 1))
    return [
        Knob(
            ("mode",),
            "shadow",
            "Decides and logs without acting. Switch to auto only after a few real peaks "
            "of decision log read (the guide's 'Rolling out auto mode'); auto too early acts "
            "on timings nobody has checked.",
        ),
        Knob(
            ("minReplicas",),
            minimum,
            "Fewest replicas per cluster. 0 lets a cluster give the model up entirely.",
        ),
        Knob(
            ("maxReplicas",),
            maximum,
            f"The only ceiling on the floor the hub raises when another cluster is short: "
            f"what you are willing to pay for there. Suggested: the most replicas "
            f"({_shape(requests, per_node, span)} each) the largest eligible pool holds "
            f"at its NodePool limit. Too high pays for borrowed capacity you did not mean "
            f"to; too low and a shortage elsewhere is never absorbed.",
        ),
        Knob(
            ("signals", "demand"),
            keep(
                ("signals", "demand"),
                {"metric": "modelplane_requests_total", "function": "rate"},
            ),
            "The load: requests finished per second over the window, computed by each "
            "member's agent from its collector and scoped to this model (the same for "
            "every engine). Without a demand signal a shortage is counted from "
            "unschedulable replicas only, one step at a time while saturated.",
        ),
        Knob(
            ("signals", "pressure"),
            keep(
                ("signals", "pressure"),
                {"metric": "modelplane_requests_waiting", "function": "perReadyReplica"},
            ),
            "How the hub knows home can take borrowed traffic back (status.report."
            "safePressure). Unset: traffic returns on time alone.",
        ),
        Knob(
            ("signals", "latency"),
            keep(
                ("signals", "latency"),
                {
                    "metric": "modelplane_time_to_first_token",
                    "function": "quantile",
                    "quantile": 0.9,
                },
            ),
            "Compared with latencySLO. Unset: a cluster over its latency still gains traffic.",
        ),
        Knob(
            ("capacity", "replicaCapacity"),
            keep(("capacity", "replicaCapacity"), 1),
            "MEASURE: the demand (requests/s, the unit of signals.demand) one replica "
            "serves within latencySLO; 1 is a placeholder. Without it the load's need is "
            "never computed and traffic weights follow ready replicas alone; too high and "
            "the hub under-provisions, too low and it borrows capacity it does not need.",
        ),
        Knob(
            ("latencySLO",),
            keep(("latencySLO",), 2),
            "MEASURE: seconds to first token (p90) you promise; 2 is a placeholder. A "
            "cluster over it never gains traffic; unset, traffic is moved to clusters "
            "that are already too slow.",
        ),
        Knob(
            ("escalation", "after"),
            keep(("escalation", "after"), _duration(after)),
            f"At least the time from a pending pod to a ready one in the cluster itself "
            f"(estimated: {'a node launch, ' if grows else ''}image pull and model load"
            f"{f', {span} nodes per replica' if span > 1 else ''}). Too short: shortages "
            f"the cluster would have solved alone move to other clusters.",
        ),
        Knob(
            ("escalation", "readyTimeout"),
            keep(("escalation", "readyTimeout"), _duration(ready_timeout)),
            "More than the model's worst normal load time. Too short: replicas still "
            "loading raise ReplicasNotReady, and replicas waiting for a node are taken "
            "back before they arrive.",
        ),
        Knob(
            ("escalation", "cooldown"),
            keep(("escalation", "cooldown"), _duration(cooldown)),
            f"More than the signals' lag (the {QUERY_WINDOW} query window plus a "
            f"{int(REPORT_INTERVAL_SECONDS)}s report). Too short: each step reacts to a "
            f"state that does not show the last one yet, and floors and weights overshoot.",
        ),
        Knob(
            ("escalation", "calmFor"),
            keep(("escalation", "calmFor"), CALM_FOR),
            "Longer than the gaps between your traffic bursts. Too short: capacity is "
            "given back just before the next burst. It also paces the return: one "
            "stepPercent of traffic per calmFor.",
        ),
    ]


def _scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def render(deployment: Mapping[str, Any], clusters: Iterable[Mapping[str, Any]]) -> str:
    """The merge patch, each knob preceded by its comment."""
    clusters = list(clusters)
    metadata = deployment.get("metadata") or {}
    namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
    pools = eligible_pools(deployment, clusters)
    lines = [
        f"# A first autoscaling policy for ModelDeployment {namespace}/{name}, in shadow mode.",
        "# Pools on the clusters its clusterSelector picks (device selectors not evaluated):",
        f"#   {', '.join(f'{p.cluster}/{p.name}' for p in pools) or 'none'}",
        "# Review every MEASURE, then:",
        f"#   kubectl patch md {name} -n {namespace} --type merge --patch-file THIS_FILE",
        "spec:",
        "  autoscaling:",
    ]
    opened: tuple[str, ...] = ()
    for knob in knobs(deployment, clusters):
        parents = knob.path[:-1]
        if parents != opened:
            for depth, key in enumerate(parents):
                if opened[: depth + 1] != parents[: depth + 1]:
                    lines.append("    " + "  " * depth + f"{key}:")
            opened = parents
        indent = "    " + "  " * len(parents)
        for text in _wrap(knob.why, 88 - len(indent)):
            lines.append(f"{indent}# {text}")
        lines.append(f"{indent}{knob.path[-1]}: {_scalar(knob.value)}")
    # The comments carry names and pools from the cluster; the values are JSON scalars,
    # whose escapes a YAML reader decodes the same way, so escaping every line keeps the
    # patch exact and the terminal safe (a newline in a name cannot end its comment).
    return "\n".join(escape(line) for line in lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*out, line] if line else out
