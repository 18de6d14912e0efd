"""Flags the engines we know take, added only where the user has not set them.

An engine type is free-form: anything else is run exactly as the template says, with the
`http` port declared and the multi-node addresses in the environment. For the engines a
platform team runs most (vLLM, SGLang, TensorRT-LLM) the port, the served model name and
the multi-node flags are appended, so a ModelDeployment does not have to repeat what the
backend already knows. A flag the user wrote is never added a second time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from functions.compose_model_replica.pods import Wiring

PORT_FLAG = {"vllm": "--port", "sglang": "--port", "trtllm": "--port"}
SERVED_NAME_FLAG = {"vllm": "--served-model-name", "sglang": "--served-model-name"}
SGLANG_DIST_INIT_PORT = 5000


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def multinode_args(engine_type: str, leader: bool) -> tuple[str, ...]:
    """The engine's multi-node flags, reading the addresses the backend put in env."""
    count, rank, address = (
        "$(MODELPLANE_NODE_COUNT)",
        "$(MODELPLANE_NODE_RANK)",
        "$(MODELPLANE_LEADER_ADDRESS)",
    )
    if engine_type == "vllm":
        # vLLM's multi-process multi-node mode (no Ray): workers run headless.
        flags = ("--nnodes", count, "--node-rank", rank, "--master-addr", address)
        return flags if leader else (*flags, "--headless")
    if engine_type == "sglang":
        return (
            "--nnodes",
            count,
            "--node-rank",
            rank,
            "--dist-init-addr",
            f"{address}:{SGLANG_DIST_INIT_PORT}",
        )
    return ()


def engine_args(
    engine_type: str, existing: list[str], port: int, served_name: str, wiring: Wiring
) -> list[str]:
    added: list[str] = []
    if wiring.serves_http:
        flag = PORT_FLAG.get(engine_type)
        if flag and not _has(existing, flag):
            added += [flag, str(port)]
        flag = SERVED_NAME_FLAG.get(engine_type)
        if flag and not _has(existing, flag):
            added += [flag, served_name]
    extra = list(wiring.extra_args)
    if extra and not _has(existing, extra[0]):
        added += extra
    return added
