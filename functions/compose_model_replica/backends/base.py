"""What every backend returns, and the naming and counting rules they share.

Counting: a rank is an accelerator. A member's accelerators are its device requests
that name no DeviceClass of their own (`deviceClassName` unset means the pool's
accelerators, per the ModelDeployment and ModelReplica XRDs; a request that names a
class asks for a device beside them, such as an RDMA or EFA NIC). Placement counts whole
nodes by the same rule, so a pod of 8 GPUs and 16 NICs is tensor parallel 8, never 24.

The multi-node launch contract (`MODELPLANE_LEADER_ADDRESS`, `MODELPLANE_NODE_RANK`, ...)
must expand whatever order a controller puts its own variables in: LWS puts its
`LWS_*` first, Grove appends its `GROVE_*` after the template's, and Kubernetes expands
`$(VAR)` only from entries earlier in the list. So the contract never refers to a
controller's variables. The address is built from names known at render time (the
workload is named here, and so is its namespace) and the one number that is not: the
group's index, which each controller writes as a pod label and the kubelet reads
through the downward API (`fieldRef`), independently of any ordering. Our variables are
all in the template, ours first, so `$(MODELPLANE_GROUP_INDEX)` is always earlier than
the address that uses it. This keeps the image's own entrypoint and the engine's argv
as written; the alternative, a `sh -c` launcher reading the variables at start, would
replace the entrypoint and need a shell in every image.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.contracts import (
    ENV_GROUP_INDEX,
    ENV_GROUP_SIZE,
    ENV_LEADER_ADDRESS,
    ENV_NODE_COUNT,
)
from functions.common.naming import dns_label
from functions.compose_model_replica.engines import MultiNode
from functions.compose_model_replica.model import Member, ModelReplica
from functions.compose_model_replica.pods import env_from_label, env_value


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
        # A CPU pod is one rank (no accelerators): tensor parallel 1 within it.
        gpus_per_node=leader.accelerators or 1,
    )


def launch_env(
    group_index_label: str, address: str, rank: dict, leader: Member
) -> tuple[dict, ...]:
    """The multi-node launch contract's variables, in an order that expands on its own:
    the group index (from the controller's pod label), then the leader's address built
    on it, then the rank (a literal, or another pod label), then the sizes."""
    nodes = str(leader.worker_nodes + 1)
    return (
        env_from_label(ENV_GROUP_INDEX, group_index_label),
        env_value(ENV_LEADER_ADDRESS, address),
        rank,
        env_value(ENV_NODE_COUNT, nodes),
        env_value(ENV_GROUP_SIZE, nodes),  # one pod per node
    )


def group_index_ref() -> str:
    return f"$({ENV_GROUP_INDEX})"
