"""A deployment's pods are merged once per scrape, never twice, in the real collector.

The cluster collector sums a deployment's pods into one point per vocabulary series
(docs: functions/compose_serving_stack/collector.py, step 6). Whatever gathers the pods'
points for that merge must hold one point per pod: two scrapes of one pod in the same
merge count that pod twice, and the fleet roll-up then reads the next, correct point as
a counter reset and counts the pod again for good (CI saw a fleet counter 250 too high).

A `batch` closed by its timeout did that: its timer restarts after each send, so the
batch edge drifts across every pod's scrape in turn, and a pod whose /metrics answers
slowly one scrape and quickly the next lands on either side of it. Here 24 pods of one
deployment serve the same constant page, scraped every second (Prometheus spreads their
scrapes over the interval); a few of them answer after a random 0-0.8 s, as a busy
engine does. No merged point may ever exceed the pods' total (with `batch` in place of
`interval` this fails within the run), and the total is reached.

The other side: a pod missing from a tick (an answer after the tick, a failed scrape)
must not make a merged counter dip, which every reader of a cumulative counter takes for
a reset (test_a_pod_missing_from_a_tick_never_dips_the_merged_counters; with the pods'
totals summed instead of their increases it fails with dips of that pod's total).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from dataclasses import dataclass

from functions.common import contracts
from functions.compose_serving_stack import collector
from tests.collector import engines, harness
from tests.collector.test_live_pipeline import CLUSTER, _builtin
from tests.conftest import require_tool

PODS = 24
SLOW_PODS = 4
RUNNING_PER_POD = 2
EXPORTS = 40  # one per second


def _pod(index: int, page: str) -> engines.Pod:
    """Pod `index` of the one vLLM deployment both tests merge."""
    return engines.Pod(
        f"llama-8b-{index}",
        f"uid-llama-{index}",
        "ml-team",
        "vllm",
        "llama-8b",
        "llama-8b-us-east-1",
        page,
    )


def _pods() -> list[engines.Pod]:
    page = engines.vllm_page(RUNNING_PER_POD, 0.5, 10, [0] * 13, release="0.32")
    pods = [_pod(index, page) for index in range(PODS)]
    slow = random.Random(7)
    for pod in pods[:SLOW_PODS]:
        pod.respond_after = lambda: slow.uniform(0.0, 0.8)
    return pods


def _config(scrape_interval_seconds: int) -> dict:
    """The cluster collector as composed, with the built-in mappings."""
    return collector.render_cluster_collector_config(
        collector.CollectorCluster(CLUSTER),
        _builtin().accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=scrape_interval_seconds,
    )


def test_every_merged_point_counts_each_pod_once(tmp_path):
    otelcol = require_tool("otelcol")
    config = _config(1)
    pods = _pods()
    with engines.EngineServers(pods), harness.OtlpJsonSink() as sink:
        live = harness.live_overlay(config, pods, tmp_path, sink.endpoint)
        with harness.running_collector(otelcol, live, tmp_path) as log:
            harness.wait_for(
                lambda: len(sink.exports) >= EXPORTS, EXPORTS * 2 + 30, "the exports", log
            )
        exports = list(sink.exports)

    running = [
        p.value
        for p in harness.points(exports)
        if p.metric == "modelplane_requests_running"
        and p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT) == "llama-8b"
    ]
    total = PODS * RUNNING_PER_POD
    seen = Counter(running)
    assert running, "no merged point arrived"
    # Never a pod counted twice.
    assert max(running) <= total, seen
    # Every pod once is reached. (A point can miss a slow pod whose answer came after
    # the tick: the next tick has it.)
    assert seen[total] > 0, seen


# --- a pod missing from a tick ------------------------------------------------------------
#
# The merged counters are sums over pods. A pod whose answer lands after the tick, or whose
# scrape fails (the receiver then marks its series stale), is missing from that tick: a
# plain sum of the pods' totals dips by that pod's total, and every reader of a cumulative
# counter (Prometheus' rate(), the gateway's roll-up) reads the dip as a reset and counts
# the pods' totals again. The collector merges increases instead (collector.py, step 6):
# the missing pod's increase arrives with its next point, and the merged counter never
# goes down.

GROWING_PODS = 6
# Every counter of every pod grows by one step each STEP_SECONDS (a busy deployment).
STEP_SECONDS = 0.1
# Two seconds, so a late answer can land after the tick (LATE_DELAYS) and still inside the
# scrape timeout, or past it, on a loaded machine.
GROW_SCRAPE_SECONDS = 2
PREFIX_HITS_PER_STEP = 10
TTFT_BUCKET = 3  # the bucket every request's TTFT falls in
# The late pod's answer delays, by scrape, cycled: at once, after the tick (it lands in the
# next one), and past the scrape timeout (a failed scrape: no point, its series marked
# stale, the tick without it).
LATE_DELAYS = (0.0, 1.3, 2.6, 0.0, 1.3)


@dataclass
class _GrowingPod:
    pod: engines.Pod
    steps: int = 0

    def step(self) -> None:
        self.steps += 1
        buckets = [0] * 13
        buckets[TTFT_BUCKET] = self.steps
        self.pod.page = engines.vllm_page(
            RUNNING_PER_POD,
            0.5,
            self.steps,
            buckets,
            release="0.32",
            prefix_hits=PREFIX_HITS_PER_STEP * self.steps,
        )


class _Grower:
    """Steps every pod's counters on a background thread until stopped."""

    def __init__(self, pods: list[_GrowingPod]) -> None:
        self.pods = pods
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(STEP_SECONDS):
            for pod in self.pods:
                pod.step()

    def __enter__(self) -> _Grower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def __exit__(self, *_exc) -> None:
        self.stop()


