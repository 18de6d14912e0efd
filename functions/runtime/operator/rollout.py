"""Where a model's rollout stands, and what `modelplane rollout pause|resume|undo` would
change: the operator's side of fleet rollouts, read from the control plane.

compose-model-deployment decides a rollout (its planner, functions/compose_model_deployment
/rollout.py) and writes where it stands in the ModelDeployment's `status.rollout`; each
ModelReplica it composes carries its revision (`spec.revision`, label
`modelplane.ai/revision`). This module only reads those: the clusters' revisions come
from the ModelReplicas themselves (what each cluster is composed with now), the rest from
the status, so what `modelplane status` shows and what a preview promises are the same
facts the planner acts on, never a second copy of its rules. It never guesses which
clusters a future wave holds: the planner picks them, so a preview names the clusters
still on the previous revision, not a wave it cannot know.

Steering is by annotation only (the planner reads them): pause sets
`modelplane.ai/rollout-paused: "true"`, resume removes it, undo sets
`modelplane.ai/rollout-undo: <the revision in progress>`. Each `plan_*` returns the
merge patch and the preview, or why the command has nothing to do; a command that would
do nothing is refused rather than written, so an annotation left on a model always
means something.

Pure: plain dicts in (as the API returns them), dataclasses out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from functions.common import contracts

PHASES: Final = (
    contracts.ROLLOUT_PHASE_PROGRESSING,
    contracts.ROLLOUT_PHASE_PAUSED,
    contracts.ROLLOUT_PHASE_COMPLETE,
    contracts.ROLLOUT_PHASE_ROLLED_BACK,
)
IN_PROGRESS: Final = (contracts.ROLLOUT_PHASE_PROGRESSING, contracts.ROLLOUT_PHASE_PAUSED)
UNKNOWN_REVISION: Final = "?"  # a ModelReplica composed before revisions existed

PAUSE: Final = "pause"
RESUME: Final = "resume"
UNDO: Final = "undo"
ACTIONS: Final = (PAUSE, RESUME, UNDO)


@dataclass(frozen=True)
class Gate:
    name: str
    state: str  # Passed, Failed, Pending, Unmeasured
    observed: str  # as written in the status ("" when not measured)
    threshold: str


@dataclass(frozen=True)
class ClusterRevision:
    cluster: str
    revision: str
    since: str = ""
    reason: str = ""
    # Every ModelReplica there reports its workloads rolled to its revision and Ready
    # (compose-model-replica's status.revision): the cluster runs it, not only has it.
    rolled: bool = False


@dataclass(frozen=True)
class Rollout:
    """status.rollout, with each cluster's revision as its ModelReplicas carry it."""

    revision: str
    previous: str
    phase: str
    wave: int
    waves: int
    reason: str
    message: str
    failed_gate: Gate | None
    gates: list[Gate]
    started_at: str
    wave_started_at: str
    clusters: list[ClusterRevision]
    # When every cluster of the waves so far was Ready: the bake counts from here.
    baking_since: str = ""
    # The steering annotations as they are on the ModelDeployment now.
    paused: bool = False
    undo: str = ""

    @property
    def in_progress(self) -> bool:
        return self.phase in IN_PROGRESS

    @property
    def changing(self) -> bool:
        """Two revisions are in play (a Complete rollout's previous is its revision)."""
        return bool(self.previous) and self.previous != self.revision

    def on(self, revision: str) -> list[str]:
        return [c.cluster for c in self.clusters if c.revision == revision]

    def elsewhere(self, *revisions: str) -> list[str]:
        """Clusters on neither revision (a ModelReplica without one, or a third value)."""
        return [c.cluster for c in self.clusters if c.revision not in revisions]


def _text(value: Any) -> str:
    """A status value as text: numbers compactly (0.0123, 2.5), None as ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _gate(raw: Any) -> Gate | None:
    if not isinstance(raw, Mapping) or not raw.get("name"):
        return None
    return Gate(
        name=_text(raw.get("name")),
        state=_text(raw.get("state")),
        observed=_text(raw.get("observed")),
        threshold=_text(raw.get("threshold")),
    )


def replica_cluster(replica: Mapping[str, Any]) -> str:
    spec = replica.get("spec") or {}
    cluster = spec.get("cluster")
    if isinstance(cluster, Mapping) and cluster.get("name"):
        return str(cluster["name"])
    labels = (replica.get("metadata") or {}).get("labels") or {}
    return str(labels.get(contracts.LABEL_CLUSTER, ""))


def replica_revision(replica: Mapping[str, Any]) -> str:
    """A ModelReplica's revision: spec.revision, else its label; "" before revisions."""
    spec = replica.get("spec") or {}
    if spec.get("revision"):
        return str(spec["revision"])
    labels = (replica.get("metadata") or {}).get("labels") or {}
    return str(labels.get(contracts.LABEL_REVISION, ""))


