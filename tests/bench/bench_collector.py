"""The collector's CPU time for a fixed scrape load: our cluster-tier config against a
pass-through config on the same load.

    .venv/bin/python tests/bench/bench_collector.py [--runs 3] [--seconds 20] [--pods 10 50]

For each size, N fake vLLM pods (tests/collector/engines.py pages plus the rest of
vLLM's latency and token histograms: ~30 series families, several hundred samples per
pod) are served on loopback; the real collector (hack/tools/otelcol) scrapes each every
second and exports OTLP/HTTP JSON to a loopback sink, run on

- ours: `render_cluster_collector_config` with the built-in mappings, through the same
  loopback overlay the live test uses (static targets, the k8s_attributes stand-in);
- pass-through: the same receiver, targets and exporter with only `batch` between them.

After a warm-up of 5 s the collector's own CPU time (user + system, from
/proc/<pid>/stat) is measured over `--seconds`; the table shows the median of `--runs`
runs as CPU seconds per wall second (cores used) and CPU microseconds per scraped
sample. The scraped sample count comes from the page itself. Not a test: pytest does not
collect bench_*.py.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import render  # noqa: E402
from functions.common import metricmapping as mappings  # noqa: E402
from functions.compose_serving_stack import collector  # noqa: E402
from tests.collector import engines, harness  # noqa: E402

WARMUP_SECONDS = 5
EXTRA_HISTOGRAMS = (
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
)


def bench_page(index: int) -> str:
    page = engines.vllm_page(index % 7, 0.1 + (index % 9) / 10, 100 + index, [index % 3] * 13)
    base = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    lines: list[str] = []
    for name in EXTRA_HISTOGRAMS:
        lines += engines.histogram(
            name,
            "Histogram.",
            base,
            bounds=LATENCY_BUCKETS,
            per_bucket=[index % 5 + i % 3 for i in range(len(LATENCY_BUCKETS) + 1)],
            total=12.5 + index,
        )
    return page + "\n".join(lines) + "\n"


def samples_per_page(page: str) -> int:
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


def pods(count: int) -> list[engines.Pod]:
    return [
        engines.Pod(
            f"llama-{i}",
            f"uid-{i}",
            "ml-team",
            "vllm",
            f"llama-{i % 5}",
            f"llama-{i % 5}-c",
            bench_page(i),
        )
        for i in range(count)
    ]


def builtin() -> mappings.ParsedMappings:
    paths = sorted((REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml"))
    return mappings.parse_mappings([yaml.safe_load(p.read_text()) for p in paths])


def ours(targets: list[engines.Pod], folder: Path, sink: str) -> dict:
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("bench"),
        builtin().accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=1,
    )
    return harness.live_overlay(config, targets, folder, sink)


def passthrough(targets: list[engines.Pod], folder: Path, sink: str) -> dict:
    live = copy.deepcopy(ours(targets, folder, sink))
    live["processors"] = {"batch": live["processors"]["batch"]}
    live["service"]["pipelines"]["metrics"]["processors"] = ["batch"]
    return live


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line (11 and 12 after the name).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def collector_pid(log: Path) -> int:
    # running_collector starts the binary as a session leader; find it by its config.
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmdline
                and cmdline[0].endswith(b"otelcol")
                and str(log.parent).encode() in b" ".join(cmdline)
            ):
                return int(proc.name)
    raise RuntimeError("collector process not found")


def run_once(otelcol: Path, make_config, size: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-collector-") as tmp:
        folder = Path(tmp)
        targets = pods(size)
        with engines.EngineServers(targets), harness.OtlpJsonSink() as sink:
            config = make_config(targets, folder, sink.endpoint)
            with harness.running_collector(otelcol, config, folder) as log:
                time.sleep(WARMUP_SECONDS)
                pid = collector_pid(log)
                start = cpu_seconds(pid)
                time.sleep(seconds)
                used = cpu_seconds(pid) - start
            if not sink.exports:
                raise RuntimeError(f"nothing exported:\n{log.read_text()[-2000:]}")
    return used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pods", type=int, nargs="+", default=[10, 50])
    args = parser.parse_args()
    otelcol = render.tools_bin() / "otelcol"
    if not otelcol.exists():
        print(
            f"otelcol is not installed at {otelcol}: run 'bash hack/tools.sh otelcol'",
            file=sys.stderr,
        )
        return 2
    per_pod = samples_per_page(bench_page(0))
    print(f"collector: {otelcol.resolve()}  scrape interval 1 s, {per_pod} samples per pod")
    print(f"median of {args.runs} runs of {args.seconds:.0f} s after {WARMUP_SECONDS} s warm-up\n")
    header = f"{'pods':>5} {'samples/s':>10} | {'config':<12} {'cores':>7} {'us/sample':>10}"
    print(header)
    print("-" * len(header))
    for size in args.pods:
        rate = size * per_pod
        results = {}
        for label, make in (("pass-through", passthrough), ("ours", ours)):
            used = statistics.median(
                run_once(otelcol, make, size, args.seconds) for _ in range(args.runs)
            )
            results[label] = used
            cores = used / args.seconds
            print(f"{size:>5} {rate:>10} | {label:<12} {cores:>7.3f} {1e6 * cores / rate:>10.2f}")
        ratio = (
            results["ours"] / results["pass-through"] if results["pass-through"] else float("nan")
        )
        print(f"{'':>5} {'':>10} | {'ours/pass':<12} {ratio:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
