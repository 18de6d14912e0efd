"""Where a change to a model's engines stands in the fleet, and what each cluster runs.

A *revision* is a stable hash of the part of a ModelReplica that changes the engines
(`TEMPLATE_FIELDS`: source, profile, serving mode, engines, tolerations, pod metadata).
Replica counts, autoscaling, parking and placement are not part of it: they apply to
every cluster at once. A new revision reaches the clusters in waves (spec.rollout); a
cluster outside the waves started so far keeps the last good revision's template,
byte for byte, read back from `status.rollout.previousTemplate`.

Everything the planner needs to continue comes from what was written before (the
ModelDeployment's `status.rollout`: phase, current wave, which cluster was given to which
wave and when, the last good template) and what the members report through the
observed ModelReplicas (the revision a cluster's workload has rolled to, readiness, start
failures of a definition, vocabulary signals): a function restart or a re-render of the
same inputs gives the same plan, never a restarted or skipped wave.

At most two revisions exist: `previous` (the last good one) and `revision` (the newest).
A third revision arriving mid-rollout supersedes the second: its clusters return to the
last good one and the new revision starts from the first wave.

Waves: a `clusters: N` wave takes N more clusters; a `clusters: "P%"` wave takes clusters
until P % of the deployment's clusters run the new revision (so "100%" is "the rest");
a `selector` wave takes the clusters not yet given whose labels match. Clusters are taken
in name order. Clusters left over after the listed waves form one last implicit wave,
gated like the others: no cluster gets an unproven revision without a gate. A wave
that takes no cluster passes at once.

A wave passes when every cluster given the new revision so far has rolled it and is
Ready, no start failure of the new definition was seen there, and, after the bake time
counted from the moment all were Ready, every SLO gate passes (an unmeasurable gate
holds the wave unless `allowUnmeasured`). A wave that has not passed by
`waveStartedAt + progressDeadline + bakeTime` fails. On failure, `Rollback` returns every
cluster to the last good revision (phase RolledBack, until the spec changes again);
`Pause` keeps the clusters where they are (phase Paused, reason GateFailed) until an undo
or a new revision.

Pure: plain typed values in, plain typed values out; `now` is passed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from functions.common import contracts
from functions.common.durations import parse_duration
from functions.common.naming import stable_hash
from functions.common.reader import InputError

# The fields of a ModelReplica's spec a revision is made of (and a previous-revision
# cluster keeps exactly). definitionHash follows source, profile and engines.
TEMPLATE_FIELDS: Final = (
    "definitionHash",
    "source",
    "profile",
    "servingMode",
    "engines",
    "tolerations",
    "podMetadata",
)

PHASE_PROGRESSING: Final = contracts.ROLLOUT_PHASE_PROGRESSING
PHASE_PAUSED: Final = contracts.ROLLOUT_PHASE_PAUSED
PHASE_COMPLETE: Final = contracts.ROLLOUT_PHASE_COMPLETE
PHASE_ROLLED_BACK: Final = contracts.ROLLOUT_PHASE_ROLLED_BACK

ON_FAILURE_ROLLBACK: Final = "Rollback"
ON_FAILURE_PAUSE: Final = "Pause"

GATE_READY: Final = "Ready"
GATE_START_FAILURES: Final = "StartFailures"
GATE_ERROR_RATE: Final = "ErrorRate"
GATE_ERROR_RATE_INCREASE: Final = "ErrorRateIncrease"
GATE_TTFT: Final = "TimeToFirstTokenP95"
GATE_TTFT_RATIO: Final = "TimeToFirstTokenP95Ratio"

STATE_PASSED: Final = "Passed"
STATE_FAILED: Final = "Failed"
STATE_PENDING: Final = "Pending"
STATE_UNMEASURED: Final = "Unmeasured"

REASON_NEW_REVISION: Final = "NewRevision"
REASON_WAVE_STARTED: Final = "WaveStarted"
REASON_WAVE_PASSED: Final = "WavePassed"
REASON_COMPLETE: Final = "RolledOut"
REASON_GATE_FAILED: Final = "GateFailed"
REASON_DEADLINE: Final = "ProgressDeadlineExceeded"
REASON_UNDO: Final = "UndoRequested"
REASON_PAUSED: Final = "PausedByAnnotation"
REASON_SUPERSEDED: Final = "Superseded"
REASON_FIRST: Final = "FirstRevision"
REASON_ADOPTED: Final = "Adopted"
REASON_NOT_SERVING: Final = "NothingServing"
REASON_WAITING: Final = "WaitingForGates"
REASON_NOT_IN_WAVE: Final = "NotInWaveYet"
REASON_IN_WAVE: Final = "InWave"
REASON_RETURNED: Final = "ReturnedToLastGood"
REASON_KEPT: Final = "KeptLastGood"

DEFAULT_WAVES: Final = ({"clusters": 1}, {"clusters": "100%"})
DEFAULT_BAKE_SECONDS: Final = 120.0
DEFAULT_DEADLINE_SECONDS: Final = 900.0


def revision_of(template: Mapping[str, Any]) -> str:
    """The revision a template is: a stable short hash of its TEMPLATE_FIELDS, after an
    `r` (hex digits alone may read as a number in YAML: `46138708e3` is a float to a
    YAML 1.2 reader, and an operator types it into an annotation)."""
    return "r" + stable_hash({k: template[k] for k in TEMPLATE_FIELDS if k in template}, 10)


def template_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The revision's part of a ModelReplica spec."""
    return {k: spec[k] for k in TEMPLATE_FIELDS if k in spec}


