"""The runtime tier: real kube-apiservers (one per simulated member), shared by the tier.

One fleet of five members starts once per session (members start in parallel; their
start-up times are printed at the end of the run). A three-member test simply configures
its agents with the first three. Before each test every fault is undone (frozen API
servers thawed, stopped ones restarted) and the runtime's Leases and the test policies
are deleted, so tests do not see each other's state.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client

from functions.common.contracts import API_VERSION, AUTOSCALING_GROUP, SYSTEM_NAMESPACE
from tests.conftest import require_tool
from tests.runtime.cluster import Fleet, Member

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
import gen_proto

gen_proto.generate()

from functions.runtime.election.core import Timings  # noqa: E402
from functions.runtime.election.elector import Agent, Clock  # noqa: E402

FLEET_SIZE = 5
POLICY_NAMESPACE = "ml-team"
POLICY_PLURAL = "adaptivepolicies"
# Short timings for most tests, with the defaults' proportions; one test uses the defaults.
FAST = Timings(lease_duration=4, renew_deadline=3, retry_period=0.5)

_started: list[Fleet] = []
# (what, seconds) measured by the tests, printed at the end of the run.
MEASURED: list[tuple[str, float]] = []


def measured(what: str, seconds: float) -> float:
    MEASURED.append((what, seconds))
    return seconds


@pytest.fixture(scope="session")
def fleet_processes() -> Iterator[Fleet]:
    etcd = require_tool("etcd")
    apiserver = require_tool("kube-apiserver")
    fleet = Fleet(FLEET_SIZE, etcd, apiserver)
    atexit.register(fleet.close)  # also on an interrupted session
    fleet.start()
    _started.append(fleet)
    for member in fleet.members:
        api = member.client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": POLICY_NAMESPACE}})
        api.close()
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def fleet(fleet_processes: Fleet) -> Iterator[Fleet]:
    for member in fleet_processes.members:
        member.restore()
        _reset(member)
    yield fleet_processes
    for member in fleet_processes.members:
        member.restore()


def _reset(member: Member) -> None:
    api = member.client()
    try:
        leases = client.CoordinationV1Api(api)
        leases.delete_collection_namespaced_lease(SYSTEM_NAMESPACE)
        client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(
            AUTOSCALING_GROUP, API_VERSION, POLICY_NAMESPACE, POLICY_PLURAL
        )
    finally:
        api.close()


def pytest_terminal_summary(terminalreporter) -> None:
    for fleet in _started:
        terminalreporter.write_sep("-", "runtime fleet start-up (kube-apiserver launch to /readyz)")
        for member in fleet.members:
            restarts = ", ".join(f"{s:.2f}s" for s in member.starts[1:]) or "none"
            terminalreporter.write_line(
                f"{member.name}: {member.starts[0]:.2f}s (restarts: {restarts})"
            )
        terminalreporter.write_line(
            f"{len(fleet.members)} members in parallel: {fleet.startup_seconds:.2f}s "
            f"(CRDs and namespace: {fleet.install_seconds:.2f}s)"
        )
    if MEASURED:
        terminalreporter.write_sep("-", "runtime measurements")
        for what, seconds in MEASURED:
            terminalreporter.write_line(f"{what}: {seconds:.2f}s")


# --- agents -------------------------------------------------------------------------


@dataclass
class Agents:
    """Agents for the first `size` members, one per member unless told otherwise."""

    fleet: Fleet
    size: int
    timings: Timings
    running: list[Agent] = field(default_factory=list)

    @property
    def members(self) -> list[Member]:
        return self.fleet.members[: self.size]

    def start(self, index: int, pod: str = "agent-0", wall_offset: float = 0.0) -> Agent:
        own = self.members[index]
        agent = Agent(
            own.name,
            pod,
            own.client(),
            {m.name: m.client() for m in self.members},
            timings=self.timings,
            clock=Clock(wall_offset),
        )
        self.running.append(agent.start())
        return agent

    def start_all(self, wall_offsets: list[float] | None = None) -> list[Agent]:
        offsets = wall_offsets or [0.0] * self.size
        return [self.start(i, wall_offset=offsets[i]) for i in range(self.size)]

    def hubs(self) -> list[Agent]:
        return [a for a in self.running if a.is_hub()]

    def stop_all(self) -> None:
        for agent in self.running:
            with contextlib.suppress(Exception):
                agent.stop(release=False)
        self.running.clear()


@pytest.fixture
def agents(fleet: Fleet) -> Iterator[Callable[..., Agents]]:
    made: list[Agents] = []

    def make(size: int, timings: Timings = FAST) -> Agents:
        made.append(Agents(fleet, size, timings))
        return made[-1]

    yield make
    for group in made:
        group.stop_all()


def wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.02):
    """The condition's first truthy value, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


class HubSampler:
    """Samples which agents act as hub, every few milliseconds, in the background."""

    def __init__(self, agents: Agents, interval: float = 0.01) -> None:
        self.agents = agents
        self.interval = interval
        self.max_simultaneous = 0
        self.overlaps: list[tuple[float, list[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HubSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            hubs = [a.identity for a in list(self.agents.running) if a.is_hub()]
            self.samples += 1
            self.max_simultaneous = max(self.max_simultaneous, len(hubs))
            if len(hubs) > 1:
                self.overlaps.append((time.monotonic(), hubs))
            self._stop.wait(self.interval)
