"""Condition types the functions and the runtime set, and their reasons.

Crossplane owns `Ready` and `Synced` on an XR; everything else a person reads in
`kubectl describe` is one of these.
"""

from typing import Final

# compose-serving-stack
STACK_READY: Final = "StackReady"
COLLECTOR_READY: Final = "CollectorReady"

# compose-model-deployment
REPLICAS_SCHEDULED: Final = "ReplicasScheduled"
REPLICAS_READY: Final = "ReplicasReady"
PARKED: Final = "Parked"

# compose-model-replica
WORKLOAD_READY: Final = "WorkloadReady"
SERVING: Final = "Serving"

# compose-telemetry
CONFLICT: Final = "Conflict"
GATEWAY_READY: Final = "GatewayReady"
MAPPING_VALID: Final = "MappingValid"

# Every function: what it was given and whether it could act on it.
COMPOSED: Final = "Composed"

REASON_NOT_IMPLEMENTED: Final = "NotImplemented"
REASON_INVALID_INPUT: Final = "InvalidInput"

# compose-serving-stack: whether every MetricMapping made it into the collector.
MAPPINGS_ACCEPTED: Final = "MappingsAccepted"
