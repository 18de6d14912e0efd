"""Dynamo stack: a Grove PodCliqueSet, one clique per role, gang-scheduled by KAI.

One PodCliqueSet replica is one model replica: its cliques (standalone; leader and
workers; or prefill and decode) are scheduled as one gang by the KAI scheduler from the
`modelplane` queue, so a replica never holds half its GPUs. A leader and its workers
form a scaling group so they scale together. Grove gives every pod its clique's name,
index and headless Service in the environment, from which the leader's address is
built the way Grove documents it (`<group>-<index>-leader-0.<headless service>`).
"""

from __future__ import annotations

from functions.common.contracts import (
    KAI_QUEUE,
    KAI_QUEUE_LABEL,
    LABEL_DEPLOYMENT,
    LABEL_SERVING,
    ROLE_LEADER,
    ROLE_STANDALONE,
    ROLE_WORKER,
)
from functions.compose_model_replica.backends import prefill_decode
from functions.compose_model_replica.backends.base import Workload, replica_count, workload_name
from functions.compose_model_replica.model import Engine, Member, ModelReplica, Shape
from functions.compose_model_replica.pods import (
    ENV_LEADER_ADDRESS,
    ENV_NODE_COUNT,
    ENV_NODE_RANK,
    Wiring,
    pod_template,
)

WORKLOAD_KEY = "workload"
KAI_SCHEDULER = "kai-scheduler"
SCALING_GROUP = "model"


def _leader_address(leader_clique: str) -> str:
    return f"$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{leader_clique}-0.$(GROVE_HEADLESS_SERVICE)"


def _clique(
    replica: ModelReplica, engine: Engine, member: Member, pods: int, wiring: Wiring
) -> dict:
    template = pod_template(replica, engine, member, wiring)
    clique: dict = {
        "name": member.role.lower(),
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
    return Wiring(
        serves_http=wiring.serves_http,
        env=wiring.env,
        extra_args=wiring.extra_args,
        sidecars=wiring.sidecars,
        extra_labels={KAI_QUEUE_LABEL: KAI_QUEUE},
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
        nodes = str(leader.worker_nodes + 1)
        address = _leader_address(ROLE_LEADER.lower())
        # Ranks: Grove numbers pods per clique, so only the leader's is known here (0);
        # workers get their index and derive rank = index + 1 in the engine's launcher.
        leader_env = ((ENV_LEADER_ADDRESS, address), (ENV_NODE_COUNT, nodes), (ENV_NODE_RANK, "0"))
        worker_env = (
            (ENV_LEADER_ADDRESS, address),
            (ENV_NODE_COUNT, nodes),
            ("MODELPLANE_WORKER_INDEX", "$(GROVE_PCLQ_POD_INDEX)"),
        )
        cliques.append(_clique(replica, engine, leader, 1, _queued(Wiring(env=leader_env))))
        cliques.append(
            _clique(
                replica,
                engine,
                worker,
                leader.worker_nodes,
                _queued(Wiring(serves_http=False, env=worker_env)),
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
            "labels": {
                LABEL_SERVING: replica.name,
                LABEL_DEPLOYMENT: replica.deployment,
                KAI_QUEUE_LABEL: KAI_QUEUE,
            },
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
