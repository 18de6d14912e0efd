"""The election's shell: real Leases on every member, a thread per agent, and the agent's
two elections (one replica per member, then the fleet hub).

`election_core.ElectionCore` decides; this module only reads every member's Lease in
parallel with a timeout, hands the answers to the core, sends the writes it returns as
compare-and-swap updates (a 409 is reported as a conflict, never retried blindly), and
tells the core which writes were confirmed. Expiry is judged by the core on this
process's monotonic clock; the wall clock only stamps renewTime and the intents'
expiry, and both can be offset for tests (`Clock`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from functions.common.contracts import AGENT_LEASE_NAME, HUB_LEASE_NAME, SYSTEM_NAMESPACE
from functions.runtime.election.core import (
    MISSING,
    Answer,
    ElectionCore,
    Round,
    Timings,
    Transition,
    View,
    Write,
    WriteResult,
    WriteStatus,
)
from functions.runtime.election.leases import lease_body, lease_record
from functions.runtime.shared.metrics import RuntimeMetrics

log = logging.getLogger("modelplane.election")

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


@dataclass(frozen=True)
class Clock:
    """Monotonic time for every decision; wall time (with an optional offset) for stamps."""

    wall_offset: float = 0.0

    def mono(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time() + self.wall_offset


class KubeLeaseStore:
    """One member's Lease, read and compare-and-swapped through its API server."""

    def __init__(
        self,
        api: client.ApiClient,
        name: str = HUB_LEASE_NAME,
        namespace: str = SYSTEM_NAMESPACE,
        timeout: float = 2.0,
    ) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.name = name
        self.namespace = namespace
        self.timeout = timeout

    def read(self) -> Answer:
        try:
            lease = self.leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timeout
            )
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return MISSING
            log.debug("reading Lease %s/%s: %s", self.namespace, self.name, error.reason)
            return None
        except Exception as error:  # any transport failure is "no answer"
            log.debug("reading Lease %s/%s: %s", self.namespace, self.name, error)
            return None
        return lease_record(lease)

    def write(self, write: Write) -> WriteResult:
        body = lease_body(write.record, self.name, self.namespace, write.expected_version)
        try:
            if write.expected_version is None:
                lease = self.leases.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self.timeout
                )
            else:
                lease = self.leases.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=self.timeout
                )
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                return WriteResult(WriteStatus.CONFLICT)
            log.debug("writing Lease %s/%s: %s", self.namespace, self.name, error.reason)
            return WriteResult(WriteStatus.FAILED)
        except Exception as error:
            log.debug("writing Lease %s/%s: %s", self.namespace, self.name, error)
            return WriteResult(WriteStatus.FAILED)
        return WriteResult(WriteStatus.OK, lease.metadata.resource_version)


class Candidate:
    """Drives one ElectionCore against its members' Lease stores, one round at a time."""

    def __init__(
        self,
        core: ElectionCore,
        stores: Mapping[str, KubeLeaseStore],
        clock: Clock,
        what: str,
        request_timeout: float,
    ) -> None:
        self.core = core
        self.stores = dict(stores)
        self.clock = clock
        self.what = what
        self.request_timeout = request_timeout
        self._pool = ThreadPoolExecutor(max_workers=len(self.stores), thread_name_prefix=what)
        self._lock = threading.Lock()
        self._last_shortage = ""
        self.last_round: Round | None = None

    def leading(self) -> bool:
        with self._lock:
            return self.core.leading(self.clock.mono())

    def term(self) -> str:
        with self._lock:
            return self.core.term if self.core.leading(self.clock.mono()) else ""

    def run_round(self) -> Transition:
        started = self.clock.mono()
        answers = self._gather({m: (s.read,) for m, s in self.stores.items()})
        with self._lock:
            round_ = self.core.decide(started, self.clock.mono(), answers, self.clock.wall())
        self.last_round = round_
        self._log_reachability(round_)
        results = self._send(round_.writes)
        with self._lock:
            transition = self.core.complete(round_, results, self.clock.mono())
        if transition is Transition.ACQUIRED:
            log.info(
                "%s: %s acquired term %s (%s)",
                self.what,
                self.core.identity,
                self.core.term,
                round_.view.describe(),
            )
        elif transition is Transition.LOST:
            log.warning(
                "%s: %s lost the term: no majority confirmed within the renew deadline (%s)",
                self.what,
                self.core.identity,
                round_.view.describe(),
            )
        return transition

    def next_round_in(self, jitter: float) -> float:
        now = self.clock.mono()
        with self._lock:
            wake = self.core.next_round_at(now)
        return max(0.0, wake - now) + jitter

    def release(self) -> None:
        """Stop acting, then empty every record this process holds (best effort)."""
        with self._lock:
            started = self.clock.mono()
            writes = self.core.release(started, self.clock.wall())
        results = self._send(writes)
        with self._lock:  # so the core knows which records no longer name it
            view = self.last_round.view if self.last_round else View(0, 0, 0, "")
            self.core.complete(
                Round(started, view, writes, "", claiming=False), results, self.clock.mono()
            )
        released = sorted(m for m, r in results.items() if r.status is WriteStatus.OK)
        if writes:
            log.info("%s: %s released %s", self.what, self.core.identity, ", ".join(released))

    def abandon(self) -> None:
        """Stop acting without telling anyone, as a crashed process would."""
        with self._lock:
            self.core.release(self.clock.mono(), self.clock.wall())

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _send(self, writes: tuple[Write, ...]) -> dict[str, WriteResult]:
        calls = {w.member: (self.stores[w.member].write, w) for w in writes}
        answers = self._gather(calls)
        return {
            m: a if a is not None else WriteResult(WriteStatus.FAILED) for m, a in answers.items()
        }

    def _gather(self, calls: Mapping[str, tuple]) -> dict:
        """Run every call in parallel; anything not back by the timeout is None."""
        futures = {m: self._pool.submit(*call) for m, call in calls.items()}
        deadline = self.clock.mono() + self.request_timeout + 0.5
        answers = {}
        for member, future in futures.items():
            try:
                answers[member] = future.result(timeout=max(0.0, deadline - self.clock.mono()))
            except FutureTimeout:
                answers[member] = None
        return answers

    def _log_reachability(self, round_: Round) -> None:
        message = "" if round_.view.has_quorum else round_.view.describe()
        if message and message != self._last_shortage:
            log.warning("%s: %s", self.what, message)
        elif not message and self._last_shortage:
            log.info("%s: %s", self.what, round_.view.describe())
        self._last_shortage = message


