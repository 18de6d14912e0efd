"""The hub Lease's mapping to and from the election's records.

The fencing token lives on the Lease itself, as the `modelplane.ai/fencing-token`
annotation, so the holder's identity and its term change in one compare-and-swap update
and a scaler reading its member's Lease sees both or neither.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from functions.common.contracts import ANNOTATION_FENCING_TOKEN
from functions.runtime.election.core import LeaseRecord

LEASE_API_VERSION = "coordination.k8s.io/v1"


def to_epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def micro_time(epoch: float | None) -> str | None:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_record(lease: client.V1Lease) -> LeaseRecord:
    spec = lease.spec or client.V1LeaseSpec()
    annotations = (lease.metadata.annotations or {}) if lease.metadata else {}
    return LeaseRecord(
        holder=spec.holder_identity or "",
        token=annotations.get(ANNOTATION_FENCING_TOKEN, "") if spec.holder_identity else "",
        duration=float(spec.lease_duration_seconds or 0),
        renewed_at=to_epoch(spec.renew_time),
        acquired_at=to_epoch(spec.acquire_time),
        transitions=spec.lease_transitions or 0,
        version=lease.metadata.resource_version or "",
    )


def lease_body(
    record: LeaseRecord, name: str, namespace: str, expected_version: str | None
) -> dict[str, Any]:
    """The whole Lease to create (no version) or replace (compare-and-swap on version)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if expected_version is not None:
        metadata["resourceVersion"] = expected_version
    if record.holder and record.token:
        metadata["annotations"] = {ANNOTATION_FENCING_TOKEN: record.token}
    spec: dict[str, Any] = {
        # Whole seconds on the wire: rounding up only makes others wait longer.
        "leaseDurationSeconds": max(1, math.ceil(record.duration)),
        "leaseTransitions": record.transitions,
    }
    if record.holder:
        spec["holderIdentity"] = record.holder
        spec["acquireTime"] = micro_time(record.acquired_at)
    spec["renewTime"] = micro_time(record.renewed_at)
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {k: v for k, v in spec.items() if v is not None},
    }