def cluster_revisions(
    replicas: Iterable[Mapping[str, Any]], recorded: Iterable[Mapping[str, Any]] = ()
) -> list[ClusterRevision]:
    """Each cluster's revision, sorted by cluster: what its ModelReplicas are composed
    with (a cluster with ModelReplicas of two revisions, one per pool, shows both, `a+b`),
    with when and why from the status's record of it. A cluster only the status names (its
    ModelReplica is gone, or not listed yet) keeps the status's word."""
    by_cluster: dict[str, set[str]] = {}
    rolled: dict[str, bool] = {}
    for replica in replicas:
        cluster = replica_cluster(replica)
        if cluster:
            revision = replica_revision(replica)
            by_cluster.setdefault(cluster, set()).add(revision or UNKNOWN_REVISION)
            reported = str((replica.get("status") or {}).get("revision") or "")
            rolled[cluster] = rolled.get(cluster, True) and bool(revision) and reported == revision
    notes: dict[str, Mapping[str, Any]] = {}
    for entry in recorded:
        if isinstance(entry, Mapping) and entry.get("cluster"):
            notes[str(entry["cluster"])] = entry
    found = []
    for cluster in sorted(set(by_cluster) | set(notes)):
        note = notes.get(cluster, {})
        revision = (
            "+".join(sorted(by_cluster[cluster]))
            if cluster in by_cluster
            else _text(note.get("revision")) or UNKNOWN_REVISION
        )
        found.append(
            ClusterRevision(
                cluster=cluster,
                revision=revision,
                since=_text(note.get("since")),
                reason=_text(note.get("reason")),
                rolled=rolled.get(cluster, False),
            )
        )
    return found


def read_rollout(
    deployment: Mapping[str, Any], replicas: Iterable[Mapping[str, Any]]
) -> Rollout | None:
    """The model's rollout, or None when its status has none (a model composed before
    rollouts, or not reconciled yet): not written is not "complete"."""
    status = deployment.get("status") or {}
    raw = status.get("rollout")
    if not isinstance(raw, Mapping) or not raw.get("revision"):
        return None
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    gates = [g for g in (_gate(x) for x in raw.get("gates") or []) if g]
    return Rollout(
        revision=_text(raw.get("revision")),
        previous=_text(raw.get("previous")),
        phase=_text(raw.get("phase")),
        wave=_int(raw.get("wave")),
        waves=_int(raw.get("waves")),
        reason=_text(raw.get("reason")),
        message=_text(raw.get("message")),
        failed_gate=_gate(raw.get("failedGate")),
        gates=gates,
        started_at=_text(raw.get("startedAt")),
        wave_started_at=_text(raw.get("waveStartedAt")),
        clusters=cluster_revisions(replicas, raw.get("clusters") or []),
        baking_since=_text(raw.get("bakingSince")),
        paused=contracts.ANNOTATION_ROLLOUT_PAUSED in annotations,
        undo=_text(annotations.get(contracts.ANNOTATION_ROLLOUT_UNDO)),
    )


# --- what `modelplane status` and `explain` say ----------------------------------------


def gate_words(gate: Gate) -> str:
    """`errorRate Failed: observed 0.12, threshold 0.05` (the state left out when the
    status gives none, as for `failedGate`)."""
    numbers = []
    if gate.observed:
        numbers.append(f"observed {gate.observed}")
    if gate.threshold:
        numbers.append(f"threshold {gate.threshold}")
    name = f"{gate.name} {gate.state}" if gate.state else gate.name
    return name + (f": {', '.join(numbers)}" if numbers else "")


def headline(rollout: Rollout) -> str:
    """One line: `Progressing r2 (from r1), wave 1/2`; the column in `modelplane status`."""
    line = f"{rollout.phase or 'Unknown'} {rollout.revision}"
    if rollout.changing:
        line += f" (from {rollout.previous})"
    if rollout.in_progress and rollout.waves:
        line += f", wave {rollout.wave}/{rollout.waves}"
    if rollout.paused and rollout.phase != contracts.ROLLOUT_PHASE_PAUSED:
        line += ", pause asked"
    if rollout.undo:
        line += f", undo of {rollout.undo} asked"
    return line


