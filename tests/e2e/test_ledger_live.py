"""The capacity ledger under contention, live (#33): 20 ModelDeployments applied at once
onto room for 10 replicas, through real Crossplane core and our functions.

Every deployment's first reconcile sees the same free room (the cluster's ledger does
not show the others yet), so the pool is over-committed at first. Once
compose-serving-stack writes the ledger, the younger holders yield (older holds first)
and the deployments settle: exactly 10 placed, the other 10 unplaceable with a reason,
the pool's ledger within its room, and no replica moved back and forth — every
ModelReplica's spec.replicas is watched from the first apply to the end, and after the
fleet settles it is watched for several more poll intervals for any change.

The cluster is a copy of the us-east-1 example on the box's spare member e2e-a, in a
tier of its own (no other deployment selects it), with one H100 pool of 5 nodes x 2
GPUs; each deployment asks for one replica of one GPU.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, watch

from fleetbox.wait import wait_for
from functions.common import contracts
from tests.e2e import claims
from tests.e2e.conftest import measured

NAMESPACE = "ml-team"
TIER = "fleet.example.com/tier"
LEDGER_TIER = "e2e-ledger"
MEMBER = "e2e-a"
CLUSTER = "e2e-ledger"
DEPLOYMENTS = [f"e2e-ledger-{i:02d}" for i in range(20)]
ROOM = 10  # 5 nodes x 2 GPUs, one GPU per replica
# Watched after settling: longer than the functions' TTL (60 s, what brings every XR
# back once nothing changes), so every XR has been reconciled again.
QUIET_SECONDS = 75


def _cluster() -> dict:
    document = claims.renamed(claims.example("inferenceclusters/us-east-h100.yaml"), CLUSTER)
    document["metadata"]["labels"] = {TIER: LEDGER_TIER}
    document["spec"]["providerConfigRef"] = {"name": MEMBER}
    h100 = next(p for p in document["spec"]["nodePools"] if p["name"] == "h100")
    h100.update(nodes=5, maxNodes=5)
    h100["devices"]["perNode"] = 2
    for extra in h100.get("additionalDevices", []):
        extra["perNode"] = 2
    h100["fabrics"] = [{"name": "ib-a", "nodes": 5}]
    document["spec"]["nodePools"] = [h100]
    return document


def _deployment(name: str) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    document["spec"]["replicas"] = 1
    document["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {TIER: LEDGER_TIER}}
    document["spec"].pop("autoscaling", None)
    return document


class ReplicaWatch:
    """Every change of each of our ModelReplicas' spec.replicas, from a watch."""

    def __init__(self, box) -> None:
        self.api = client.CustomObjectsApi(box.api())
        self.history: dict[str, list[int]] = {}  # name -> spec.replicas, each change
        self.changed_at = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.api.list_namespaced_custom_object,
                    contracts.API_GROUP,
                    contracts.API_VERSION,
                    NAMESPACE,
                    "modelreplicas",
                    label_selector=f"{contracts.LABEL_CLUSTER}={CLUSTER}",
                    timeout_seconds=30,
                ):
                    self._record(event["type"], event["object"])
                    if self.stop.is_set():
                        stream.stop()
                        break
            except Exception:
                time.sleep(0.5)

    def _record(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        replicas = 0 if kind == "DELETED" else int(obj.get("spec", {}).get("replicas", 0))
        with self.lock:
            seen = self.history.setdefault(name, [])
            if not seen or seen[-1] != replicas:
                seen.append(replicas)
                self.changed_at = time.monotonic()

    def snapshot(self) -> tuple[dict[str, list[int]], float]:
        with self.lock:
            return {k: list(v) for k, v in self.history.items()}, self.changed_at

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=40)


def _back_and_forth(history: dict[str, list[int]]) -> dict[str, list[int]]:
    """ModelReplicas whose replicas fell and then rose again."""
    out = {}
    for name, counts in history.items():
        fell = False
        for before, after in itertools.pairwise(counts):
            fell = fell or after < before
            if fell and after > before:
                out[name] = counts
    return out


