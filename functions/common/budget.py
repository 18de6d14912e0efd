"""How much work one request may make a function do, checked while the work runs.

A tenant's input can make a function compute (CEL selectors, above all). An estimate
made before the work runs can be wrong, so the work itself is counted: the code that
does it calls `spend()` as it goes, and the request's budget stops it with an exception
the moment any of three things is true:

- the request's deadline has passed (gRPC's, from the caller);
- the caller went away (the RPC was cancelled);
- a counted kind of work (`"cel"` steps, say) has used the request's allowance of it.

So a worker thread never runs on for a caller that stopped waiting, and one request's
work is bounded whatever its input. The budget travels in a context variable: the shell
sets it once per request (`GuardedRunner.RunFunction`), `asyncio.to_thread` carries it
into the worker thread, and code that does no counted work never sees it.

Without a request (a unit test, a CLI), `current()` is a fresh budget each time: no
deadline, nobody cancels it, and nothing accumulates across calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final


class WorkStopped(Exception):
    """The request's work was stopped: `path: rule`, like an input error, so the answer
    names what to change (or says the caller's deadline passed)."""

    def __init__(self, path: str, rule: str) -> None:
        super().__init__(f"{path}: {rule}" if path else rule)
        self.path = path
        self.rule = rule


class WorkBudget:
    """One request's deadline, cancellation and allowances of counted work."""

    def __init__(
        self,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deadline = deadline  # on `clock`, None: no deadline
        self.clock = clock
        self.cancelled = threading.Event()
        self.spent: dict[str, int] = {}

    def cancel(self) -> None:
        self.cancelled.set()

    def check(self, path: str = "") -> None:
        """WorkStopped if the caller is gone or its deadline passed."""
        if self.cancelled.is_set():
            raise WorkStopped(path, "stopped: the caller cancelled the request")
        if self.deadline is not None and self.clock() >= self.deadline:
            raise WorkStopped(path, "stopped: the request's deadline passed")

    def spend(self, kind: str, amount: int, allowance: int, rule: str) -> None:
        """Count `amount` of `kind`; WorkStopped(rule) once the request has used more
        than `allowance` of it, or if it must stop anyway (`check`)."""
        used = self.spent.get(kind, 0) + amount
        self.spent[kind] = used
        if used > allowance:
            raise WorkStopped("", rule)
        self.check()


class FairGate:
    """Capacity for counted work, shared by all requests: `turn()` waits for a free slot,
    and when one frees it goes to the waiting request that has spent the least of the
    kind so far. A request that keeps asking for expensive work waits behind every
    request that asks for little, so one tenant's selectors cannot queue another's
    reconcile behind them; a waiter still stops at its deadline or cancellation.

    One slot is the default: the interpreter holds the GIL while it counts, so two
    evaluations at once only take turns at finer grain and slow everything else more."""

    def __init__(self, slots: int = 1, poll: float = 0.05) -> None:
        self._changed = threading.Condition()
        self._free = slots
        self._poll = poll
        self._waiting: list[tuple[int, int]] = []  # a heap of (spent, arrival)
        self._arrivals = itertools.count()

    @contextlib.contextmanager
    def turn(self, work: WorkBudget, kind: str) -> Iterator[None]:
        entry = (work.spent.get(kind, 0), next(self._arrivals))
        with self._changed:
            heapq.heappush(self._waiting, entry)
            try:
                while not (self._free and self._waiting[0] == entry):
                    self._changed.wait(self._poll)
                    work.check()
            except BaseException:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                self._changed.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._free -= 1
        try:
            yield
        finally:
            with self._changed:
                self._free += 1
                self._changed.notify_all()


_CURRENT: Final[contextvars.ContextVar[WorkBudget | None]] = contextvars.ContextVar(
    "modelplane_work_budget", default=None
)


def current() -> WorkBudget:
    """The running request's budget; outside a request a fresh one per call (no
    deadline, and an allowance that only what this call counts can use)."""
    return _CURRENT.get() or WorkBudget()


def begin(deadline_in: float | None) -> tuple[WorkBudget, contextvars.Token]:
    """A new budget for a request whose caller waits `deadline_in` seconds more (None:
    no deadline), made current; `end(token)` restores the previous one."""
    budget = WorkBudget(None if deadline_in is None else time.monotonic() + deadline_in)
    return budget, _CURRENT.set(budget)


def end(token: contextvars.Token) -> None:
    _CURRENT.reset(token)
