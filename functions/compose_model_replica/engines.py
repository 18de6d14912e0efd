"""Flags the engines we know take, added only where the user has not set them.

An engine type is free-form: anything else is run exactly as the template says, with the
`http` port declared and the multi-node launch contract (functions.common.contracts,
`MODELPLANE_*`) in the environment. For the engines a platform team runs most (vLLM,
SGLang) the model, the port, the served model name, the parallel layout and the
multi-node flags are added, so a ModelDeployment does not have to repeat what the
backend already knows, and every process of a replica is started alike.

Four rules keep that safe:
- A flag the user wrote (under any of its spellings) always wins: ours is not added.
- Every engine process names its model (leader, headless worker, prefill, decode): a
  headless vLLM worker builds its whole model config from its own arguments, and without
  one it loads vLLM's default model. vLLM takes it positionally, first after `serve`
  (`vllm serve MODEL`; `--model` is deprecated, and `--served-model-name` before the
  model is refused), so it is put at the front of the arguments when the container runs
  the image's `vllm serve` (no command) or names `... serve` as its command; any other
  launch line gets `--model`. SGLang takes `--model-path`.
- The multi-node flags read the contract's variables as `$(NAME)`, never a controller's
  own (`LWS_*`, `GROVE_*`): the backends fill the same names, so one replica launches
  with byte-identical flags on the Standard and the Dynamo stack.
- A command written as a shell script (`sh -c "..."`) gets no flags at all: appended
  arguments would become the script's `$0 $1 ...`, not the engine's flags. The script
  reads the contract's variables itself.

Flag names, checked against the engines' own sources (vLLM 0.32.0, SGLang 0.5.23):
- vLLM (`vllm serve [model_tag]`): `--nnodes/-n`, `--node-rank/-r`, `--master-addr`,
  `--master-port`, `--headless` on the ranks that do not serve the API;
  `--tensor-parallel-size/-tp`, `--pipeline-parallel-size/-pp`,
  `--data-parallel-size/-dp`, `--port`, `--served-model-name`, `--revision`,
  `--kv-transfer-config` (JSON; `kv_connector`, `kv_role`: `kv_producer` on prefill,
  `kv_consumer` on decode, never the deprecated `kv_both`), `--otlp-traces-endpoint`
  (vLLM depends on the OpenTelemetry packages itself), `--shutdown-timeout` (seconds;
  its default 0 aborts every in-flight request on SIGTERM, a value above 0 lets them
  finish first, up to that long: "drain").
- SGLang (`sglang.launch_server`): `--model-path` (alias `--model`), `--nnodes`,
  `--node-rank`, `--dist-init-addr host:port`, `--tp-size` (alias
  `--tensor-parallel-size`; `--tp` only works as an abbreviation) counting GPUs across
  all nodes, `--pp-size` (never `--pp`: ambiguous), `--dp-size`, `--host` (its default
  127.0.0.1 is unreachable from outside the pod), `--port`, `--served-model-name`,
  `--revision`, `--enable-metrics`. `--enable-trace` is never added: it needs the
  `sglang[tracing]` extra, which an image may lack, and then the engine does not start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from functions.common import layout
from functions.common.contracts import (
    ENV_LEADER_ADDRESS,
    ENV_NODE_COUNT,
    ENV_NODE_RANK,
    ROLE_DECODE,
    ROLE_PREFILL,
)
from functions.common.modelcache import MODEL_FLAG, engine_argv, model_flag_in
from functions.common.served_name import SERVED_NAME_FLAG
from functions.common.shell import is_shell_script

if TYPE_CHECKING:
    from functions.compose_model_replica.pods import Wiring

# The engine releases whose flags the lists below were checked against, as their
# published images are tagged; the examples run these.
CHECKED_IMAGES = {"vllm": "vllm/vllm-openai:v0.32.0", "sglang": "lmsysorg/sglang:v0.5.23"}
# The engines' CPU builds, for members on a CPU-only pool. vLLM publishes its CPU build
# of each release as its own repository, tagged with the release and the architecture
# (vLLM's CPU installation docs, "Pre-built images": `vllm/vllm-openai-cpu:v<version>-
# x86_64`, and `-arm64`). The GPU image of a release becomes the x86-64 CPU image of the
# same release; any other image (an arm64 tag, a digest, a platform's own build) is run
# as written. SGLang publishes no CPU image of its releases: its images stay as written.
CPU_IMAGES = {"vllm/vllm-openai": ("vllm/vllm-openai-cpu", "-x86_64")}
CPU_IMAGE_ARCH = "x86_64"
PORT_FLAG = {"vllm": "--port", "sglang": "--port", "trtllm": "--port"}
# SGLang listens on 127.0.0.1 unless told otherwise; the probes, the Service and the
# picker reach the pod's address. vLLM listens on every address by default.
HOST_FLAG = {"sglang": ("--host", "0.0.0.0")}
REVISION_FLAG = {"vllm": "--revision", "sglang": "--revision"}
# Engines that serve /metrics only when asked (SGLang docs, "Production Metrics"). Always
# on, not only while a collector runs: the engine does not know, and switching it when a
# TelemetryDestination appears would change the pod template and restart every model.
METRICS_FLAG = {"sglang": "--enable-metrics"}
# OTLP traces, where the cluster collector receives them (spec.cluster.tracesEndpoint):
# vLLM's `--otlp-traces-endpoint` (gRPC exporter by default, insecure; a URL). Only on
# pods that serve the API, where requests are traced. SGLang's needs `--enable-trace`
# and the `sglang[tracing]` extra: not added (see the module docstring).
TRACES_FLAGS = {"vllm": lambda endpoint: ["--otlp-traces-endpoint", f"http://{endpoint}"]}
TRACES_ENDPOINT_FLAG = "--otlp-traces-endpoint"
# What an engine does with the requests it is serving when it is told to stop (SIGTERM,
# after the pod's preStop: pods.py). vLLM aborts them unless `--shutdown-timeout` is
# above 0 (vllm/entrypoints/launchers/launcher.py: mode "abort" or "drain"); with it,
# the engine finishes them first, for up to that many seconds. Only on pods that serve
# requests. SGLang has no such flag: its requests end with the process.
DRAIN_FLAG = {"vllm": "--shutdown-timeout"}
DRAIN_SECONDS = 60
SGLANG_DIST_INIT_PORT = 5000
LAYOUT_DIMENSIONS = (layout.TENSOR, layout.PIPELINE, layout.DATA)
# vLLM's KV transfer for prefill/decode through llm-d's routing sidecar (its `nixlv2`
# connector): NIXL on both roles, each told which side it is. vLLM 0.32's NixlConnector
# deprecates `kv_both` (it logs a warning when the connector starts, after argument
# parsing) and asks for `kv_producer` on prefill instances and `kv_consumer` on decode
# instances: the prefill engine's KV is read by the decode engine.
VLLM_KV_CONNECTOR = "NixlConnector"
VLLM_KV_ROLE_DEPRECATED = "kv_both"
VLLM_KV_ROLES = {ROLE_PREFILL: "kv_producer", ROLE_DECODE: "kv_consumer"}
KV_TRANSFER_FLAG = "--kv-transfer-config"


def vllm_kv_transfer_config(kv_role: str) -> str:
    """The `--kv-transfer-config` JSON of a prefill or decode vLLM engine."""
    return json.dumps(
        {"kv_connector": VLLM_KV_CONNECTOR, "kv_role": kv_role}, separators=(",", ":")
    )


# Every spelling each engine accepts for a flag we may add (the user's wins under any).
VLLM_TP, VLLM_PP, VLLM_DP = (layout.SPELLINGS["vllm"][d] for d in LAYOUT_DIMENSIONS)
SGLANG_TP, SGLANG_PP, SGLANG_DP = (layout.SPELLINGS["sglang"][d] for d in LAYOUT_DIMENSIONS)


@dataclass(frozen=True)
class MultiNode:
    """One pod's place in a multi-node replica, as the engine flags need it."""

    leader: bool
    nodes: int  # workerNodes + 1
    gpus_per_node: int  # the member's accelerators (never its NICs)


