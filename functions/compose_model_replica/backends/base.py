"""What every backend returns, and the naming and counting rules they share."""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.contracts import (
    ENV_GROUP_SIZE,
    ENV_LEADER_ADDRESS,
    ENV_NODE_COUNT,
    ENV_NODE_RANK,
)
from functions.common.naming import dns_label
from functions.compose_model_replica.engines import MultiNode
from functions.compose_model_replica.model import Member, ModelReplica


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


def launch(leader: Member, *, is_leader: bool) -> MultiNode:
    """One pod's place in a Leader + Workers replica.

    Sized from the Leader member on every rank: the engines refuse to start unless every
    rank agrees on the parallel layout.
    """
    return MultiNode(
        leader=is_leader,
        nodes=leader.worker_nodes + 1,
        gpus_per_node=sum(d.count for d in leader.devices),
    )


def launch_env(address: str, rank: str, leader: Member) -> tuple[tuple[str, str], ...]:
    """The multi-node launch contract's variables; only address and rank are per stack."""
    nodes = str(leader.worker_nodes + 1)
    return (
        (ENV_LEADER_ADDRESS, address),
        (ENV_NODE_RANK, rank),
        (ENV_NODE_COUNT, nodes),
        (ENV_GROUP_SIZE, nodes),  # one pod per node
    )