# --- the policy ---------------------------------------------------------------------


@dataclass(frozen=True)
class Wave:
    count: int | None = None  # N more clusters
    percent: int | None = None  # until P % of the clusters run the new revision
    selector: tuple[tuple[str, str], ...] | None = None  # matchLabels


@dataclass(frozen=True)
class Gates:
    error_rate_max: float | None = None
    error_rate_max_increase: float | None = None
    ttft_max_seconds: float | None = None
    ttft_max_ratio: float | None = None
    allow_unmeasured: bool = False


@dataclass(frozen=True)
class Policy:
    waves: tuple[Wave, ...] = (Wave(count=1), Wave(percent=100))
    bake_seconds: float = DEFAULT_BAKE_SECONDS
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    on_failure: str = ON_FAILURE_ROLLBACK
    gates: Gates = Gates()


DEFAULT_POLICY: Final = Policy()


# --- what the members report --------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """One cluster's ModelReplica as observed (None fields: not reported)."""

    cluster: str
    revision: str = ""  # spec.revision composed there
    rolled_revision: str = ""  # status.revision: the revision its workload has fully rolled
    ready_replicas: int = 0
    desired_replicas: int = 0
    failures_definition: str = ""  # the health record's definition hash
    failures: int = 0
    last_error: str = ""
    error_rate: float | None = None
    ttft_p95: float | None = None


