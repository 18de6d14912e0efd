"""The local fleet, live: `make fleet` and `make fleet-down`.

    python hack/fleetbox up       start the fleet box in the background, apply examples/,
                                  wait, print a summary and the kubeconfig paths; the box
                                  keeps running
    python hack/fleetbox status   print the summary again
    python hack/fleetbox down     stop every process of the box and remove its data

The box (box.py) runs in a detached supervisor process (`python hack/fleetbox serve`)
so it outlives `make fleet`; its processes die with that supervisor, so `down` (SIGTERM
to the supervisor) leaves nothing behind. Everything lives in _output/fleet/: the box's
folder (box/, with each cluster's kubeconfig), the supervisor's pid and log, and the
state the supervisor saves once the box and its runtime are up (FleetBox.save_state),
which `up` waits for and `up` and `status` attach to (FleetBox.attach).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fleetbox.box import STATE_FILE, FleetBox, missing_tools
from fleetbox.clusters import CONTROL_PLANE, Clusters
from fleetbox.control_plane import example_paths
from fleetbox.members import EXAMPLE_MEMBERS
from fleetbox.runtime import Runtime
from fleetbox.wait import conditions, is_true

REPO = Path(__file__).resolve().parents[2]
# What `python hack/fleetbox` runs (__main__.py): the supervisor is started the same way.
PACKAGE = Path(__file__).resolve().parent

STATE = REPO / "_output" / "fleet"
PID_FILE = STATE / "supervisor.pid"
READY_FILE = STATE / STATE_FILE  # saved once the box and its runtime are up
LOG_FILE = STATE / "supervisor.log"
START_TIMEOUT = 600.0
REAL_ENV = "MODELPLANE_FLEET_REAL"
SETTLE_TIMEOUT = 180.0

XR_KINDS = (
    "inferenceclusters",
    "telemetrydestinations",
    "modelcaches",
    "modeldeployments",
    "modelreplicas",
    "metricmappings",
)


def serve() -> None:
    """The supervisor: start the box, write what `up` needs, wait for SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    box = FleetBox(root=STATE / "box", gpu=EXAMPLE_MEMBERS, real=real_members())
    runtime = None
    try:
        box.start()
        # The runtime (agent, scaler, KEDA operator and adapter) on every member.
        runtime = Runtime(box, box.members).start()
        box.save_state(STATE)
        while not stop.wait(1.0):
            for process in box.processes.values():
                if not process.running():
                    print(f"{process.name} exited; restarting it", flush=True)
                    process.start()
    finally:
        if runtime is not None:
            runtime.close()
        box.close()
        with contextlib.suppress(FileNotFoundError):
            READY_FILE.unlink()
        with contextlib.suppress(FileNotFoundError):
            PID_FILE.unlink()


