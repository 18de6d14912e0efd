"""The LoRA-adapter contract the functions and the runtime share.

A ModelAdapter (its own namespaced kind, composed by compose-model-deployment) names a
base ModelDeployment; the base opts in with `spec.template.spec.adapters` (how many
adapters its engines hold at once and the largest rank). compose-model-replica turns
that capacity into engine flags and one volume per ModelReplica that every engine pod
mounts read-only; each ModelAdapter's download Job fills its own directory in that
volume on every cluster the base is placed on; the member's runtime loads it into the
running engines through the engine's own endpoint.

What is decided here, once: the volume's claim name and mount path (the Job writes
where the engine reads), the engines that load adapters at runtime, the ranks vLLM
accepts, the per-base limit, and the rule for the name clients send.

The adapter *set* never reaches a pod template: only the capacity does, so adding or
removing an adapter changes no engine pod (no restart, no re-creation, no rollout).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from functions.common.naming import dns_label
from functions.common.quantity import parse_quantity
from functions.common.reader import InputError

KIND_MODEL_ADAPTER: Final = "ModelAdapter"
# On every object a ModelAdapter composes, and on the runtime's view of it.
LABEL_ADAPTER: Final = "modelplane.ai/adapter"
# The condition a ModelAdapter carries: staged (and loaded) where its base runs.
ADAPTER_READY: Final = "AdapterReady"
# The readiness gate on every engine pod of a base that accepts adapters: the member's
# agent sets this pod condition True once every staged adapter is loaded into it, so a
# new pod counts ready (Service, picker, route) only then.
ADAPTERS_GATE: Final = "modelplane.ai/adapters-loaded"

# Where engine pods see every adapter of their base (read-only), one directory each.
MOUNT_ROOT: Final = "/adapters"
VOLUME_NAME: Final = "lora-adapters"
DEFAULT_VOLUME_SIZE: Final = "1Gi"

# The per-base limit: how many adapters one base may hold (its engines' slots).
MAX_ADAPTERS_LIMIT: Final = 64
DEFAULT_MAX_ADAPTERS: Final = 4
# vLLM 0.32's `--max-lora-rank` choices (EngineArgs: LoRAConfig.max_lora_rank); an
# adapter's rank must be one of them and at most its base's maxRank.
LORA_RANKS: Final = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_RANK: Final = 16

# Engines that load LoRA adapters into a running process through their own endpoint:
# vLLM (`POST /v1/load_lora_adapter`, with VLLM_ALLOW_RUNTIME_LORA_UPDATING) and SGLang
# (`POST /load_lora_adapter`). Any other engine type is refused with its name.
RUNTIME_LORA_ENGINES: Final = ("vllm", "sglang")
# The loader ConfigMap's keys: compose-model-deployment writes one per adapter and
# cluster, the member's agent reads it (functions/runtime/agent/adapters.py).
CONFIG_SERVED_NAME: Final = "servedName"
CONFIG_PATH: Final = "path"
CONFIG_RANK: Final = "rank"
UNSUPPORTED_REASONS: Final = {
    "triton": "Triton Inference Server has no runtime LoRA loading endpoint",
    "trtllm": "TensorRT-LLM builds LoRA support into its engine at build time; it has no "
    "runtime loading endpoint",
    "tensorrt-llm": "TensorRT-LLM builds LoRA support into its engine at build time; it has "
    "no runtime loading endpoint",
}
VLLM_RUNTIME_LORA_ENV: Final = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"

# The name clients send for an adapter: what vLLM registers as `lora_name` and what the
# route and the picker match. A DNS-1123-like name with dots: no spaces, slashes or
# quotes ever reach a URL, a header match or a JSON body we build.
SERVED_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$"
_SERVED_NAME = re.compile(SERVED_NAME_PATTERN)


def unsupported_reason(engine_type: str) -> str:
    """Why an engine type cannot hold adapters, or "" when it can."""
    if engine_type in RUNTIME_LORA_ENGINES:
        return ""
    return UNSUPPORTED_REASONS.get(
        engine_type,
        f"engine type {engine_type!r} is not one modelplane loads adapters into "
        f"(it loads them through the runtime endpoints of {', '.join(RUNTIME_LORA_ENGINES)})",
    )


def whole_number(value: Any) -> int | None:
    """An integer as the XR carries it (a protobuf Struct holds every number as a
    float), or None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def is_served_name(name: object) -> bool:
    return isinstance(name, str) and _SERVED_NAME.fullmatch(name) is not None


