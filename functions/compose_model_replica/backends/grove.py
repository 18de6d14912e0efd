"""Dynamo stack: a Grove PodCliqueSet, one clique per role, gang-scheduled by KAI.

One PodCliqueSet replica is one model replica: its cliques (standalone; leader and
workers; or prefill and decode) are scheduled as one gang by the KAI scheduler from the
`modelplane` queue, so a replica never holds half its GPUs. A leader and its workers
form a scaling group so they scale together. The leader's address is the name Grove
gives the leader pod: hostname `<clique>-<pod index>`, where the clique of a scaling
group is `<podcliqueset>-<replica>-<group>-<group replica>-<clique>`, and subdomain the
headless Service `<podcliqueset>-<replica>` (grove operator/api/common). Only the
replica index is not known at render time; Grove labels every pod with it
(`grove.io/podcliqueset-replica-index`) and the kubelet reads it through the downward
API. Grove's own `GROVE_*` variables are appended after the template's, where a
template variable cannot refer to them (backends/base.py); the scaling group has one
replica, so its index is always 0.

Each worker rank is its own one-pod clique (`worker-1` .. `worker-n`): Grove numbers pods
per clique from 0, and a Kubernetes `$(VAR)` reference cannot add one, so a single
worker clique could not tell a pod its node rank without rewriting the user's command.
One clique per rank gives every pod a literal `MODELPLANE_NODE_RANK`, the same launch
contract and the same engine flags as the LeaderWorkerSet backend.
"""

from __future__ import annotations

from dataclasses import replace

from functions.common.contracts import (
    ENV_NODE_RANK,
    KAI_QUEUE,
    KAI_QUEUE_LABEL,
    ROLE_LEADER,
    ROLE_STANDALONE,
    ROLE_WORKER,
)
from functions.compose_model_replica.backends import prefill_decode
from functions.compose_model_replica.backends.base import (
    Workload,
    group_index_ref,
    launch,
    launch_env,
    replica_count,
    workload_name,
)
from functions.compose_model_replica.model import Engine, Member, ModelReplica, Shape
from functions.compose_model_replica.pods import Wiring, env_value, pod_template

WORKLOAD_KEY = "workload"
KAI_SCHEDULER = "kai-scheduler"
SCALING_GROUP = "model"
# Grove labels every pod of one PodCliqueSet replica (one model replica) with its index;
# with the ModelReplica's own label it names one multi-node group.
REPLICA_INDEX_LABEL = "grove.io/podcliqueset-replica-index"


def leader_address(name: str, namespace: str, leader_clique: str) -> str:
    """The leader pod's DNS name: `<pcs>-<replica>-<group>-0-<clique>-0.<pcs>-<replica>.<ns>`."""
    replica = f"{name}-{group_index_ref()}"
    return f"{replica}-{SCALING_GROUP}-0-{leader_clique}-0.{replica}.{namespace}"


def _clique(
    replica: ModelReplica,
    engine: Engine,
    member: Member,
    pods: int,
    wiring: Wiring,
    *,
    name: str = "",
) -> dict:
    template = pod_template(replica, engine, member, wiring)
    clique: dict = {
        "name": name or member.role.lower(),
        "labels": template["metadata"]["labels"],
    }
    if template["metadata"].get("annotations"):
        clique["annotations"] = template["metadata"]["annotations"]
    clique["spec"] = {
        "roleName": member.role,
        "replicas": pods,
        # Gang: the clique is scheduled whole or not at all.
        "minAvailable": pods,
        "podSpec": template["spec"],
    }
    return clique


def _queued(wiring: Wiring) -> Wiring:
    return replace(
        wiring,
        extra_labels={**wiring.extra_labels, KAI_QUEUE_LABEL: KAI_QUEUE},
        scheduler_name=KAI_SCHEDULER,
    )


def pod_clique_set(replica: ModelReplica) -> Workload:
    cliques: list[dict] = []
    template: dict = {}
    if replica.shape is Shape.STANDALONE:
        engine = replica.engines[0]
        member = engine.member(ROLE_STANDALONE)
        assert member is not None
        cliques.append(_clique(replica, engine, member, 1, _queued(Wiring())))
    elif replica.shape is Shape.LEADER_WORKER:
        engine = replica.engines[0]
        leader = engine.member(ROLE_LEADER)
        worker = engine.member(ROLE_WORKER)
        assert leader is not None
        assert worker is not None
        address = leader_address(workload_name(replica), replica.namespace, ROLE_LEADER.lower())
        leader_wiring = Wiring(
            env=launch_env(REPLICA_INDEX_LABEL, address, env_value(ENV_NODE_RANK, "0"), leader),
            multinode=launch(leader, is_leader=True),
            gang_label=REPLICA_INDEX_LABEL,
        )
        cliques.append(_clique(replica, engine, leader, 1, _queued(leader_wiring)))
        for rank in range(1, leader.worker_nodes + 1):
            worker_wiring = Wiring(
                serves_http=False,
                env=launch_env(
                    REPLICA_INDEX_LABEL, address, env_value(ENV_NODE_RANK, str(rank)), leader
                ),
                multinode=launch(leader, is_leader=False),
                gang_label=REPLICA_INDEX_LABEL,
            )
            cliques.append(
                _clique(
                    replica,
                    engine,
                    worker,
                    1,
                    _queued(worker_wiring),
                    name=f"{ROLE_WORKER.lower()}-{rank}",
                )
            )
        template["podCliqueScalingGroups"] = [
            {
                "name": SCALING_GROUP,
                "cliqueNames": [c["name"] for c in cliques],
                "replicas": 1,
                "minAvailable": 1,
            }
        ]
    else:
        for engine, member in prefill_decode.members(replica):
            wiring = prefill_decode.wiring_for(replica, engine, member)
            cliques.append(_clique(replica, engine, member, 1, _queued(wiring)))
    manifest = {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {
            "name": workload_name(replica),
            "namespace": replica.namespace,
            "labels": {**replica.workload_labels(), KAI_QUEUE_LABEL: KAI_QUEUE},
        },
        "spec": {
            **replica_count(replica),
            "template": {
                "cliqueStartupType": "CliqueStartupTypeAnyOrder",
                "cliques": cliques,
                **template,
            },
        },
    }
    return Workload(WORKLOAD_KEY, manifest, "availableReplicas")
