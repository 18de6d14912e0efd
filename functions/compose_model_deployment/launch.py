"""Launch mistakes a ModelDeployment's spec shows before anything is placed.

Most launch warnings are found where the launch lines are built, by compose-model-replica
(its launch.py), and reach the deployment's status from its ModelReplicas. Two are about
the deployment's own spec and are decided here, before placement:

- `worker.nodes` on a Worker member. Only the Leader's is read (the XRD says so: worker
  nodes per replica besides the leader); another API puts the count on the workers, and
  a user migrating from it writes it there. The same count as the Leader's changes
  nothing and is a warning that it is ignored; a different one means the user expects a
  replica of a size it will not have, and is refused, naming both fields.
- A parallel layout that asks for more accelerators than one replica claims cannot
  start; it is refused here as compose-model-replica refuses it (one rule:
  functions/common/layout.py), so nothing is placed for a launch that cannot run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions.common import contracts, layout
from functions.common.launch_warnings import (
    REASON_WORKER_NODES_ON_WORKER,
    LaunchWarning,
    aggregate,
)
from functions.common.reader import InputError
from functions.common.served_name import engine_container_index
from functions.common.shell import is_shell_script
from functions.compose_model_deployment.model import Deployment, Holding, Member


def _members(raw_engine: Any) -> list[dict]:
    members = raw_engine.get("members") if isinstance(raw_engine, dict) else None
    return [m for m in members or [] if isinstance(m, dict)]


def worker_nodes_warnings(xr: dict) -> list[LaunchWarning]:
    """`worker.nodes` written on a Worker member: a warning when it repeats the Leader's,
    InputError when it disagrees (the replica would not have the size the user wrote)."""
    tspec = (((xr.get("spec") or {}).get("template") or {}).get("spec")) or {}
    found = []
    for i, engine in enumerate(tspec.get("engines") or []):
        members = _members(engine)
        leader = next(
            (j for j, m in enumerate(members) if m.get("role") == contracts.ROLE_LEADER), None
        )
        for j, member in enumerate(members):
            if member.get("role") != contracts.ROLE_WORKER:
                continue
            worker = member.get("worker")
            if not isinstance(worker, dict) or worker.get("nodes") is None:
                continue
            path = f"spec.template.spec.engines[{i}].members[{j}].worker.nodes"
            if leader is None:
                continue  # read_deployment refuses a Worker without a Leader
            leader_path = f"spec.template.spec.engines[{i}].members[{leader}].worker.nodes"
            leader_nodes = (members[leader].get("worker") or {}).get("nodes")
            if worker["nodes"] != leader_nodes:
                raise InputError(
                    path,
                    f"worker.nodes belongs on the Leader member ({leader_path}, which says "
                    f"{leader_nodes}); a Worker's is not read, and this one says "
                    f"{worker['nodes']}: set the Leader's to the worker nodes you want and "
                    "remove this one",
                )
            found.append(
                LaunchWarning(
                    path,
                    REASON_WORKER_NODES_ON_WORKER,
                    f"worker.nodes is read only on the Leader member ({leader_path}, which "
                    "says the same); this one is ignored: remove it",
                )
            )
    return found


def _engine_args(member: Member) -> tuple[int, list[str], list[str]] | None:
    containers = (member.template.get("spec") or {}).get("containers") or []
    if not containers or not all(isinstance(c, dict) for c in containers):
        return None
    c = engine_container_index(containers)
    command = [str(a) for a in containers[c].get("command") or []]
    args = [str(a) for a in containers[c].get("args") or []]
    return c, command, args


def check_layouts(deployment: Deployment) -> None:
    """InputError for a parallel layout needing more accelerators than a replica claims."""
    for engine in deployment.engines:
        leader = next((m for m in engine.members if m.role == contracts.ROLE_LEADER), None)
        for member in engine.members:
            found = _engine_args(member)
            if found is None:
                continue
            c, command, args = found
            if is_shell_script(command, args):
                continue
            if leader is not None:
                fit = layout.fit(
                    engine.type,
                    args,
                    per_pod=leader.devices_per_pod,
                    pods=leader.worker_nodes + 1,
                    multinode=True,
                )
            else:
                fit = layout.fit(engine.type, args, per_pod=member.devices_per_pod)
            if fit is not None and fit.too_large:
                raise InputError(f"{member.path}.template.spec.containers[{c}].args", fit.refusal())
            if leader is not None and layout.written_sizes(engine.type, args):
                break  # every rank runs the first layout a member spells


def check_spec(xr: dict, deployment: Deployment) -> list[LaunchWarning]:
    """The spec's own launch warnings; InputError for a launch that cannot work."""
    found = worker_nodes_warnings(xr)
    check_layouts(deployment)
    return found


def status_warnings(own: Iterable[Holding], spec: list[LaunchWarning]) -> dict[str, Any]:
    """`{"warnings": [...]}` for the deployment's status: the spec's own warnings and its
    ModelReplicas' (with the clusters that reported each), or {} when there are none."""
    found = aggregate({h.cluster: h.warnings for h in own if h.warnings}, spec)
    return {"warnings": found} if found else {}
