"""The fleet box's runtime (hack/fleetbox/runtime.py) as kubelet would run it: KEDA's
processes, which exit on a start-up error and leave the restart to their pod, are
restarted with a backoff; ours never are, and a wait that times out says who is down."""

from __future__ import annotations

import time
import types

import pytest

import fleetbox.runtime
from fleetbox.process import Process
from fleetbox.wait import FleetBoxError


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    monkeypatch.setattr(fleetbox.runtime, "RESTART_BACKOFF_SECONDS", 0.2)
    box = types.SimpleNamespace(processes={})
    running = fleetbox.runtime.Runtime.__new__(fleetbox.runtime.Runtime)
    running.box, running.members = box, ["m1"]
    running.listens, running.restarts, running._restart_due = {}, {}, {}

    def add(kind: str, script: str) -> Process:
        process = Process(f"{kind}-m1", ["sh", "-c", script], tmp_path / f"{kind}.log")
        process.start()
        box.processes[process.name] = process
        return process

    running.add = add
    yield running
    for process in box.processes.values():
        process.stop(grace=1)


def test_keda_is_restarted_after_its_backoff_and_ours_is_not(runtime, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(fleetbox.runtime, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    operator = runtime.add("keda-operator", "echo unable to init scale client; exit 1")
    scaler = runtime.add("scaler", "exit 2")
    operator.popen.wait()
    scaler.popen.wait()
    assert runtime.revive() == []  # exited, but its backoff (0.2 s here) has only begun
    clock[0] += 0.19
    assert runtime.revive() == []
    clock[0] += 0.02
    assert runtime.revive() == ["keda-operator-m1"]
    assert runtime.restarts == {"keda-operator-m1": 1}
    assert not scaler.running()
    assert "--- fleet box: exited (1), restart 1" in operator.log.read_text()
    # It exits again: the backoff doubles.
    operator.popen.wait()
    assert runtime.revive() == []
    clock[0] += 0.39
    assert runtime.revive() == []
    clock[0] += 0.02
    assert runtime.revive() == ["keda-operator-m1"]
    assert runtime.restarts == {"keda-operator-m1": 2}


def test_a_wait_that_times_out_names_each_process_its_state_and_last_words(runtime):
    runtime.add("keda-adapter", "sleep 30")
    runtime.add("scaler", "echo bind: address already in use; exit 1").popen.wait()
    with pytest.raises(FleetBoxError) as timed_out:
        runtime.wait_for("the floor served", lambda: False, 0.5)
    text = str(timed_out.value)
    assert "the floor served: not within" in text
    assert "--- scaler-m1 (exited 1)\nbind: address already in use" in text
    assert "--- keda-adapter-m1 (running)" in text


def test_the_start_fails_at_once_naming_one_of_ours_that_exited_before_it_listened(runtime):
    scaler = runtime.add("scaler", "echo bind: address already in use; exit 1")
    runtime.listens["scaler-m1"] = [("127.0.0.1", 1)]
    scaler.popen.wait()
    began = time.monotonic()
    with pytest.raises(FleetBoxError, match=r"scaler-m1 exited \(1\) before it listened"):
        runtime._wait_listening(timeout=300)
    assert time.monotonic() - began < 60  # at once, not at the timeout
