"""The Compositions, the XRDs and our functions work together under the real
`crossplane render`, for every example a user would apply."""

from pathlib import Path

import pytest
import yaml

import render

EXAMPLES = render.example_xrs()


@pytest.mark.parametrize("xr", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_example_renders_through_its_function(function_servers, xr):
    result = render.render(function_servers, xr)
    assert result.returncode == 0, result.stderr + function_servers.logs()

    composite = result.documents[0]
    assert composite["kind"] == yaml.safe_load(xr.read_text())["kind"]
    assert composite["metadata"]["name"] == yaml.safe_load(xr.read_text())["metadata"]["name"]


def test_render_fills_defaults_from_the_xrd(function_servers):
    # The harness passes the XRD, so a defaulted field reaches the function: the
    # InferenceCluster below does not set `stack`, and the function reports Standard.
    xr = render.REPO / "tests" / "render" / "testdata" / "cluster-without-stack.yaml"
    result = render.render(function_servers, xr)
    assert result.returncode == 0, result.stderr
    composed = next(
        c for c in result.documents[0]["status"]["conditions"] if c["type"] == "Composed"
    )
    assert "stack Standard" in composed["message"]


def test_harness_stops_every_function_it_started(crossplane, tmp_path):
    with render.FunctionServers(tmp_path) as servers:
        processes = [s.process for s in servers.servers]
        assert all(p.poll() is None for p in processes)
    assert all(p.poll() is not None for p in processes)


def test_renders_an_xr_outside_the_repo_named_relative_to_where_you_stand(
    function_servers, tmp_path, monkeypatch
):
    outside = tmp_path / "mine.yaml"
    outside.write_text((render.REPO / "tests/render/testdata/modelreplica.yaml").read_text())
    # compose-model-replica reads the InferenceCluster the replica names, as `-e` gives it.
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((render.REPO / "examples/inferenceclusters/us-east-h100.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    result = render.render(function_servers, Path("mine.yaml"), required=Path("cluster.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.documents[0]["kind"] == "ModelReplica"