def _merged(exports, metric: str) -> dict[tuple, list[harness.Point]]:
    """The deployment's merged points of `metric`, by series, in time order."""
    series: dict[tuple, list[harness.Point]] = {}
    for p in harness.points(exports):
        if p.metric == metric and p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT) == "llama-8b":
            series.setdefault(tuple(sorted(p.attributes.items())), []).append(p)
    for points in series.values():
        points.sort(key=lambda p: p.time)
    return series


def _latest(exports, metric: str, **attributes: str) -> harness.Point | None:
    for points in _merged(exports, metric).values():
        if all(dict(points[-1].attributes).get(k) == v for k, v in attributes.items()):
            return points[-1]
    return None


def _dips(points: list[harness.Point]) -> list[tuple[int, str]]:
    """Every place where a merged cumulative series goes down, as (time, what)."""
    found = []
    for before, after in itertools.pairwise(points):
        if after.kind == "histogram":
            lower = [
                f"bucket {i}: {b} -> {a}"
                for i, (b, a) in enumerate(zip(before.buckets, after.buckets, strict=True))
                if a < b
            ]
            if after.count < before.count:
                lower.append(f"count: {before.count} -> {after.count}")
            if lower:
                found.append((after.time, ", ".join(lower)))
        elif after.value < before.value:
            found.append((after.time, f"{before.value} -> {after.value}"))
    return found


def test_a_pod_missing_from_a_tick_never_dips_the_merged_counters(tmp_path):
    otelcol = require_tool("otelcol")
    config = _config(GROW_SCRAPE_SECONDS)
    growing = [_GrowingPod(_pod(index, "")) for index in range(GROWING_PODS)]
    for pod in growing:
        pod.step()
    late = growing[0].pod
    delays = itertools.cycle(LATE_DELAYS)
    served: list[float] = []

    def late_answer() -> float:
        delay = next(delays)
        served.append(delay)
        return delay

    late.respond_after = late_answer
    pods = [g.pod for g in growing]
    with engines.EngineServers(pods), harness.OtlpJsonSink() as sink:
        live = harness.live_overlay(config, pods, tmp_path, sink.endpoint)
        with harness.running_collector(otelcol, live, tmp_path) as log, _Grower(growing) as grower:
            # Counters grow until the late pod has gone through its delays twice.
            harness.wait_for(
                lambda: len(served) >= 2 * len(LATE_DELAYS),
                4 * len(LATE_DELAYS) * GROW_SCRAPE_SECONDS + 30,
                "the late pod's scrapes",
                log,
            )
            grower.stop()
            late.respond_after = None
            total = sum(g.steps for g in growing)

            def settled() -> bool:
                stop = _latest(sink.exports, "modelplane_requests_total", finish_reason="stop")
                ttft = _latest(sink.exports, "modelplane_time_to_first_token")
                hits = _latest(sink.exports, "modelplane_prefix_cache_hits_total")
                return (
                    stop is not None
                    and stop.value == total
                    and ttft is not None
                    and ttft.count == total
                    and hits is not None
                    and hits.value == PREFIX_HITS_PER_STEP * total
                )

            harness.wait_for(settled, 10 * GROW_SCRAPE_SECONDS, f"the merged total {total}", log)
        exports = list(sink.exports)

    # The late pod really was late and really missed ticks: the merged level of requests
    # running (a gauge, summed over the pods present) lacks it in some ticks.
    assert {1.3, 2.6} <= set(served), served
    (running,) = _merged(exports, "modelplane_requests_running").values()
    levels = Counter(p.value for p in running)
    assert min(levels) < GROWING_PODS * RUNNING_PER_POD, levels

    # And no merged counter or histogram bucket ever went down.
    for metric in (
        "modelplane_requests_total",
        "modelplane_prefix_cache_hits_total",
        "modelplane_prompt_tokens_total",
        "modelplane_time_to_first_token",
    ):
        merged = _merged(exports, metric)
        assert merged, f"no merged {metric} arrived"
        for attributes, points in merged.items():
            assert len(points) >= len(LATE_DELAYS), (metric, len(points))
            # One point per tick, each later than the last (an increase stamped no later
            # than the one before is dropped).
            times = [p.time for p in points]
            assert all(b > a for a, b in itertools.pairwise(times)), (metric, times)
            assert not _dips(points), (metric, attributes, _dips(points))

    # The totals are every pod's, each once: counters that never change (the `length`
    # finishes, one per pod; the prompt tokens) are the pods' sum, never more.
    length = _latest(exports, "modelplane_requests_total", finish_reason="length")
    assert length is not None
    assert length.value == GROWING_PODS
    prompt = _latest(exports, "modelplane_prompt_tokens_total")
    assert prompt is not None
    assert prompt.value == 1000 * GROWING_PODS
    ttft = _latest(exports, "modelplane_time_to_first_token")
    assert ttft.buckets[TTFT_BUCKET] == total
    assert sum(ttft.buckets) == total
