"""The capacity ledger: what the ModelReplicas on one InferenceCluster hold, pool by pool,
in the order placement's "older holds first" rule takes them.

compose-serving-stack writes it into the InferenceCluster's `status.ledger` from the
ModelReplicas labelled for that cluster (it asks for them by label, not for all of
them); compose-model-deployment reads the clusters' ledgers and its own ModelReplicas
instead of every ModelReplica in the fleet (docs/placement.md, "The capacity ledger").

    status:
      ledger:
        replicas: 3                 # ModelReplicas summarized (holding or not)
        pools:
          - name: h100
            replicas: 7             # replicas held in the pool
            holders:                # one per ModelReplica holding something, oldest first
              - "2026-11-01T00:00:00Z team-a llama-us-east-1 llama 4 /2"

A holder is one line, `<creationTimestamp> <namespace> <name> <deployment> <replicas>
<gangs>/<pods>`: the footprint of one replica as whole nodes per multi-node engine and
devices per single-node pod (comma-separated, largest first), `-` for a ModelReplica
without a creationTimestamp. A CPU replica (members asking for `cpu` and `memory`, not
devices) adds a seventh field, each pod's request as `<millicores>x<bytes>`, largest
first, a Leader's workers included:

    2026-11-01T00:00:00Z team-a qwen-eu qwen 2 /2,1 cpu:8000x17179869184,4000x8589934592

and its `<pods>` are then those requests in slots of its own smallest request (so `/2,1`
above; placement re-counts them in each CPU deployment's slots, cpu_slots.py). A line
without the seventh field holds devices, as every line did before CPU pools.

One line rather than an object keeps a pool's entry small:
a ledger grows with the devices a cluster has (each holder holds at least one), never
with the models in the fleet. A ModelReplica at 0 replicas holds nothing and is counted
in `replicas` only.

A ModelReplica is read here the way placement reads it (compose_model_deployment's
model.read_holding, which a function may not import across; tests/unit/test_ledger.py
checks both read every replica alike). Pure: no I/O, no placement. Readers raise
LedgerError naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts
from functions.common.cpu_slots import Request, bytes_of, millicores, pod_slots
from functions.common.reader import InputError

NO_TIMESTAMP: Final = "-"
# A Kubernetes object may hold at most 1.5 MiB (etcd's request limit); the ledger lives in
# the InferenceCluster's status beside its conditions and inventory. Past this many bytes
# of ledger (as JSON) the holders are not written: the ledger says it overflowed, and
# placement refuses to read it (a ledger that lists only some holders would offer room
# the others hold). About 13,000 holders fit, each one a ModelReplica holding something.
MAX_LEDGER_BYTES: Final = 1024 * 1024
FIELDS: Final = 6
CPU_PREFIX: Final = "cpu:"


class LedgerError(InputError):
    """A status.ledger that cannot be read."""


@dataclass(frozen=True)
class Entry:
    """One ModelReplica's holding in one pool."""

    created: str  # creationTimestamp ("" if none)
    namespace: str
    name: str
    deployment: str
    pool: str
    replicas: int
    gangs: tuple[int, ...]  # whole nodes per multi-node engine, largest first
    pods: tuple[int, ...]  # devices per single-node pod, largest first
    # A CPU replica: each pod's (millicores, bytes), largest first; `pods` are then the
    # pods' slots in their own smallest request and `gangs` is empty.
    requests: tuple[Request, ...] = ()

    @property
    def order(self) -> tuple[str, str, str]:
        """Older holds first: creationTimestamp, then namespace and name."""
        return (self.created, self.namespace, self.name)


def encode(entry: Entry) -> str:
    footprint = ",".join(map(str, entry.gangs)) + "/" + ",".join(map(str, entry.pods))
    return " ".join(
        (
            entry.created or NO_TIMESTAMP,
            entry.namespace,
            entry.name,
            entry.deployment,
            str(entry.replicas),
            footprint,
            *([_encode_requests(entry.requests)] if entry.requests else []),
        )
    )


def _encode_requests(requests: tuple[Request, ...]) -> str:
    return CPU_PREFIX + ",".join(f"{m}x{b}" for m, b in requests)


def _decode_requests(text: str, path: str) -> tuple[Request, ...]:
    rule = f"{text!r}: want '{CPU_PREFIX}<millicores>x<bytes>,...', each more than 0"
    if not text.startswith(CPU_PREFIX):
        raise LedgerError(path, rule)
    requests = []
    for part in text[len(CPU_PREFIX) :].split(","):
        milli, x, size = part.partition("x")
        if not (x and milli.isdigit() and size.isdigit() and int(milli) and int(size)):
            raise LedgerError(path, rule)
        requests.append((int(milli), int(size)))
    return tuple(sorted(requests, reverse=True))


