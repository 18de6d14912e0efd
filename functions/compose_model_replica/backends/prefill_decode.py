"""PrefillDecode: prefill pods and decode pods, with the routing sidecar in front of
decode.

The protocol is llm-d's (llm-d-inference-scheduler v0.5.0, which builds on the Gateway
API Inference Extension v1.3.0 and ships the sidecar as `llm-d-routing-sidecar`): one
InferencePool holds both roles; its endpoint picker (serving.py) tells them apart by the
`llm-d.ai/role` pod label (`prefill` / `decode`, its prefill-filter and decode-filter),
routes the request to a decode pod and names the prefill pod it chose in the
`x-prefiller-host-port` header (`<ip>:<port>`). The decode pod's sidecar listens on 8000,
sends the prompt to that prefiller, then hands the decode to the engine on 8001 in its
own pod over the KV connector (`--connector`: nixlv2 for vLLM, sglang for SGLang). The
engines keep the `http` port name, so scraping by name covers both. On the Standard
stack the two roles are two Deployments; on Dynamo they are two cliques of one
PodCliqueSet (see grove.py) with the same pods.
"""

from __future__ import annotations

from functions.common import sizing
from functions.common.contracts import PORT_SERVING, ROLE_DECODE, ROLE_PREFILL
from functions.compose_model_replica.backends.base import Workload, workload_name
from functions.compose_model_replica.backends.deployment import deployment
from functions.compose_model_replica.engines import VLLM_KV_ROLES
from functions.compose_model_replica.model import Engine, Member, ModelReplica
from functions.compose_model_replica.pods import Wiring

ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.5.0"
ROUTING_SIDECAR_NAME = "routing-sidecar"
# Not `http`: that name is the engines' (and scraped as one).
ROUTING_PORT_NAME = "serving"
# The picker's filters read this label (llm-d pkg/plugins/filter/pd_role.go).
PD_ROLE_LABEL = "llm-d.ai/role"
PD_ROLE_VALUES = {ROLE_PREFILL: "prefill", ROLE_DECODE: "decode"}
# The sidecar's KV-transfer connectors by engine type; vLLM's NIXL is its default.
CONNECTORS = {"sglang": "sglang"}
DEFAULT_CONNECTOR = "nixlv2"


def routing_sidecar(replica: ModelReplica, decode: Engine, member: Member) -> dict:
    return {
        "name": ROUTING_SIDECAR_NAME,
        "image": ROUTING_SIDECAR_IMAGE,
        "args": [
            f"--port={PORT_SERVING}",
            f"--vllm-port={replica.member_port(decode, member)}",
            f"--connector={CONNECTORS.get(decode.type, DEFAULT_CONNECTOR)}",
            # Plain HTTP from the gateway, as to every other engine pod (the sidecar
            # serves a self-signed TLS endpoint by default since v0.3).
            "--secure-proxy=false",
        ],
        "ports": [{"name": ROUTING_PORT_NAME, "containerPort": PORT_SERVING, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": ROUTING_PORT_NAME}, "periodSeconds": 5},
        "resources": sizing.resources(sizing.ROUTING_SIDECAR),
    }


def members(replica: ModelReplica) -> list[tuple[Engine, Member]]:
    """(engine, member) for prefill then decode."""
    found = {}
    for engine in replica.engines:
        for member in engine.members:
            found[member.role] = (engine, member)
    return [found[ROLE_PREFILL], found[ROLE_DECODE]]


def wiring_for(replica: ModelReplica, engine: Engine, member: Member) -> Wiring:
    """Both roles move KV between pods (vLLM: NIXL, told its side channel is the pod's
    address, see pods.py; prefill produces the KV, decode consumes it); decode has the
    routing sidecar in front."""
    labels = {PD_ROLE_LABEL: PD_ROLE_VALUES[member.role]}
    if member.role == ROLE_DECODE:
        return Wiring(
            sidecars=(routing_sidecar(replica, engine, member),),
            extra_labels=labels,
            kv_role=VLLM_KV_ROLES[ROLE_DECODE],
        )
    return Wiring(extra_labels=labels, kv_role=VLLM_KV_ROLES[ROLE_PREFILL])


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
