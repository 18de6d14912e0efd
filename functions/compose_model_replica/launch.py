"""What the engine or the kubelet would say about the launch lines composed, said now.

Every launch line compose-model-replica builds parses in the engines' own parsers
(tests/engines), but some mistakes pass a parser and show only once the pod runs, in a
log nobody reads: a `$(VAR)` that names no variable (the kubelet passes it on as
written), a parallel layout written in part (the engine starts on fewer accelerators
than the replica holds), an image older than the engine release whose flags we add, a
deprecated KV-transfer role. Each is found here, from the replica and the workloads as
composed, and becomes a warning in the ModelReplica's status naming the field
(functions/common/launch_warnings.py; the deployment shows them too). A layout that asks
for more accelerators than the replica claims cannot start at all: it is refused
(InvalidReplica), as compose-model-deployment refuses it before placing.

The variables a container defines are read from the composed pod template (ours, the
user's) plus those its workload controller adds when it creates the pod:
LeaderWorkerSet v0.8.0 puts `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE`, `LWS_WORKER_INDEX`
first in every container (pkg/utils/pod AddLWSVariables); Grove appends `GROVE_PCS_NAME`,
`GROVE_PCS_INDEX`, `GROVE_PCLQ_NAME`, `GROVE_HEADLESS_SERVICE`, `GROVE_PCLQ_POD_INDEX`
(and, in a scaling group, `GROVE_PCSG_NAME`, `GROVE_PCSG_INDEX`,
`GROVE_PCSG_TEMPLATE_NUM_PODS`) after the template's. Command and args expand from every
variable; an env value only from the entries before it, so an env value can never read a
Grove variable. A container with `envFrom` may define anything: its references are not
judged. In a shell script (`sh -c`) `$(word)` is the shell's command substitution; only
upper-case names there are read as variable references.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from functions.common import layout
from functions.common.contracts import (
    LABEL_ROLE,
    ROLE_DECODE,
    ROLE_LEADER,
    ROLE_PREFILL,
    ROLE_WORKER,
    STACK_DYNAMO,
)
from functions.common.launch_warnings import (
    REASON_DEPRECATED_KV_ROLE,
    REASON_IMAGE_OLDER,
    REASON_LAYOUT_COMPLETED,
    REASON_UNDEFINED_VARIABLE,
    REASON_UNUSED_ACCELERATORS,
    LaunchWarning,
)
from functions.common.shell import is_shell_script
from functions.compose_model_replica.backends.base import Workload
from functions.compose_model_replica.engines import (
    CHECKED_IMAGES,
    KV_TRANSFER_FLAG,
    VLLM_KV_CONNECTOR,
    VLLM_KV_ROLE_DEPRECATED,
    VLLM_KV_ROLES,
    MultiNode,
    layout_fit,
)
from functions.compose_model_replica.model import (
    Engine,
    InvalidReplica,
    Member,
    ModelReplica,
    Shape,
    engine_container_index,
)

LWS_VARIABLES = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
GROVE_VARIABLES = (
    "GROVE_PCS_NAME",
    "GROVE_PCS_INDEX",
    "GROVE_PCLQ_NAME",
    "GROVE_HEADLESS_SERVICE",
    "GROVE_PCLQ_POD_INDEX",
)
GROVE_SCALING_GROUP_VARIABLES = (
    "GROVE_PCSG_NAME",
    "GROVE_PCSG_INDEX",
    "GROVE_PCSG_TEMPLATE_NUM_PODS",
)
# The repositories each engine's releases are published under (docker.io implied); a
# platform's own build is named otherwise and is not judged by its tag.
ENGINE_REPOSITORIES = {
    "vllm": ("vllm/vllm-openai", "vllm/vllm-openai-cpu"),
    "sglang": ("lmsysorg/sglang",),
}
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?![\d.])")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHELL_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Names listed in a message, at most (a template with hundreds of variables).
LISTED_NAMES = 40


@dataclass(frozen=True)
class Controller:
    """The variables a workload controller adds to a member's containers."""

    names: tuple[str, ...] = ()
    first: bool = True  # put before the template's (an env value may read them)


