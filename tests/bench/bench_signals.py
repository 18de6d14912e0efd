"""Vocabulary signals: how late a signal follows the engine, and what the agent pays for
them per 100 engine pods.

    .venv/bin/python tests/bench/bench_signals.py [--runs 5] [--pods 100] [--deployments 10]

1. Signal lag. One fake vLLM pod (tests/collector/engines.py) is scraped by the real
   collector (hack/tools/otelcol) on the signals-only config compose-serving-stack
   renders, at a 1 s scrape interval; the agent's own reader samples the page every
   0.25 s. The engine's waiting requests change (alternately 2 and 7) at a random
   moment and the time until the default `pressure` signal shows the new value is
   measured; the median of `--runs` changes is printed. The lag is about scrape +
   batch (each one interval) + the agent's sampling, so at the production interval
   (30 s) expect ~2 intervals, i.e. ~60 s plus the report period.
2. Agent cost per 100 engine pods. `--pods` fake vLLM pods in `--deployments`
   deployments (real vLLM-shaped pages with a growing counter and TTFT histogram) are
   scraped by the real collector (1 s interval); the agent's reader samples the page
   `--samples` times, as the agent does every 15 s, into a 2-minute window, then
   computes the default signals of every deployment. Printed: the page's size and
   series, CPU per sample (parse) and per report (every deployment's signals), and the
   Python heap the kept window holds (tracemalloc), each scaled to 100 pods.

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import glob
import random
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from functions.common import metricmapping as mappings  # noqa: E402
from functions.compose_serving_stack import collector  # noqa: E402
from functions.runtime.agent.collect import read_collector_page  # noqa: E402
from functions.runtime.agent.signals import Scope, SignalHistory, evaluate, parse_page  # noqa: E402
from functions.runtime.shared.policy import DEFAULT_SIGNALS  # noqa: E402
from tests.bench import unwind_on_sigterm  # noqa: E402
from tests.collector import engines, harness  # noqa: E402
from tests.conftest import require_tool  # noqa: E402

NAMESPACE = "bench"
BUCKETS = len(engines.VLLM_TTFT_BUCKETS) + 1


def _config():
    paths = sorted(glob.glob(str(REPO / "functions/common/builtin_mappings/*.yaml")))
    accepted = mappings.parse_mappings([yaml.safe_load(Path(p).read_text()) for p in paths])
    return collector.render_cluster_collector_config(
        collector.CollectorCluster("bench"),
        accepted.accepted,
        None,
        signals=True,
        scrape_interval_seconds=1,
    )


class Load:
    """Rewrites every pod's page 10 times a second: 10 requests/s, TTFT in one bucket."""

    def __init__(self, pods: list[engines.Pod]):
        self.pods = pods
        self.waiting = {p.name: 2.0 for p in pods}
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.update()

    def update(self):
        done = int(10 * (time.monotonic() - self.started))
        ttft = [0] * BUCKETS
        ttft[4] = done
        for pod in self.pods:
            pod.page = engines.vllm_serving_page(done, self.waiting[pod.name], ttft)

    def run(self):
        while not self.stop.wait(0.1):
            self.update()


def _pods(count: int, deployments: int) -> list[engines.Pod]:
    """`count` pods spread over `deployments`, one ModelReplica (serving) each, as on a
    cluster: the collector merges a replica's pods into one series per metric."""
    return [
        engines.Pod(
            f"p{i}",
            f"uid-{i}",
            NAMESPACE,
            "vllm",
            f"d{i % deployments}",
            f"d{i % deployments}-bench",
            "",
        )
        for i in range(count)
    ]


def signal_lag(runs: int, folder: Path, otelcol: Path) -> list[float]:
    pods = _pods(1, 1)
    load = Load(pods)
    threading.Thread(target=load.run, daemon=True).start()
    scope = Scope(NAMESPACE, "d0")
    lags = []
    try:
        with engines.EngineServers(pods):
            overlay = harness.live_overlay(_config(), pods, folder, "http://unused")
            with harness.running_collector(otelcol, overlay, folder):
                url = harness.signals_url(overlay)
                history = SignalHistory(10.0)

                def pressure() -> float | None:
                    read_collector_page(url, history, time.time())
                    return evaluate(
                        DEFAULT_SIGNALS["pressure"],
                        history,
                        scope,
                        ready_replicas=1,
                        now=time.time(),
                        window=5.0,
                        interval=1.0,
                    ).single()[0]

                deadline = time.monotonic() + 60
                while pressure() != 2.0 and time.monotonic() < deadline:
                    time.sleep(0.25)
                for run in range(runs):
                    target = 7.0 if run % 2 == 0 else 2.0
                    time.sleep(random.uniform(0.0, 1.0))
                    changed_at = time.monotonic()
                    load.waiting[pods[0].name] = target
                    load.update()
                    while pressure() != target:
                        if time.monotonic() - changed_at > 30:
                            raise SystemExit("the signal never followed the engine")
                        time.sleep(0.25)
                    lags.append(time.monotonic() - changed_at)
    finally:
        load.stop.set()
    return lags