@dataclass(frozen=True)
class Target:
    """A cluster the placement uses now, with its labels (for selector waves)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


# --- the state status.rollout keeps ------------------------------------------------


@dataclass(frozen=True)
class ClusterState:
    cluster: str
    revision: str
    since: str
    reason: str
    wave: int = 0  # the wave that gave it the newest revision (0: not given yet)


@dataclass(frozen=True)
class Gate:
    name: str
    state: str
    observed: str = ""
    threshold: str = ""


@dataclass(frozen=True)
class State:
    revision: str
    previous: str
    phase: str
    wave: int  # 1-based; 0 when Complete without waves
    waves: int
    reason: str
    message: str = ""
    started_at: str = ""
    wave_started_at: str = ""
    baking_since: str = ""  # when every cluster of the waves so far was Ready
    clusters: tuple[ClusterState, ...] = ()
    gates: tuple[Gate, ...] = ()
    failed_gate: Gate | None = None
    previous_template: Mapping[str, Any] | None = None
    previous_definition: str = ""

    def cluster(self, name: str) -> ClusterState | None:
        return next((c for c in self.clusters if c.cluster == name), None)


@dataclass(frozen=True)
class Plan:
    state: State
    # cluster -> the revision its ModelReplica gets (State.revision or State.previous)
    revision_at: Mapping[str, str]
    events: tuple[tuple[bool, str], ...]  # (warning, message), one per wave transition
    requeue_after: float | None  # seconds until a timer ends (None: nothing pending)

    def template_for(self, cluster: str, new_template: Mapping[str, Any]) -> Mapping[str, Any]:
        """What a cluster's ModelReplica carries: the newest template, or the last good
        one exactly as it was composed."""
        if self.revision_at.get(cluster, self.state.revision) == self.state.revision:
            return new_template
        assert self.state.previous_template is not None
        return self.state.previous_template


# --- time ----------------------------------------------------------------------------


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str, fallback: datetime) -> datetime:
    try:
        parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return fallback
    return parsed.replace(tzinfo=UTC)


# --- the planner ---------------------------------------------------------------------


def plan(  # noqa: PLR0915 (one decision read top to bottom)
    *,
    policy: Policy,
    previous: State | None,
    revision: str,
    template: Mapping[str, Any],
    targets: Sequence[Target],
    observed: Mapping[str, Observed],
    observed_template: Mapping[str, Any] | None,
    serving: bool,
    paused: bool,
    undo: str,
    now: datetime,
) -> Plan:
    """The rollout after this reconcile.

    `previous`: status.rollout as written before (None: never written). `observed_template`:
    the template an observed ModelReplica carries (the first in cluster order) when there
    is no state to read it from — a deployment created before rollouts existed.
    An observed template of the same definition (source, profile, engines) is adopted as
    the deployment's own: only a changed engine is rolled out from it.
    `serving`: the model serves its current revision somewhere (not parked, a replica
    observed): with nothing to protect, a new revision applies at once.
    """
    stamp = _stamp(now)
    names = sorted({t.name for t in targets})
    labels = {t.name: dict(t.labels) for t in targets}
    events: list[tuple[bool, str]] = []
    definition = str(template.get("definitionHash", ""))

    state = previous
    if (
        state is None
        and observed_template is not None
        and observed_template.get("definitionHash") == template.get("definitionHash")
    ):
        # Composed before rollouts existed, its engines unchanged since: what runs is the
        # deployment's own template (read back through the API server it may carry
        # defaults, or fields an older function wrote differently; none changes an engine).
        return _complete_at_once(revision, template, names, stamp, REASON_ADOPTED)
    if state is None and observed_template is not None:
        old = revision_of(observed_template)
        state = State(
            revision=old,
            previous=old,
            phase=PHASE_COMPLETE,
            wave=0,
            waves=0,
            reason=REASON_FIRST,
            previous_template=dict(observed_template),
            previous_definition=str(observed_template.get("definitionHash", "")),
        )
    if state is None or state.previous_template is None:
        return _complete_at_once(revision, template, names, stamp, REASON_FIRST)

    if revision == state.previous == state.revision and state.phase == PHASE_COMPLETE:
        return _finish(state, names, events, None, stamp)
    if revision == state.previous:
        # Back to the last good revision: nothing to roll.
        if state.revision != revision:
            events.append((False, f"revision {revision} is the last good one again: no rollout"))
        done = _complete_at_once(revision, template, names, stamp, REASON_COMPLETE, state)
        return replace(done, events=tuple(events))

    if revision != state.revision:
        # A new revision. One still in progress is superseded: its clusters return to the
        # last good one and the new revision starts from the first wave.
        if not serving:
            done = _complete_at_once(revision, template, names, stamp, REASON_NOT_SERVING)
            return replace(
                done,
                events=(
                    (
                        False,
                        f"revision {revision} applied to every cluster at once: "
                        "the model serves nothing to protect",
                    ),
                ),
            )
        superseded = state.revision if state.revision != state.previous else ""
        state = State(
            revision=revision,
            previous=state.previous,
            phase=PHASE_PROGRESSING,
            wave=1,
            waves=0,
            reason=REASON_NEW_REVISION,
            message=(
                f"revision {revision} supersedes {superseded}, whose clusters return to "
                f"{state.previous}"
                if superseded
                else f"revision {revision} rolls out after {state.previous}"
            ),
            started_at=stamp,
            wave_started_at=stamp,
            clusters=(),
            previous_template=state.previous_template,
            previous_definition=state.previous_definition,
        )
        events.append((False, state.message))
        if not paused:
            # Paused before it started: no cluster is given it until resumed.
            state = _assign(state, policy, names, labels, stamp)
            events.append((False, _wave_message(state, "started")))

    # From here: a rollout of state.revision, in progress, paused, or rolled back.
    waves = _resolved_waves(policy)
    state = replace(state, waves=len(waves))

    if state.phase in (PHASE_PROGRESSING, PHASE_PAUSED) and undo and undo == state.revision:
        state = replace(
            state,
            phase=PHASE_ROLLED_BACK,
            reason=REASON_UNDO,
            message=f"undo requested (annotation {contracts.ANNOTATION_ROLLOUT_UNDO}): "
            f"every cluster returns to {state.previous}",
            baking_since="",
            clusters=_returned(state, stamp),
        )
        events.append((True, f"rollout of {state.revision} undone: {state.message}"))

    if state.phase == PHASE_ROLLED_BACK or (
        state.phase == PHASE_PAUSED and state.reason == REASON_GATE_FAILED
    ):
        return _finish(state, names, events, None, stamp)

    if paused:
        if state.phase != PHASE_PAUSED:
            events.append((False, f"rollout of {state.revision} paused at wave {state.wave}"))
        state = replace(
            state,
            phase=PHASE_PAUSED,
            reason=REASON_PAUSED,
            message=f"paused by the annotation {contracts.ANNOTATION_ROLLOUT_PAUSED}; "
            "remove it to resume",
        )
        return _finish(state, names, events, None, stamp)
    if state.phase == PHASE_PAUSED:
        # Resumed: the wave's clocks start again (a paused wave is not a late one).
        state = replace(
            state,
            phase=PHASE_PROGRESSING,
            reason=REASON_WAITING,
            message="resumed",
            wave_started_at=stamp,
            baking_since="",
        )
        events.append((False, f"rollout of {state.revision} resumed at wave {state.wave}"))
        if not any(c.wave == state.wave for c in state.clusters):
            # Paused before its wave was given any cluster: give them now.
            state = _assign(state, policy, names, labels, stamp)
            events.append((False, _wave_message(state, "started")))

    # Evaluate the current wave, and go on while waves pass in this same reconcile (an
    # empty wave passes at once).
    requeue: float | None = None
    for _ in range(len(waves) + 1):
        state, outcome, requeue = _evaluate(state, policy, observed, definition, now)
        if outcome == STATE_FAILED:
            failed = state
            if policy.on_failure == ON_FAILURE_PAUSE:
                state = replace(state, phase=PHASE_PAUSED, reason=REASON_GATE_FAILED)
            else:
                state = replace(
                    state,
                    phase=PHASE_ROLLED_BACK,
                    clusters=_returned(state, stamp),
                )
            events.append(
                (
                    True,
                    f"wave {failed.wave}/{failed.waves} of revision {state.revision} failed: "
                    f"{failed.message}; "
                    + (
                        f"every cluster returns to {state.previous}"
                        if state.phase == PHASE_ROLLED_BACK
                        else "paused where it stands (undo or change the spec)"
                    ),
                )
            )
            return _finish(state, names, events, None, stamp)
        if outcome != STATE_PASSED:
            return _finish(state, names, events, requeue, stamp)
        events.append((False, _wave_message(state, "passed")))
        if state.wave >= len(waves):
            state = _completed(state, template, names, stamp)
            events.append((False, f"revision {state.revision} rolled out to every cluster"))
            return _finish(state, names, events, None, stamp)
        state = replace(
            state,
            wave=state.wave + 1,
            wave_started_at=stamp,
            baking_since="",
            gates=(),
            reason=REASON_WAVE_STARTED,
            message="",
        )
        state = _assign(state, policy, names, labels, stamp)
        events.append((False, _wave_message(state, "started")))
    return _finish(state, names, events, requeue, stamp)


def _complete_at_once(  # noqa: PLR0917
    revision: str,
    template: Mapping[str, Any],
    names: list[str],
    stamp: str,
    reason: str,
    before: State | None = None,
) -> Plan:
    kept = {c.cluster: c for c in (before.clusters if before else ())}
    clusters = tuple(
        kept[n]
        if n in kept and kept[n].revision == revision
        else ClusterState(n, revision, stamp, reason, 0)
        for n in names
    )
    state = State(
        revision=revision,
        previous=revision,
        phase=PHASE_COMPLETE,
        wave=0,
        waves=0,
        reason=reason,
        clusters=clusters,
        previous_template=dict(template),
        previous_definition=str(template.get("definitionHash", "")),
        started_at=before.started_at if before and before.revision == revision else "",
    )
    return Plan(state, dict.fromkeys(names, revision), (), None)


def _completed(state: State, template: Mapping[str, Any], names: list[str], stamp: str) -> State:
    return replace(
        state,
        previous=state.revision,
        phase=PHASE_COMPLETE,
        reason=REASON_COMPLETE,
        message=f"revision {state.revision} runs on every cluster",
        baking_since="",
        failed_gate=None,
        previous_template=dict(template),
        previous_definition=str(template.get("definitionHash", "")),
        clusters=tuple(
            c
            if c.revision == state.revision
            else ClusterState(c.cluster, state.revision, stamp, REASON_COMPLETE, c.wave)
            for c in state.clusters
        ),
    )


def _returned(state: State, stamp: str) -> tuple[ClusterState, ...]:
    """Every cluster on the last good revision: those given the new one return to it, the
    others keep it (and now say so rather than that their wave is still to come)."""
    return tuple(
        ClusterState(c.cluster, state.previous, stamp, REASON_RETURNED, c.wave)
        if c.revision != state.previous
        else replace(c, reason=REASON_KEPT)
        if c.reason == REASON_NOT_IN_WAVE
        else c
        for c in state.clusters
    )


def _finish(
    state: State,
    names: list[str],
    events: list[tuple[bool, str]],
    requeue: float | None,
    stamp: str,
) -> Plan:
    """Every placed cluster's entry (a cluster placed since gets the last good revision;
    one placement no longer uses is dropped) and the revision each runs."""
    kept = {c.cluster: c for c in state.clusters}
    entries = []
    for name in names:
        entry = kept.get(name)
        if entry is None:
            revision = state.revision if state.phase == PHASE_COMPLETE else state.previous
            reason = REASON_COMPLETE if state.phase == PHASE_COMPLETE else REASON_NOT_IN_WAVE
            entry = ClusterState(name, revision, stamp, reason, 0)
        entries.append(entry)
    state = replace(state, clusters=tuple(entries))
    return Plan(state, {c.cluster: c.revision for c in entries}, tuple(events), requeue)


def _resolved_waves(policy: Policy) -> tuple[Wave, ...]:
    """The policy's waves, and an implicit last one for the clusters none of them took
    (unless a wave already takes 100 %): no cluster gets the revision ungated."""
    waves = policy.waves or (Wave(percent=100),)
    if any(w.percent == 100 for w in waves):
        return waves
    return (*waves, Wave(percent=100))


def _assign(
    state: State,
    policy: Policy,
    names: list[str],
    labels: Mapping[str, Mapping[str, str]],
    stamp: str,
) -> State:
    """Give the current wave its clusters, from those not given the revision yet."""
    waves = _resolved_waves(policy)
    if state.wave > len(waves):
        return state
    wave = waves[state.wave - 1]
    kept = {c.cluster: c for c in state.clusters}
    given = [n for n in names if n in kept and kept[n].wave > 0]
    remaining = [n for n in names if n not in given]
    if wave.selector is not None:
        chosen = [
            n for n in remaining if all(labels.get(n, {}).get(k) == v for k, v in wave.selector)
        ]
    elif wave.percent is not None:
        goal = math.ceil(len(names) * wave.percent / 100)
        chosen = remaining[: max(0, goal - len(given))]
    else:
        chosen = remaining[: wave.count or 0]
    entries = dict(kept)
    for n in chosen:
        entries[n] = ClusterState(n, state.revision, stamp, REASON_IN_WAVE, state.wave)
    for n in names:
        if n not in entries:
            entries[n] = ClusterState(n, state.previous, stamp, REASON_NOT_IN_WAVE, 0)
    return replace(
        state,
        waves=len(waves),
        clusters=tuple(entries[n] for n in sorted(entries)),
    )


def _wave_message(state: State, what: str) -> str:
    on = [c.cluster for c in state.clusters if c.wave == state.wave]
    return f"wave {state.wave}/{state.waves} of revision {state.revision} {what}" + (
        f" ({', '.join(on)})" if on else " (no cluster)"
    )


def _evaluate(
    state: State,
    policy: Policy,
    observed: Mapping[str, Observed],
    definition: str,
    now: datetime,
) -> tuple[State, str, float | None]:
    """The current wave's gates: (state with gates, Passed | Failed | Pending, seconds
    until the next timer)."""
    if not any(c.wave == state.wave for c in state.clusters):
        return replace(state, gates=(), reason=REASON_WAVE_PASSED, message=""), STATE_PASSED, None
    on_new = [c for c in state.clusters if c.wave > 0 and c.revision == state.revision]
    on_old = [c for c in state.clusters if c.revision != state.revision]
    wave_start = _parse(state.wave_started_at, now)
    deadline = wave_start + timedelta(seconds=policy.deadline_seconds + policy.bake_seconds)
    gates: list[Gate] = []

    # Start failures of the new definition, where it was given.
    failing = [
        observed[c.cluster]
        for c in on_new
        if c.cluster in observed
        and observed[c.cluster].failures > 0
        and observed[c.cluster].failures_definition == definition
        and definition != state.previous_definition
    ]
    if failing:
        worst = failing[0]
        gate = Gate(
            GATE_START_FAILURES,
            STATE_FAILED,
            f"{worst.failures} on {worst.cluster}",
            "0",
        )
        failed = replace(
            state,
            gates=(gate,),
            failed_gate=gate,
            reason=REASON_GATE_FAILED,
            message=f"start failures on {worst.cluster}: {worst.last_error or 'unknown error'}",
        )
        return failed, STATE_FAILED, None
    gates.append(Gate(GATE_START_FAILURES, STATE_PASSED, "0", "0"))

    not_ready = [c.cluster for c in on_new if not _ready(observed.get(c.cluster), state.revision)]
    total = len(on_new)
    gates.append(
        Gate(
            GATE_READY,
            STATE_PENDING if not_ready else STATE_PASSED,
            f"{total - len(not_ready)}/{total} clusters",
            f"{total}/{total} clusters",
        )
    )
    if not_ready:
        waiting = replace(
            state,
            gates=tuple(gates),
            baking_since="",
            reason=REASON_WAITING,
            message=f"waiting for {', '.join(not_ready)} to roll and be Ready",
        )
        if now >= deadline:
            gate = gates[-1]
            return (
                replace(
                    waiting,
                    failed_gate=Gate(gate.name, STATE_FAILED, gate.observed, gate.threshold),
                    reason=REASON_DEADLINE,
                    message=f"{', '.join(not_ready)} not Ready within the progress deadline "
                    f"({policy.deadline_seconds:.0f}s + bake {policy.bake_seconds:.0f}s)",
                ),
                STATE_FAILED,
                None,
            )
        return waiting, STATE_PENDING, (deadline - now).total_seconds()

    baking_since = _parse(state.baking_since, now) if state.baking_since else now
    bake_end = baking_since + timedelta(seconds=policy.bake_seconds)
    state = replace(state, baking_since=_stamp(baking_since))
    slo = _slo_gates(policy.gates, on_new, on_old, observed)
    gates.extend(slo)
    if now < bake_end:
        pending = [replace(g, state=STATE_PENDING) if g.state != STATE_FAILED else g for g in slo]
        waiting = replace(
            state,
            gates=(*gates[:2], *pending),
            reason=REASON_WAITING,
            message=f"baking until {_stamp(bake_end)}",
        )
        return waiting, STATE_PENDING, (bake_end - now).total_seconds()

    failed_gate = next((g for g in slo if g.state == STATE_FAILED), None)
    if failed_gate is not None:
        return (
            replace(
                state,
                gates=tuple(gates),
                failed_gate=failed_gate,
                reason=REASON_GATE_FAILED,
                message=f"gate {failed_gate.name}: observed {failed_gate.observed}, "
                f"threshold {failed_gate.threshold}",
            ),
            STATE_FAILED,
            None,
        )
    unmeasured = [g for g in slo if g.state == STATE_UNMEASURED]
    if unmeasured and not policy.gates.allow_unmeasured:
        held = replace(
            state,
            gates=tuple(gates),
            reason=REASON_WAITING,
            message=f"gate {unmeasured[0].name} cannot be measured ({unmeasured[0].observed}); "
            "it does not pass unless spec.rollout.gates.allowUnmeasured",
        )
        if now >= deadline:
            gate = replace(unmeasured[0], state=STATE_FAILED)
            return (
                replace(held, failed_gate=gate, reason=REASON_DEADLINE),
                STATE_FAILED,
                None,
            )
        return held, STATE_PENDING, (deadline - now).total_seconds()
    return (
        replace(
            state,
            gates=tuple(gates),
            reason=REASON_WAVE_PASSED,
            message="",
            failed_gate=None,
        ),
        STATE_PASSED,
        None,
    )


def _ready(seen: Observed | None, revision: str) -> bool:
    if seen is None:
        return False
    return (
        seen.revision == revision
        and seen.rolled_revision == revision
        and seen.ready_replicas >= seen.desired_replicas
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _slo_gates(
    gates: Gates,
    on_new: list[ClusterState],
    on_old: list[ClusterState],
    observed: Mapping[str, Observed],
) -> list[Gate]:
    """The SLO gates the policy asks for, each Passed, Failed or Unmeasured. The new
    revision's value is the mean over its clusters; the previous revision's over the
    clusters still on it (a relative gate with none left is Unmeasured)."""

    def values(entries: list[ClusterState], attr: str) -> list[float]:
        out = []
        for c in entries:
            seen = observed.get(c.cluster)
            value = getattr(seen, attr) if seen is not None else None
            if value is not None and math.isfinite(value):
                out.append(value)
        return out

    out: list[Gate] = []
    checks = (
        (GATE_ERROR_RATE, "error_rate", gates.error_rate_max, False),
        (GATE_ERROR_RATE_INCREASE, "error_rate", gates.error_rate_max_increase, True),
        (GATE_TTFT, "ttft_p95", gates.ttft_max_seconds, False),
        (GATE_TTFT_RATIO, "ttft_p95", gates.ttft_max_ratio, True),
    )
    for name, attr, limit, relative in checks:
        if limit is None:
            continue
        new = _mean(values(on_new, attr))
        if new is None:
            out.append(Gate(name, STATE_UNMEASURED, "no signal from the new revision", _fmt(limit)))
            continue
        if not relative:
            state = STATE_FAILED if new > limit else STATE_PASSED
            out.append(Gate(name, state, _fmt(new), _fmt(limit)))
            continue
        old = _mean(values(on_old, attr))
        if old is None:
            out.append(
                Gate(name, STATE_UNMEASURED, "no signal from the previous revision", _fmt(limit))
            )
            continue
        if name == GATE_ERROR_RATE_INCREASE:
            observed_value = new - old
        else:
            observed_value = new / old if old > 0 else (math.inf if new > 0 else 1.0)
        state = STATE_FAILED if observed_value > limit else STATE_PASSED
        out.append(Gate(name, state, _fmt(observed_value), _fmt(limit)))
    return out


# --- reading spec.rollout ------------------------------------------------------------

WAVES_MAX: Final = 10
_REVISION: Final = re.compile(r"^r[0-9a-f]{10}$")
_PERCENT: Final = re.compile(r"^([1-9][0-9]?|100)%$")


def read_policy(raw: Any) -> Policy:
    """spec.rollout as typed values; InputError naming the field and the rule (the XRD
    says the same; the function does not rely on it)."""
    if raw is None:
        return Policy()
    if not isinstance(raw, dict):
        raise InputError("spec.rollout", "must be an object")
    raw_waves = raw.get("waves")
    waves: tuple[Wave, ...] = Policy().waves
    if raw_waves is not None:
        if not isinstance(raw_waves, list) or not 1 <= len(raw_waves) <= WAVES_MAX:
            raise InputError("spec.rollout.waves", f"must be a list of 1-{WAVES_MAX} waves")
        waves = tuple(_read_wave(w, f"spec.rollout.waves[{i}]") for i, w in enumerate(raw_waves))
    on_failure = raw.get("onFailure", ON_FAILURE_ROLLBACK)
    if on_failure not in (ON_FAILURE_ROLLBACK, ON_FAILURE_PAUSE):
        raise InputError(
            "spec.rollout.onFailure",
            f"must be {ON_FAILURE_ROLLBACK} or {ON_FAILURE_PAUSE}, got {str(on_failure)[:40]!r}",
        )
    return Policy(
        waves=waves,
        bake_seconds=_seconds(raw.get("bakeTime"), "spec.rollout.bakeTime", DEFAULT_BAKE_SECONDS),
        deadline_seconds=_seconds(
            raw.get("progressDeadline"), "spec.rollout.progressDeadline", DEFAULT_DEADLINE_SECONDS
        ),
        on_failure=on_failure,
        gates=_read_gates(raw.get("gates")),
    )


def _read_wave(raw: Any, path: str) -> Wave:
    if not isinstance(raw, dict) or len({"clusters", "selector"} & set(raw)) != 1:
        raise InputError(path, "must set exactly one of clusters or selector")
    if "selector" in raw:
        labels = (
            (raw["selector"] or {}).get("matchLabels")
            if isinstance(raw["selector"], dict)
            else None
        )
        if (
            not isinstance(labels, dict)
            or not labels
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        ):
            raise InputError(f"{path}.selector.matchLabels", "must map label keys to values")
        return Wave(selector=tuple(sorted(labels.items())))
    value = raw["clusters"]
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 1000:
            raise InputError(f"{path}.clusters", f"{value} is outside 1-1000")
        return Wave(count=value)
    if isinstance(value, str) and _PERCENT.match(value):
        return Wave(percent=int(value[:-1]))
    raise InputError(
        f"{path}.clusters",
        f"must be a count (1-1000) or a percentage (1%-100%), got {str(value)[:40]!r}",
    )


def _seconds(value: Any, path: str, default: float) -> float:
    if value is None:
        return default
    try:
        seconds = parse_duration(value)
    except ValueError as err:
        raise InputError(path, str(err)) from None
    if not 0 <= seconds <= 86400:
        raise InputError(path, f"{value} is outside 0s-24h")
    return seconds


def _read_gates(raw: Any) -> Gates:
    if raw is None:
        return Gates()
    if not isinstance(raw, dict):
        raise InputError("spec.rollout.gates", "must be an object")

    def number(section: str, key: str) -> float | None:
        value = (raw.get(section) or {}).get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise InputError(f"spec.rollout.gates.{section}.{key}", "must be a number >= 0")
        return float(value)

    allow = raw.get("allowUnmeasured", False)
    if not isinstance(allow, bool):
        raise InputError("spec.rollout.gates.allowUnmeasured", "must be true or false")
    return Gates(
        error_rate_max=number("errorRate", "max"),
        error_rate_max_increase=number("errorRate", "maxIncrease"),
        ttft_max_seconds=number("timeToFirstTokenP95", "maxSeconds"),
        ttft_max_ratio=number("timeToFirstTokenP95", "maxRatioToPrevious"),
        allow_unmeasured=allow,
    )


# --- status.rollout ------------------------------------------------------------------


def _gate_status(gate: Gate) -> dict[str, str]:
    return {
        "name": gate.name,
        "state": gate.state,
        "observed": gate.observed,
        "threshold": gate.threshold,
    }


def to_status(state: State) -> dict[str, Any]:
    """status.rollout. `previousTemplate` and each cluster's `wave` are what a restart
    continues from."""
    out: dict[str, Any] = {
        "revision": state.revision,
        "previous": state.previous,
        "phase": state.phase,
        "wave": state.wave,
        "waves": state.waves,
        "reason": state.reason,
        "clusters": [
            {
                "cluster": c.cluster,
                "revision": c.revision,
                "since": c.since,
                "reason": c.reason,
                "wave": c.wave,
            }
            for c in state.clusters
        ],
        "previousDefinitionHash": state.previous_definition,
    }
    if state.message:
        out["message"] = state.message
    if state.gates:
        out["gates"] = [_gate_status(g) for g in state.gates]
    for key, value in (
        ("startedAt", state.started_at),
        ("waveStartedAt", state.wave_started_at),
        ("bakingSince", state.baking_since),
    ):
        if value:
            out[key] = value
    if state.failed_gate is not None:
        out["failedGate"] = {
            k: v for k, v in _gate_status(state.failed_gate).items() if k != "state"
        }
    if state.previous_template is not None:
        out["previousTemplate"] = dict(state.previous_template)
    return out


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def read_state(raw: Any) -> State | None:
    """status.rollout as written by to_status; None when absent or unreadable (a status
    that cannot be read starts over from the observed ModelReplicas, never crashes)."""
    if not isinstance(raw, Mapping) or not all(
        isinstance(raw.get(k), str) and _REVISION.match(raw[k]) for k in ("revision", "previous")
    ):
        # A revision becomes a label value and a ModelReplica field: only our own hashes.
        return None
    phase = raw.get("phase")
    if phase not in contracts.ROLLOUT_PHASES:
        return None
    template = raw.get("previousTemplate")
    if not isinstance(template, Mapping):
        return None

    def integer(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    def gate(entry: Any, state: str | None = None) -> Gate | None:
        if not isinstance(entry, Mapping) or not entry.get("name"):
            return None
        return Gate(
            str(entry["name"]),
            str(state or entry.get("state", STATE_FAILED)),
            str(entry.get("observed", "")),
            str(entry.get("threshold", "")),
        )

    clusters = tuple(
        ClusterState(
            str(c["cluster"]),
            str(c.get("revision", "")),
            str(c.get("since", "")),
            str(c.get("reason", "")),
            integer(c.get("wave")),
        )
        for c in _listed(raw.get("clusters"))
        if isinstance(c, Mapping)
        and c.get("cluster")
        and c.get("revision") in (raw["revision"], raw["previous"])
    )
    return State(
        revision=str(raw["revision"]),
        previous=str(raw["previous"]),
        phase=str(phase),
        wave=max(1, integer(raw.get("wave")))
        if phase != PHASE_COMPLETE
        else integer(raw.get("wave")),
        waves=integer(raw.get("waves")),
        reason=str(raw.get("reason", "")),
        message=str(raw.get("message", "")),
        started_at=str(raw.get("startedAt", "")),
        wave_started_at=str(raw.get("waveStartedAt", "")),
        baking_since=str(raw.get("bakingSince", "")),
        clusters=clusters,
        gates=tuple(g for g in (gate(e) for e in _listed(raw.get("gates"))) if g is not None),
        failed_gate=gate(raw.get("failedGate"), STATE_FAILED),
        previous_template=dict(template),
        previous_definition=str(raw.get("previousDefinitionHash", "")),
    )


# --- what an observed ModelReplica says ----------------------------------------------

# The fields read_observed reads (structs.plain_only's shape).
OBSERVED_FIELDS: Final = {
    "spec": {"cluster": {"name": None}, "revision": None, "replicas": None},
    "status": {"revision": None, "readyReplicas": None, "health": None, "signals": None},
}


def read_observed(mr: Mapping[str, Any]) -> Observed | None:
    """A ModelReplica's rollout facts; None when it names no cluster. A field of the
    wrong type reads as not reported (a gate on it then waits or is Unmeasured)."""
    spec = mr.get("spec") if isinstance(mr.get("spec"), Mapping) else {}
    status = mr.get("status") if isinstance(mr.get("status"), Mapping) else {}
    cluster = (
        (spec.get("cluster") or {}).get("name")
        if isinstance(spec.get("cluster"), Mapping)
        else None
    )
    if not isinstance(cluster, str) or not cluster:
        return None

    def count(value: Any) -> int:
        return (
            int(value)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            else 0
        )

    def number(value: Any) -> float | None:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        return None

    health = status.get("health") if isinstance(status.get("health"), Mapping) else {}
    signals = status.get("signals") if isinstance(status.get("signals"), Mapping) else {}
    return Observed(
        cluster=cluster,
        revision=str(spec.get("revision") or ""),
        rolled_revision=str(status.get("revision") or ""),
        ready_replicas=count(status.get("readyReplicas")),
        desired_replicas=count(spec.get("replicas")),
        failures_definition=str(health.get("definitionHash") or ""),
        failures=count(health.get("consecutiveStartFailures")),
        last_error=str(health.get("lastError") or ""),
        error_rate=number(signals.get("errorRate")),
        ttft_p95=number(signals.get("timeToFirstTokenP95")),
    )
