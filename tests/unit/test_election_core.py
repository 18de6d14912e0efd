"""The election state machine: table cases, and a property test that drives several
candidates against an in-process lock store with random crashes, partitions, freezes and
message delays, checking that no two candidates ever act as hub at the same instant.

The store and network here are an aid; the proof against real API servers is
tests/runtime/test_election.py.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.runtime.election.core import (
    MISSING,
    ElectionCore,
    LeaseRecord,
    Timings,
    Transition,
    WriteResult,
    WriteStatus,
)

DEFAULT = Timings()


def _tokens(prefix: str):
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def _core(identity: str, members=("a", "b", "c"), timings=DEFAULT) -> ElectionCore:
    return ElectionCore(identity, tuple(members), timings, _tokens(identity))


def _held(holder: str, version: str, token: str = "t", renewed: float = 0.0) -> LeaseRecord:
    return LeaseRecord(holder=holder, token=token, version=version, renewed_at=renewed)


def _ok_all(round_) -> dict[str, WriteResult]:
    return {w.member: WriteResult(WriteStatus.OK, f"{w.member}-2") for w in round_.writes}


# --- table cases ---------------------------------------------------------------------


def test_acquires_when_every_member_is_empty():
    core = _core("a/p")
    round_ = core.decide(0.0, 0.1, dict.fromkeys("abc", MISSING), wall=1000.0)
    assert [w.member for w in round_.writes] == ["a", "b", "c"]
    assert all(w.expected_version is None for w in round_.writes)
    assert core.complete(round_, _ok_all(round_), 0.2) is Transition.ACQUIRED
    assert core.leading(0.2)
    assert core.leading(9.9)
    assert not core.leading(10.0)  # round start + renew deadline


def test_counts_only_a_majority_of_configured_members_not_of_answers():
    core = _core("a/p", members=("a", "b", "c", "d", "e"))
    answers = {"a": MISSING, "b": MISSING, "c": None, "d": None, "e": None}
    round_ = core.decide(0.0, 0.1, answers, wall=0.0)
    assert round_.writes == ()
    assert round_.view.describe() == "2 of 5 members reachable, need 3"
    assert not round_.view.has_quorum


def test_two_member_fleet_needs_both():
    core = _core("a/p", members=("a", "b"))
    round_ = core.decide(0.0, 0.1, {"a": MISSING, "b": None}, wall=0.0)
    assert round_.writes == ()
    assert round_.view.quorum == 2
    round_ = core.decide(1.0, 1.1, {"a": MISSING, "b": MISSING}, wall=0.0)
    results = {"a": WriteResult(WriteStatus.OK, "2"), "b": WriteResult(WriteStatus.FAILED)}
    assert core.complete(round_, results, 1.2) is Transition.NONE
    assert not core.leading(1.2)


def test_conflict_is_not_counted_and_forgets_the_version():
    core = _core("a/p")
    round_ = core.decide(0.0, 0.1, dict.fromkeys("abc", MISSING), wall=0.0)
    results = {
        "a": WriteResult(WriteStatus.OK, "2"),
        "b": WriteResult(WriteStatus.CONFLICT),
        "c": WriteResult(WriteStatus.CONFLICT),
    }
    assert core.complete(round_, results, 0.2) is Transition.NONE
    assert not core.leading(0.2)


def test_waits_a_full_lease_duration_of_unchanged_record_before_taking_over():
    core = _core("b/p")
    answers = {m: _held("a/p", "7") for m in "abc"}
    assert core.decide(0.0, 0.0, answers, wall=0.0).writes == ()
    assert core.decide(14.0, 14.9, answers, wall=0.0).writes == ()
    taking = core.decide(15.0, 15.0, answers, wall=0.0)
    assert [(w.member, w.expected_version) for w in taking.writes] == [
        ("a", "7"),
        ("b", "7"),
        ("c", "7"),
    ]
    assert all(w.record.transitions == 1 for w in taking.writes)


def test_a_renewal_restarts_the_wait():
    core = _core("b/p")
    core.decide(0.0, 0.0, {m: _held("a/p", "7") for m in "abc"}, wall=0.0)
    renewed = {m: _held("a/p", "8") for m in "abc"}
    assert core.decide(14.0, 14.0, renewed, wall=0.0).writes == ()
    assert core.decide(28.9, 28.9, renewed, wall=0.0).writes == ()
    assert len(core.decide(29.0, 29.0, renewed, wall=0.0).writes) == 3


def test_empty_holder_is_free_at_once_and_no_vote():
    core = _core("b/p")
    answers = {"a": _held("", "3"), "b": _held("", "3"), "c": _held("a/p", "9")}
    round_ = core.decide(0.0, 0.0, answers, wall=0.0)
    assert round_.view.hub == "a/p"
    assert [w.member for w in round_.writes] == ["a", "b"]


def test_read_names_the_holder_most_members_name():
    core = _core("x/p", members=("a", "b", "c", "d", "e"))
    answers = {
        "a": _held("h1/p", "1"),
        "b": _held("h1/p", "1"),
        "c": _held("h2/p", "1", renewed=99.0),
        "d": None,
        "e": _held("", "1"),
    }
    assert core.decide(0.0, 0.0, answers, wall=0.0).view.hub == "h1/p"


def test_read_tie_goes_to_the_latest_renewal():
    core = _core("x/p", members=("a", "b", "c", "d"))
    answers = {
        "a": _held("h1/p", "1", renewed=100.0),
        "b": _held("h2/p", "1", renewed=105.0),
        "c": _held("h1/p", "1", renewed=101.0),
        "d": _held("h2/p", "1", renewed=99.0),
    }
    assert core.decide(0.0, 0.0, answers, wall=0.0).view.hub == "h2/p"


def test_read_without_a_majority_of_answers_names_no_hub():
    core = _core("x/p")
    answers = {"a": _held("h1/p", "1"), "b": None, "c": None}
    assert core.decide(0.0, 0.0, answers, wall=0.0).view.hub == ""


def test_every_acquisition_mints_a_new_token_and_renewals_keep_it():
    core = _core("a/p")
    first = core.decide(0.0, 0.0, dict.fromkeys("abc", MISSING), wall=0.0)
    core.complete(first, _ok_all(first), 0.1)
    renewal = core.decide(
        2.0,
        2.0,
        {m: replace(w.record, version=f"{m}-2") for m, w in ((w.member, w) for w in first.writes)},
        wall=0.0,
    )
    assert renewal.token == first.token
    core.complete(renewal, {}, 2.1)  # every write failed: still the first round's deadline
    assert core.leading(9.9)
    assert not core.leading(10.0)
    again = core.decide(
        20.0, 20.0, {m: _held("a/p", f"{m}-2", token=first.token) for m in "abc"}, wall=0.0
    )
    assert again.writes  # its own records, still held by its identity and an old term
    assert again.token != first.token


def test_a_previous_incarnation_with_the_same_identity_must_expire_first():
    restarted = _core("a/p")
    answers = {m: _held("a/p", "5", token="old-process-term") for m in "abc"}
    assert restarted.decide(0.0, 0.0, answers, wall=0.0).writes == ()
    assert len(restarted.decide(15.0, 15.0, answers, wall=0.0).writes) == 3


def test_split_vote_resolves_toward_the_smallest_identity():
    members = ("a", "b", "c")
    records = {"a": _held("a/p", "1"), "b": _held("b/p", "1"), "c": _held("c/p", "1")}
    cores = {name: _core(f"{name}/p") for name in members}
    for core in cores.values():
        # Each holds its own member's record from an earlier round of its own.
        core._issued.add("t")
    releases = {name: cores[name].decide(0.0, 0.0, records, wall=0.0).writes for name in members}
    assert releases["a"] == ()
    assert [w.member for w in releases["b"]] == ["b"]
    assert [w.member for w in releases["c"]] == ["c"]
    assert all(w.record.holder == "" for w in releases["b"] + releases["c"])


def test_release_empties_own_records_and_stops_acting_at_once():
    core = _core("a/p")
    round_ = core.decide(0.0, 0.0, dict.fromkeys("abc", MISSING), wall=0.0)
    core.complete(round_, _ok_all(round_), 0.1)
    writes = core.release(0.5, wall=0.0)
    assert not core.leading(0.5)
    assert sorted((w.member, w.expected_version, w.record.holder) for w in writes) == [
        ("a", "a-2", ""),
        ("b", "b-2", ""),
        ("c", "c-2", ""),
    ]


def test_next_round_wakes_when_an_awaited_record_expires():
    core = _core("b/p")
    core.decide(0.0, 0.3, {m: _held("a/p", "7") for m in "abc"}, wall=0.0)
    assert core.next_round_at(14.0) == pytest.approx(15.3)
    assert core.next_round_at(10.0) == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("lease", "renew", "retry"), [(10, 10, 2), (15, 10, 10), (15, 10, 0), (5, 10, 2)]
)
def test_timings_must_leave_a_margin(lease, renew, retry):
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        Timings(lease, renew, retry)


# --- property: never two acting hubs ---------------------------------------------------

REQUEST_TIMEOUT = 1.5


class Store:
    """One member's Lease with compare-and-swap on a version counter."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0

    def read(self):
        if self.record is None:
            return MISSING
        return replace(self.record, version=str(self.version))

    def cas(self, expected: str | None, record: LeaseRecord) -> WriteResult:
        if expected is None:
            if self.record is not None:
                return WriteResult(WriteStatus.CONFLICT)
        elif self.record is None or str(self.version) != expected:
            return WriteResult(WriteStatus.CONFLICT)
        self.version += 1
        self.record = replace(record, version="")
        return WriteResult(WriteStatus.OK, str(self.version))


