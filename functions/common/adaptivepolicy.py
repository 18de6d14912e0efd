"""The AdaptivePolicy's spec fields, as the writers of its copies name them.

compose-model-deployment passes a deployment's `autoscaling` through into each
ModelReplica and adds the member list; compose-model-replica copies the result into
every member's AdaptivePolicy. Both walk the same list, in this order, so every member
writes the same bytes and a field added to the CRD (apis/adaptivepolicies) is one edit.
"""

from typing import Final

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
CLUSTER_SETTINGS: Final = (
    "weight",
    "minWeight",
    "maxWeight",
    "costRank",
    "replicaCapacity",
    "backendRef",
)


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
