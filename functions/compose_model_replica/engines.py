"""Flags the engines we know take, added only where the user has not set them.

An engine type is free-form: anything else is run exactly as the template says, with the
`http` port declared and the multi-node launch contract (functions.common.contracts,
`MODELPLANE_*`) in the environment. For the engines a platform team runs most (vLLM,
SGLang, TensorRT-LLM) the port, the served model name and the multi-node flags are
appended, so a ModelDeployment does not have to repeat what the backend already knows.

Three rules keep that safe:
- A flag the user wrote (under any of its spellings) always wins: ours is not added.
- The multi-node flags read the contract's variables as `$(NAME)`, never a controller's
  own (`LWS_*`, `GROVE_*`): the backends fill the same names, so one replica launches
  with byte-identical flags on the Standard and the Dynamo stack.
- A command written as a shell script (`sh -c "..."`) gets no flags at all: appended
  arguments would become the script's `$0 $1 ...`, not the engine's flags. The script
  reads the contract's variables itself.

Flag names, checked against the engines' own sources:
- vLLM's multi-process multi-node mode (no Ray; vllm-project/vllm PR #23691, in releases
  from v0.11): `--nnodes/-n`, `--node-rank/-r`, `--master-addr`, `--headless` on the ranks
  that do not serve the API; `--tensor-parallel-size/-tp`, `--pipeline-parallel-size/-pp`.
- SGLang (`sglang.launch_server`, docs "Multi-Node Deployment"): `--nnodes`,
  `--node-rank`, `--dist-init-addr host:port`, `--tp-size` (also `--tp`,
  `--tensor-parallel-size`) counting GPUs across all nodes; ranks other than 0 serve no
  HTTP by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from functions.common.contracts import ENV_LEADER_ADDRESS, ENV_NODE_COUNT, ENV_NODE_RANK
from functions.common.modelcache import MODEL_FLAG, model_flag_in
from functions.common.served_name import SERVED_NAME_FLAG

if TYPE_CHECKING:
    from functions.compose_model_replica.pods import Wiring

PORT_FLAG = {"vllm": "--port", "sglang": "--port", "trtllm": "--port"}
# Engines that serve /metrics only when asked (SGLang docs, "Production Metrics"). Always
# on, not only while a collector runs: the engine does not know, and switching it when a
# TelemetryDestination appears would change the pod template and restart every model.
METRICS_FLAG = {"sglang": "--enable-metrics"}
# OTLP traces, where the cluster collector receives them (spec.cluster.tracesEndpoint),
# checked against the engines' sources: vLLM's `--otlp-traces-endpoint` (gRPC exporter
# by default, insecure; a URL), SGLang's `--enable-trace --otlp-traces-endpoint
# host:port` (gRPC). Only on pods that serve the API, where requests are traced.
TRACES_FLAGS = {
    "vllm": lambda endpoint: ["--otlp-traces-endpoint", f"http://{endpoint}"],
    "sglang": lambda endpoint: ["--enable-trace", "--otlp-traces-endpoint", endpoint],
}
TRACES_ENDPOINT_FLAG = "--otlp-traces-endpoint"
SGLANG_DIST_INIT_PORT = 5000
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})

# Every spelling each engine accepts for a flag we may add (the user's wins under any).
VLLM_TP = ("--tensor-parallel-size", "-tp")
VLLM_PP = ("--pipeline-parallel-size", "-pp")
SGLANG_TP = ("--tp-size", "--tp", "--tensor-parallel-size")
SGLANG_PP = ("--pp-size", "--pp", "--pipeline-parallel-size")


@dataclass(frozen=True)
class MultiNode:
    """One pod's place in a multi-node replica, as the engine flags need it."""

    leader: bool
    nodes: int  # workerNodes + 1
    gpus_per_node: int  # the member's device count


def _var(name: str) -> str:
    return f"$({name})"


def _has(args: list[str], spellings: tuple[str, ...]) -> bool:
    return any(a == s or a.startswith(s + "=") for a in args for s in spellings)


