"""What every backend returns, and the naming and counting rules they share."""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.naming import dns_label
from functions.compose_model_replica.model import ModelReplica


@dataclass(frozen=True)
class Workload:
    key: str  # the composed resource's key (its identity)
    manifest: dict
    ready_field: str  # the status field counting ready replicas

    @property
    def ref(self) -> dict[str, str]:
        return {
            "apiVersion": self.manifest["apiVersion"],
            "kind": self.manifest["kind"],
            "name": self.manifest["metadata"]["name"],
        }


def workload_name(replica: ModelReplica, *parts: str) -> str:
    """Named after the deployment, never the cluster: the AdaptivePolicy copy that names
    it must be byte-identical on every member."""
    return dns_label(replica.deployment, *parts)


def replica_count(replica: ModelReplica) -> dict[str, int]:
    """`{"replicas": n}`, or nothing when KEDA owns the count (so Crossplane never
    fights the autoscaler over the field)."""
    return {} if replica.autoscaling is not None else {"replicas": replica.desired_replicas}