def _usage(box) -> dict[str, tuple[float, float, float]]:
    """CPU seconds, RSS and peak RSS (MiB) of Crossplane core and each of our functions."""
    out = {}
    for name in ("crossplane-core", *contracts.FUNCTIONS):
        process = box.processes.get(name)
        if process is None or process.popen is None:
            continue
        pid = process.popen.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        rss, peak = (int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))
        out[name] = (cpu, rss, peak)
    return out


def _status(box, name: str) -> dict:
    return (claims.get(box, "modeldeployment", name, NAMESPACE) or {}).get("status") or {}


def _ledger_h100(box) -> int:
    ledger = (claims.get(box, "inferencecluster", CLUSTER) or {}).get("status", {}).get("ledger")
    assert ledger is not None, "no status.ledger on the cluster yet"
    return sum(p.get("replicas", 0) for p in ledger.get("pools", []) if p["name"] == "h100")


@pytest.fixture
def ledger_cluster(box):
    claims.apply_document(box, _cluster())
    # The cluster's first ledger (nothing held yet) before anything is placed on it.
    wait_for(f"{CLUSTER}'s ledger", lambda: _ledger_h100(box) == 0, claims.CONVERGE_SECONDS)
    yield CLUSTER
    claims.delete(box, "inferencecluster", CLUSTER)


def test_twenty_deployments_at_once_onto_room_for_ten_settle_without_flapping(box, ledger_cluster):
    watcher = ReplicaWatch(box)
    usage_before = _usage(box)
    began = time.monotonic()
    try:
        for name in DEPLOYMENTS:  # as fast as kubectl applies: all within seconds
            claims.apply_document(box, _deployment(name))

        def settled():
            placed = {
                n: sum(p["replicas"] for p in _status(box, n).get("placements", []) or [])
                for n in DEPLOYMENTS
            }
            assert sum(placed.values()) == ROOM, f"placed {placed}"
            unplaceable = {
                n: (_status(box, n).get("unplaceable") or {}).get("reason", "")
                for n, count in placed.items()
                if not count
            }
            assert len(unplaceable) == len(DEPLOYMENTS) - ROOM
            assert all(unplaceable.values()), f"unplaceable without a reason: {unplaceable}"
            assert _ledger_h100(box) == ROOM, "the ledger does not show the settled pool yet"
            return placed, unplaceable

        placed, unplaceable = wait_for(
            "20 deployments settled on room for 10", settled, 4 * claims.CONVERGE_SECONDS
        )
        measured("ledger: 20 deployments at once settled on room for 10", time.monotonic() - began)
        usage_after = _usage(box)
        for process, (cpu, rss, peak) in usage_after.items():
            used = cpu - usage_before.get(process, (0.0, 0.0, 0.0))[0]
            print(
                f"\n{process}: {used:.1f} s CPU until settled, RSS {rss:.0f} MiB (peak {peak:.0f})"
            )

        # Watched for longer than a TTL: nothing changes any more.
        quiet_from = time.monotonic()
        history_at_settle, _ = watcher.snapshot()
        deadline = quiet_from + QUIET_SECONDS
        while time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))  # the watch window
        history, _last_change = watcher.snapshot()
    finally:
        watcher.close()
        for name in DEPLOYMENTS:
            claims.delete(box, "modeldeployment", name, NAMESPACE)

    assert history, "the watch saw no ModelReplica"
    assert history == history_at_settle, f"changed after the fleet settled: {history}"
    assert not _back_and_forth(history), _back_and_forth(history)
    # No pool over-committed after the ledger settled: the ledger and the placements
    # both say 10, the pool's room.
    assert sum(placed.values()) == ROOM
    reasons = set(unplaceable.values())
    assert all("free" in r or "fits" in r for r in reasons), reasons
    changes = sum(len(v) - 1 for v in history.values())
    print(
        f"\nledger e2e: {len(history)} ModelReplicas watched, {changes} replica-count "
        f"changes in all; settled in {time.monotonic() - began:.0f}s; reasons: {reasons}"
    )
