"""The collector's CPU time for a fixed scrape load: our cluster-tier config against a
pass-through config on the same load.

    .venv/bin/python tests/bench/bench_collector.py [--runs 3] [--seconds 20] [--pods 50 200]
        [--keep-alive] [--go-defaults] [--profile DIR]

For each size, N fake vLLM pods (tests/collector/engines.py pages plus the rest of
vLLM's latency and token histograms: ~30 series families, several hundred samples per
pod) are served on loopback; the real collector (hack/tools/otelcol) scrapes each every
second and exports OTLP/HTTP JSON to a loopback sink, run on

- ours: `render_cluster_collector_config` with the built-in mappings, through the same
  loopback overlay the live test uses (static targets, a stand-in for k8s_attributes),
  except that the stand-in costs what k8s_attributes costs whatever the pod count
  (`constant_cost_standin`), not one condition per pod on every scrape;
- pass-through: the same receiver, targets and exporter with only `batch` between them
  (and without our label renames, which the receiver does for ours).

Both collectors run on the Go runtime settings the composed collector Deployment sets
(collector_objects.RUNTIME_ENV: GOGC, GOMEMLIMIT), so the pass-through is the same
deployment with only `batch`; `--go-defaults` runs both on Go's defaults instead (GOGC=100,
no memory limit), where garbage collection weighs more on the config that allocates more.

The fake engines answer HTTP/1.0 and close each connection, so both collectors also dial
a TCP connection per scrape (the same cost on both sides); `--keep-alive` serves
HTTP/1.1 with persistent connections, as vLLM's server does, which leaves each config
only its own work and so gives the higher, stricter ratio.

The two configs' runs alternate (pass-through then ours, then ours then pass-through, ...)
so a shared machine's drifting load weighs on both alike. From 5 s after its first
export (start-up excluded) the collector's own CPU time
(user + system, from /proc/<pid>/stat) is measured over `--seconds`; the table shows
the median of `--runs` runs as CPU seconds per wall second (cores used), the samples
really scraped per second (pages the fake engines served in the window x samples per
page: a loaded machine misses scrapes, more of them at 200 pods), CPU microseconds per
scraped sample, and the collector's resident memory at the end. The ratio is of CPU per
scraped sample. Not a test: pytest does not collect bench_*.py.

`--profile DIR` runs each config once per size with the collector's own pprof extension
and takes a CPU profile over the measured window (the figures of a profiled run carry the
profiler's small cost and are marked so): DIR/<pods>-<config>.pb.gz, read with
`go tool pprof -top -cum <otelcol> FILE`. The table after each profile is the share of
CPU under each pipeline component's entry point, which is where the cost is attributed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import render  # noqa: E402
from functions.common import contracts  # noqa: E402
from functions.common import metricmapping as mappings  # noqa: E402
from functions.compose_serving_stack import collector, collector_objects  # noqa: E402
from tests.bench import unwind_on_sigterm  # noqa: E402
from tests.collector import engines, harness  # noqa: E402

WARMUP_SECONDS = 5
PPROF_EXTENSION = "pprof"
# A component's cost in a CPU profile: everything under its entry point (cumulative).
# The transform and filter processors share one package, so their entry points are
# told apart by the processor instance in the profile's labels only; summed here.
PROFILED_COMPONENTS = (
    ("prometheus receiver (scrape, parse)", r"prometheusreceiver/internal\.\(\*transaction\)"),
    ("transform processors", r"transformprocessor/internal/metrics\.\(\*Processor\)"),
    ("filter processor", r"filterprocessor\.\(\*filterMetricProcessor\)"),
    ("interval", r"intervalprocessor\.\(\*intervalProcessor\)"),
    ("metrics_transform", r"metricstransformprocessor\.\(\*metricsTransformProcessor\)"),
    ("cumulative_to_delta", r"cumulativetodeltaprocessor\.\(\*cumulativeToDeltaProcessor\)"),
    ("delta_to_cumulative", r"deltatocumulativeprocessor\.\(\*deltaToCumulativeProcessor\)"),
    ("resource processor", r"resourceprocessor\.\(\*resourceProcessor\)"),
    ("attributes processor", r"attributesprocessor\.\(\*metricAttributesProcessor\)"),
    ("batch", r"batchprocessor\."),
    ("exporter (OTLP/HTTP JSON)", r"otlphttpexporter\.\(\*baseExporter\)"),
    ("garbage collector", r"runtime\.gcBgMarkWorker"),
)
STARTUP_TIMEOUT = 120
# The rendered config's scrape interval (--interval); a list so main() can set it.
SCRAPE_INTERVAL_SECONDS = [1]
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


# The bench pods' uids carry what k8s_attributes would find for the pod, so the stand-in
# (constant_cost_standin) reads them with a fixed number of statements per resource.
UID_SEPARATOR = "|"


def pods(count: int) -> list[engines.Pod]:
    return [
        engines.Pod(
            f"llama-{i}",
            UID_SEPARATOR.join(("vllm", f"llama-{i % 5}", f"llama-{i % 5}-c", f"uid-{i}")),
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


def constant_cost_standin() -> dict:
    """The k8s_attributes stand-in at the real processor's cost shape: k8s_attributes finds
    a pod with one map lookup per resource, whatever the cluster's pod count. The live
    tests' stand-in (harness.live_overlay) tests one uid condition per pod on every
    resource, so at N pods it costs N conditions per scrape, N x N a second: at 200 pods
    that was 8 % of the profiled CPU, charged to ours although no cluster pays it. Here
    the three attributes are read out of the bench pods' uids (`pods`): three statements
    per resource at any size, setting the same values as the per-pod groups."""
    uid = 'resource.attributes["k8s.pod.uid"]'
    fields = (
        contracts.RESOURCE_ATTR_ENGINE,
        contracts.RESOURCE_ATTR_DEPLOYMENT,
        contracts.RESOURCE_ATTR_SERVING,
    )
    return {
        "error_mode": "ignore",
        "metric_statements": [
            {
                "conditions": [f"{uid} != nil"],
                "statements": [
                    f'set(resource.attributes["{attribute}"], '
                    f'Split({uid}, "{UID_SEPARATOR}")[{index}])'
                    for index, attribute in enumerate(fields)
                ],
            }
        ],
    }


def ours(targets: list[engines.Pod], folder: Path, sink: str) -> dict:
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("bench"),
        builtin().accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=SCRAPE_INTERVAL_SECONDS[0],
    )
    live = harness.live_overlay(config, targets, folder, sink)
    live["processors"][harness.STANDIN_PROCESSOR] = constant_cost_standin()
    return live


def passthrough(targets: list[engines.Pod], folder: Path, sink: str) -> dict:
    live = copy.deepcopy(ours(targets, folder, sink))
    live["processors"] = {"batch": live["processors"]["batch"]}
    live["service"]["pipelines"]["metrics"]["processors"] = ["batch"]
    # Nor does it rename labels: the label renames are ours, done by the receiver.
    for job in live["receivers"][collector.RECEIVER]["config"]["scrape_configs"]:
        job.pop("metric_relabel_configs", None)
        job["relabel_configs"] = [
            rule
            for rule in job["relabel_configs"]
            if rule.get("target_label") != collector.SCRAPE_ENGINE_LABEL
        ]
    return live


def keep_connections_open() -> None:
    """The fake engines serve HTTP/1.1 and keep each collector's connection open."""
    engines._Handler.protocol_version = "HTTP/1.1"
    serve = engines._Handler.handle

    def handle(handler) -> None:
        # A collector stopped between scrapes resets its idle connection: not an error.
        with contextlib.suppress(ConnectionResetError):
            serve(handler)

    engines._Handler.handle = handle


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