def controller(replica: ModelReplica, member: Member) -> Controller:
    if replica.cluster.stack == STACK_DYNAMO:
        scaling = member.role in (ROLE_LEADER, ROLE_WORKER)
        extra = GROVE_SCALING_GROUP_VARIABLES if scaling else ()
        return Controller((*GROVE_VARIABLES, *extra), first=False)
    if replica.shape is Shape.LEADER_WORKER:
        return Controller(LWS_VARIABLES, first=True)
    return Controller()


def references(text: str) -> Iterator[str]:
    """The names a text's `$(NAME)` references name, as the kubelet reads them (`$$` is
    an escaped dollar)."""
    i = 0
    while i < len(text) - 1:
        if text[i] != "$":
            i += 1
        elif text[i + 1] == "$":
            i += 2
        elif text[i + 1] == "(":
            end = text.find(")", i + 2)
            if end < 0:
                return
            yield text[i + 2 : end]
            i = end + 1
        else:
            i += 1


def _listed(names: set[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:LISTED_NAMES])
    more = len(ordered) - LISTED_NAMES
    return f"{shown} and {more} more" if more > 0 else (shown or "none")


def _undefined(text: str, defined: set[str], *, shell: bool) -> list[str]:
    pattern = _SHELL_NAME if shell else _NAME
    return [name for name in references(text) if pattern.match(name) and name not in defined]


