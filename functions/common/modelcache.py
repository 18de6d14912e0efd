"""The ModelCache contract two functions share.

compose-model-deployment composes a cache's volume on each member and tells each
ModelReplica where it is; compose-model-replica mounts it into every engine pod. The
claim's name and the mount path are decided here, once, so the volume the download Job
fills is the one the engine reads. The per-cluster phases are read by the cache's own
status and by placement (which prefers clusters where the cache is Ready).
"""

from __future__ import annotations

from typing import Final

from functions.common.naming import dns_label

PHASE_PENDING: Final = "Pending"
PHASE_DOWNLOADING: Final = "Downloading"
PHASE_READY: Final = "Ready"
PHASE_FAILED: Final = "Failed"
PHASES: Final = (PHASE_PENDING, PHASE_DOWNLOADING, PHASE_READY, PHASE_FAILED)

# Where engine pods see the weights (read-only), and the variable that names that path
# for a `sh -c` launch line; vLLM and SGLang are also given it as their model flag.
MOUNT_ROOT: Final = "/models"
ENV_MODEL_PATH: Final = "MODELPLANE_MODEL_PATH"
VOLUME_NAME: Final = "model-cache"


def claim_name(cache: str) -> str:
    """The ReadWriteMany PersistentVolumeClaim holding a cache's weights on a member."""
    return dns_label("modelcache", cache)


def mount_path(cache: str) -> str:
    return f"{MOUNT_ROOT}/{cache}"


# The flag each engine we know loads its weights from, and every spelling it accepts
# (vLLM: the positional model of `vllm serve`, or `--model`, which vLLM 0.32 still
# takes but warns will be removed; SGLang's launch_server: `--model-path`, also spelled
# `--model`). compose-model-replica gives every engine process the model (vLLM
# positionally); compose-model-deployment warns when the user's own template already
# names a model beside a cache, since the user's flag always wins.
MODEL_FLAG: Final = {"vllm": ("--model",), "sglang": ("--model-path", "--model")}
# The vllm/vllm-openai image's entrypoint: a container that names no command runs it.
VLLM_IMAGE_ENTRYPOINT: Final = ("vllm", "serve")


def engine_argv(engine_type: str, command: list[str], args: list[str]) -> list[str]:
    """What the engine process is started with: a vLLM container without a command runs
    its image's `vllm serve`, so its first argument is the positional model."""
    if engine_type == "vllm" and not command:
        return [*VLLM_IMAGE_ENTRYPOINT, *args]
    return [*command, *args]


def _engine_argv(template: dict) -> tuple[list[str], list[str]]:
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    engine = next((c for c in containers if c.get("name") == "engine"), None)
    engine = engine if engine is not None else (containers[0] if containers else {})
    command: list[str] = []
    args: list[str] = []
    for arg in engine.get("command") or []:
        command += str(arg).split()
    for arg in engine.get("args") or []:
        args += str(arg).split()
    return command, args


def _model_at(engine_type: str, argv: list[str]) -> tuple[str, str]:
    """(how the user named it, the model), or ("", "")."""
    spellings = MODEL_FLAG.get(engine_type, ())
    for i, arg in enumerate(argv):
        for flag in spellings:
            if arg.startswith(flag + "="):
                return arg, arg.split("=", 1)[1]
            if arg == flag and i + 1 < len(argv):
                return f"{flag} {argv[i + 1]}", argv[i + 1]
        if (
            engine_type == "vllm"
            and arg == "serve"
            and i + 1 < len(argv)
            and not argv[i + 1].startswith("-")
        ):
            return f"serve {argv[i + 1]}", argv[i + 1]
    return "", ""


def model_flag_in(engine_type: str, argv: list[str]) -> str:
    """The model the user's own argv names (`--model X`, `vllm serve X`), or ""."""
    return _model_at(engine_type, argv)[0]


def model_named_in(engine_type: str, argv: list[str]) -> str:
    """The model itself that the user's argv names, or ""."""
    return _model_at(engine_type, argv)[1]


def user_model_flag(engine_type: str, template: dict) -> str:
    command, args = _engine_argv(template)
    return model_flag_in(engine_type, engine_argv(engine_type, command, args))
