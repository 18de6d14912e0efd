"""The model health record: start failures counted where the pods are seen.

The member's agent (runtime) writes one record per ModelReplica into the member cluster;
compose-model-replica reads it back through an Observe-only provider-kubernetes Object
and copies it to the ModelReplica's status.health; compose-model-deployment sums it per
definition to decide parking. A ConfigMap, because it is plain data every component can
read without a CRD, and the agent needs no more than `configmaps` RBAC in the namespaces
it serves.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common.naming import dns_label
from functions.common.redact import redact_text

HEALTH_RECORD_KIND: Final = "ConfigMap"
HEALTH_RECORD_API_VERSION: Final = "v1"
# Labels on the record itself, so the agent can list the records it owns.
HEALTH_RECORD_LABEL: Final = "modelplane.ai/health-record"

# Keys of the ConfigMap's data (all values are strings, as ConfigMap data must be).
KEY_DEFINITION_HASH: Final = "definitionHash"
KEY_CONSECUTIVE_START_FAILURES: Final = "consecutiveStartFailures"
KEY_LAST_ERROR: Final = "lastError"
KEY_OBSERVED_AT: Final = "observedAt"


def health_record_name(model_replica: str) -> str:
    """The record's name in the ModelReplica's namespace on the member cluster."""
    return dns_label(model_replica, "health")


@dataclass(frozen=True)
class HealthRecord:
    definition_hash: str
    consecutive_start_failures: int
    last_error: str
    observed_at: str  # RFC 3339, written by the agent from its own clock

    def to_data(self) -> dict[str, str]:
        return {
            KEY_DEFINITION_HASH: self.definition_hash,
            KEY_CONSECUTIVE_START_FAILURES: str(self.consecutive_start_failures),
            KEY_LAST_ERROR: self.last_error,
            KEY_OBSERVED_AT: self.observed_at,
        }

    def to_status(self) -> dict[str, Any]:
        """The record as a ModelReplica's status.health carries it (the count a number)."""
        return {**self.to_data(), KEY_CONSECUTIVE_START_FAILURES: self.consecutive_start_failures}

    @classmethod
    def from_status(
        cls, status: Mapping[str, Any], count: Callable[[Any, str], int]
    ) -> "HealthRecord":
        """Read a ModelReplica's status.health; `count` reads the failure count the way
        the caller treats a malformed number (refuse with the field's path, or read 0)."""
        return cls(
            definition_hash=str(status.get(KEY_DEFINITION_HASH, "")),
            consecutive_start_failures=count(
                status.get(KEY_CONSECUTIVE_START_FAILURES),
                f"status.health.{KEY_CONSECUTIVE_START_FAILURES}",
            ),
            last_error=redact_text(str(status.get(KEY_LAST_ERROR, ""))),
            observed_at=str(status.get(KEY_OBSERVED_AT, "")),
        )

    @classmethod
    def from_data(cls, data: dict[str, str]) -> "HealthRecord":
        """Read a record; a missing or malformed count reads as 0 failures, never a crash."""
        try:
            failures = max(0, int(data.get(KEY_CONSECUTIVE_START_FAILURES, "0")))
        except ValueError:
            failures = 0
        return cls(
            definition_hash=data.get(KEY_DEFINITION_HASH, ""),
            consecutive_start_failures=failures,
            last_error=redact_text(str(data.get(KEY_LAST_ERROR, ""))),
            observed_at=data.get(KEY_OBSERVED_AT, ""),
        )


def count_failures(records: Iterable[HealthRecord], definition: str) -> tuple[int, str]:
    """Failures of one definition summed over the model's replicas, and the latest error."""
    total = 0
    latest: tuple[str, str] = ("", "")
    for record in records:
        if record.definition_hash != definition:
            continue
        total += record.consecutive_start_failures
        if record.consecutive_start_failures > 0 and record.last_error:
            latest = max(latest, (record.observed_at, record.last_error))
    return total, latest[1]