def _numbers(text: str, path: str) -> tuple[int, ...]:
    if not text:
        return ()
    values = []
    for part in text.split(","):
        if not part.isdigit():
            raise LedgerError(path, f"{text!r}: want comma-separated whole numbers")
        values.append(int(part))
    return tuple(values)


def decode(pool: str, line: Any, path: str) -> Entry:
    if not isinstance(line, str):
        raise LedgerError(path, "want a string")
    parts = line.split(" ")
    if len(parts) not in (FIELDS, FIELDS + 1) or not all(parts):
        raise LedgerError(
            path,
            f"{line!r}: want '<creationTimestamp> <namespace> <name> <deployment> "
            f"<replicas> <gangs>/<pods>', then '{CPU_PREFIX}<millicores>x<bytes>,...' "
            "for a CPU replica",
        )
    created, namespace, name, deployment, replicas, footprint = parts[:FIELDS]
    requests = _decode_requests(parts[FIELDS], path) if len(parts) > FIELDS else ()
    if not replicas.isdigit():
        raise LedgerError(path, f"{line!r}: replicas {replicas!r} is not a whole number")
    gangs, slash, pods = footprint.partition("/")
    if not slash:
        raise LedgerError(path, f"{line!r}: footprint {footprint!r} has no '/'")
    if requests and (gangs or len(_numbers(pods, path)) != len(requests)):
        raise LedgerError(
            path, f"{line!r}: a CPU replica's footprint is '/<pods>', one per request"
        )
    return Entry(
        created="" if created == NO_TIMESTAMP else created,
        namespace=namespace,
        name=name,
        deployment=deployment,
        pool=pool,
        replicas=int(replicas),
        gangs=_numbers(gangs, path),
        pods=_numbers(pods, path),
        requests=requests,
    )


def ledger_status(
    entries: Iterable[Entry], summarized: int, max_bytes: int = MAX_LEDGER_BYTES
) -> dict:
    """status.ledger for `entries` (what each ModelReplica holds; those at 0 replicas
    are left out) summarized from `summarized` ModelReplicas: pools by name, holders
    oldest first. Past `max_bytes` the pools keep their counts, no holders are written
    and `overflow` says how many there were and how large they would be."""
    by_pool: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.replicas > 0:
            by_pool.setdefault(entry.pool, []).append(entry)
    ledger: dict[str, Any] = {
        "replicas": summarized,
        "pools": [
            {
                "name": pool,
                "replicas": sum(e.replicas for e in held),
                "holders": [encode(e) for e in sorted(held, key=lambda e: e.order)],
            }
            for pool, held in sorted(by_pool.items())
        ],
    }
    size = len(json.dumps(ledger, separators=(",", ":")))
    if size <= max_bytes:
        return ledger
    holders = sum(len(p["holders"]) for p in ledger["pools"])
    for pool in ledger["pools"]:
        pool["holders"] = []
    ledger["overflow"] = {"holders": holders, "bytes": size, "maxBytes": max_bytes}
    return ledger


def overflow_message(overflow: Any) -> str:
    """Why an overflowed ledger is not read, for a status, a warning and a refusal."""
    overflow = overflow if isinstance(overflow, dict) else {}
    return (
        f"the cluster's {overflow.get('holders', '?')} holding ModelReplicas need "
        f"{overflow.get('bytes', '?')} bytes of ledger, more than the "
        f"{overflow.get('maxBytes', MAX_LEDGER_BYTES)} an InferenceCluster's status can "
        "hold; placement adds nothing here until some are removed or moved to another "
        "InferenceCluster"
    )


def read_ledger(ledger: Any) -> list[Entry]:
    """Every entry of a status.ledger, pool by pool, oldest first within a pool."""
    if not isinstance(ledger, dict):
        raise LedgerError("status.ledger", "want an object")
    if ledger.get("overflow") is not None:
        raise LedgerError("status.ledger.overflow", overflow_message(ledger["overflow"]))
    pools = ledger.get("pools") or []
    if not isinstance(pools, list):
        raise LedgerError("status.ledger.pools", "want a list")
    entries: list[Entry] = []
    for i, pool in enumerate(pools):
        where = f"status.ledger.pools[{i}]"
        if not isinstance(pool, dict) or not isinstance(pool.get("name"), str):
            raise LedgerError(f"{where}.name", "want a string")
        holders = pool.get("holders") or []
        if not isinstance(holders, list):
            raise LedgerError(f"{where}.holders", "want a list")
        entries += [
            decode(pool["name"], line, f"{where}.holders[{j}]") for j, line in enumerate(holders)
        ]
    return entries


