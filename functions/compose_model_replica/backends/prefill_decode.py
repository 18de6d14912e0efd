"""PrefillDecode: prefill pods and decode pods, with the routing sidecar in front of
decode.

The sidecar listens on 8000 (the Service's port) and forwards each request's decode to
the decode engine on 8001 in the same pod, after the prefill the request names has run;
the engines keep the `http` port name, so scraping by name covers both. On the Standard
stack the two roles are two Deployments; on Dynamo they are two cliques of one
PodCliqueSet (see grove.py) with the same pods.
"""

from __future__ import annotations

from functions.common.contracts import PORT_SERVING, ROLE_DECODE, ROLE_PREFILL
from functions.compose_model_replica.backends.base import Workload, workload_name
from functions.compose_model_replica.backends.deployment import deployment
from functions.compose_model_replica.model import Engine, Member, ModelReplica
from functions.compose_model_replica.pods import Wiring

ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0"
ROUTING_SIDECAR_NAME = "routing-sidecar"
# Not `http`: that name is the engines' (and scraped as one).
ROUTING_PORT_NAME = "serving"


def routing_sidecar(replica: ModelReplica, decode: Engine, member: Member) -> dict:
    return {
        "name": ROUTING_SIDECAR_NAME,
        "image": ROUTING_SIDECAR_IMAGE,
        "args": [
            f"-port={PORT_SERVING}",
            f"-vllm-port={replica.member_port(decode, member)}",
            "-connector=nixlv2",
        ],
        "ports": [{"name": ROUTING_PORT_NAME, "containerPort": PORT_SERVING, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": ROUTING_PORT_NAME}, "periodSeconds": 5},
    }


def members(replica: ModelReplica) -> list[tuple[Engine, Member]]:
    """(engine, member) for prefill then decode."""
    found = {}
    for engine in replica.engines:
        for member in engine.members:
            found[member.role] = (engine, member)
    return [found[ROLE_PREFILL], found[ROLE_DECODE]]


def wiring_for(replica: ModelReplica, engine: Engine, member: Member) -> Wiring:
    if member.role == ROLE_DECODE:
        return Wiring(sidecars=(routing_sidecar(replica, engine, member),))
    return Wiring()


def deployments(replica: ModelReplica) -> list[Workload]:
    workloads = []
    for engine, member in members(replica):
        role = member.role.lower()
        manifest = deployment(
            replica,
            engine,
            member,
            workload_name(replica, role),
            wiring_for(replica, engine, member),
        )
        workloads.append(Workload(f"workload-{role}", manifest, "readyReplicas"))
    return workloads
