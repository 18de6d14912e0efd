"""Engines that emit OTLP traces are pointed at the cluster collector while the fleet's
destination carries traces (spec.cluster.tracesEndpoint), with each engine's own flags.
SGLang is not: its tracing needs the `sglang[tracing]` extra, and an image without it
does not start with `--enable-trace`."""

import copy
from pathlib import Path

import pytest
import yaml

from functions.common import contracts
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse

INPUTS = Path(__file__).parent / "testdata" / "model_replica" / "inputs"
ENDPOINT = contracts.COLLECTOR_OTLP_GRPC_HOST_PORT


def engine_args(name: str, endpoint: str | None, user_args: list[str] | None = None) -> list:
    xr = copy.deepcopy(yaml.safe_load((INPUTS / f"{name}.yaml").read_text()))
    if endpoint is not None:
        xr["spec"]["cluster"]["tracesEndpoint"] = endpoint
    if user_args is not None:
        member = xr["spec"]["engines"][0]["members"][0]
        member["template"]["spec"]["containers"][0]["args"] = user_args
    found = []
    for composed in compose(parse(xr)).composed:
        text = yaml.safe_dump(composed.manifest)
        if "--otlp-traces-endpoint" in text or composed.key.startswith("workload"):
            found.append(text)
    return found


@pytest.mark.parametrize(
    ("name", "expected"),
    [("standalone", ["--otlp-traces-endpoint", f"http://{ENDPOINT}"])],
)
def test_an_engine_is_pointed_at_the_collector_with_its_own_flags(name, expected):
    texts = engine_args(name, ENDPOINT)
    assert any(all(f"- {flag}\n" in text for flag in expected) for text in texts), texts


def test_sglang_is_not_given_tracing_its_image_may_lack():
    texts = engine_args("leader-worker-sglang", ENDPOINT)
    assert not any("--enable-trace" in text for text in texts)
    assert not any("--otlp-traces-endpoint" in text for text in texts)


@pytest.mark.parametrize("name", ["standalone", "leader-worker-sglang"])
def test_without_a_traces_endpoint_no_engine_traces(name):
    assert not any("--otlp-traces-endpoint" in text for text in engine_args(name, None))


def test_a_traces_endpoint_the_user_set_wins():
    texts = engine_args("standalone", ENDPOINT, ["--otlp-traces-endpoint=http://mine:4317"])
    joined = "\n".join(texts)
    assert "http://mine:4317" in joined
    assert f"http://{ENDPOINT}" not in joined
