"""Signals from the vocabulary, end to end through the real collector.

Fake engine pods serve pages written from vLLM's and SGLang's published metric names
(tests/collector/engines.py), their counters and histograms growing at known rates. The
collector runs the config compose-serving-stack renders for a cluster whose replicas
autoscale from vocabulary signals and no destination (only the agent's signals page),
with the overlays tests/collector/harness.py describes. The agent's own code reads the
page (`read_collector_page`) and computes the signals of ONE policy that names no
signal (the defaults) for a vLLM deployment and an SGLang deployment alike; then a pod
stops serving and its deployment's signals fail by name instead of reading as zero.
"""

import glob
import threading
import time
from pathlib import Path

import pytest
import yaml

from functions.common import metricmapping as mappings
from functions.compose_serving_stack import collector
from functions.runtime.agent.collect import read_collector_page
from functions.runtime.agent.signals import Scope, SignalHistory, evaluate
from functions.runtime.shared.policy import PolicySpec
from tests.collector import engines, harness
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "ml-team"
INTERVAL = 1  # the collector's scrape interval in this test, seconds
WINDOW = 6.0
# Requests finished per second and requests waiting, per engine.
VLLM_RATE, VLLM_WAITING = 10.0, 4.0
SGLANG_RATE, SGLANG_WAITING = 5.0, 3.0

# The one policy: it names no signal, so the defaults apply.
POLICY = PolicySpec.model_validate(
    {
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "any"},
        "clusters": [{"name": "us-east-1", "maxReplicas": 4}],
    }
)


def _builtin():
    paths = sorted(glob.glob(str(REPO / "functions/common/builtin_mappings/*.yaml")))
    return mappings.parse_mappings([yaml.safe_load(Path(p).read_text()) for p in paths]).accepted


class GrowingPages:
    """Rewrites each pod's page as time passes: counters at a fixed rate, every TTFT
    observation in one known bucket (vLLM's (0.1, 0.25], SGLang's (0.2, 0.4])."""

    def __init__(self, vllm: engines.Pod, sglang: engines.Pod):
        self.vllm, self.sglang = vllm, sglang
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.gone: set[str] = set()  # pods that stopped serving (their page is empty)
        self.update()

    def update(self) -> None:
        elapsed = time.monotonic() - self.started
        done = int(VLLM_RATE * elapsed)
        vllm_buckets = [0] * (len(engines.VLLM_TTFT_BUCKETS) + 1)
        vllm_buckets[engines.VLLM_TTFT_BUCKETS.index(0.25)] = done
        self.vllm.page = engines.vllm_serving_page(done, VLLM_WAITING, vllm_buckets)
        done = int(SGLANG_RATE * elapsed)
        sglang_buckets = [0] * (len(engines.SGLANG_TTFT_BUCKETS) + 1)
        sglang_buckets[engines.SGLANG_TTFT_BUCKETS.index(0.4)] = done
        self.sglang.page = engines.sglang_serving_page(done, SGLANG_WAITING, sglang_buckets)
        for pod in (self.vllm, self.sglang):
            if pod.name in self.gone:
                pod.page = ""  # the handler answers 404: every scrape fails

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.update()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    otelcol = require_tool("otelcol")
    folder = tmp_path_factory.mktemp("signals")
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("us-east-1"),
        _builtin(),
        None,
        signals=True,
        scrape_interval_seconds=INTERVAL,
    )
    vllm = engines.Pod("chat-a", "uid-a", NAMESPACE, "vllm", "chat-vllm", "chat-vllm-us", "")
    sglang = engines.Pod("qa-a", "uid-b", NAMESPACE, "sglang", "chat-sglang", "chat-sglang-us", "")
    pages = GrowingPages(vllm, sglang)
    threading.Thread(target=pages.run, daemon=True).start()
    history = SignalHistory(WINDOW + 2)
    try:
        with engines.EngineServers([vllm, sglang]):
            overlay = harness.live_overlay(config, [vllm, sglang], folder, "http://unused")
            with harness.running_collector(otelcol, overlay, folder) as log:
                yield pages, history, harness.signals_url(overlay), log
    finally:
        pages.stop.set()


def _signals(history: SignalHistory, deployment: str) -> dict:
    now = time.time()
    scope = Scope(NAMESPACE, deployment)
    return {
        name: evaluate(
            signal,
            history,
            scope,
            ready_replicas=1,
            now=now,
            window=WINDOW,
            interval=INTERVAL,
        ).single()
        for name, signal in POLICY.effective_signals.items()
    }


def _sample_until(history, url, done, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        read_collector_page(url, history, time.time())
        if done():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize(
    ("deployment", "rate", "waiting", "ttft_bucket"),
    [
        ("chat-vllm", VLLM_RATE, VLLM_WAITING, (0.1, 0.25)),
        ("chat-sglang", SGLANG_RATE, SGLANG_WAITING, (0.2, 0.4)),
    ],
    ids=["vllm", "sglang"],
)
def test_one_policy_computes_demand_pressure_and_latency_for_either_engine(
    live, deployment, rate, waiting, ttft_bucket
):
    _, history, url, log = live

    def all_computed() -> bool:
        got = _signals(history, deployment)
        return all(error is None for _, error in got.values()) and len(history.pages) >= 2 * WINDOW

    assert _sample_until(history, url, all_computed, 60), (
        _signals(history, deployment),
        log.read_text()[-2000:],
    )
    got = {name: v for name, (v, _) in _signals(history, deployment).items()}
    # Generous bounds: rates are over the collector's ticks, which jitter on a loaded machine.
    assert rate * 0.6 <= got["demand"] <= rate * 1.4, got
    assert got["pressure"] == waiting
    assert ttft_bucket[0] < got["latency"] <= ttft_bucket[1], got


def test_a_signal_whose_source_disappears_fails_by_name_and_is_never_zero(live):
    pages, history, url, _ = live

    def computed() -> bool:
        return _signals(history, "chat-sglang")["pressure"] == (SGLANG_WAITING, None)

    assert _sample_until(history, url, computed, 60), _signals(history, "chat-sglang")
    pages.gone.add(pages.sglang.name)

    def failed() -> bool:
        return all(v is None for v, _ in _signals(history, "chat-sglang").values())

    assert _sample_until(history, url, failed, 60), _signals(history, "chat-sglang")
    for name, (value, error) in _signals(history, "chat-sglang").items():
        assert value is None, name
        assert "ml-team/chat-sglang" in error, (name, error)
    # The vLLM deployment on the same page is unaffected.
    assert _signals(history, "chat-vllm")["pressure"] == (VLLM_WAITING, None)
