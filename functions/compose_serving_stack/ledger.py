"""The cluster's capacity ledger (functions/common/ledger.py): what the ModelReplicas
that target this InferenceCluster hold, per pool, oldest first.

compose-serving-stack already asks for this cluster's ModelReplicas by label
(`modelplane.ai/cluster`). A ModelReplica whose spec names another cluster is not this
cluster's; one that cannot be read is left out with a warning (placement would not
count it either), and so is one whose names cannot be written on one ledger line. A
ledger too large for the object (common/ledger.py MAX_LEDGER_BYTES) is written without
its holders, with `overflow` and a warning; placement then refuses to read it.

A ledger this reconcile changed asks for a call back within LEDGER_CALL_BACK_SECONDS:
the deployments on the cluster answer a changed ledger within seconds (yielding, or
taking room it freed; compose_model_deployment/confirm.py), and core would not
reconcile the cluster for their answer until its TTL ends (it watches what an XR
composes, not the ModelReplicas its function requires). Once a reconcile leaves the
ledger as it was, the cluster is back at the usual TTL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from functions.common.ledger import (
    Entry,
    LedgerError,
    ledger_status,
    overflow_message,
    read_entry,
)

LEDGER_CALL_BACK_SECONDS: Final = 5.0


def cluster_ledger(cluster: str, replicas: Iterable[dict]) -> tuple[dict, list[str]]:
    """status.ledger of `cluster` from its ModelReplicas, and a warning for each one
    left out."""
    entries: list[Entry] = []
    warnings: list[str] = []
    for body in replicas:
        try:
            target, entry = read_entry(body)
        except LedgerError as err:
            warnings.append(f"not counting what it holds in status.ledger: {err}")
            continue
        if target != cluster:
            continue
        names = (entry.namespace, entry.name, entry.deployment, entry.pool)
        if not all(names) or any(len(n.split()) != 1 or n != n.strip() for n in names):
            warnings.append(
                f"not counting ModelReplica {entry.namespace}/{entry.name} in status.ledger: "
                "its namespace, name, spec.deployment and spec.nodePool.name must each be "
                "one word"
            )
            continue
        entries.append(entry)
    ledger = ledger_status(entries, len(entries))
    if "overflow" in ledger:
        warnings.append(f"status.ledger lists no holders: {overflow_message(ledger['overflow'])}")
    return ledger, warnings


def _canonical(value: Any) -> Any:
    """Integral floats as ints, all the way down: an observed status comes back from its
    Struct with every number a float."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def ledger_changed(observed_status: Any, ledger: dict) -> bool:
    """Whether `ledger` differs from the observed XR's status.ledger."""
    before = observed_status.get("ledger") if isinstance(observed_status, dict) else None
    return _canonical(before) != _canonical(ledger)