INT_LIMIT: Final = 2**31 - 1


def _count(value: Any, path: str) -> int:
    """A non-negative count (0 when unset), as placement reads one."""
    if value is None:
        return 0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())
    ):
        raise LedgerError(path, f"must be an integer, got {str(value)[:40]!r}")
    if not -INT_LIMIT <= value <= INT_LIMIT:
        raise LedgerError(path, f"{value:.0f} is outside ±{INT_LIMIT}")
    return max(0, int(value))


def read_entry(mr: Any) -> tuple[str, Entry]:
    """A ModelReplica as (the cluster it names, what it holds there); LedgerError naming
    the replica and the field for a shape it cannot be read from."""
    meta = mr.get("metadata") if isinstance(mr, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    who = f"ModelReplica {meta.get('namespace', '')}/{meta.get('name', '<unnamed>')}"
    try:
        return _read_entry(mr)
    except LedgerError as err:
        raise LedgerError(f"{who}: {err.path}", err.rule) from None
    except (AttributeError, TypeError) as err:
        raise LedgerError(who, f"cannot be read: {err}") from None


def footprint(spec: dict) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Request, ...]]:
    """What a ModelReplica's spec holds on its pool, as placement counts it: (gangs, the
    devices of each lone pod, the (millicores, bytes) of each CPU pod), each largest
    first. A device replica has gangs and pods; a CPU one has requests only. The ledger
    and compose-model-deployment's read of a ModelReplica both read it here."""
    gangs: list[int] = []
    pods: list[int] = []
    requests = _requests(spec)
    for engine in [] if requests else spec.get("engines") or []:
        members = engine.get("members") or []
        leader = next((m for m in members if m.get("role") == contracts.ROLE_LEADER), None)
        if leader is not None:
            gangs.append(1 + _count(leader.get("workerNodes"), "spec.engines[].workerNodes"))
            continue
        for m in members:
            pods.append(
                sum(
                    _count(d.get("count"), "spec.engines[].devices[].count")
                    for d in m.get("devices") or []
                    if not d.get("deviceClassName")
                )
            )
    return tuple(sorted(gangs, reverse=True)), tuple(sorted(pods, reverse=True)), requests


def _read_entry(mr: dict) -> tuple[str, Entry]:
    meta = mr.get("metadata") or {}
    spec = mr.get("spec") or {}
    gangs, pods, requests = footprint(spec)
    entry = Entry(
        created=str(meta.get("creationTimestamp", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        deployment=str(spec.get("deployment", "")),
        pool=str((spec.get("nodePool") or {}).get("name", "")),
        replicas=_count(spec.get("replicas"), "spec.replicas"),
        gangs=gangs,
        pods=pod_slots(requests) if requests else pods,
        requests=requests,
    )
    return str((spec.get("cluster") or {}).get("name", "")), entry


def _quantity(value: Any, path: str, convert: Any) -> int:
    """A positive resource quantity, converted (as placement reads one)."""
    text = str(value)
    try:
        amount = convert(text)
    except ValueError:
        raise LedgerError(path, f"{text[:40]!r} is not a resource quantity") from None
    if amount <= 0:
        raise LedgerError(path, f"must be more than 0, got {text[:40]!r}")
    return amount


def _requests(spec: dict) -> tuple[Request, ...]:
    """A CPU ModelReplica's pods as (millicores, bytes), largest first; () for one whose
    members ask for devices. A Worker member runs its Leader's workerNodes pods."""
    requests: list[Request] = []
    for engine in spec.get("engines") or []:
        members = engine.get("members") or []
        leader = next((m for m in members if m.get("role") == contracts.ROLE_LEADER), None)
        workers = _count(leader.get("workerNodes"), "spec.engines[].workerNodes") if leader else 0
        for m in members:
            if "cpu" not in m:
                return ()
            path = "spec.engines[].members[]"
            request = (
                _quantity(m.get("cpu"), f"{path}.cpu", millicores),
                _quantity(m.get("memory"), f"{path}.memory", bytes_of),
            )
            requests += [request] * (workers if m.get("role") == contracts.ROLE_WORKER else 1)
    return tuple(sorted(requests, reverse=True))
