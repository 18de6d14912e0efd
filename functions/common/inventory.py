"""The fleet inventory record: what a member's agent reports about its own capacity.

The agent writes one record per member (a ConfigMap in the runtime's namespace, one JSON
document under one key); compose-serving-stack reads it back through an Observe-only
provider-kubernetes Object and copies the document to the InferenceCluster's
status.inventory, the same observe-only path the model health record takes. `modelplane
status` then reads it from the control plane, never from a member.

A ConfigMap, for the reason the health record is one: plain data any component reads
without a CRD, and the agent already holds `configmaps` RBAC. The document's fields are
the InferenceCluster XRD's status.inventory schema (apis/inferenceclusters).
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from functions.common.contracts import SYSTEM_NAMESPACE

INVENTORY_RECORD_KIND: Final = "ConfigMap"
INVENTORY_RECORD_API_VERSION: Final = "v1"
INVENTORY_RECORD_NAME: Final = "modelplane-inventory"
INVENTORY_RECORD_NAMESPACE: Final = SYSTEM_NAMESPACE
# The one data key: the document, as JSON (ConfigMap data values are strings).
KEY_INVENTORY: Final = "inventory"

# The node label naming a node's interconnect domain (NVLink or InfiniBand): the fabric a
# multi-node replica may not span. A GPU node without it counts under FABRIC_UNLABELLED.
LABEL_FABRIC: Final = "modelplane.ai/fabric"
FABRIC_UNLABELLED: Final = "unlabelled"


@dataclass(frozen=True)
class FabricLabel:
    """Which node label names a pool's fabric: the InferenceCluster pool's
    `fabricNodeLabel` (LABEL_FABRIC when unset), for the nodes its `nodeSelector` matches
    (every node when it has none). compose-serving-stack passes one per pool to the
    agent as `--fabric-label` (`format_fabric_label`); the agent's inventory reads each
    node's fabric through them (`node_fabric`)."""

    label: str = LABEL_FABRIC
    node_selector: tuple[tuple[str, str], ...] = field(default=())


def fabric_labels_of_pools(pools: Sequence[Mapping[str, Any]]) -> tuple[FabricLabel, ...]:
    """An InferenceCluster's spec.nodePools, as the agent's fabric labels (pool order)."""
    return tuple(
        FabricLabel(
            str(pool.get("fabricNodeLabel") or LABEL_FABRIC),
            tuple(sorted((str(k), str(v)) for k, v in (pool.get("nodeSelector") or {}).items())),
        )
        for pool in pools
    )


def format_fabric_label(fabric: FabricLabel) -> str:
    """`LABEL` or `LABEL:key=value,key=value` (label keys and values hold no `:`, `,`, `=`
    beyond the key's own prefix slash, so the form is unambiguous)."""
    if not fabric.node_selector:
        return fabric.label
    return fabric.label + ":" + ",".join(f"{k}={v}" for k, v in fabric.node_selector)


def parse_fabric_label(text: str) -> FabricLabel:
    """The inverse of `format_fabric_label`; ValueError naming what is wrong."""
    label, _, selector = text.partition(":")
    if not label:
        raise ValueError(f"{text!r}: expected LABEL or LABEL:key=value,...")
    pairs = []
    for part in filter(None, selector.split(",")):
        key, eq, value = part.partition("=")
        if not key or not eq:
            raise ValueError(f"{text!r}: node selector part {part!r} is not key=value")
        pairs.append((key, value))
    return FabricLabel(label, tuple(sorted(pairs)))


def node_fabric(node_labels: Mapping[str, str], fabrics: Sequence[FabricLabel]) -> str:
    """A node's fabric: the label of the first pool whose nodeSelector matches it, else
    the first selector-less pool label the node carries, else LABEL_FABRIC's value, else
    FABRIC_UNLABELLED."""
    for fabric in fabrics:
        if fabric.node_selector and all(node_labels.get(k) == v for k, v in fabric.node_selector):
            return node_labels.get(fabric.label) or FABRIC_UNLABELLED
    for fabric in fabrics:
        if not fabric.node_selector and node_labels.get(fabric.label):
            return node_labels[fabric.label]
    return node_labels.get(LABEL_FABRIC) or FABRIC_UNLABELLED


# The DRA driver whose devices are counted as GPUs (NVIDIA's k8s-dra-driver-gpu).
GPU_DRIVER: Final = "gpu.nvidia.com"

# A serving replica nothing has asked anything of for this long is named as idle: minutes,
# not seconds, because a replica flapping in and out of the list is noise, and unloading
# one throws away the KV cache prefix routing spent its effort filling.
IDLE_AFTER_SECONDS: Final = 600

# The device attribute that names a card's class (as NVIDIA's DRA driver publishes it,
# bare or qualified); a device without it is counted under its driver's name.
DEVICE_CLASS_ATTRIBUTE: Final = "productName"

# Whether the request counters idle replicas are read from were available this time.
COUNTERS_AVAILABLE: Final = "Available"
COUNTERS_UNAVAILABLE: Final = "Unavailable"


def device_class(attributes: Mapping[str, Any] | None, driver: str) -> str:
    """A device's class from its DRA attributes (a ResourceSlice device's, or a node
    pool's described the same way): its productName, else the driver's name."""
    for name, attribute in sorted((attributes or {}).items()):
        if name.rsplit("/", 1)[-1] == DEVICE_CLASS_ATTRIBUTE and (attribute or {}).get("string"):
            return str(attribute["string"])
    return driver


def inventory_from_record(data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The document from a record's data; None when it is absent or not a JSON object
    (a record being written by a newer agent is not a reason to fail a composition)."""
    text = (data or {}).get(KEY_INVENTORY)
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


# --- CPU-only pools ---------------------------------------------------------------------


@dataclass(frozen=True)
class CpuPool:
    """An InferenceCluster's CPU-only pool (`cpu` and `memory`, no `devices`), as the
    agent counts it: the nodes its `nodeSelector` matches (every node when it has none).
    compose-serving-stack passes one per CPU pool as `--cpu-pool` (`format_cpu_pool`);
    the inventory then reports each pool's allocatable CPU and memory and what pods on
    its nodes request (status.inventory.cpuPools), as it reports GPUs for device pools."""

    name: str
    node_selector: tuple[tuple[str, str], ...] = field(default=())


def cpu_pools_of_pools(pools: Sequence[Mapping[str, Any]]) -> tuple[CpuPool, ...]:
    """The CPU-only pools of an InferenceCluster's spec.nodePools (pool order)."""
    return tuple(
        CpuPool(
            str(pool.get("name", "")),
            tuple(sorted((str(k), str(v)) for k, v in (pool.get("nodeSelector") or {}).items())),
        )
        for pool in pools
        if not pool.get("devices") and pool.get("cpu") is not None
    )


def format_cpu_pool(pool: CpuPool) -> str:
    """`NAME` or `NAME:key=value,key=value` (as a fabric label is written)."""
    return format_fabric_label(FabricLabel(pool.name, pool.node_selector))


def parse_cpu_pool(text: str) -> CpuPool:
    """The inverse of `format_cpu_pool`; ValueError naming what is wrong."""
    parsed = parse_fabric_label(text)
    return CpuPool(parsed.label, parsed.node_selector)
