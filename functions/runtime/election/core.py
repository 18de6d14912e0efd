"""Who is the fleet hub: the election as a pure state machine over M lock records.

Every member keeps one hub Lease. A candidate is hub only while a compare-and-swap write
of its own identity succeeded on a majority (Q = M // 2 + 1) of the *configured*
members, so two hubs would need two majorities, which share a member. This module owns
the decisions; `election.py` is the shell that reads and writes real Leases, and the
property test drives the same class against an in-process lock store with crashes,
partitions and delays.

Why it is safe without trusting anyone's wall clock:

- A record may be taken over only when it is empty, or when *this* candidate has seen
  the same version (resourceVersion) unchanged for the record's lease duration on its
  own monotonic clock. The clock starts when the version is first read, which is after
  it was written, so every takeover of a record happens at least one lease duration
  after the previous holder's last write to it.
- A round's writes are sent after the round started, so a holder whose round confirmed
  a majority acts only until `round start + renew deadline`. The renew deadline is
  shorter than the lease duration, so the old holder has stopped before any member of
  its last majority can be taken over; a new majority needs one of those members.
- A write that timed out is not counted even though it may land later (an API server
  frozen with the request in its socket). A late write only restarts others' timers.
- Wall-clock time (`renewed_at`) only breaks ties between holders in a read; skewed
  clocks change who a read names for a moment, never who may act.

No majority of records obtainable: the candidate writes nothing, so a split (A, B and C
each holding one of three records after a hub dies) cannot renew itself forever; the
candidate holding fewer records than another (ties: the larger identity) releases its
own, so the split resolves in one round instead of one lease duration.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0


@dataclass(frozen=True)
class Timings:
    """Seconds. The renew deadline must leave the lease duration's margin for drift."""

    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "election timings must satisfy 0 < retry period < renew deadline < lease "
                f"duration; got retry {self.retry_period}s, renew deadline "
                f"{self.renew_deadline}s, lease duration {self.lease_duration}s"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """One member's hub Lease as the election sees it."""

    holder: str = ""  # "" is no holder: free to take, and no vote in a read
    token: str = ""  # the holder's term (fencing token)
    duration: float = DEFAULT_LEASE_DURATION
    renewed_at: float | None = None  # the writer's wall clock, epoch seconds; ties only
    acquired_at: float | None = None
    transitions: int = 0
    version: str = ""  # the store's resourceVersion; compare-and-swap key