def explain_lines(rollout: Rollout) -> list[str]:
    """The rollout under `modelplane explain`: phase, revisions, wave, why, the failed
    gate with its numbers, the engine's own words, every gate, each cluster's revision."""
    lines = [f"  rollout: {headline(rollout)}"]
    if rollout.started_at:
        when = f"    started {rollout.started_at}"
        if rollout.in_progress and rollout.wave_started_at:
            when += f"; wave {rollout.wave} started {rollout.wave_started_at}"
        if rollout.in_progress and rollout.baking_since:
            when += f", baking since {rollout.baking_since}"
        lines.append(when)
    if rollout.reason or rollout.message:
        lines.append(f"    {rollout.reason or 'why'}: {rollout.message or '-'}")
    if rollout.failed_gate:
        lines.append(f"    failed gate: {gate_words(rollout.failed_gate)}")
    for gate in rollout.gates:
        lines.append(f"    gate {gate_words(gate)}")
    for cluster in rollout.clusters:
        mark = ""
        if rollout.changing and cluster.revision == rollout.revision:
            mark = " (new)" if cluster.rolled or not rollout.in_progress else " (new, rolling)"
        elif rollout.changing and cluster.revision == rollout.previous:
            mark = " (previous)"
        detail = ", ".join(
            x for x in (cluster.since and f"since {cluster.since}", cluster.reason) if x
        )
        lines.append(
            f"    {cluster.cluster}: {cluster.revision}{mark}" + (f" ({detail})" if detail else "")
        )
    return lines


# --- steering: pause, resume, undo ------------------------------------------------------


@dataclass(frozen=True)
class Change:
    cluster: str
    before: str
    after: str


@dataclass(frozen=True)
class Steering:
    """What one `modelplane rollout ACTION` does: the annotation patch and the preview, or
    `refusal`, the reason it does nothing (then `patch` is None)."""

    action: str
    refusal: str = ""
    patch: dict[str, Any] | None = None
    # Clusters whose composed revision this changes at the next reconcile.
    changes: list[Change] = field(default_factory=list)
    # What else the operator should know before it is written: what stays, what follows.
    notes: list[str] = field(default_factory=list)


def _annotations(values: Mapping[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"annotations": dict(values)}}


def _nothing(action: str, why: str) -> Steering:
    return Steering(action=action, refusal=why)


def _no_rollout(action: str, rollout: Rollout | None) -> Steering | None:
    """The refusal when there is no rollout in progress to act on, else None."""
    if rollout is None:
        return _nothing(
            action,
            "has no rollout in its status (not reconciled since rollouts exist, or not yet "
            f"reconciled); nothing to {action}",
        )
    if rollout.phase == contracts.ROLLOUT_PHASE_COMPLETE:
        return _nothing(
            action,
            f"has no rollout in progress: revision {rollout.revision} is Complete on every "
            f"cluster; nothing to {action}"
            + (
                ". To go back, change the template back: that is a new revision, rolled out "
                "wave by wave"
                if action == UNDO
                else ""
            ),
        )
    if rollout.phase == contracts.ROLLOUT_PHASE_ROLLED_BACK:
        return _nothing(
            action,
            f"has no rollout in progress: revision {rollout.revision} was rolled back to "
            f"{rollout.previous or 'the last good revision'} ({rollout.reason or 'see its status'})"
            f"; nothing to {action}. A new change to the template starts a new rollout",
        )
    if not rollout.in_progress:
        return _nothing(
            action,
            f"its rollout's phase is {rollout.phase or 'not written'!r}, not one of "
            f"{', '.join(IN_PROGRESS)}; nothing to {action}",
        )
    return None


def plan_pause(rollout: Rollout | None) -> Steering:
    refused = _no_rollout(PAUSE, rollout)
    if refused:
        return refused
    assert rollout is not None
    if rollout.paused:
        return _nothing(
            PAUSE,
            f"is already paused ({contracts.ANNOTATION_ROLLOUT_PAUSED} is set); "
            "`modelplane rollout resume` continues it",
        )
    if rollout.phase == contracts.ROLLOUT_PHASE_PAUSED:
        return _nothing(
            PAUSE,
            f"is already paused by its policy (onFailure: Pause): {_failure(rollout)}. "
            "Change the template (a new revision) or `modelplane rollout undo` it",
        )
    held = rollout.on(rollout.previous) if rollout.previous else []
    notes = [
        f"no cluster changes now: the rollout of {rollout.revision} stops at wave "
        f"{rollout.wave}/{rollout.waves}",
        f"stay on {rollout.revision}: {_names(rollout.on(rollout.revision))}",
    ]
    if rollout.previous:
        notes.append(f"stay on {rollout.previous} until resumed: {_names(held)}")
    return Steering(
        action=PAUSE,
        patch=_annotations({contracts.ANNOTATION_ROLLOUT_PAUSED: "true"}),
        notes=notes,
    )


