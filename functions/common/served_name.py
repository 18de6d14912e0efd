"""The model name clients send: what an engine serves a deployment under.

Requests name their model in the body (`"model": ...`); the Gateway's body-based router
copies it into the header each model's route matches, so the route must match the
name the engine answers to. That is the deployment's name, which compose-model-replica
passes as `--served-model-name` — unless the user's own args set the flag, and then the
user's names win (vLLM accepts several; the first is the one it reports). Both the
route (compose-model-replica) and the warning about a mismatch (compose-model-deployment)
read the user's names here, so they cannot disagree.
"""

from __future__ import annotations

import shlex
from typing import Final

SERVED_NAME_FLAG: Final = {"vllm": "--served-model-name", "sglang": "--served-model-name"}
ENGINE_CONTAINER_NAME: Final = "engine"


def engine_container_index(containers: list[dict]) -> int:
    """The engine container: the one named `engine`, else the first."""
    for i, container in enumerate(containers):
        if container.get("name") == ENGINE_CONTAINER_NAME:
            return i
    return 0


def user_served_names(engine_type: str, args: list[str]) -> tuple[str, ...]:
    """The names the user's own args serve the model under; () when they set none."""
    flag = SERVED_NAME_FLAG.get(engine_type)
    if flag is None:
        return ()
    names: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            names.append(arg.split("=", 1)[1])
        elif arg == flag:
            for value in args[i + 1 :]:
                if value.startswith("-"):
                    break
                names.append(value)
    return tuple(n for n in names if n)


def container_served_names(engine_type: str, container: dict) -> tuple[str, ...]:
    """The user's served names in an engine container's command and args, including a
    `sh -c "..."` script's (split as the shell would, where it can be)."""
    argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    words: list[str] = []
    for arg in argv:
        try:
            words += shlex.split(arg) if " " in arg else [arg]
        except ValueError:
            words.append(arg)
    return user_served_names(engine_type, words)


def served_name_mismatch(engine_type: str, template: dict, deployment: str) -> str:
    """Why clients cannot send the deployment's name, or "" when they can."""
    containers = (template.get("spec") or {}).get("containers") or []
    if not containers:
        return ""
    names = container_served_names(engine_type, containers[engine_container_index(containers)])
    if not names or deployment in names:
        return ""
    quoted = ", ".join(f'"{n}"' for n in names)
    return (
        f"the engine serves the model as {quoted} (--served-model-name), not as the "
        f'deployment\'s name "{deployment}": clients must send "model": {quoted.split(", ")[0]}'
        ", and the route matches only those names"
    )