class CountedPages:
    """Counts the pages the fake engines serve: on a loaded machine a collector does not
    complete every scrape of a second, so the samples it really read are counted."""

    def __init__(self) -> None:
        self.served = 0
        self._serve = engines._Handler.do_GET

    def __enter__(self) -> CountedPages:
        counter, serve = self, self._serve

        def do_get(handler) -> None:
            serve(handler)
            if handler.path == "/metrics":
                counter.served += 1

        engines._Handler.do_GET = do_get
        return self

    def __exit__(self, *_exc) -> None:
        engines._Handler.do_GET = self._serve


def with_pprof(config: dict) -> tuple[dict, str]:
    """The config with the pprof extension on a free loopback port, and its base URL."""
    endpoint = f"127.0.0.1:{harness.free_port()}"
    profiled = copy.deepcopy(config)
    profiled["extensions"][PPROF_EXTENSION] = {"endpoint": endpoint}
    profiled["service"]["extensions"].append(PPROF_EXTENSION)
    return profiled, f"http://{endpoint}"


def take_profile(base_url: str, seconds: float, to: Path) -> None:
    """A CPU profile of `seconds` from the collector's pprof extension (blocks that long)."""
    url = f"{base_url}/debug/pprof/profile?seconds={max(1, round(seconds))}"
    with urllib.request.urlopen(url, timeout=seconds + 30) as answer:
        to.write_bytes(answer.read())


