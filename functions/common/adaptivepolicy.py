"""The AdaptivePolicy's spec fields, as the writers of its copies name them.

compose-model-deployment passes a deployment's `autoscaling` through into each
ModelReplica and adds the member list; compose-model-replica copies the result into
every member's AdaptivePolicy. Both walk the same list, in this order, so every member
writes the same bytes and a field added to the CRD (apis/adaptivepolicies) is one edit.
"""

from typing import Final

from functions.common.naming import service_name

# AdaptivePolicy.spec's fields other than `workload`, in the order every copy writes them.
POLICY_FIELDS: Final = (
    "mode",
    "placement",
    "clusters",
    "route",
    "signals",
    "capacity",
    "latencySLO",
    "errorRateSLO",
    "saturationThreshold",
    "escalation",
    "traffic",
    "experimental",
)

# Fields a deployment's `autoscaling` does not pass through: compose-model-deployment
# resolves `clusters` itself (merging the deployment's per-cluster settings), and a
# ModelDeployment names its routes in `traffic.routes`, not `route`.
RESOLVED_FIELDS: Final = frozenset({"clusters", "route"})
PASSTHROUGH_FIELDS: Final = tuple(f for f in POLICY_FIELDS if f not in RESOLVED_FIELDS)
# Per-cluster settings a deployment's `autoscaling.clusters[]` may give a cluster entry.
# Not `backendRef`: with managed traffic the suite composes each cluster's backend and
# names it (cluster_backend_name), so the name the hub weights is the one on the route.
CLUSTER_SETTINGS: Final = (
    "weight",
    "minWeight",
    "maxWeight",
    "costRank",
    "replicaCapacity",
)


def endpoint_name(deployment: str) -> str:
    """The model's InferencePool and HTTPRoute on every member it runs on (its Service is
    `naming.serving_service_name`: a Service under this name would take the one the
    LeaderWorkerSet controller needs)."""
    return service_name(deployment)


def cluster_backend_name(deployment: str, cluster: str) -> str:
    """The backend that carries a deployment's traffic to one cluster: that cluster's
    exported Service, the ServiceImport every member routes to, and the policy's
    `clusters[].backendRef` (the name the hub writes the cluster's weight for)."""
    return service_name(deployment, "at", cluster)


def manages_traffic(autoscaling: object) -> bool:
    """Whether the hub weights this deployment's routes: `traffic.routes` is named."""
    if not isinstance(autoscaling, dict):
        return False
    traffic = autoscaling.get("traffic")
    return isinstance(traffic, dict) and bool(traffic.get("routes"))


def _valid_weights(entries: list[dict]) -> bool:
    weights = [e["weight"] for e in entries if "weight" in e]
    every = len(weights) == len(entries)
    return (
        sum(weights) <= 100
        and (not every or sum(weights) == 100)
        and all(
            e.get("minWeight", 0) <= e["weight"] <= e.get("maxWeight", 100)
            for e in entries
            if "weight" in e
        )
    )


def fit_cluster_weights(entries: list[dict]) -> list[dict]:
    """A deployment's per-cluster weights are shares among the clusters placement uses,
    which may be fewer than it named: make them a valid AdaptivePolicy again.

    Bounds that cannot add up to 100 over the used clusters (maxWeight) are dropped;
    weights set on every used cluster are rescaled to sum to 100 (largest remainder);
    weights that still break a rule are dropped (the hub then starts from equal shares).
    """
    out = [dict(e) for e in entries]
    if sum(e.get("maxWeight", 100) for e in out) < 100:
        for e in out:
            e.pop("maxWeight", None)
    weights = [e.get("weight") for e in out]
    if out and all(w is not None for w in weights) and sum(weights) != 100:
        total = sum(weights)
        if total <= 0:
            for e in out:
                e.pop("weight")
        else:
            exact = [100 * w / total for w in weights]
            scaled = [int(x) for x in exact]
            order = sorted(range(len(out)), key=lambda i: (-(exact[i] - scaled[i]), i))
            for i in order[: 100 - sum(scaled)]:
                scaled[i] += 1
            for e, w in zip(out, scaled, strict=True):
                e["weight"] = w
    if not _valid_weights(out):
        for e in out:
            e.pop("weight", None)
    return out


def equal_shares(names: list[str], total: int = 100) -> dict[str, int]:
    """`total` split evenly, the remainder to the first names."""
    if not names:
        return {}
    share, extra = divmod(total, len(names))
    return {n: share + (1 if i < extra else 0) for i, n in enumerate(names)}


