"""Whether the clusters' capacity ledgers show what this deployment just placed.

Placement under contention settles in rounds: deployments place on the room their
clusters' ledgers show, compose-serving-stack writes each cluster's ledger from the
ModelReplicas it then finds, and a holder that no longer fits beside older ones yields
(docs/placement.md, "Concurrency"). Core reconciles an XR when it or what it composes
changes, not when a resource its function requires changes (v2.3 and v2.4 watch
composed resources only), so without more each side would see the other's step only
when its own TTL ends: a minute a hop.

So a deployment whose new placement its cluster's ledger does not list yet asks to be
called back within CALL_BACK_SECONDS, and compose-serving-stack does the same after it
changed a ledger (its LEDGER_CALL_BACK_SECONDS): each round then takes seconds. It is
bounded: only a ModelReplica not observed yet or created within CONFIRM_WINDOW_SECONDS
counts (a cluster that never writes its ledger costs a few minutes of quick calls, not
quick calls for ever), and once the ledgers agree every call is back at the usual TTL.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from functions.compose_model_deployment.ledger_view import LedgerView
from functions.compose_model_deployment.model import Holding

CALL_BACK_SECONDS: Final = 5.0
CONFIRM_WINDOW_SECONDS: Final = 300.0


def ledgered(views: Iterable[LedgerView], namespace: str, deployment: str) -> dict:
    """(cluster, pool) -> the replicas the cluster's ledger lists for this deployment."""
    out: dict[tuple[str, str], int] = {}
    for view in views:
        for pool, held in view.holders.items():
            for h in held:
                if h.namespace == namespace and h.deployment == deployment:
                    key = (view.cluster.name, pool)
                    out[key] = out.get(key, 0) + h.replicas
    return out


def _recent(created: str, now: datetime) -> bool:
    try:
        stamp = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return False  # no readable time: not counted as new
    return now - stamp <= timedelta(seconds=CONFIRM_WINDOW_SECONDS)


def unconfirmed(
    targets: Iterable[tuple[str, str, int]],
    listed: dict[tuple[str, str], int],
    own: Iterable[Holding],
    now: datetime,
) -> list[tuple[str, str]]:
    """(cluster, pool) of each target holding replicas that its cluster's ledger does not
    list at that count, where the ModelReplica is new: not observed yet, or created
    within CONFIRM_WINDOW_SECONDS of `now`."""
    created = {(h.cluster, h.pool): h.order[0] for h in own}
    out = []
    for cluster, pool, replicas in targets:
        if replicas <= 0 or listed.get((cluster, pool), 0) == replicas:
            continue
        stamp = created.get((cluster, pool))
        if stamp is None or _recent(stamp, now):
            out.append((cluster, pool))
    return out