def agent_cost(pods_count: int, deployments: int, samples: int, folder: Path, otelcol: Path):
    pods = _pods(pods_count, deployments)
    load = Load(pods)
    threading.Thread(target=load.run, daemon=True).start()
    try:
        with engines.EngineServers(pods):
            overlay = harness.live_overlay(_config(), pods, folder, "http://unused")
            with harness.running_collector(otelcol, overlay, folder):
                url = harness.signals_url(overlay)
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    try:
                        text = urllib.request.urlopen(url, timeout=5).read().decode()
                    except OSError:  # the collector is still starting
                        time.sleep(1)
                        continue
                    seen = {
                        line.split('modelplane_deployment="')[1].split('"')[0]
                        for line in text.splitlines()
                        if line.startswith("modelplane_requests_waiting{")
                        and "modelplane_deployment=" in line
                    }
                    if len(seen) == deployments:
                        break
                    time.sleep(1)
                else:
                    raise SystemExit("the collector never served every deployment")
                pages = []
                for _ in range(samples):
                    pages.append(urllib.request.urlopen(url, timeout=5).read().decode())
                    time.sleep(1.1)
    finally:
        load.stop.set()

    # Parse as the agent does, one page per 15 s of its window (timestamps rewritten).
    tracemalloc.start()
    history = SignalHistory(120.0 + 15.0)
    base = time.time()
    parse_cpu = []
    for index, text in enumerate(pages):
        started = time.process_time()
        history.add(parse_page(text, base + 15 * index))
        parse_cpu.append(time.process_time() - started)
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    now = history.pages[-1].read_at
    started = time.process_time()
    for d in range(deployments):
        for signal in DEFAULT_SIGNALS.values():
            evaluate(
                signal,
                history,
                Scope(NAMESPACE, f"d{d}"),
                ready_replicas=1,
                now=now,
                window=120.0,
                interval=1e9,  # the pages' own times are seconds apart, not 15 s: no staleness
            )
    report_cpu = time.process_time() - started
    return {
        "page_bytes": len(pages[-1]),
        "page_lines": len(pages[-1].splitlines()),
        "parse_ms": statistics.median(parse_cpu) * 1000,
        "report_ms": report_cpu * 1000,
        "window_pages": len(history.pages),
        "heap_mib": heap / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--deployments", type=int, default=10)
    parser.add_argument("--samples", type=int, default=9)
    args = parser.parse_args()
    unwind_on_sigterm()
    otelcol = require_tool("otelcol")
    with tempfile.TemporaryDirectory() as tmp:
        lags = signal_lag(args.runs, Path(tmp) / "lag", otelcol)
        print(
            f"signal lag (engine change -> pressure signal), scrape interval 1 s, "
            f"{len(lags)} changes: median {statistics.median(lags):.2f} s "
            f"(min {min(lags):.2f}, max {max(lags):.2f})"
        )
        cost = agent_cost(args.pods, args.deployments, args.samples, Path(tmp) / "cost", otelcol)
    per100 = 100 / args.pods
    print(
        f"agent cost, {args.pods} engine pods in {args.deployments} deployments, "
        f"window {cost['window_pages']} pages of {cost['page_bytes']} bytes "
        f"({cost['page_lines']} lines):"
    )
    print(f"  parse one page (every 15 s): {cost['parse_ms']:.1f} ms CPU (median)")
    print(f"  default signals of every deployment (every 30 s): {cost['report_ms']:.1f} ms CPU")
    cpu_per_second = cost["parse_ms"] / 15 + cost["report_ms"] / 30
    print(
        f"  per 100 engine pods: {cpu_per_second * per100:.2f} ms CPU per second "
        f"({cpu_per_second * per100 / 10:.3f}% of a core), "
        f"window heap {cost['heap_mib'] * per100:.2f} MiB"
    )


if __name__ == "__main__":
    main()
