"""Model parking: when a model that fails every time it starts stops being placed.

On a live fleet one model was started 155 times in eight hours, failing the same way
every time, and nothing an operator looked at said so. The rule here ends that: start
failures are counted where the pods are seen (the member's agent writes them to the
ModelReplica's status.health), summed across the model's clusters for the model's
current *definition* — a stable hash of its source, profile and engines — and after
`max_consecutive_failures` (5 unless the deployment says otherwise) the model is parked:
its replicas go to 0 and every request is answered at once with the last error.

It stays parked until the definition changes (a new source, profile or engine template:
failures of the old definition do not count for the new one) or the
`modelplane.ai/retry` annotation gets a new value. A retry with the same definition
remembers how many failures had already been counted (the *baseline*), so the failures
that parked the model do not park it again on the next reconcile; only new ones do.
Records travel from the member's agent through provider-kubernetes and the ModelReplica,
so failures observed before the retry may arrive after it: until a record observed
after the retry arrives, the baseline rises with them (the live tier found a fixed model
parked again by its own pre-retry crashes).

Only start failures count. A replica lost to node loss or preemption is not one — the
agent does not report it as such, and nothing here reads ready counts — so a cluster
losing nodes never parks a healthy model.

Pure: `now` is passed in, and the previous state comes from the ModelDeployment's own
status, so the same inputs always give the same decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from functions.common.health import HealthRecord, count_failures
from functions.common.naming import stable_hash

DEFAULT_MAX_CONSECUTIVE_FAILURES: Final = 5


def definition_hash(source: dict, profile: str, engines: list[dict[str, Any]]) -> str:
    """What parking counts failures for: the weights, the profile and the engines.

    Replicas, autoscaling, placement and parking settings are not part of it: scaling a
    failing model does not make it start.
    """
    return stable_hash({"source": source, "profile": profile, "engines": engines}, 16)


@dataclass(frozen=True)
class Parked:
    """A parked model, as its status records it."""

    since: str
    failures: int
    last_error: str
    definition_hash: str
    retry: str  # the retry annotation's value when it was parked


@dataclass(frozen=True)
class Baseline:
    """Failures of one definition already spent by a retry; only later ones count."""

    definition_hash: str
    retry: str
    failures: int
    since: str = ""  # when the retry was taken (RFC 3339, UTC, whole seconds)


@dataclass(frozen=True)
class Decision:
    parked: Parked | None
    baseline: Baseline | None
    failures: int  # consecutive start failures of the current definition that count
    last_error: str
    transition: str  # "parked", "unparked" or ""
    why_unparked: str = ""

    @property
    def is_parked(self) -> bool:
        return self.parked is not None


def decide(
    *,
    definition: str,
    retry: str,
    records: Iterable[HealthRecord],
    previous: Parked | None,
    baseline: Baseline | None,
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES,
    enabled: bool = True,
    now: str,
) -> Decision:
    records = list(records)
    total, last_error = count_failures(records, definition)

    # A retry of this definition: failures counted before it are spent.
    if baseline is not None and (
        baseline.definition_hash != definition or total < baseline.failures
    ):
        # Another definition, or a counter went down (a replica started, or its record
        # went away): the consecutive run the baseline was taken from is over.
        baseline = None
    if baseline is not None and baseline.since and total > baseline.failures:
        current = [r for r in records if r.definition_hash == definition]
        if all(r.observed_at and _at_or_before(r.observed_at, baseline.since) for r in current):
            # Failures the agents observed before the retry, arriving late: spent too.
            baseline = replace(baseline, failures=total)

    if previous is not None:
        if not enabled:
            return Decision(
                None,
                baseline,
                _counted(total, baseline),
                last_error,
                "unparked",
                "parking is disabled (spec.parking.enabled: false)",
            )
        if previous.definition_hash != definition:
            return Decision(
                None,
                baseline,
                _counted(total, baseline),
                last_error,
                "unparked",
                "the definition changed (source, profile or engines)",
            )
        if previous.retry != retry:
            baseline = Baseline(definition, retry, total, now)
            return Decision(
                None, baseline, 0, last_error, "unparked", f"retry requested (annotation {retry!r})"
            )
        return Decision(previous, baseline, previous.failures, previous.last_error, "")

    counted = _counted(total, baseline)
    if enabled and counted >= max_consecutive_failures:
        parked = Parked(now, counted, last_error, definition, retry)
        return Decision(parked, baseline, counted, last_error, "parked")
    return Decision(None, baseline, counted, last_error, "")


def _at_or_before(stamp: str, limit: str) -> bool:
    """RFC 3339 times in UTC; a stamp that cannot be read is not before anything."""
    try:
        return datetime.fromisoformat(stamp) <= datetime.fromisoformat(limit)
    except ValueError:
        return False


def _counted(total: int, baseline: Baseline | None) -> int:
    return total - baseline.failures if baseline is not None else total