@dataclass(frozen=True)
class HubTerm:
    """What a hub stamps into every intent it writes."""

    hub: str
    fencing_token: str


class Agent:
    """A member's agent, as far as the election goes: one active replica per member
    (the agent Lease on its own cluster), and that replica a candidate for hub.

    `hub_term()` is what hub decisions (issue #8) check before every write: it is None
    the moment this agent may no longer act as hub.
    """

    def __init__(
        self,
        cluster: str,
        pod: str,
        own: client.ApiClient,
        members: Mapping[str, client.ApiClient],
        *,
        timings: Timings | None = None,
        metrics: RuntimeMetrics | None = None,
        clock: Clock | None = None,
        request_timeout: float | None = None,
        hub_lease: tuple[str, str] = (SYSTEM_NAMESPACE, HUB_LEASE_NAME),
        agent_lease: tuple[str, str] = (SYSTEM_NAMESPACE, AGENT_LEASE_NAME),
        new_token: Callable[[], str] | None = None,
    ) -> None:
        if cluster not in members:
            raise ValueError(
                f"the agent's own cluster {cluster!r} is not among the members "
                f"({', '.join(sorted(members))})"
            )
        self.cluster = cluster
        self.identity = f"{cluster}/{pod}"
        self.timings = timings or Timings()
        self.metrics = metrics
        self.clock = clock or Clock()
        timeout = request_timeout or max(1.0, self.timings.retry_period)
        mint = new_token or (lambda: uuid.uuid4().hex)
        self.replica = Candidate(
            ElectionCore(self.identity, (cluster,), self.timings, mint),
            {cluster: KubeLeaseStore(own, agent_lease[1], agent_lease[0], timeout)},
            self.clock,
            "agent-lease",
            timeout,
        )
        self.hub = Candidate(
            ElectionCore(self.identity, tuple(members), self.timings, mint),
            {
                m: KubeLeaseStore(api, hub_lease[1], hub_lease[0], timeout)
                for m, api in members.items()
            },
            self.clock,
            "hub",
            timeout,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._random = random.Random()
        if metrics:
            metrics.fleet_members(len(members))
            metrics.hub_leading(False)

    # --- what the rest of the agent asks -------------------------------------------

    def is_hub(self) -> bool:
        return self.replica.leading() and self.hub.leading()

    def hub_term(self) -> HubTerm | None:
        token = self.hub.term()
        if not token or not self.replica.leading():
            return None
        return HubTerm(self.identity, token)

    def observed_hub(self) -> str:
        """The holder most members named in this agent's last read ("" if none)."""
        round_ = self.hub.last_round
        return round_.view.hub if round_ else ""

    # --- running ---------------------------------------------------------------------

    def step(self) -> float:
        """One round of both elections; seconds until the next."""
        self.replica.run_round()
        if self.replica.leading():
            self.hub.run_round()
        elif self.hub.core.held():
            # No longer this member's active replica: hand over whatever hub records
            # this process still holds instead of letting them run out.
            self.hub.release()
        if self.metrics:
            self.metrics.hub_leading(self.is_hub())
        jitter = self._random.uniform(0, 0.1 * self.timings.retry_period)
        waits = [self.replica.next_round_in(jitter)]
        if self.replica.leading():
            waits.append(self.hub.next_round_in(jitter))
        return min(waits)

    def run(self) -> None:
        log.info(
            "agent %s: hub election over %d members, need %d (lease %ss, renew "
            "deadline %ss, retry %ss)",
            self.identity,
            len(self.hub.stores),
            self.hub.core.quorum,
            self.timings.lease_duration,
            self.timings.renew_deadline,
            self.timings.retry_period,
        )
        while not self._stop.is_set():
            try:
                wait = self.step()
            except Exception:
                log.exception("agent %s: election round failed", self.identity)
                wait = self.timings.retry_period
            self._stop.wait(wait)

    def start(self) -> Agent:
        self._thread = threading.Thread(target=self.run, name=f"agent-{self.identity}", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop taking part; with `release`, hand both Leases over at once (shutdown).

        Without it the agent just goes silent, like a crashed process: others take over
        once its records expire.
        """
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=3 * max(self.hub.request_timeout, 1.0) + 1)
        if release:
            self.hub.release()
            self.replica.release()
        else:
            self.hub.abandon()
            self.replica.abandon()
        if self.metrics:
            self.metrics.hub_leading(False)
        self.hub.close()
        self.replica.close()
