"""Standard stack, one replica across several nodes: a LeaderWorkerSet.

A group is the leader and `workerNodes` workers, created and restarted together. The
launch contract is filled without LWS's own variables (see backends/base.py): LWS labels
every pod with its group index and worker index (0 on the leader, 1..n on workers), the
kubelet reads both through the downward API, and the leader's address is the name LWS
gives the leader pod, `<lws>-<group index>.<lws>.<namespace>` (its hostname, and the
headless Service named after the LeaderWorkerSet as its subdomain: the `Shared`
subdomain policy, set explicitly so a changed default cannot move it). The engine flags
read only our names (the same ones the Grove backend fills) and are identical on both
stacks.
"""

from __future__ import annotations

from functions.common.contracts import (
    ENV_NODE_RANK,
    ROLE_LEADER,
    ROLE_WORKER,
)
from functions.compose_model_replica.backends.base import (
    Workload,
    group_index_ref,
    launch,
    launch_env,
    replica_count,
    workload_name,
)
from functions.compose_model_replica.model import ModelReplica
from functions.compose_model_replica.pods import Wiring, env_from_label, pod_template

WORKLOAD_KEY = "workload"
# LWS labels every pod of one group (leader and workers) with one hash under this key.
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
# And with the group's index and the pod's index in it (sigs.k8s.io/lws v0.8.0,
# api/leaderworkerset/v1: GroupIndexLabelKey, WorkerIndexLabelKey).
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
SUBDOMAIN_POLICY = "Shared"


def leader_address(name: str, namespace: str) -> str:
    """The leader pod's DNS name, as LWS builds LWS_LEADER_ADDRESS."""
    return f"{name}-{group_index_ref()}.{name}.{namespace}"


def leader_worker_set(replica: ModelReplica) -> Workload:
    engine = replica.engines[0]
    leader = engine.member(ROLE_LEADER)
    worker = engine.member(ROLE_WORKER)
    assert leader is not None  # model.parse checked the shape
    assert worker is not None
    name = workload_name(replica)
    env = launch_env(
        GROUP_INDEX_LABEL,
        leader_address(name, replica.namespace),
        env_from_label(ENV_NODE_RANK, WORKER_INDEX_LABEL),
        leader,
    )
    leader_wiring = Wiring(
        env=env, multinode=launch(leader, is_leader=True), gang_label=GROUP_KEY_LABEL
    )
    worker_wiring = Wiring(
        serves_http=False,
        env=env,
        multinode=launch(leader, is_leader=False),
        gang_label=GROUP_KEY_LABEL,
    )
    manifest = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": replica.namespace,
            "labels": replica.workload_labels(),
        },
        "spec": {
            **replica_count(replica),
            # Workers start with the leader, not after it is ready: a multi-node engine's
            # leader only becomes ready once its workers have joined.
            "startupPolicy": "LeaderCreated",
            "networkConfig": {"subdomainPolicy": SUBDOMAIN_POLICY},
            "leaderWorkerTemplate": {
                "size": leader.worker_nodes + 1,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(replica, engine, leader, leader_wiring),
                "workerTemplate": pod_template(replica, engine, worker, worker_wiring),
            },
        },
    }
    return Workload(WORKLOAD_KEY, manifest, "readyReplicas")
