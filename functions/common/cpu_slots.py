"""CPU and memory counted in slots: the arithmetic placement counts CPU-only pools with
(compose-model-deployment's cpu.py) and `modelplane suggest` sizes a CPU model by.

A slot is a deployment's smallest request in each dimension; a node holds as many as fit
in both its CPU and its memory, and a pod takes enough to cover both. Integers only
(millicores and bytes).
"""

from __future__ import annotations

import math

from functions.common.quantity import format_bytes, format_millicores, parse_quantity

# The kubelet's default maxPods: more slots than this on one node are never counted (a
# node would refuse the pods anyway), which also bounds PoolRoom's per-node arrays.
MAX_PODS_PER_NODE = 110
# A request: (millicores, bytes).
Request = tuple[int, int]


def millicores(text: str) -> int:
    """A CPU quantity in millicores, rounded up; ValueError if it is not a quantity."""
    return math.ceil(parse_quantity(text) * 1000)


def bytes_of(text: str) -> int:
    """A memory quantity in bytes, rounded up; ValueError if it is not a quantity."""
    return math.ceil(parse_quantity(text))


def unit_of(requests: tuple[Request, ...]) -> Request:
    """The slot: the least CPU and the least memory any pod asks for."""
    return (min(r[0] for r in requests), min(r[1] for r in requests))


def slots(request: Request, unit: Request) -> int:
    """Slots a pod takes: enough to cover both its CPU and its memory."""
    return max(1, -(-request[0] // unit[0]), -(-request[1] // unit[1]))


def slots_per_node(cpu_milli: int, memory_bytes: int, unit: Request) -> int:
    return min(cpu_milli // unit[0], memory_bytes // unit[1], MAX_PODS_PER_NODE)


def pod_slots(requests: tuple[Request, ...], unit: Request | None = None) -> tuple[int, ...]:
    """Each pod's slots (in `unit`, else in the pods' own), largest first."""
    if not requests:
        return ()
    unit = unit or unit_of(requests)
    return tuple(sorted((slots(r, unit) for r in requests), reverse=True))


def describe(request: Request) -> str:
    return f"{format_millicores(request[0])} CPU and {format_bytes(request[1])} memory"
