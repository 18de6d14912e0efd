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
"""

import random
from collections import Counter

from functions.common import contracts
from functions.compose_serving_stack import collector
from tests.collector import engines, harness
from tests.collector.test_live_pipeline import CLUSTER, _builtin
from tests.conftest import require_tool

PODS = 24
SLOW_PODS = 4
RUNNING_PER_POD = 2
EXPORTS = 40  # one per second


def _pods() -> list[engines.Pod]:
    page = engines.vllm_page(RUNNING_PER_POD, 0.5, 10, [0] * 13, release="0.32")
    pods = [
        engines.Pod(
            f"llama-8b-{index}",
            f"uid-llama-{index}",
            "ml-team",
            "vllm",
            "llama-8b",
            "llama-8b-us-east-1",
            page,
        )
        for index in range(PODS)
    ]
    slow = random.Random(7)
    for pod in pods[:SLOW_PODS]:
        pod.respond_after = lambda: slow.uniform(0.0, 0.8)
    return pods


def test_every_merged_point_counts_each_pod_once(tmp_path):
    otelcol = require_tool("otelcol")
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(CLUSTER),
        _builtin().accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=1,
    )
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