def fit_to_bounds(
    weights: dict[str, int], lo: dict[str, int], hi: dict[str, int]
) -> dict[str, int]:
    """The nearest weights summing to 100 with each within [lo, hi]: clamped, then the
    difference taken from (or given to) the members with most slack, names breaking
    ties. The policy's rules guarantee the bounds admit a sum of 100."""
    out = {n: min(hi[n], max(lo[n], w)) for n, w in weights.items()}
    gap = 100 - sum(out.values())
    while gap:
        if gap > 0:
            slack = {n: hi[n] - out[n] for n in out if out[n] < hi[n]}
        else:
            slack = {n: out[n] - lo[n] for n in out if out[n] > lo[n]}
        if not slack:
            break
        name = max(slack, key=lambda n: (slack[n], n))
        move = min(abs(gap), slack[name])
        out[name] += move if gap > 0 else -move
        gap += -move if gap > 0 else move
    return out


def steady_shares(entries: list[dict]) -> dict[str, int]:
    """The weights a hub starts from for a policy's `clusters[]` (raw entries): the
    `weight`s set (members without one share the rest evenly), else equal shares, within
    each member's minWeight/maxWeight. Composed routes start here, so the weights the
    hub believes on its first step are the ones the routes carry."""
    set_weights = {e["name"]: int(e["weight"]) for e in entries if e.get("weight") is not None}
    unset = sorted(e["name"] for e in entries if e.get("weight") is None)
    weights = set_weights | equal_shares(unset, 100 - sum(set_weights.values()))
    lo = {e["name"]: int(e.get("minWeight", 0)) for e in entries}
    hi = {e["name"]: int(e.get("maxWeight", 100)) for e in entries}
    return fit_to_bounds(weights, lo, hi)


# The signal fields of AdaptivePolicy.spec.signals (besides `window`).
SIGNAL_NAMES: Final = ("demand", "pressure", "latency", "errorRate", "saturation")


def needs_vocabulary_signals(autoscaling: object) -> bool:
    """Whether a replica's `autoscaling` has its agent compute vocabulary signals, and so
    needs the cluster collector's signals page.

    No `autoscaling` or mode `off`: no. No `signals` at all: yes, the defaults are
    vocabulary signals. Otherwise yes when any named signal names a vocabulary `metric`
    (a PromQL signal, written `{promql: ...}` or as the older bare string, does not).
    """
    if not isinstance(autoscaling, dict) or autoscaling.get("mode") == "off":
        return False
    signals = autoscaling.get("signals")
    if signals is None:
        return True
    if not isinstance(signals, dict):
        return False
    named = [signals.get(n) for n in SIGNAL_NAMES]
    extra = signals.get("extra")
    if isinstance(extra, list):
        named += extra
    return any(isinstance(s, dict) and "metric" in s for s in named)


# What a deployment that names no signal at all is scaled by (the runtime's policy builds
# its defaults from these; compose-model-deployment writes them out when it must add a
# signal of its own to a policy that named none).
DEFAULT_VOCABULARY_SIGNALS: Final = {
    "demand": {"metric": "modelplane_requests_total", "function": "rate"},
    "pressure": {"metric": "modelplane_requests_waiting", "function": "perReadyReplica"},
    "latency": {
        "metric": "modelplane_time_to_first_token",
        "function": "quantile",
        "quantile": 0.9,
    },
}
# Extra signals (status.report.extra) a rollout's SLO gates read: compose-model-deployment
# adds them to a deployment's policy when spec.rollout.gates asks for them, the agent
# computes them for the replicas on its cluster, compose-model-replica copies them into
# the ModelReplica's status.signals under the second name.
ROLLOUT_SIGNALS: Final = {
    "rolloutErrorRate": (
        "errorRate",
        {
            "metric": "modelplane_requests_total",
            "function": "ratio",
            "where": {"finish_reason": ["abort"]},
        },
    ),
    "rolloutTtftP95": (
        "timeToFirstTokenP95",
        {"metric": "modelplane_time_to_first_token", "function": "quantile", "quantile": 0.95},
    ),
}
# AdaptivePolicy.spec.signals.extra's maxItems: a rollout signal that does not fit is not
# added (its gate is then Unmeasured and says why).
EXTRA_SIGNALS_MAX: Final = 8


def with_rollout_signals(autoscaling: dict, names: tuple[str, ...]) -> dict:
    """`autoscaling` with the named ROLLOUT_SIGNALS among its extra signals (the
    defaults written out when it named no signal, so adding one changes nothing else);
    unchanged when they are there already or do not fit."""
    signals = autoscaling.get("signals")
    if not isinstance(signals, dict):
        if signals is not None:
            return autoscaling
        signals = dict(DEFAULT_VOCABULARY_SIGNALS)
    extra = list(signals.get("extra") or [])
    have = {e.get("name") for e in extra if isinstance(e, dict)}
    missing = [n for n in names if n not in have]
    if not missing or len(extra) + len(missing) > EXTRA_SIGNALS_MAX:
        return autoscaling
    extra += [{"name": n, **ROLLOUT_SIGNALS[n][1]} for n in missing]
    return {**autoscaling, "signals": {**signals, "extra": extra}}
