"""The scaler answering GetMetrics while KEDA holds many StreamIsActive streams open.

    .venv/bin/python tests/bench/bench_scaler_streams.py [--streams 500] [--calls 200] [--runs 3]

One real member (etcd + kube-apiserver) carries a served AdaptivePolicy and the hub
Lease; the scaler (grpc.aio, plaintext) fills its cache from it. A client opens
`--streams` streams (one per autoscaled workload, each naming the policy), reads the
first answer on each, then times `--calls` sequential GetMetrics calls while every
stream stays open. Prints, per run, the median and p99 of those latencies and the time
one intent change takes to reach every stream. Not a test: pytest does not collect
bench_*.py.
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import gen_proto  # noqa: E402

gen_proto.generate()

import grpc  # noqa: E402
from kubernetes import client  # noqa: E402

from functions.runtime.scaler.server import (  # noqa: E402
    METRIC_NAME,
    FloorScaler,
    MemberCache,
    serve,
    wait_synced,
)
from tests.runtime.cluster import Fleet  # noqa: E402
from tests.runtime.conftest import POLICY_NAMESPACE  # noqa: E402
from tests.runtime.test_scaler import POLICY, Member, pb, pb_grpc  # noqa: E402

TOOLS = Path.home() / ".cache" / "modelplane" / "tools" / "bin"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def one_run(port: int, writer: Member, streams: int, calls: int, floor: int) -> dict:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        opened = [
            stub.StreamIsActive(
                pb.ScaledObjectRef(
                    name=f"workload-{i}",
                    namespace=POLICY_NAMESPACE,
                    scalerMetadata={"policy": POLICY},
                )
            )
            for i in range(streams)
        ]
        await asyncio.gather(*(s.read() for s in opened))
        request = pb.GetMetricsRequest(
            scaledObjectRef=pb.ScaledObjectRef(name=POLICY, namespace=POLICY_NAMESPACE),
            metricName=METRIC_NAME,
        )
        latencies = []
        for _ in range(calls):
            began = time.perf_counter()
            await stub.GetMetrics(request, timeout=10)
            latencies.append(time.perf_counter() - began)
        changed = time.perf_counter()
        await asyncio.to_thread(writer.intent, floor=floor)
        await asyncio.wait_for(asyncio.gather(*(s.read() for s in opened)), 60)
        spread = time.perf_counter() - changed
        for stream in opened:
            stream.cancel()
    return {
        "median": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "spread": spread,
    }


async def all_runs(port: int, writer: Member, args: argparse.Namespace) -> list[dict]:
    """Every run on one event loop (grpc.aio's client keeps to the loop it started on)."""
    results = []
    for run in range(args.runs):
        # A different floor each run, so each run's change flips every stream.
        results.append(await one_run(port, writer, args.streams, args.calls, 3 + run))
        await asyncio.to_thread(writer.intent, floor=0)
        await asyncio.sleep(0.5)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    fleet = Fleet(1, TOOLS / "etcd", TOOLS / "kube-apiserver").start()
    try:
        member = fleet.members[0]
        writer = Member(member)
        client.CoreV1Api(writer.api).create_namespace({"metadata": {"name": POLICY_NAMESPACE}})
        writer.lease()
        writer.policy()
        writer.intent(floor=2)
        cache = MemberCache(member.client()).start()
        served, port = serve(FloorScaler(cache, member.name), "127.0.0.1:0")
        assert wait_synced(cache, 30)
        results = asyncio.run(all_runs(port, writer, args))
        for run, result in enumerate(results, 1):
            print(
                f"run {run}: {args.streams} open streams, {args.calls} GetMetrics: "
                f"median {result['median'] * 1000:.2f} ms, p99 {result['p99'] * 1000:.2f} ms; "
                f"one change reached every stream in {result['spread'] * 1000:.0f} ms"
            )
        median = {key: statistics.median(r[key] for r in results) * 1000 for key in results[0]}
        print(
            f"median of {args.runs} runs: GetMetrics median {median['median']:.2f} ms, "
            f"p99 {median['p99']:.2f} ms, change to all {args.streams} streams "
            f"{median['spread']:.0f} ms"
        )
        served.stop(grace=None)
        cache.stop()
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