def pod_templates(workload: Workload) -> Iterator[tuple[str, dict]]:
    """(role, pod spec) of every pod template a workload holds, by the role label every
    composed template carries."""
    spec = workload.manifest.get("spec") or {}
    kind = workload.manifest.get("kind")
    templates: list[dict] = []
    if kind == "Deployment":
        templates = [spec.get("template") or {}]
    elif kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        templates = [lwt.get("leaderTemplate") or {}, lwt.get("workerTemplate") or {}]
    elif kind == "PodCliqueSet":
        for clique in (spec.get("template") or {}).get("cliques") or []:
            templates.append(
                {
                    "metadata": {"labels": clique.get("labels") or {}},
                    "spec": clique["spec"]["podSpec"],
                }
            )
    for template in templates:
        role = ((template.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
        if role:
            yield role, template.get("spec") or {}


def variable_warnings(replica: ModelReplica, workloads: list[Workload]) -> list[LaunchWarning]:
    """Every `$(NAME)` the user wrote that names no variable of its container."""
    composed: dict[str, dict] = {}
    for workload in workloads:
        for role, spec in pod_templates(workload):
            composed.setdefault(role, spec)  # one clique per worker rank: alike
    found: list[LaunchWarning] = []
    for e, engine in enumerate(replica.engines):
        for m, member in enumerate(engine.members):
            spec = composed.get(member.role)
            if spec is None:
                continue
            ctl = controller(replica, member)
            base = f"spec.engines[{e}].members[{m}].template.spec"
            user_spec = member.template.get("spec") or {}
            for kind in ("initContainers", "containers"):
                ours = spec.get(kind) or []
                for c, user in enumerate(user_spec.get(kind) or []):
                    if c < len(ours):
                        found += _container_warnings(f"{base}.{kind}[{c}]", user, ours[c], ctl)
    return found


def _container_warnings(
    path: str, user: dict, composed: dict, ctl: Controller
) -> list[LaunchWarning]:
    if composed.get("envFrom"):
        return []
    env = [e for e in composed.get("env") or [] if isinstance(e, dict)]
    names = [str(e.get("name", "")) for e in env]
    every = set(names) | set(ctl.names)
    command = [str(a) for a in user.get("command") or []]
    args = [str(a) for a in user.get("args") or []]
    shell = is_shell_script(command, args)
    found = []
    for field, values in (("command", command), ("args", args)):
        for i, value in enumerate(values):
            missing = _undefined(value, every, shell=shell)
            if missing:
                found.append(_undefined_warning(f"{path}.{field}[{i}]", missing, every, ""))
    for k, entry in enumerate(user.get("env") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), str):
            continue
        at = names.index(entry.get("name")) if entry.get("name") in names else len(names)
        before = set(names[:at]) | (set(ctl.names) if ctl.first else set())
        missing = _undefined(entry["value"], before, shell=False)
        if missing:
            found.append(
                _undefined_warning(f"{path}.env[{k}].value", missing, before, " before it")
            )
    return found


def _undefined_warning(
    field: str, missing: list[str], defined: set[str], where: str
) -> LaunchWarning:
    refs = ", ".join(f"$({n})" for n in sorted(set(missing)))
    verb = "is" if len(set(missing)) == 1 else "are"
    return LaunchWarning(
        field,
        REASON_UNDEFINED_VARIABLE,
        f"{refs} {verb} not defined in this container{where}, so Kubernetes passes "
        f"{'it' if verb == 'is' else 'them'} to the process as written; "
        f"defined{where}: {_listed(defined)}",
    )


def _engine_container(member: Member) -> tuple[int, dict] | None:
    containers = (member.template.get("spec") or {}).get("containers") or []
    if not containers:
        return None
    index = engine_container_index(containers)
    return index, containers[index]


def _args(container: dict) -> list[str]:
    return [str(a) for a in container.get("args") or []]


def layout_warnings(replica: ModelReplica) -> list[LaunchWarning]:
    """A layout written in part: completed (said), or leaving accelerators idle (warned);
    asking for more than the replica claims: refused."""
    found = []
    for e, engine in enumerate(replica.engines):
        if replica.shape is Shape.LEADER_WORKER:
            leader = engine.member(ROLE_LEADER)
            assert leader is not None
            multinode = MultiNode(True, leader.worker_nodes + 1, leader.accelerators or 1)
            # Every rank is given the first layout a member spells (pods.engine_layout).
            for m, member in enumerate(engine.members):
                hit = _layout_warning(
                    engine, member, e=e, m=m, multinode=multinode, accelerators=leader.accelerators
                )
                if hit is not None:
                    found.append(hit)
                    break
                if _spells_layout(engine, member):
                    break
            continue
        for m, member in enumerate(engine.members):
            hit = _layout_warning(
                engine, member, e=e, m=m, multinode=None, accelerators=member.accelerators
            )
            if hit is not None:
                found.append(hit)
    return found


def _spells_layout(engine: Engine, member: Member) -> bool:
    found = _engine_container(member)
    return found is not None and bool(layout.written_sizes(engine.type, _args(found[1])))


def _layout_warning(
    engine: Engine,
    member: Member,
    *,
    e: int,
    m: int,
    multinode: MultiNode | None,
    accelerators: int,
) -> LaunchWarning | None:
    found = _engine_container(member)
    if found is None:
        return None
    c, container = found
    args = _args(container)
    if is_shell_script([str(a) for a in container.get("command") or []], args):
        return None
    fit = layout_fit(engine.type, args, multinode, accelerators)
    if fit is None:
        return None
    field = f"spec.engines[{e}].members[{m}].template.spec.containers[{c}].args"
    if fit.too_large:
        raise InvalidReplica(field, fit.refusal())
    if fit.added:
        return LaunchWarning(
            field,
            REASON_LAYOUT_COMPLETED,
            f"the parallel layout written ({fit.sizes()}) uses {fit.used} of the "
            f"{fit.claimed} accelerators one replica claims {fit.breakdown()}; "
            f"{' '.join(fit.added)} was "
            "added so the engine uses all of them (write the size yourself to choose "
            "another layout)",
        )
    if fit.unused:
        return LaunchWarning(
            field,
            REASON_UNUSED_ACCELERATORS,
            f"the parallel layout written ({fit.sizes()}) uses {fit.used} of the "
            f"{fit.claimed} accelerators one replica claims {fit.breakdown()}, leaving "
            f"{fit.unused} idle; "
            f"write sizes whose product is {fit.claimed}, or claim {fit.used}",
        )
    return None


def release(tag: str) -> tuple[int, int, int] | None:
    match = _RELEASE.match(tag)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def image_release(engine_type: str, image: str) -> tuple[str, tuple[int, int, int]] | None:
    """(tag, release) of an engine's own published image; None for any other image (a
    digest, no tag, a platform's own build)."""
    if "@" in image or ":" not in image.rsplit("/", 1)[-1]:
        return None
    repository, tag = image.rsplit(":", 1)
    for prefix in ("docker.io/", "index.docker.io/"):
        repository = repository.removeprefix(prefix)
    if repository not in ENGINE_REPOSITORIES.get(engine_type, ()):
        return None
    found = release(tag)
    return (tag, found) if found is not None else None


def image_warnings(replica: ModelReplica) -> list[LaunchWarning]:
    found = []
    for e, engine in enumerate(replica.engines):
        checked_image = CHECKED_IMAGES.get(engine.type)
        if checked_image is None:
            continue
        checked_tag = checked_image.rsplit(":", 1)[1]
        checked = release(checked_tag)
        assert checked is not None
        for m, member in enumerate(engine.members):
            hit = _engine_container(member)
            if hit is None:
                continue
            c, container = hit
            image = str(container.get("image") or "")
            seen = image_release(engine.type, image)
            if seen is None or seen[1] >= checked:
                continue
            name = ENGINE_NAMES[engine.type]
            found.append(
                LaunchWarning(
                    f"spec.engines[{e}].members[{m}].template.spec.containers[{c}].image",
                    REASON_IMAGE_OLDER,
                    f"image tag {seen[0]} is older than {name} {checked_tag}, the release the "
                    "flags added to the launch line are checked against; one of them may not "
                    f"exist in {seen[0]}, and the engine then refuses to start "
                    f"(use {checked_image} or later)",
                )
            )
    return found


def kv_role_warnings(replica: ModelReplica) -> list[LaunchWarning]:
    """A user's own `--kv-transfer-config` with NIXL in the role vLLM deprecates."""
    found = []
    for e, engine in enumerate(replica.engines):
        if engine.type != "vllm":
            continue
        for m, member in enumerate(engine.members):
            hit = _engine_container(member)
            if hit is None:
                continue
            c, container = hit
            args = _args(container)
            written = layout.flag_value(args, (KV_TRANSFER_FLAG,))
            if written is None:
                continue
            try:
                config = json.loads(written[1])
            except ValueError:
                continue
            if not isinstance(config, dict):
                continue
            if (
                config.get("kv_connector") != VLLM_KV_CONNECTOR
                or config.get("kv_role") != VLLM_KV_ROLE_DEPRECATED
            ):
                continue
            wanted = VLLM_KV_ROLES.get(member.role)
            advice = (
                f"this {member.role} member's is {wanted}"
                if wanted
                else f"{ROLE_PREFILL}: {VLLM_KV_ROLES[ROLE_PREFILL]}, "
                f"{ROLE_DECODE}: {VLLM_KV_ROLES[ROLE_DECODE]}"
            )
            found.append(
                LaunchWarning(
                    f"spec.engines[{e}].members[{m}].template.spec.containers[{c}].args",
                    REASON_DEPRECATED_KV_ROLE,
                    f'{KV_TRANSFER_FLAG} sets "kv_role": "{VLLM_KV_ROLE_DEPRECATED}", which '
                    f"vLLM 0.32's {VLLM_KV_CONNECTOR} deprecates (it warns at start and will "
                    f"remove it); set the role the engine wants ({advice}), or leave "
                    f"{KV_TRANSFER_FLAG} out to have each side's role set for you",
                )
            )
    return found


def check(replica: ModelReplica, workloads: list[Workload]) -> list[LaunchWarning]:
    """Every launch warning of the replica, sorted; InvalidReplica for a launch that
    cannot start."""
    found = [
        *layout_warnings(replica),
        *variable_warnings(replica, workloads),
        *image_warnings(replica),
        *kv_role_warnings(replica),
    ]
    return sorted(set(found))
