"""A model's LoRA adapters as `modelplane explain` prints them: each adapter's served
name, whether it is admitted, and per cluster its base runs on whether its files are
staged and on how many of the base's replicas there it is loaded, with the engine's own
error (the ModelAdapter's status, written by compose-model-deployment from what each
member's agent reports). Each pod's own `modelplane.ai/adapters-loaded` condition is on
the member; the lines say where to look.

Pure: the ModelAdapters as the API server returned them in, lines out; every string is
escaped by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from functions.common import adapters as contract


def of_base(adapters: Iterable[Mapping[str, Any]], base: str) -> list[Mapping[str, Any]]:
    """The ModelAdapters naming `base`, by name."""
    found = [
        a
        for a in adapters
        if isinstance(a.get("spec"), dict)
        and ((a["spec"].get("deploymentRef") or {}).get("name") == base)
    ]
    return sorted(found, key=lambda a: str((a.get("metadata") or {}).get("name", "")))


def adapter_lines(adapters: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per adapter, then one per cluster that is not staged yet."""
    adapters = list(adapters)
    if not adapters:
        return []
    lines = [f"  adapters ({len(adapters)}):"]
    for adapter in adapters:
        meta = adapter.get("metadata") or {}
        spec = adapter.get("spec") or {}
        status = adapter.get("status") or {}
        served = status.get("servedName") or spec.get("servedName") or meta.get("name", "")
        ready = next(
            (c for c in status.get("conditions") or [] if c.get("type") == contract.ADAPTER_READY),
            {},
        )
        staged, selected = status.get("stagedClusters", 0), status.get("selectedClusters", 0)
        line = (
            f"    {served} (ModelAdapter {meta.get('name', '')}, rank {spec.get('rank', '?')}): "
            f"staged on {staged} of {selected} clusters"
        )
        if ready.get("status") != "True" and ready.get("message"):
            line += f" — {ready.get('reason', '')}: {ready['message']}"
        lines.append(line)
        for cluster in status.get("clusters") or []:
            if "replicas" in cluster:
                loaded = (
                    f"      {cluster.get('cluster', '')}: loaded on "
                    f"{cluster.get('loadedReplicas', 0)} of {cluster['replicas']} replicas"
                )
                if cluster.get("loadError"):
                    loaded += f" — {cluster['loadError']}"
                lines.append(loaded)
    lines.append(
        "    each engine pod: its modelplane.ai/adapters-loaded condition on the member "
        "(`kubectl describe pod`)"
    )
    return lines