def _running_pid() -> int | None:
    try:
        pid = int(PID_FILE.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def real_members() -> tuple[str, ...]:
    """The members that serve for real (`make fleet FLEET_REAL=us-east-1`): the
    LeaderWorkerSet controller runs there, and pods labelled `modelplane.test/run: real`
    run as local processes (hack/fleetbox/serving.py)."""
    return tuple(m for m in os.environ.get(REAL_ENV, "").split(",") if m)


def up() -> int:
    missing = missing_tools(gpu=True, real=bool(real_members()))
    if missing:
        print(f"missing tools: {', '.join(missing)}: run 'bash hack/tools.sh'", file=sys.stderr)
        return 1
    if _running_pid():
        print("the fleet is already running ('make fleet-down' stops it)")
        return status()
    STATE.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        READY_FILE.unlink()
    supervisor = subprocess.Popen(
        [sys.executable, str(PACKAGE), "serve"],
        stdout=LOG_FILE.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=REPO,
    )
    PID_FILE.write_text(str(supervisor.pid))
    print(
        "starting the fleet box (API servers, Crossplane core, provider-kubernetes, functions)..."
    )
    deadline = time.monotonic() + START_TIMEOUT
    while not READY_FILE.exists():
        if supervisor.poll() is not None or time.monotonic() > deadline:
            print(f"the fleet box did not start:\n{LOG_FILE.read_text()[-4000:]}", file=sys.stderr)
            down()
            return 1
        time.sleep(0.5)
    box = FleetBox.attach(STATE)
    print(f"started in {FleetBox.read_state(STATE)['start_seconds']} s; applying examples/")
    box.apply(CONTROL_PLANE, example_paths())
    _settle(box)
    return status()


def _xrs(box: Clusters) -> list[dict]:
    return [xr for kind in XR_KINDS for xr in box.get("control-plane", kind)]


def _settle(box: Clusters) -> None:
    """Wait until every XR is Synced and Ready, or nothing has changed for a while."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        snapshot = [
            (x["kind"], x["metadata"]["name"], json.dumps(x.get("status", {}), sort_keys=True))
            for x in _xrs(box)
        ]
        if snapshot and all(is_true(x, "Synced") and is_true(x, "Ready") for x in _xrs(box)):
            return
        if snapshot != last:
            last, since = snapshot, time.monotonic()
        elif time.monotonic() - since > 30:
            return  # settled: what is not ready now is explained in the summary
        time.sleep(2)


def summary(box: Clusters) -> str:
    lines = ["", "Claims and what they composed (control plane):"]
    for xr in _xrs(box):
        meta = xr["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        states = []
        for kind in ("Synced", "Ready"):
            condition = conditions(xr).get(kind, {})
            states.append(f"{kind}={condition.get('status', '?')}")
        lines.append(f"  {xr['kind']} {name}: {' '.join(states)}")
        for condition in xr.get("status", {}).get("conditions", []):
            if condition.get("status") != "True" and condition.get("message"):
                lines.append(
                    f"      {condition['type']} {condition.get('reason', '')}: "
                    f"{condition['message'][:300]}"
                )
        for placement in xr.get("status", {}).get("placements", []) or []:
            where = (
                f"{placement.get('cluster')}/{placement.get('nodePool', placement.get('pool', ''))}"
            )
            lines.append(f"      placed {placement.get('replicas')} on {where}")
    lines.append("")
    lines.append("On each member (provider-kubernetes applied them):")
    for member in box.members:
        counts: dict[str, int] = {}
        for resource in (
            "deployments",
            "leaderworkersets",
            "podcliquesets",
            "services",
            "httproutes",
            "scaledobjects",
            "adaptivepolicies",
            "configmaps",
        ):
            for item in box.get(member, resource):
                if item["metadata"].get("namespace") == "kube-system" or item["metadata"][
                    "name"
                ] in ("kube-root-ca.crt", "kubernetes"):
                    continue
                counts[item["kind"]] = counts.get(item["kind"], 0) + 1
        listed = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing yet"
        lines.append(f"  {member}: {listed}")
        lines += [f"    {line}" for line in pod_lines(box, member)]
    return "\n".join(lines)


def pod_lines(box: Clusters, member: str) -> list[str]:
    """Each pod outside kube-system: phase, readiness, the node the real kube-scheduler
    bound it to and the DRA devices it allocated (its ResourceClaims' allocation)."""
    claims = {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c
        for c in box.get(member, "resourceclaims")
    }
    lines = []
    for pod in box.get(member, "pods"):
        meta, status = pod["metadata"], pod.get("status", {})
        if meta.get("namespace") == "kube-system":
            continue
        devices = []
        for ref in status.get("resourceClaimStatuses") or []:
            claim = claims.get((meta["namespace"], ref.get("resourceClaimName")), {})
            allocation = claim.get("status", {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                devices.append(f"{result['pool']}/{result['device']}")
        ready = is_true(pod, "Ready")
        node = pod["spec"].get("nodeName") or "(not scheduled)"
        waiting = [
            s["state"]["waiting"].get("reason", "")
            for s in status.get("containerStatuses") or []
            if s.get("state", {}).get("waiting")
        ]
        phase = status.get("phase", "?") + (f" {','.join(waiting)}" if waiting else "")
        lines.append(
            f"pod {meta['namespace']}/{meta['name']}: {phase}{' Ready' if ready else ''}"
            f" on {node}" + (f" with {' '.join(sorted(devices))}" if devices else "")
        )
    return lines


def status() -> int:
    if not READY_FILE.exists():
        print("the fleet is not running ('make fleet' starts it)")
        return 1
    box = FleetBox.attach(STATE)
    print(summary(box))
    kubectl = box.bin / "kubectl"
    print(f"\nKubeconfigs (kubectl at the API servers' release is {kubectl}):")
    for name, path in box.kubeconfigs.items():
        print(f"  {name}: {path}")
    control = box.kubeconfigs[CONTROL_PLANE]
    print(f"\nTry: {kubectl} --kubeconfig {control} get modeldeployments -A")
    print("Stop it with: make fleet-down")
    return 0


def down() -> int:
    pid = _running_pid()
    if pid is None:
        print("the fleet is not running")
        return 0
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    else:
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        PID_FILE.unlink()
    print("the fleet is stopped")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    command = parser.parse_args().command
    if command == "serve":
        serve()
        return 0
    return {"up": up, "down": down, "status": status}[command]()


if __name__ == "__main__":
    sys.exit(main())