@dataclass(frozen=True)
class Model:
    """The weights every process of one engine loads, and the revision to load."""

    name: str  # a repository id, a local path or an object-store URI
    revision: str = ""  # only for a model named from the deployment's source


def cpu_image(image: str) -> str:
    """The image a container on a CPU-only pool runs: the CPU build of the engine's
    GPU image of the same release (see CPU_IMAGES), else the image as written."""
    if "@" in image or ":" not in image.rsplit("/", 1)[-1]:
        return image  # a digest names one build; an untagged image names no release
    repository, tag = image.rsplit(":", 1)
    registry = ""
    for prefix in ("docker.io/", "index.docker.io/"):
        if repository.startswith(prefix):
            registry, repository = prefix, repository.removeprefix(prefix)
    found = CPU_IMAGES.get(repository)
    if found is None:
        return image
    cpu_repository, suffix = found
    return f"{registry}{cpu_repository}:{tag}{suffix}"


def _var(name: str) -> str:
    return f"$({name})"


def _has(args: list[str], spellings: tuple[str, ...]) -> bool:
    return any(a == s or a.startswith(s + "=") for a in args for s in spellings)


def drain_seconds(engine_type: str, args: list[str]) -> int:
    """How long the engine may spend finishing its requests once told to stop: what the
    arguments say (the user's value, or ours), 0 for an engine that does not drain or a
    value that is not a whole number here (a `$(VAR)`)."""
    flag = DRAIN_FLAG.get(engine_type)
    found = layout.flag_value(args, (flag,)) if flag else None
    if found is None:
        return 0
    text = found[1]
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 5 else 0


