"""Launch warnings: what the engine or the kubelet would say about a launch, said when
it is composed.

compose-model-replica checks every launch line it builds (launch.py there) and writes
what it finds to the ModelReplica's `status.warnings`; compose-model-deployment reads its
replicas' lists and writes one list to the ModelDeployment's `status.warnings`, each
entry with the clusters that reported it and its field as the deployment spells it.
Both read and write the shape here, so they cannot disagree:

    warnings:
    - field: spec.engines[0].members[0].template.spec.containers[0].args
      reason: UndefinedVariable
      message: $(MODELPLANE_RANK) is not defined in this container ...
      clusters: [us-east-1]          # the deployment's list only

`reason` is a stable word a script can match; `message` says what to change. The list is
sorted and holds each (field, reason, message) once, so the same replica writes the
same bytes on every reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

REASON_UNDEFINED_VARIABLE: Final = "UndefinedVariable"
REASON_LAYOUT_COMPLETED: Final = "LayoutCompleted"
REASON_UNUSED_ACCELERATORS: Final = "UnusedAccelerators"
REASON_IMAGE_OLDER: Final = "ImageOlderThanChecked"
REASON_DEPRECATED_KV_ROLE: Final = "DeprecatedKVRole"
REASON_WORKER_NODES_ON_WORKER: Final = "WorkerNodesOnWorker"

# At most this many entries are written (the rest are counted in the last one's place):
# a template with hundreds of bad references must not make a status too large to store.
MAX_WARNINGS: Final = 32
MAX_MESSAGE: Final = 1024


@dataclass(frozen=True, order=True)
class LaunchWarning:
    field: str  # the spec path the warning is about
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def to_status(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason, "message": self.message}


def to_status(found: Iterable[LaunchWarning]) -> list[dict[str, Any]]:
    """Sorted, each once, bounded."""
    unique = sorted(set(found))
    return [w.to_status() for w in unique[:MAX_WARNINGS]]


def from_status(raw: Any) -> tuple[LaunchWarning, ...]:
    """A status list as written by to_status; entries of any other shape are skipped (a
    status is anyone's to write)."""
    if not isinstance(raw, list):
        return ()
    found = []
    for item in raw[:MAX_WARNINGS]:
        if not isinstance(item, dict):
            continue
        field, reason, message = (item.get(k) for k in ("field", "reason", "message"))
        if all(isinstance(v, str) and v for v in (field, reason, message)):
            found.append(LaunchWarning(field[:512], reason[:64], message[:MAX_MESSAGE]))
    return tuple(found)


# A ModelReplica's member fields as the ModelDeployment spells them (the replica's engines
# and members are the deployment's, in the same order: compose-model-deployment's
# manifests.py).
_MEMBER_FIELD: Final = re.compile(r"^spec\.engines(\[\d+\]\.members\[\d+\])(\.[A-Za-z]+)?(.*)$")
MEMBER_FIELD_RENAMES: Final = {".workerNodes": ".worker.nodes", ".devices": ".nodeSelector.devices"}


def deployment_field(replica_field: str) -> str:
    """A ModelReplica's field path as the ModelDeployment's spec spells it."""
    match = _MEMBER_FIELD.match(replica_field)
    if match is None:
        return replica_field.replace("spec.engines", "spec.template.spec.engines", 1)
    member, name, rest = match.groups()
    name = MEMBER_FIELD_RENAMES.get(name or "", name or "")
    return f"spec.template.spec.engines{member}{name}{rest}"


def aggregate(
    by_cluster: dict[str, tuple[LaunchWarning, ...]], own: Iterable[LaunchWarning] = ()
) -> list[dict[str, Any]]:
    """The deployment's list: its own warnings (no clusters), then each replica warning
    once, in the deployment's field terms, with the clusters that reported it."""
    clusters: dict[LaunchWarning, set[str]] = {w: set() for w in own}
    for cluster, found in by_cluster.items():
        for w in found:
            translated = LaunchWarning(deployment_field(w.field), w.reason, w.message)
            clusters.setdefault(translated, set()).add(cluster)
    out = []
    for w in sorted(clusters)[:MAX_WARNINGS]:
        entry: dict[str, Any] = w.to_status()
        if clusters[w]:
            entry["clusters"] = sorted(clusters[w])
        out.append(entry)
    return out