class _Missing:
    """The member answered: it has no hub Lease yet (created on first write)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()

# What a read of one member returned: its record, MISSING, or None when it did not
# answer (timeout, connection refused, any error).
Answer = LeaseRecord | _Missing | None


class WriteStatus(Enum):
    OK = "ok"
    CONFLICT = "conflict"  # 409: someone wrote since our read; re-read, never overwrite
    FAILED = "failed"  # no answer in time; it may still land


@dataclass(frozen=True)
class Write:
    member: str
    expected_version: str | None  # None: create (the member had no Lease)
    record: LeaseRecord


@dataclass(frozen=True)
class WriteResult:
    status: WriteStatus
    version: str = ""  # the new resourceVersion when OK


@dataclass(frozen=True)
class View:
    """A read of the fleet: the holder most answering members name."""

    reachable: int
    configured: int
    quorum: int
    hub: str  # "" when no holder, or fewer than a quorum of members answered

    @property
    def has_quorum(self) -> bool:
        return self.reachable >= self.quorum

    def describe(self) -> str:
        return f"{self.reachable} of {self.configured} members reachable, need {self.quorum}"


@dataclass(frozen=True)
class Round:
    started: float  # monotonic time the reads were sent
    view: View
    writes: tuple[Write, ...]
    token: str  # the term the writes carry ("" when releasing or writing nothing)
    claiming: bool  # the writes claim (or renew) the hub


class Transition(Enum):
    NONE = "none"
    ACQUIRED = "acquired"
    LOST = "lost"


@dataclass
class _Seen:
    version: str
    first_seen: float  # local monotonic time this version was first read
    record: LeaseRecord


@dataclass
class ElectionCore:
    """One candidate's election state. Not thread-safe: one shell drives it."""

    identity: str
    members: tuple[str, ...]
    timings: Timings
    new_token: Callable[[], str]
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _issued: set[str] = field(default_factory=set)  # every token this process minted
    _term: str = ""
    _acting_until: float = -math.inf
    _was_leading: bool = False

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("a candidate needs a non-empty identity")
        if not self.members or len(set(self.members)) != len(self.members):
            raise ValueError(f"members must be non-empty and unique; got {self.members}")
        self.members = tuple(sorted(self.members))

    @property
    def quorum(self) -> int:
        return len(self.members) // 2 + 1

    @property
    def term(self) -> str:
        return self._term

    def leading(self, now: float) -> bool:
        """True while this candidate may act as hub (monotonic `now`)."""
        return bool(self._term) and now < self._acting_until

    def acting_until(self) -> float:
        return self._acting_until if self._term else -math.inf

    # --- a round: read every member, decide, write, complete ------------------------

    def decide(
        self, started: float, now: float, answers: Mapping[str, Answer], wall: float
    ) -> Round:
        """Given every member's answer, the writes this round makes."""
        records: dict[str, LeaseRecord | _Missing] = {}
        for member in self.members:
            answer = answers.get(member)
            if answer is None:
                continue
            records[member] = answer
            if isinstance(answer, LeaseRecord):
                self._observe(member, answer, now)
        view = self._view(records, now)
        if not view.has_quorum:
            return Round(started, view, (), "", claiming=False)
        mine = [m for m, r in records.items() if self._is_mine(r)]
        free = [m for m, r in records.items() if not self._is_mine(r) and self._is_free(m, r, now)]
        if len(mine) + len(free) >= self.quorum:
            token = self._term if self.leading(now) else self.new_token()
            # Remembered before sending: a write that lands late, or on fewer than a
            # quorum, still names a term only this process uses.
            self._issued.add(token)
            writes = tuple(
                Write(m, self._expected(records[m]), self._claim(records[m], token, wall))
                for m in sorted(mine + free)
            )
            return Round(started, view, writes, token, claiming=True)
        if self.leading(now):
            return Round(started, view, (), "", claiming=False)
        return Round(started, view, self._yield_minority(records, now, wall), "", claiming=False)

    def complete(self, round_: Round, results: Mapping[str, WriteResult], now: float) -> Transition:
        """Count the round's confirmed writes; a majority makes (or keeps) the hub."""
        confirmed = 0
        for write in round_.writes:
            result = results.get(write.member, WriteResult(WriteStatus.FAILED))
            if result.status is WriteStatus.OK:
                confirmed += 1
                record = replace(write.record, version=result.version)
                self._seen[write.member] = _Seen(result.version, now, record)
            elif result.status is WriteStatus.CONFLICT:
                self._seen.pop(write.member, None)
        if round_.claiming and confirmed >= self.quorum:
            if self._term != round_.token:
                self._acting_until = -math.inf
            self._term = round_.token
            self._acting_until = max(
                self._acting_until, round_.started + self.timings.renew_deadline
            )
        leading = self.leading(now)
        if not leading:
            self._term = ""  # a term that lapsed is over: the next one gets a new token
        transition = Transition.NONE
        if leading and not self._was_leading:
            transition = Transition.ACQUIRED
        elif self._was_leading and not leading:
            transition = Transition.LOST
        self._was_leading = leading
        return transition

    def release(self, now: float, wall: float) -> tuple[Write, ...]:
        """Stop acting at once; the writes that empty every record this process holds."""
        self._term = ""
        self._acting_until = -math.inf
        self._was_leading = False
        writes = []
        for member, seen in sorted(self._seen.items()):
            if self._is_mine_any_term(seen.record):
                writes.append(Write(member, seen.version, self._emptied(seen.record, wall)))
        return tuple(writes)

    def held(self) -> tuple[str, ...]:
        """Members whose record, as last seen, names this process."""
        return tuple(
            m for m, seen in sorted(self._seen.items()) if self._is_mine_any_term(seen.record)
        )

    def next_round_at(self, now: float) -> float:
        """One retry period from now, or earlier when a record we wait on expires."""
        soonest = now + self.timings.retry_period
        for seen in self._seen.values():
            if seen.record.holder and not self._is_mine_any_term(seen.record):
                expiry = seen.first_seen + seen.record.duration
                if now < expiry < soonest:
                    soonest = expiry
        return soonest

    # --- helpers -----------------------------------------------------------------------

    def _observe(self, member: str, record: LeaseRecord, now: float) -> None:
        seen = self._seen.get(member)
        if seen is None or seen.version != record.version:
            self._seen[member] = _Seen(record.version, now, record)
        else:
            seen.record = record

    def _is_mine_any_term(self, record: LeaseRecord | _Missing) -> bool:
        return (
            isinstance(record, LeaseRecord)
            and record.holder == self.identity
            and record.token in self._issued
        )

    def _is_mine(self, record: LeaseRecord | _Missing) -> bool:
        # Records from an earlier term of this process are ours to renew under a new
        # term: nobody else may take them before they expire, so no other hub acts on
        # them. A record naming our identity with a token we never minted is a previous
        # incarnation's (same pod name) and is treated like anyone else's.
        return self._is_mine_any_term(record)

    def _is_free(self, member: str, record: LeaseRecord | _Missing, now: float) -> bool:
        if isinstance(record, _Missing) or not record.holder:
            return True
        seen = self._seen[member]
        return now - seen.first_seen >= record.duration

    def _is_expired(self, member: str, record: LeaseRecord, now: float) -> bool:
        seen = self._seen.get(member)
        return seen is not None and now - seen.first_seen >= record.duration

    def _view(self, records: Mapping[str, LeaseRecord | _Missing], now: float) -> View:
        votes: Counter[str] = Counter()
        latest: dict[str, float] = {}
        for member, record in records.items():
            if not isinstance(record, LeaseRecord) or not record.holder:
                continue
            if self._is_expired(member, record, now):
                continue
            votes[record.holder] += 1
            renewed = record.renewed_at if record.renewed_at is not None else -math.inf
            latest[record.holder] = max(latest.get(record.holder, -math.inf), renewed)
        reachable = len(records)
        hub = ""
        if reachable >= self.quorum and votes:
            hub = max(votes, key=lambda h: (votes[h], latest[h], h))
        return View(reachable, len(self.members), self.quorum, hub)

    def _yield_minority(
        self, records: Mapping[str, LeaseRecord | _Missing], now: float, wall: float
    ) -> tuple[Write, ...]:
        """Release our records when another candidate is at least as far along."""
        counts: Counter[str] = Counter()
        for member, record in records.items():
            if not isinstance(record, LeaseRecord) or not record.holder:
                continue
            if not self._is_expired(member, record, now) or self._is_mine_any_term(record):
                counts[record.holder] += 1
        ours = counts.pop(self.identity, 0)
        if not ours or not counts:
            return ()
        if not any(
            theirs > ours or (theirs == ours and rival < self.identity)
            for rival, theirs in counts.items()
        ):
            return ()
        return tuple(
            Write(m, r.version, self._emptied(r, wall))
            for m, r in sorted(records.items())
            if isinstance(r, LeaseRecord) and self._is_mine_any_term(r)
        )

    @staticmethod
    def _expected(record: LeaseRecord | _Missing) -> str | None:
        return record.version if isinstance(record, LeaseRecord) else None

    def _claim(self, previous: LeaseRecord | _Missing, token: str, wall: float) -> LeaseRecord:
        if isinstance(previous, LeaseRecord) and previous.holder == self.identity:
            acquired, transitions = previous.acquired_at, previous.transitions
            if previous.token != token:
                acquired = wall
        else:
            acquired = wall
            transitions = (previous.transitions + 1) if isinstance(previous, LeaseRecord) else 0
        return LeaseRecord(
            holder=self.identity,
            token=token,
            duration=self.timings.lease_duration,
            renewed_at=wall,
            acquired_at=acquired,
            transitions=transitions,
        )

    @staticmethod
    def _emptied(record: LeaseRecord, wall: float) -> LeaseRecord:
        return replace(record, holder="", token="", renewed_at=wall, version="")