def component_shares(otelcol: Path, profile: Path) -> list[tuple[str, float]]:
    """Each component's cumulative share of the profile's CPU samples, in percent."""
    top = subprocess.run(
        ["go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", str(otelcol), str(profile)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares = []
    for label, pattern in PROFILED_COMPONENTS:
        found = 0.0
        for line in top.splitlines():
            fields = line.split()
            # flat flat% sum% cum cum% function: the largest cum% under the pattern is the
            # entry point (its callees are under it, never above).
            if len(fields) >= 6 and re.search(pattern, fields[5]):
                found = max(found, float(fields[4].rstrip("%")))
        shares.append((label, found))
    return shares


def run_once(
    otelcol: Path, make_config, size: int, seconds: float, profile_to: Path | None = None
) -> tuple[float, float, int]:
    """CPU seconds, resident MiB at the end, and pages scraped over the measured window."""
    with tempfile.TemporaryDirectory(prefix="bench-collector-") as tmp:
        folder = Path(tmp)
        targets = pods(size)
        with (
            CountedPages() as pages,
            engines.EngineServers(targets),
            harness.OtlpJsonSink() as sink,
        ):
            config = make_config(targets, folder, sink.endpoint)
            pprof_url = ""
            if profile_to is not None:
                config, pprof_url = with_pprof(config)
            with harness.running_collector(otelcol, config, folder) as log:
                # Measure from the first export on: building hundreds of OTTL statements
                # takes seconds of CPU on a loaded machine, which is start-up, not load.
                started = time.monotonic()
                while not sink.exports and time.monotonic() - started < STARTUP_TIMEOUT:
                    time.sleep(0.2)
                time.sleep(WARMUP_SECONDS)
                pid = collector_pid(log)
                start, served = cpu_seconds(pid), pages.served
                if profile_to is None:
                    time.sleep(seconds)
                else:
                    take_profile(pprof_url, seconds, profile_to)
                used, scraped = cpu_seconds(pid) - start, pages.served - served
                rss = rss_mib(pid)
            if not sink.exports:
                raise RuntimeError(f"nothing exported:\n{log.read_text()[-2000:]}")
    return used, rss, scraped


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pods", type=int, nargs="+", default=[50, 200])
    parser.add_argument(
        "--interval",
        type=int,
        default=1,
        help="scrape interval in seconds: a longer one keeps a loaded machine's fake "
        "engines from missing scrapes at 200 pods (CPU per sample is compared either way)",
    )
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="fake engines keep each scrape's connection open (HTTP/1.1), as vLLM's uvicorn "
        "does; by default they close it (HTTP/1.0), so every scrape of both configs also "
        "pays a TCP connect, which lowers the ratio",
    )
    parser.add_argument(
        "--go-defaults",
        action="store_true",
        help="run both collectors on Go's runtime defaults rather than the composed "
        "Deployment's GOGC and GOMEMLIMIT",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="one profiled run per config and size (pprof extension); profiles saved in DIR",
    )
    args = parser.parse_args()
    unwind_on_sigterm()
    otelcol = render.tools_bin() / "otelcol"
    if not otelcol.exists():
        print(
            f"otelcol is not installed at {otelcol}: run 'bash hack/tools.sh otelcol'",
            file=sys.stderr,
        )
        return 2
    per_pod = samples_per_page(bench_page(0))
    SCRAPE_INTERVAL_SECONDS[0] = args.interval
    # Both collectors inherit this process's environment (harness.running_collector).
    runtime = {} if args.go_defaults else dict(collector_objects.RUNTIME_ENV)
    for name, _ in collector_objects.RUNTIME_ENV:
        os.environ.pop(name, None)
    os.environ.update(runtime)
    settings = " ".join(f"{k}={v}" for k, v in runtime.items()) or "Go's defaults"
    if args.keep_alive:
        keep_connections_open()
    connections = "HTTP/1.1 keep-alive" if args.keep_alive else "HTTP/1.0, a connection per scrape"
    print(
        f"collector: {otelcol.resolve()}  scrape interval {args.interval} s, "
        f"{per_pod} samples per pod, engines {connections}\n"
        f"Go runtime of both collectors: {settings}"
    )
    print(f"median of {args.runs} runs of {args.seconds:.0f} s after {WARMUP_SECONDS} s warm-up\n")
    header = (
        f"{'pods':>5} {'samples/s':>10} | {'config':<12} {'cores':>7} {'scraped/s':>10} "
        f"{'us/sample':>10} {'RSS MiB':>8}"
    )
    print(header)
    print("-" * len(header))
    if args.profile is not None:
        return profile(otelcol, args.profile, args.pods, args.seconds, per_pod)
    configs = (("pass-through", passthrough), ("ours", ours))
    for size in args.pods:
        rate = size * per_pod // args.interval
        per_sample = {}
        # Interleaved, each pair in alternating order: on a shared machine whose load
        # drifts, both configs see the same drift (all of one config, then all of the
        # other, measured the drift as much as the configs).
        all_runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label, _ in configs}
        for index in range(args.runs):
            for label, make in configs if index % 2 == 0 else reversed(configs):
                all_runs[label].append(run_once(otelcol, make, size, args.seconds))
        for label, _ in configs:
            runs = all_runs[label]
            used = statistics.median(r[0] for r in runs)
            rss = statistics.median(r[1] for r in runs)
            scraped = statistics.median(r[2] for r in runs) * per_pod / args.seconds
            cores = used / args.seconds
            per_sample[label] = statistics.median(
                1e6 * r[0] / (r[2] * per_pod) if r[2] else float("nan") for r in runs
            )
            print(
                f"{size:>5} {rate:>10} | {label:<12} {cores:>7.3f} {scraped:>10.0f} "
                f"{per_sample[label]:>10.2f} {rss:>8.0f}",
                flush=True,
            )
        ratio = per_sample["ours"] / per_sample["pass-through"]
        paired = statistics.median(
            (o[0] / (o[2] or float("nan"))) / (p[0] / (p[2] or float("nan")))
            for p, o in zip(all_runs["pass-through"], all_runs["ours"], strict=True)
        )
        print(
            f"{'':>5} {'':>10} | {'ours/pass':<12} {ratio:>7.2f}x  (CPU per scraped sample; "
            f"median of the {args.runs} back-to-back pairs' ratios {paired:.2f}x)"
        )
    return 0


def profile(otelcol: Path, folder: Path, sizes: list[int], seconds: float, per_pod: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        for label, make in (("pass-through", passthrough), ("ours", ours)):
            path = folder / f"{size}-{label}.pb.gz"
            used, rss, scraped = run_once(otelcol, make, size, seconds, profile_to=path)
            micros = 1e6 * used / (scraped * per_pod) if scraped else float("nan")
            print(
                f"{size} pods, {label} (profiled): {used / seconds:.3f} cores, "
                f"{micros:.2f} us/sample, RSS {rss:.0f} MiB -> {path}"
            )
            for component, share in component_shares(otelcol, path):
                print(f"    {share:5.1f}%  {component}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
