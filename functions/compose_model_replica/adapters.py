"""What a base that accepts LoRA adapters adds to its engine pods and its cluster.

Only the capacity (spec.adapters: the per-base limit and the largest rank) reaches a pod
template, never the adapters themselves, so a ModelAdapter created or deleted changes
no pod: no restart, no re-creation, no rollout. Each engine process is started able to
take adapters at runtime; the member's runtime loads each one through the engine's own
endpoint from the volume composed here.

- vLLM 0.32 (`vllm serve`): `--enable-lora`, `--max-loras N` (the adapters one batch may
  mix; sized from the per-base limit, not the current count, so it is stable),
  `--max-lora-rank R`, and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, which enables
  `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`. No `--lora-modules`: a
  list of adapters in the launch line would make every adapter change a new pod.
- SGLang 0.5.23 (`launch_server`): `--enable-lora`, `--max-loras-per-batch N`,
  `--max-lora-rank R` and `--lora-target-modules all` (with no `--lora-paths` at start,
  SGLang needs the rank and target modules to size its LoRA memory pool up front);
  adapters are loaded with its `POST /load_lora_adapter`. `--lora-paths` is never
  added, for the same reason as vLLM's `--lora-modules`.

Every member of an engine gets the flags (a headless vLLM rank builds its whole config
from its own arguments, and the ranks must agree). A flag the user wrote wins, as
everywhere; a `sh -c` launch line gets none (the script owns its arguments).

Every engine pod carries the readiness gate `modelplane.ai/adapters-loaded`: the member's
agent sets it once it has loaded every staged adapter into the pod, so a new pod
(scale-up, restart, rollout) counts ready only with its adapters in place.

The adapters' volume: one ReadWriteMany claim per base per cluster
(functions.common.adapters.claim_name), mounted read-only at /adapters in every engine
container; each ModelAdapter's download Job writes its own directory in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from functions.common import adapters as contract
from functions.common.reader import Spec
from functions.compose_model_replica.engines import is_shell_script

if TYPE_CHECKING:
    from functions.compose_model_replica.model import ModelReplica


class AdapterCapacity(Spec):
    """spec.adapters of a ModelReplica (compose-model-deployment writes it)."""

    max_adapters: int = Field(default=contract.DEFAULT_MAX_ADAPTERS, alias="maxAdapters")
    max_rank: int = Field(default=contract.DEFAULT_MAX_RANK, alias="maxRank")
    volume_size: str = Field(default=contract.DEFAULT_VOLUME_SIZE, alias="volumeSize")
    storage_class: str = Field(default="", alias="storageClassName")

    def check(self, engine_types: list[tuple[str, str]]) -> None:
        """The same rules as the deployment's: InputError naming the field and rule."""
        contract.read_capacity(
            {
                "maxAdapters": self.max_adapters,
                "maxRank": self.max_rank,
                "volumeSize": self.volume_size,
                "storageClassName": self.storage_class,
            },
            engine_types,
            "spec.adapters",
        )


VOLUME_KEY = "lora-adapters"


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def lora_flags(engine_type: str, existing: list[str], capacity: AdapterCapacity) -> list[str]:
    """The flags that start an engine able to load adapters at runtime, each added only
    where the user has not set it."""
    slots, rank = str(capacity.max_adapters), str(capacity.max_rank)
    if engine_type == "vllm":
        groups: list[tuple[str, list[str]]] = [
            ("--enable-lora", ["--enable-lora"]),
            ("--max-loras", ["--max-loras", slots]),
            ("--max-lora-rank", ["--max-lora-rank", rank]),
        ]
    elif engine_type == "sglang":
        groups = [
            ("--enable-lora", ["--enable-lora"]),
            ("--max-loras-per-batch", ["--max-loras-per-batch", slots]),
            ("--max-lora-rank", ["--max-lora-rank", rank]),
            ("--lora-target-modules", ["--lora-target-modules", "all"]),
        ]
    else:
        return []
    added: list[str] = []
    for flag, values in groups:
        if not _has(existing, flag):
            added += values
    return added


def lora_env(engine_type: str) -> list[dict]:
    """The environment that turns on the engine's runtime loading endpoint."""
    if engine_type == "vllm":
        return [{"name": contract.VLLM_RUNTIME_LORA_ENV, "value": "True"}]
    return []


def apply(
    spec: dict,
    container: dict,
    engine_type: str,
    replica: ModelReplica,
    *,
    command: list[str],
    args: list[str],
    serves_http: bool,
) -> list[str]:
    """The engine container's arguments with the LoRA flags, its environment and the
    adapters' volume, for a base that accepts adapters; `args` as given otherwise. Only
    a pod that serves the API gets the readiness gate: a headless rank (a multi-node
    worker) answers no load request and holds the adapters through its leader, and a
    gate nobody sets would keep it, and its group, unready forever."""
    if replica.adapters is None or is_shell_script(command, args):
        return args
    # Ours first, the user's value wins where a name is set twice (as for every variable).
    user_names = {e.get("name") for e in container.get("env") or []}
    ours = [e for e in lora_env(engine_type) if e["name"] not in user_names]
    if ours:
        container["env"] = [*ours, *(container.get("env") or [])]
    mount_volume(spec, container, replica)
    if not serves_http:
        return [*args, *lora_flags(engine_type, args, replica.adapters)]
    gates = [
        g
        for g in spec.get("readinessGates") or []
        if g.get("conditionType") != contract.ADAPTERS_GATE
    ]
    spec["readinessGates"] = [*gates, {"conditionType": contract.ADAPTERS_GATE}]
    return [*args, *lora_flags(engine_type, args, replica.adapters)]


def mount_volume(spec: dict, container: dict, replica: ModelReplica) -> None:
    """Every adapter of the base, read-only, at /adapters in the engine container."""
    name = contract.VOLUME_NAME
    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != name]
    container["volumeMounts"] = [
        *mounts,
        {"name": name, "mountPath": contract.MOUNT_ROOT, "readOnly": True},
    ]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != name]
    spec["volumes"] = [
        *volumes,
        {
            "name": name,
            "persistentVolumeClaim": {
                "claimName": contract.claim_name(replica.deployment),
                "readOnly": True,
            },
        },
    ]


def volume_claim(replica: ModelReplica, capacity: AdapterCapacity) -> dict:
    """The base's adapter volume on this cluster (every ModelAdapter's Job writes to it)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": capacity.volume_size}},
    }
    if capacity.storage_class:
        spec["storageClassName"] = capacity.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": contract.claim_name(replica.deployment),
            "namespace": replica.namespace,
        },
        "spec": spec,
    }
