"""Standard stack, one replica across several nodes: a LeaderWorkerSet.

A group is the leader and `workerNodes` workers, created and restarted together. LWS
puts LWS_LEADER_ADDRESS and LWS_WORKER_INDEX (0 on the leader, 1..n on workers) first in
every container's environment; the launch contract's variables refer to them with
`$(...)` expansion, so the engine flags read only our names (the same ones the Grove
backend fills) and are identical on both stacks.
"""

from __future__ import annotations

from functions.common.contracts import (
    ROLE_LEADER,
    ROLE_WORKER,
)
from functions.compose_model_replica.backends.base import (
    Workload,
    launch,
    launch_env,
    replica_count,
    workload_name,
)
from functions.compose_model_replica.model import ModelReplica
from functions.compose_model_replica.pods import Wiring, pod_template

WORKLOAD_KEY = "workload"
# LWS labels every pod of one group (leader and workers) with one hash under this key.
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"


def leader_worker_set(replica: ModelReplica) -> Workload:
    engine = replica.engines[0]
    leader = engine.member(ROLE_LEADER)
    worker = engine.member(ROLE_WORKER)
    assert leader is not None  # model.parse checked the shape
    assert worker is not None
    env = launch_env("$(LWS_LEADER_ADDRESS)", "$(LWS_WORKER_INDEX)", leader)
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
            "name": workload_name(replica),
            "namespace": replica.namespace,
            "labels": replica.labels(),
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
