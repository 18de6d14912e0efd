"""Standard stack, one replica across several nodes: a LeaderWorkerSet.

A group is the leader and `workerNodes` workers, created and restarted together. LWS
puts LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX first in every container's
environment, so the engine's multi-node flags read them through our own names (the
same names the Grove backend fills) with `$(...)` expansion.
"""

from __future__ import annotations

from functions.common.contracts import (
    LABEL_DEPLOYMENT,
    LABEL_SERVING,
    ROLE_LEADER,
    ROLE_WORKER,
)
from functions.compose_model_replica.backends.base import Workload, replica_count, workload_name
from functions.compose_model_replica.engines import multinode_args
from functions.compose_model_replica.model import ModelReplica
from functions.compose_model_replica.pods import (
    ENV_LEADER_ADDRESS,
    ENV_NODE_COUNT,
    ENV_NODE_RANK,
    Wiring,
    pod_template,
)

WORKLOAD_KEY = "workload"
LWS_ENV = (
    (ENV_LEADER_ADDRESS, "$(LWS_LEADER_ADDRESS)"),
    (ENV_NODE_COUNT, "$(LWS_GROUP_SIZE)"),
    (ENV_NODE_RANK, "$(LWS_WORKER_INDEX)"),
)


def leader_worker_set(replica: ModelReplica) -> Workload:
    engine = replica.engines[0]
    leader = engine.member(ROLE_LEADER)
    worker = engine.member(ROLE_WORKER)
    assert leader is not None  # model.parse checked the shape
    assert worker is not None
    leader_wiring = Wiring(env=LWS_ENV, extra_args=multinode_args(engine.type, leader=True))
    worker_wiring = Wiring(
        serves_http=False, env=LWS_ENV, extra_args=multinode_args(engine.type, leader=False)
    )
    manifest = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": workload_name(replica),
            "namespace": replica.namespace,
            "labels": {LABEL_SERVING: replica.name, LABEL_DEPLOYMENT: replica.deployment},
        },
        "spec": {
            **replica_count(replica),
            # Workers start with the leader, not after it is ready: a multi-node engine's
            # leader only becomes ready once its workers have joined.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": leader.worker_nodes + 1,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(replica, engine, leader, leader_wiring),
                "workerTemplate": pod_template(replica, engine, worker, worker_wiring),
            },
        },
    }
    return Workload(WORKLOAD_KEY, manifest, "readyReplicas")