def plan_resume(rollout: Rollout | None) -> Steering:
    if rollout is not None and rollout.paused and not rollout.in_progress:
        # A pause left behind after its rollout ended: removing it changes no cluster,
        # and keeps the next change to the template from starting held.
        return Steering(
            action=RESUME,
            patch=_annotations({contracts.ANNOTATION_ROLLOUT_PAUSED: None}),
            notes=[
                f"no rollout is in progress ({rollout.phase or 'no phase'}); the leftover "
                f"{contracts.ANNOTATION_ROLLOUT_PAUSED} is removed so the next change to "
                "the template is not held"
            ],
        )
    refused = _no_rollout(RESUME, rollout)
    if refused:
        return refused
    assert rollout is not None
    if not rollout.paused:
        if rollout.phase == contracts.ROLLOUT_PHASE_PAUSED:
            return _nothing(
                RESUME,
                f"was paused by its policy (onFailure: Pause), not by "
                f"{contracts.ANNOTATION_ROLLOUT_PAUSED}: {_failure(rollout)}. Fix the "
                "cause and change the template (a new revision), or `modelplane rollout "
                "undo` it",
            )
        return _nothing(RESUME, f"is not paused ({contracts.ANNOTATION_ROLLOUT_PAUSED} is not set)")
    still = (
        rollout.on(rollout.previous) if rollout.previous else rollout.elsewhere(rollout.revision)
    )
    return Steering(
        action=RESUME,
        patch=_annotations({contracts.ANNOTATION_ROLLOUT_PAUSED: None}),
        notes=[
            f"the rollout of {rollout.revision} continues from wave {rollout.wave}/"
            f"{rollout.waves}, each wave after its gates pass",
            f"still to move to {rollout.revision}, wave by wave: {_names(still)}",
        ],
    )


def plan_undo(rollout: Rollout | None) -> Steering:
    refused = _no_rollout(UNDO, rollout)
    if refused:
        return refused
    assert rollout is not None
    if not rollout.changing:
        return _nothing(
            UNDO,
            f"has no previous revision to return to (revision {rollout.revision} is its "
            "first); delete or change the ModelDeployment instead",
        )
    if rollout.undo == rollout.revision:
        return _nothing(
            UNDO,
            f"already has {contracts.ANNOTATION_ROLLOUT_UNDO}={rollout.revision}: the "
            "rollback is asked; follow it with `modelplane explain`",
        )
    changes = [
        Change(c.cluster, c.revision, rollout.previous)
        for c in rollout.clusters
        if c.revision == rollout.revision
    ]
    notes = [
        f"stay on {rollout.previous}: {_names(rollout.on(rollout.previous))}",
        f"revision {rollout.revision} reaches no further cluster",
    ]
    if rollout.paused:
        notes.append(
            f"{contracts.ANNOTATION_ROLLOUT_PAUSED} stays set: `modelplane rollout resume` "
            "removes it"
        )
    return Steering(
        action=UNDO,
        patch=_annotations({contracts.ANNOTATION_ROLLOUT_UNDO: rollout.revision}),
        changes=changes,
        notes=notes,
    )


PLANS: Final = {PAUSE: plan_pause, RESUME: plan_resume, UNDO: plan_undo}


def plan(action: str, rollout: Rollout | None) -> Steering:
    return PLANS[action](rollout)


def _names(clusters: list[str]) -> str:
    return ", ".join(clusters) if clusters else "none"


def _failure(rollout: Rollout) -> str:
    if rollout.failed_gate:
        return f"gate {gate_words(rollout.failed_gate)}"
    return rollout.message or rollout.reason or "see its status"


def preview(where: str, steering: Steering) -> str:
    """The lines printed before the write: which clusters change, then what stays."""
    lines = [f"{where}: rollout {steering.action}"]
    if steering.changes:
        lines.append("  clusters that change at the next reconcile:")
        lines += [f"    {c.cluster}: {c.before} -> {c.after}" for c in steering.changes]
    else:
        lines.append("  clusters that change at the next reconcile: none")
    lines += [f"  {note}" for note in steering.notes]
    return "\n".join(lines) + "\n"