def runs_vllm_serve(command: list[str]) -> bool:
    """The container runs `vllm serve` with its arguments right after it: the image's
    entrypoint (no command) or a command that ends in `serve`."""
    return not command or command[-1] == "serve"


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


LAYOUT_SPELLINGS = {
    "vllm": (VLLM_TP, VLLM_PP, VLLM_DP),
    "sglang": (SGLANG_TP, SGLANG_PP, SGLANG_DP),
}


def layout_flags(engine_type: str, args: list[str]) -> list[str]:
    """The parallel-layout flags the user wrote, as written (`--flag value` or
    `--flag=value`): what the engine's other members are given when they set none."""
    spellings = {s for group in LAYOUT_SPELLINGS.get(engine_type, ()) for s in group}
    found: list[str] = []
    for i, arg in enumerate(args):
        if arg.split("=", 1)[0] not in spellings:
            continue
        if "=" in arg:
            found.append(arg)
        elif i + 1 < len(args):
            found += [arg, args[i + 1]]
    return found


def parallelism_flags(
    engine_type: str,
    multinode: MultiNode | None,
    existing: list[str],
    accelerators: int = 0,
    written: tuple[str, ...] = (),
) -> list[str]:
    """Spread the model over every accelerator the pod (or replica) holds, unless the
    user chose a layout.

    Without this a leader told `--tensor-parallel-size 16` on an 8-GPU node asks for 16
    local GPUs, and a single pod given 4 GPUs serves from one. The layout is each
    engine's documented default: vLLM tensor parallel within a node and pipeline parallel
    across nodes; SGLang tensor parallel across all of them. Any size set by the user
    (tensor, pipeline or data parallel) means the user chose: add none. Accelerators
    only: a NIC beside the GPUs is no rank. A layout the user wrote on another member of
    the same engine (`written`) is given as written instead: every rank must agree on it.

    A layout written in part (only a pipeline size on a pod of 8 GPUs) is completed where
    that is unambiguous (functions/common/layout.py), so the engine uses what the replica
    claims; the ModelReplica's status says so.
    """
    spelled = any(_has(existing, s) for s in LAYOUT_SPELLINGS.get(engine_type, ()))
    if spelled or written:
        source = existing if spelled else list(written)
        completion = layout_completion(engine_type, source, multinode, accelerators)
        return ([] if spelled else list(written)) + list(completion)
    if engine_type == "vllm" and not any(_has(existing, s) for s in (VLLM_TP, VLLM_PP, VLLM_DP)):
        if multinode is not None:
            return [
                "--tensor-parallel-size",
                str(multinode.gpus_per_node),
                "--pipeline-parallel-size",
                str(multinode.nodes),
            ]
        if accelerators > 1:
            return ["--tensor-parallel-size", str(accelerators)]
    if engine_type == "sglang" and not any(
        _has(existing, s) for s in (SGLANG_TP, SGLANG_PP, SGLANG_DP)
    ):
        if multinode is not None:
            return ["--tp-size", str(multinode.gpus_per_node * multinode.nodes)]
        if accelerators > 1:
            return ["--tp-size", str(accelerators)]
    return []


