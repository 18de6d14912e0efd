"""Node taints and pod tolerations, with the core/v1 rule for when one tolerates the other.

compose-model-deployment checks a deployment's tolerations against a node pool's taints
before placing it there; the runtime's report checks a pending pod's tolerations against
live nodes when it counts room. One model, so the two never disagree on whether a pod
fits.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""  # NoSchedule, PreferNoSchedule, NoExecute

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        """The core/v1 rule: an empty key with Exists tolerates every taint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return bool(self.key) and self.key == taint.key and self.value == taint.value