@dataclass
class SimAgent:
    index: int
    identity: str
    drift: float  # monotonic clock rate error
    wall_skew: float
    core: ElectionCore
    alive: bool = True
    incarnation: int = 0
    paused_until: float = 0.0

    def mono(self, t: float) -> float:
        return t * (1 + self.drift)

    def to_global(self, mono: float) -> float:
        return mono / (1 + self.drift)


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    action: object = field(compare=False)


@dataclass(frozen=True)
class Fault:
    kind: str  # crash, stop, partition, isolate, member-down, pause
    at: float
    agent: int
    member: int
    length: float


class Simulation:
    def __init__(
        self,
        members: int,
        agents: int,
        faults: list[Fault],
        rng: random.Random,
        heal: float,
        *,
        timings: Timings = DEFAULT,
    ) -> None:
        self.rng = rng
        self.heal = heal
        self.timings = timings
        self.members = [f"m{i}" for i in range(members)]
        self.stores = {m: Store() for m in self.members}
        self.queue: list[_Event] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.tokens: list[str] = []
        self.minted = itertools.count(1)
        self.partitions: list[tuple[int, str, float, float]] = []
        self.agents = [
            SimAgent(
                index=i,
                identity=f"c{i}/agent",
                drift=rng.uniform(-0.01, 0.01),
                wall_skew=rng.uniform(-5, 5),
                core=self._new_core(f"c{i}/agent"),
            )
            for i in range(agents)
        ]
        for agent in self.agents:
            self.at(rng.uniform(0, 2), self._round_start(agent, agent.incarnation))
        for fault in faults:
            self._schedule_fault(fault)

    def _new_core(self, identity: str) -> ElectionCore:
        # A process-wide counter stands in for uuid4: unique by construction, so a
        # repeated token can only come from the core keeping a term it lost.
        return ElectionCore(identity, tuple(self.members), self.timings, self._mint)

    def _mint(self) -> str:
        return f"term-{next(self.minted)}"

    def at(self, time: float, action) -> None:
        heapq.heappush(self.queue, _Event(time, next(self.seq), action))

    def delay(self) -> float:
        if self.now >= self.heal:
            return self.rng.uniform(0.001, 0.05)
        roll = self.rng.random()
        if roll < 0.85:
            return self.rng.uniform(0.001, 0.1)
        if roll < 0.95:
            return self.rng.uniform(0.1, 2.0)
        return self.rng.uniform(2.0, 25.0)

    def link_up(self, agent: SimAgent, member: str, time: float) -> bool:
        return not any(
            a == agent.index and m == member and start <= time < end
            for a, m, start, end in self.partitions
        )

    # --- faults ---------------------------------------------------------------------

    def _schedule_fault(self, fault: Fault) -> None:
        agent = self.agents[fault.agent % len(self.agents)]
        member = self.members[fault.member % len(self.members)]
        if fault.at >= self.heal:
            return
        end = min(fault.at + fault.length, self.heal)
        if fault.kind == "partition":
            self.partitions.append((agent.index, member, fault.at, end))
        elif fault.kind == "isolate":  # the agent's own network fails
            self.partitions.extend((agent.index, m, fault.at, end) for m in self.members)
        elif fault.kind == "member-down":  # one member's API server stops answering anyone
            self.partitions.extend((a.index, member, fault.at, end) for a in self.agents)
        elif fault.kind == "pause":
            self.at(fault.at, lambda: setattr(agent, "paused_until", max(agent.paused_until, end)))
        else:
            self.at(fault.at, lambda: self._stop(agent, graceful=fault.kind == "stop"))
            self.at(end, lambda: self._restart(agent))

    def _stop(self, agent: SimAgent, graceful: bool) -> None:
        if not agent.alive:
            return
        if graceful:
            for write in agent.core.release(agent.mono(self.now), wall=self.now):
                self._send_write(agent, write, results=None)
        agent.alive = False
        agent.incarnation += 1

    def _restart(self, agent: SimAgent) -> None:
        if agent.alive:
            return
        agent.alive = True
        agent.core = self._new_core(agent.identity)  # same pod name, new process
        self.at(self.now, self._round_start(agent, agent.incarnation))

    # --- one round ----------------------------------------------------------------

    def _current(self, agent: SimAgent, incarnation: int) -> bool:
        return agent.alive and agent.incarnation == incarnation

    def _deferred(self, agent: SimAgent, action) -> bool:
        """A paused agent runs its next step when it wakes, with what it knew."""
        if self.now < agent.paused_until:
            self.at(agent.paused_until, action)
            return True
        return False

    def _round_start(self, agent: SimAgent, incarnation: int):
        def start() -> None:
            if not self._current(agent, incarnation) or self._deferred(agent, start):
                return
            started = self.now
            answers: dict[str, object] = {}
            arrivals = []
            for member in self.members:
                if not self.link_up(agent, member, started):
                    continue
                served = started + self.delay()
                back = served + self.delay()
                if back > started + REQUEST_TIMEOUT:
                    continue
                arrivals.append(back)

                def serve(member=member, back=back) -> None:
                    if self.link_up(agent, member, back):
                        answers[member] = self.stores[member].read()

                self.at(served, serve)
            decide_at = max(arrivals, default=started)
            if len(arrivals) < len(self.members):
                decide_at = started + REQUEST_TIMEOUT
            self.at(decide_at, self._decide(agent, incarnation, started, answers))

        return start

    def _decide(self, agent, incarnation, started, answers):
        def decide() -> None:
            if not self._current(agent, incarnation) or self._deferred(agent, decide):
                return
            round_ = agent.core.decide(
                agent.mono(started),
                agent.mono(self.now),
                dict(answers),
                wall=self.now + agent.wall_skew,
            )
            results: dict[str, tuple[float, WriteResult]] = {}
            sent = self.now
            arrivals = [self._send_write(agent, w, results) for w in round_.writes]
            done = max([a for a in arrivals if a is not None], default=sent)
            if None in arrivals or done > sent + REQUEST_TIMEOUT:
                done = sent + REQUEST_TIMEOUT
            self.at(done, self._complete(agent, incarnation, round_, results))

        return decide

    def _send_write(self, agent, write, results) -> float | None:
        sent = self.now
        if not self.link_up(agent, write.member, sent):
            return None
        applied = sent + self.delay()
        back = applied + self.delay()

        def apply() -> None:
            result = self.stores[write.member].cas(write.expected_version, write.record)
            if (
                results is not None
                and back <= sent + REQUEST_TIMEOUT
                and self.link_up(agent, write.member, back)
            ):
                results[write.member] = (back, result)

        self.at(applied, apply)
        return back if back <= sent + REQUEST_TIMEOUT else None

    def _complete(self, agent, incarnation, round_, results):
        def complete() -> None:
            if not self._current(agent, incarnation) or self._deferred(agent, complete):
                return
            arrived = {m: r for m, (back, r) in results.items() if back <= self.now}
            transition = agent.core.complete(round_, arrived, agent.mono(self.now))
            if transition is Transition.ACQUIRED:
                self.tokens.append(agent.core.term)
            jitter = self.rng.uniform(0, 0.2 * self.timings.retry_period)
            wake = agent.to_global(agent.core.next_round_at(agent.mono(self.now)))
            self.at(max(wake, self.now) + jitter, self._round_start(agent, incarnation))

        return complete

    # --- run and check --------------------------------------------------------------

    def leaders(self) -> list[str]:
        return [a.identity for a in self.agents if a.alive and a.core.leading(a.mono(self.now))]

    def run(self, until: float) -> list[str]:
        """Run to `until`, asserting at every event that at most one candidate acts."""
        while self.queue and self.queue[0].time <= until:
            event = heapq.heappop(self.queue)
            self.now = event.time
            event.action()
            leaders = self.leaders()
            assert len(leaders) <= 1, f"two acting hubs at t={self.now:.3f}: {leaders}"
        self.now = until
        return self.leaders()


