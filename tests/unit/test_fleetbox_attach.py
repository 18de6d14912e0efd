"""A process that did not start the fleet box reaches it through the state the box saves
(hack/fleetbox/box.py: `FleetBox.save_state`, `FleetBox.attach`), as `make fleet`'s `up`
and `status` reach the box its supervisor keeps running. Nothing is started here: the
box's clusters are built, never run."""

from __future__ import annotations

import pytest
import yaml

import fleetbox.box
from fleetbox.box import STATE_FILE, FleetBox
from fleetbox.clusters import CONTROL_PLANE, Clusters


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.setattr(fleetbox.box, "missing_tools", lambda gpu=False, real=False: [])
    monkeypatch.setattr(fleetbox.box, "tools_bin", lambda: tmp_path / "bin")
    box = FleetBox(members=("us-east-1", "eu-west-1"), root=tmp_path / "box")
    for cluster in box.all_clusters:
        # What a started API server leaves in its folder, which kubeconfig() inlines.
        cluster.ca_file.parent.mkdir(parents=True)
        cluster.ca_file.write_text("the API server's CA")
        path = cluster.workdir / "kubeconfig"
        path.write_text(yaml.safe_dump(cluster.kubeconfig()))
        box.kubeconfigs[cluster.name] = path
    box.timings["start"] = 42.04
    state = tmp_path / "state"
    state.mkdir()
    box.save_state(state)
    return box, state


def test_attach_reaches_every_cluster_of_the_saved_box(saved):
    box, state = saved
    attached = FleetBox.attach(state)
    assert attached.bin == box.bin
    assert attached.root == box.root
    assert list(attached.members) == ["us-east-1", "eu-west-1"]
    assert attached.kubeconfigs == box.kubeconfigs
    for started, reached in zip(box.all_clusters, attached.all_clusters, strict=True):
        assert (reached.name, reached.server, reached.token) == (
            started.name,
            started.server,
            started.token,
        )
        assert reached.ca_file == started.ca_file
    assert attached.control.name == CONTROL_PLANE


def test_an_attached_box_reads_and_applies_but_cannot_start_or_stop_the_box(saved):
    _, state = saved
    attached = FleetBox.attach(state)
    assert type(attached) is Clusters
    assert not hasattr(attached, "start")
    assert not hasattr(attached, "close")
    assert attached.processes == {}


def test_the_state_is_written_whole_and_says_how_long_the_start_took(saved):
    _, state = saved
    assert sorted(p.name for p in state.iterdir()) == [STATE_FILE]
    assert FleetBox.read_state(state)["start_seconds"] == 42.0


def test_attaching_where_no_box_saved_its_state_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        FleetBox.attach(tmp_path)
