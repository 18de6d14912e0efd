"""Workload backends: one module per controller, each a pure function of the replica.

| stack    | Standalone  | Leader + Worker | PrefillDecode                         |
| -------- | ----------- | --------------- | ------------------------------------- |
| Standard | Deployment  | LeaderWorkerSet | two Deployments (decode + sidecar)    |
| Dynamo   | PodCliqueSet, one clique per role, gang-scheduled by KAI                |

`workloads(replica)` picks the backend; every backend returns `Workload`s whose ready
count the status reads back from the observed object.
"""

from __future__ import annotations

from functions.common.contracts import STACK_DYNAMO
from functions.compose_model_replica.backends import deployment, grove, lws, prefill_decode
from functions.compose_model_replica.backends.base import Workload
from functions.compose_model_replica.model import ModelReplica, Shape

__all__ = ["Workload", "workloads"]


def workloads(replica: ModelReplica) -> list[Workload]:
    if replica.cluster.stack == STACK_DYNAMO:
        return [grove.pod_clique_set(replica)]
    if replica.shape is Shape.LEADER_WORKER:
        return [lws.leader_worker_set(replica)]
    if replica.shape is Shape.PREFILL_DECODE:
        return prefill_decode.deployments(replica)
    return [deployment.standalone(replica)]
