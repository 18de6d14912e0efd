"""InferenceClusters with the capacity ledger compose-serving-stack would write for a
set of ModelReplicas (functions/compose_serving_stack/ledger.py, the function's own
code): what tests and benches hand compose-model-deployment instead of the replicas."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from functions.compose_serving_stack.ledger import cluster_ledger


def with_ledgers(clusters: Iterable[dict], replicas: Iterable[dict]) -> list[dict]:
    """Copies of `clusters`, each with status.ledger summarizing the `replicas` that name
    it (spec.cluster.name), as its compose-serving-stack reconcile would write it."""
    # As compose-serving-stack asks for them: by the cluster they name.
    by_cluster: dict[object, list[dict]] = {}
    for body in replicas:
        spec = body.get("spec") if isinstance(body, dict) else None
        ref = spec.get("cluster") if isinstance(spec, dict) else None
        target = ref.get("name") if isinstance(ref, dict) else None
        by_cluster.setdefault(target if isinstance(target, str) else None, []).append(body)
    out = []
    for given in clusters:
        cluster = copy.deepcopy(given)
        name = (cluster.get("metadata") or {}).get("name", "")
        # Unreadable ones too: the function warns about them and leaves them out.
        ledger, _warnings = cluster_ledger(
            name, by_cluster.get(name, []) + by_cluster.get(None, [])
        )
        cluster.setdefault("status", {})["ledger"] = ledger
        out.append(cluster)
    return out