def claim_name(deployment: str) -> str:
    """The ReadWriteMany claim holding a base's adapters on a member (one per base there:
    a deployment has one ModelReplica per cluster)."""
    return dns_label("lora", deployment)


def loaded_record_name(deployment: str) -> str:
    """The ConfigMap the member's agent writes beside a base's pods: per served name,
    how many of the base's engine pods there hold the adapter, and the engine's own
    error; each ModelAdapter observes it (Observe only) for its status."""
    return dns_label("lora-loaded", deployment)


# The record's value per served name: {"loaded": N, "replicas": M, "error": "..."}.
LOADED_KEYS: Final = ("loaded", "replicas", "error")


def adapter_path(adapter: str) -> str:
    """Where an adapter's files are in every engine pod of its base."""
    return f"{MOUNT_ROOT}/{adapter}"


@dataclass(frozen=True)
class Capacity:
    """What a base's engines are started with to hold adapters: stable while adapters
    come and go (sized from the per-base limit, never from the current count)."""

    max_adapters: int = DEFAULT_MAX_ADAPTERS
    max_rank: int = DEFAULT_MAX_RANK
    volume_size: str = DEFAULT_VOLUME_SIZE
    storage_class: str = ""

    def to_spec(self) -> dict:
        """As a ModelReplica carries it (spec.adapters)."""
        return {
            "maxAdapters": self.max_adapters,
            "maxRank": self.max_rank,
            "volumeSize": self.volume_size,
            **({"storageClassName": self.storage_class} if self.storage_class else {}),
        }


def read_capacity(raw: Any, engine_types: Iterable[tuple[str, str]], path: str) -> Capacity | None:
    """A deployment's (or replica's) `adapters`, or None when it takes none.
    `engine_types`: (the engine's path, its type) for every engine; one that cannot load
    adapters at runtime is refused with its name and why."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError(path, "must be an object")
    for at, engine_type in engine_types:
        reason = unsupported_reason(engine_type)
        if reason:
            raise InputError(
                path,
                f"{at}.type {engine_type!r} cannot serve LoRA adapters: {reason}; remove "
                f"{path.rsplit('.', 1)[-1]} or serve the model with vLLM or SGLang",
            )
    max_adapters = whole_number(raw.get("maxAdapters", DEFAULT_MAX_ADAPTERS))
    if max_adapters is None or not 1 <= max_adapters <= MAX_ADAPTERS_LIMIT:
        raise InputError(f"{path}.maxAdapters", f"must be a whole number 1-{MAX_ADAPTERS_LIMIT}")
    max_rank = whole_number(raw.get("maxRank", DEFAULT_MAX_RANK))
    if max_rank not in LORA_RANKS:
        raise InputError(
            f"{path}.maxRank", f"must be one of {', '.join(str(r) for r in LORA_RANKS)}"
        )
    size = raw.get("volumeSize", DEFAULT_VOLUME_SIZE)
    try:
        if not isinstance(size, str) or len(size) > 32 or parse_quantity(size) <= 0:
            raise ValueError
    except ValueError:
        raise InputError(f"{path}.volumeSize", "must be a positive quantity (e.g. 1Gi)") from None
    storage_class = raw.get("storageClassName", "")
    if not isinstance(storage_class, str) or len(storage_class) > 253:
        raise InputError(f"{path}.storageClassName", "must be a StorageClass name")
    return Capacity(max_adapters, max_rank, size, storage_class)