def is_shell_script(command: list[str], args: list[str]) -> bool:
    """`sh -c "..."` (or bash, ...): the script owns the launch line."""
    argv = [*command, *args]
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in SHELLS and "-c" in argv[1:3]


# (spellings, values): the flag group is added when none of the spellings is present.
FlagGroup = tuple[tuple[str, ...], tuple[str, ...]]


def multinode_flags(engine_type: str, multinode: MultiNode) -> list[FlagGroup]:
    """The engine's multi-node flags, reading the launch contract's variables."""
    count, rank, address = (
        _var(ENV_NODE_COUNT),
        _var(ENV_NODE_RANK),
        _var(ENV_LEADER_ADDRESS),
    )
    if engine_type == "vllm":
        flags: list[FlagGroup] = [
            (("--nnodes", "-n"), ("--nnodes", count)),
            (("--node-rank", "-r"), ("--node-rank", rank)),
            (("--master-addr",), ("--master-addr", address)),
        ]
        if not multinode.leader:
            # Only rank 0 serves the API; the others run the executor alone.
            flags.append((("--headless",), ("--headless",)))
        return flags
    if engine_type == "sglang":
        return [
            (("--nnodes",), ("--nnodes", count)),
            (("--node-rank",), ("--node-rank", rank)),
            (("--dist-init-addr",), ("--dist-init-addr", f"{address}:{SGLANG_DIST_INIT_PORT}")),
        ]
    return []


def parallelism_flags(engine_type: str, multinode: MultiNode, existing: list[str]) -> list[str]:
    """Spread the model over every GPU of every node, unless the user chose a layout.

    Without this a leader told `--tensor-parallel-size 16` on an 8-GPU node asks for 16
    local GPUs. The layout is each engine's documented multi-node default: vLLM tensor
    parallel within a node and pipeline parallel across nodes; SGLang tensor parallel
    across all of them. Either size set by the user means the user chose: add neither.
    """
    if engine_type == "vllm" and not (_has(existing, VLLM_TP) or _has(existing, VLLM_PP)):
        return [
            "--tensor-parallel-size",
            str(multinode.gpus_per_node),
            "--pipeline-parallel-size",
            str(multinode.nodes),
        ]
    if engine_type == "sglang" and not (_has(existing, SGLANG_TP) or _has(existing, SGLANG_PP)):
        return ["--tp-size", str(multinode.gpus_per_node * multinode.nodes)]
    return []


def engine_args(
    engine_type: str,
    command: list[str],
    existing: list[str],
    *,
    port: int,
    served_name: str,
    wiring: Wiring,
    model_path: str = "",
    traces_endpoint: str = "",
) -> list[str]:
    """The arguments to append to the engine container's own."""
    if is_shell_script(command, existing):
        return []
    added: list[str] = []
    flags = MODEL_FLAG.get(engine_type)
    if model_path and flags and not model_flag_in(engine_type, [*command, *existing]):
        # Every rank loads the weights (headless workers too), so every pod gets the path.
        added += [flags[0], model_path]
    if wiring.serves_http:
        flag = PORT_FLAG.get(engine_type)
        if flag and not _has(existing, (flag,)):
            added += [flag, str(port)]
        flag = SERVED_NAME_FLAG.get(engine_type)
        if flag and not _has(existing, (flag,)):
            added += [flag, served_name]
        flag = METRICS_FLAG.get(engine_type)
        if flag and not _has(existing, (flag,)):
            added += [flag]
        traces = TRACES_FLAGS.get(engine_type)
        if traces_endpoint and traces and not _has(existing, (TRACES_ENDPOINT_FLAG,)):
            added += traces(traces_endpoint)
    if wiring.multinode is not None:
        for spellings, values in multinode_flags(engine_type, wiring.multinode):
            if not _has(existing, spellings):
                added += values
        added += parallelism_flags(engine_type, wiring.multinode, existing)
    return added