faults_strategy = st.lists(
    st.builds(
        Fault,
        kind=st.sampled_from(["crash", "stop", "partition", "isolate", "member-down", "pause"]),
        at=st.floats(0, 60),
        agent=st.integers(0, 3),
        member=st.integers(0, 4),
        length=st.floats(0.5, 40),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=st.integers(1, 5),
    agents=st.integers(1, 4),
    faults=faults_strategy,
    heal=st.floats(20, 70),
    seed=st.integers(0, 2**32),
)
def test_no_two_candidates_ever_act_as_hub_and_a_hub_returns_after_faults(
    members, agents, faults, heal, seed
):
    # Message delays come from a seeded generator: thousands of draws per run would make
    # hypothesis' own random data slow to generate and to shrink.
    sim = Simulation(members, agents, faults, random.Random(seed), heal)
    # After the last fault: late writes land (25 s), then one lease, then a few rounds.
    leaders = sim.run(until=heal + 25 + DEFAULT.lease_duration + 4 * DEFAULT.retry_period + 5)
    assert len(leaders) == 1, f"no hub {sim.now - heal:.1f}s after the faults healed"
    assert len(set(sim.tokens)) == len(sim.tokens), "a fencing token was reused"


def test_held_lists_the_records_this_process_wrote_until_released():
    core = _core("a/p")
    assert core.held() == ()
    round_ = core.decide(0.0, 0.0, dict.fromkeys("abc", MISSING), wall=0.0)
    core.complete(round_, _ok_all(round_), 0.1)
    assert core.held() == ("a", "b", "c")
    writes = core.release(0.2, wall=0.0)
    core.complete(
        replace(round_, writes=writes, claiming=False),
        {w.member: WriteResult(WriteStatus.OK, f"{w.member}-3") for w in writes},
        0.3,
    )
    assert core.held() == ()
