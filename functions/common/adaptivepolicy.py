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
    "clusters",
    "route",
    "signals",
    "capacity",
    "latencySLO",
    "errorRateSLO",
    "escalation",
    "traffic",
)

# Fields a deployment's `autoscaling` does not pass through: compose-model-deployment
# resolves `clusters` itself, and a ModelDeployment has no `route` to give.
RESOLVED_FIELDS: Final = frozenset({"clusters", "route"})
PASSTHROUGH_FIELDS: Final = tuple(f for f in POLICY_FIELDS if f not in RESOLVED_FIELDS)

# The signal fields of AdaptivePolicy.spec.signals (besides `window`).
SIGNAL_NAMES: Final = ("demand", "pressure", "latency", "errorRate")


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
    return any(isinstance(signals.get(n), dict) and "metric" in signals[n] for n in SIGNAL_NAMES)
