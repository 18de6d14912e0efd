"""A ModelReplica on a CPU-only pool: no DRA claim, cpu and memory as the engine
container's requests and limits, a /dev/shm sized from its memory, one rank per pod,
and the engine's CPU image."""

import copy

import pytest

from functions.compose_model_replica.engines import cpu_image
from functions.compose_model_replica.model import InvalidReplica, parse
from functions.compose_model_replica.pods import cpu_shm_size_limit
from tests.unit.test_model_replica import load, manifests


def engine_container(objects: dict[str, dict]) -> tuple[dict, dict]:
    workload = objects["workload"]
    spec = workload["spec"]["template"]["spec"]
    return spec, next(c for c in spec["containers"] if c["name"] == "engine")


def test_a_cpu_replica_gets_no_claim_and_its_request_as_resources():
    objects = manifests(load("cpu-standalone"))
    assert not [k for k in objects if k.startswith("claims-")]
    spec, container = engine_container(objects)
    assert "resourceClaims" not in spec
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "16Gi"},
    }
    assert container["image"] == "vllm/vllm-openai-cpu:v0.32.0-x86_64"
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    # One rank: no parallel layout is added.
    assert not any("parallel" in a for a in container["args"])


def test_a_limit_the_user_wrote_stays_and_the_request_is_placements():
    xr = load("cpu-standalone")
    container = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "12"}}
    _spec, composed = engine_container(manifests(xr))
    assert composed["resources"] == {
        "requests": {"cpu": "8", "memory": "16Gi"},
        "limits": {"cpu": "12", "memory": "16Gi"},
    }


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("vllm/vllm-openai:v0.32.0", "vllm/vllm-openai-cpu:v0.32.0-x86_64"),
        ("docker.io/vllm/vllm-openai:v0.30.1", "docker.io/vllm/vllm-openai-cpu:v0.30.1-x86_64"),
        ("vllm/vllm-openai-cpu:v0.32.0-arm64", "vllm/vllm-openai-cpu:v0.32.0-arm64"),
        ("vllm/vllm-openai@sha256:abc", "vllm/vllm-openai@sha256:abc"),
        ("vllm/vllm-openai", "vllm/vllm-openai"),
        ("lmsysorg/sglang:v0.5.23", "lmsysorg/sglang:v0.5.23"),
        ("registry.example.com/vllm/vllm-openai:v1", "registry.example.com/vllm/vllm-openai:v1"),
    ],
)
def test_the_cpu_image_is_the_same_release_of_the_engines_cpu_build(image, expected):
    assert cpu_image(image) == expected


@pytest.mark.parametrize(
    ("memory", "size"), [("16Gi", "2Gi"), ("4Gi", "1Gi"), ("1Gi", "256Mi"), ("2M", "1Mi")]
)
def test_a_cpu_pods_shm_is_a_quarter_of_its_memory_at_most_2gi(memory, size):
    assert cpu_shm_size_limit(memory) == size


@pytest.mark.parametrize(
    ("change", "path", "rule"),
    [
        ({"memory": ""}, "spec.engines[0].members[0].memory", "set together"),
        ({"cpu": "lots"}, "spec.engines[0].members[0].cpu", "resource quantity"),
        (
            {"devices": [{"name": "gpu", "count": 1}]},
            "spec.engines[0].members[0].devices",
            "asks for no devices",
        ),
    ],
)
def test_a_bad_cpu_member_names_the_field(change, path, rule):
    xr = copy.deepcopy(load("cpu-standalone"))
    xr["spec"]["engines"][0]["members"][0].update(change)
    with pytest.raises(InvalidReplica) as err:
        parse(xr)
    assert err.value.path == path
    assert rule in err.value.rule
