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
