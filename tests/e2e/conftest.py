"""The end-to-end tier: the fleet box (hack/fleetbox/), started once for the tier.

A real control plane (kube-apiserver, kube-controller-manager, Crossplane core,
provider-kubernetes, our four functions over mTLS) and member API servers; the examples'
members schedule pods (kube-scheduler, KWOK nodes: fleetbox/gpu.py), the two GPU members'
nodes with DRA devices, the CPU-only member's with CPU and memory only. The
examples are applied once, as a user applies them, by the session fixture; tests that
change things apply their own claims (named for the test) and delete them, so tests do
not see each other's state. Every process is stopped at the end of the run.
"""

from __future__ import annotations

import statistics
import time

import pytest

from fleetbox.box import REQUIRED_TOOLS, FleetBox
from fleetbox.gpu import REQUIRED_TOOLS as GPU_TOOLS
from fleetbox.members import DEFAULT_MEMBERS, EXAMPLE_MEMBERS
from fleetbox.runtime import PROCESS_KINDS, RUNTIME_TOOLS, Runtime
from tests.conftest import require_tool

# (what, seconds) measured by the tests, printed at the end of the run.
MEASURED: dict[str, list[float]] = {}


def measured(what: str, seconds: float) -> float:
    MEASURED.setdefault(what, []).append(seconds)
    return seconds


@pytest.fixture(scope="package")  # stopped when the tier ends, not at the end of the run
def box():
    for tool in (*REQUIRED_TOOLS, *GPU_TOOLS):
        require_tool(tool)
    # The examples' three members, and two spare ones the change tests put their own
    # clusters on (so they never move the examples' replicas). The real kube-scheduler
    # binds the examples' pods (test_scheduling.py).
    fleet = FleetBox(members=(*EXAMPLE_MEMBERS, "e2e-a", "e2e-b"), gpu=EXAMPLE_MEMBERS)
    try:
        fleet.start()
    except BaseException:
        print(fleet.logs() if fleet.processes else "")
        raise
    measured(
        "fleet box start (control plane, 5 members, core, provider, 4 functions)",
        fleet.timings["start"],
    )
    began = time.monotonic()
    fleet.apply_examples()
    fleet.example_applied_at = began
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture(scope="package")
def runtime(box):
    """Our agent and scaler, KEDA and the HPA controller on the examples' two members,
    started once for the tier's runtime scenarios (fencing, parking, floors): an election
    of two agents with a failover is enough for them, and two members' KEDA, agent and
    scaler are already a lot on two cores."""
    for tool in RUNTIME_TOOLS:
        require_tool(tool)
    running = Runtime(box, DEFAULT_MEMBERS)
    try:
        running.start()
    except BaseException:
        print(box.logs())
        running.close()
        raise
    try:
        yield running
    finally:
        running.close()
        for kind in PROCESS_KINDS:
            for name in running.members:
                process = box.processes.pop(f"{kind}-{name}", None)
                if process is not None:
                    process.stop(grace=5)


def pytest_collection_modifyitems(items):
    """The examples first: they measure the box as a user first meets it, before the
    change tests add claims of their own."""
    here = [i for i, item in enumerate(items) if item.path.parent.name == "e2e"]
    ordered = sorted(
        (items[i] for i in here), key=lambda item: item.path.name != "test_examples.py"
    )
    for slot, item in zip(here, ordered, strict=True):
        items[slot] = item


def pytest_terminal_summary(terminalreporter):
    if not MEASURED:
        return
    terminalreporter.section("fleet box timings")
    for what, values in MEASURED.items():
        figures = ", ".join(f"{v:.1f}" for v in values)
        terminalreporter.write_line(
            f"{what}: median {statistics.median(values):.1f} s over {len(values)} ({figures})"
        )
