"""Fleet hub failover and API-server start-up, against real etcd + kube-apiserver members.

    .venv/bin/python tests/bench/bench_failover.py [--runs 5] [--sizes 3,5] [--no-defaults]

Starts one fleet of max(sizes) members (each its own etcd and kube-apiserver on
loopback, as tests/runtime does) and prints:

- start-up: per-member time from kube-apiserver launch to /readyz, when all members
  start in parallel and when one member restarts alone;
- failover: for each fleet size and timing set, `--runs` times, elect a hub, let it
  renew for two retry periods, stop it silently (a crash: no release) and time until
  another agent acts as hub; and the same after a graceful stop (release on shutdown).

Default timings (15 s / 10 s / 2 s) take about 20 s per crash run; `--no-defaults` skips
them. Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kubernetes import client  # noqa: E402

from functions.common.contracts import SYSTEM_NAMESPACE  # noqa: E402
from functions.runtime.election.core import Timings  # noqa: E402
from functions.runtime.election.elector import Agent  # noqa: E402
from tests.runtime.cluster import Fleet  # noqa: E402

TOOLS = Path.home() / ".cache" / "modelplane" / "tools" / "bin"
FAST = Timings(lease_duration=4, renew_deadline=3, retry_period=0.5)
DEFAULT = Timings()


def _wait(condition, timeout: float, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(interval)
    raise TimeoutError(f"not within {timeout}s")


def _reset(fleet: Fleet) -> None:
    for member in fleet.members:
        api = member.client()
        client.CoordinationV1Api(api).delete_collection_namespaced_lease(SYSTEM_NAMESPACE)
        api.close()


def _failover(fleet: Fleet, size: int, timings: Timings, graceful: bool) -> float:
    _reset(fleet)
    members = fleet.members[:size]
    agents = [
        Agent(
            m.name, "agent-0", m.client(), {p.name: p.client() for p in members}, timings=timings
        ).start()
        for m in members
    ]
    try:
        hub = _wait(
            lambda: next((a for a in agents if a.is_hub()), None), 2 * timings.lease_duration
        )
        time.sleep(2 * timings.retry_period)
        stopped = time.monotonic()
        hub.stop(release=graceful)
        _wait(lambda: any(a.is_hub() for a in agents if a is not hub), 3 * timings.lease_duration)
        return time.monotonic() - stopped
    finally:
        for agent in agents:
            agent.stop(release=False)


def _row(label: str, values: list[float]) -> str:
    return (
        f"| {label} | {len(values)} | {statistics.median(values):.2f} | "
        f"{min(values):.2f} | {max(values):.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="3,5")
    parser.add_argument("--no-defaults", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    fleet = Fleet(max(sizes), TOOLS / "etcd", TOOLS / "kube-apiserver")
    try:
        fleet.start()
        parallel = [m.startup_seconds for m in fleet.members]
        alone = []
        for _ in range(args.runs):
            member = fleet.members[0]
            member.stop_apiserver()
            member.start_apiserver()
            alone.append(member.startup_seconds)
        rows = [
            "| what | runs | median s | min s | max s |",
            "| --- | --- | --- | --- | --- |",
            _row(f"kube-apiserver start, {len(parallel)} in parallel (per member)", parallel),
            _row("kube-apiserver restart, one member alone", alone),
            f"| whole fleet start incl. CRDs ({len(parallel)} members) | 1 | "
            f"{fleet.startup_seconds:.2f} | | |",
        ]
        timing_sets = [("FAST 4/3/0.5 s", FAST)]
        if not args.no_defaults:
            timing_sets.append(("default 15/10/2 s", DEFAULT))
        for name, timings in timing_sets:
            for size in sizes:
                crash = [_failover(fleet, size, timings, graceful=False) for _ in range(args.runs)]
                rows.append(_row(f"failover after a crash, {size} members, {name}", crash))
                graceful = [
                    _failover(fleet, size, timings, graceful=True) for _ in range(args.runs)
                ]
                rows.append(
                    _row(f"hand-over after a graceful stop, {size} members, {name}", graceful)
                )
        print("\n".join(rows))
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