def layout_fit(
    engine_type: str, args: list[str], multinode: MultiNode | None, accelerators: int
) -> layout.Fit | None:
    """How a written layout fits what one replica of the engine claims (common/layout.py):
    every pod of a multi-node replica holds the Leader's accelerators."""
    if accelerators < 1:
        return None  # a CPU member: no accelerators to leave unused
    if multinode is not None:
        return layout.fit(
            engine_type,
            args,
            per_pod=multinode.gpus_per_node,
            pods=multinode.nodes,
            multinode=True,
        )
    return layout.fit(engine_type, args, per_pod=accelerators)


def layout_completion(
    engine_type: str, args: list[str], multinode: MultiNode | None, accelerators: int
) -> tuple[str, ...]:
    """The size that completes a layout written in part, if one does."""
    found = layout_fit(engine_type, args, multinode, accelerators)
    return found.added if found is not None else ()


def engine_args(
    engine_type: str,
    command: list[str],
    existing: list[str],
    *,
    port: int,
    served_name: str,
    wiring: Wiring,
    traces_endpoint: str = "",
    accelerators: int = 0,
    written: tuple[str, ...] = (),
) -> list[str]:
    """The flags to append to the engine container's own arguments."""
    if is_shell_script(command, existing):
        return []
    added: list[str] = []
    if wiring.serves_http:
        host = HOST_FLAG.get(engine_type)
        if host and not _has(existing, (host[0],)):
            added += list(host)
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
        flag = DRAIN_FLAG.get(engine_type)
        if flag and not _has(existing, (flag,)):
            added += [flag, str(DRAIN_SECONDS)]
    if wiring.kv_role and engine_type == "vllm" and not _has(existing, (KV_TRANSFER_FLAG,)):
        added += [KV_TRANSFER_FLAG, vllm_kv_transfer_config(wiring.kv_role)]
    if wiring.multinode is not None:
        for spellings, values in multinode_flags(engine_type, wiring.multinode):
            if not _has(existing, spellings):
                added += values
    added += parallelism_flags(engine_type, wiring.multinode, existing, accelerators, written)
    return added


def launch_args(
    engine_type: str,
    command: list[str],
    existing: list[str],
    *,
    model: Model | None,
    port: int,
    served_name: str,
    wiring: Wiring,
    traces_endpoint: str = "",
    accelerators: int = 0,
    written: tuple[str, ...] = (),
) -> list[str]:
    """The engine container's whole argument list: the user's, with the model where the
    engine reads it and our flags after them."""
    if is_shell_script(command, existing):
        return list(existing)
    front: list[str] = []
    back: list[str] = []
    flags = MODEL_FLAG.get(engine_type)
    if (
        model is not None
        and flags
        and not model_flag_in(engine_type, engine_argv(engine_type, command, existing))
    ):
        if engine_type == "vllm" and runs_vllm_serve(command):
            front = [model.name]
        else:
            back = [flags[0], model.name]
        revision = REVISION_FLAG.get(engine_type)
        if model.revision and revision and not _has(existing, (revision,)):
            back += [revision, model.revision]
    added = engine_args(
        engine_type,
        command,
        existing,
        port=port,
        served_name=served_name,
        wiring=wiring,
        traces_endpoint=traces_endpoint,
        accelerators=accelerators,
        written=written,
    )
    return [*front, *existing, *back, *added]
