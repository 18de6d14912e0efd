"""From `kubectl apply` of a ModelDeployment to the first token of a real engine, on the
fleet box, with the engine's own start shown apart from the rest.

    .venv/bin/python tests/bench/bench_first_token.py [--runs 3]

The box (control plane + the examples' two GPU members; us-east-1 serves for real:
hack/fleetbox/serving.py) starts once, the example InferenceClusters are applied and
waited for until composed (their stacks never become Ready: no Helm here); then each
run applies a one-replica Standalone vLLM deployment of the tiny model
(tests/e2e/test_serving_real.py's), waits for the ModelDeployment's status to
count a ready replica (what gates serving), streams one chat completion from the
engine and deletes the deployment. Printed per run and as the median:

- engine: the engine's own start, from its process starting (the container's state
  turning running, seen by a watch) to its /health answering (polled every 0.1 s);
- rest: everything else: our reconciles and provider-kubernetes up to the pod on the
  member, the scheduler and the runner up to the process, the startup and readiness
  probes' periods, the status travelling back to the control plane, the first token;
  and its parts.

Then the worst run of the two legs #43 bounds (pod Ready -> status on the control plane
within STATUS_BOUND_SECONDS, the rest within REST_BOUND_SECONDS, in every run), and how
often core's per-XR circuit breakers opened (its `circuit_breaker_opens_total`): an open
breaker drops the watch events that carry status, which is what stalled the status leg
for 53 s at core's default breaker (docs/operating.md, "Reconciles that follow changes").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import openai  # noqa: E402
import yaml  # noqa: E402
from kubernetes import client  # noqa: E402

from fleetbox.box import FleetBox, missing_tools  # noqa: E402
from fleetbox.clusters import CONTROL_PLANE  # noqa: E402
from fleetbox.members import DEFAULT_MEMBERS  # noqa: E402
from fleetbox.wait import is_true, wait_for  # noqa: E402
from tests.e2e import claims  # noqa: E402
from tests.e2e import test_serving_real as scenario  # noqa: E402

HEALTH_POLL_SECONDS = 0.1
STATUS_BOUND_SECONDS = 2.0
REST_BOUND_SECONDS = 15.0
STATUS_LEG = "pod Ready->status on control plane"


def breaker_opens(box: FleetBox) -> dict[str, float]:
    """core's circuit_breaker_opens_total by controller, from its metrics endpoint."""
    address = f"http://127.0.0.1:{box.core_metrics_port}/metrics"
    with urllib.request.urlopen(address, timeout=10) as answer:
        page = answer.read().decode()
    opens = {}
    for line in page.splitlines():
        if line.startswith("circuit_breaker_opens_total{"):
            labels, value = line.rsplit(" ", 1)
            controller = labels.split('controller="', 1)[1].split('"', 1)[0]
            opens[controller] = float(value)
    return opens


def _running(pods: list[dict]) -> dict | None:
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == "engine" and "running" in (status.get("state") or {}):
                return pod
    return None


def _health(address: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(HEALTH_POLL_SECONDS)
    raise TimeoutError(f"{address}/health not answering within {timeout:.0f}s")


def _first_token(address: str, model: str) -> float:
    with openai.OpenAI(base_url=f"{address}/v1", api_key="unused", max_retries=0) as api:
        stream = api.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say something."}],
            max_tokens=8,
            stream=True,
            timeout=120,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content is not None:
                return time.monotonic()
    raise RuntimeError("the stream ended without a token")


def one_run(box: FleetBox, name: str) -> dict[str, float]:
    began = time.monotonic()
    claims.apply_document(box, scenario.standalone(name))
    marks: dict[str, float] = {}

    def seen(pods):
        if pods and "pod" not in marks:
            marks["pod"] = time.monotonic()
        return _running(pods)

    pod = scenario._pods(box, name, seen, f"{name}'s engine process running")
    marks["process"] = time.monotonic()
    address = scenario._http_address(pod)
    marks["engine"] = _health(address, scenario.SERVE_SECONDS)
    scenario._pods(box, name, lambda pods: pods and scenario._ready(pods[0]), f"{name} Ready")
    marks["ready"] = time.monotonic()
    scenario._deployment(
        box,
        name,
        lambda md: (md.get("status") or {}).get("readyReplicas") == 1,
        f"{name} readyReplicas 1",
        claims.CONVERGE_SECONDS,
    )
    marks["status"] = time.monotonic()
    marks["token"] = _first_token(address, name)
    claims.delete(box, "modeldeployment", name, scenario.NAMESPACE)
    scenario._pods(box, name, lambda pods: not pods or None, f"{name} gone", 120)
    engine = marks["engine"] - marks["process"]
    total = marks["token"] - began
    return {
        "total": total,
        "engine": engine,
        "rest": total - engine,
        "apply->pod on member": marks["pod"] - began,
        "pod->process": marks["process"] - marks["pod"],
        "engine ready->pod Ready (probes)": marks["ready"] - marks["engine"],
        STATUS_LEG: marks["status"] - marks["ready"],
        "status->first token": marks["token"] - marks["status"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--no-watches",
        action="store_true",
        help="provider-kubernetes without --enable-watches (status at a 30 s poll)",
    )
    args = parser.parse_args()
    missing = missing_tools(gpu=True, real=True)
    if missing:
        print(f"missing tools {missing}: run 'bash hack/tools.sh'", file=sys.stderr)
        return 1
    box = FleetBox(
        members=DEFAULT_MEMBERS,
        gpu=DEFAULT_MEMBERS,
        real=(scenario.MEMBER,),
        provider_watches=not args.no_watches,
    )
    try:
        box.start()
        real = box.timings[f"real_{scenario.MEMBER}"]
        print(
            f"fleet box: control plane + 2 GPU members started in {box.timings['start']:.1f} s, "
            f"of which {real:.1f} s real serving on {scenario.MEMBER}; provider-kubernetes "
            + ("without watches" if args.no_watches else "with --enable-watches"),
            flush=True,
        )
        # The GPU examples' clusters (the box has no CPU member here).
        box.apply(
            CONTROL_PLANE,
            [
                p
                for p in sorted((claims.EXAMPLES / "inferenceclusters").glob("*.yaml"))
                if yaml.safe_load(p.read_text())["spec"]["providerConfigRef"]["name"]
                in DEFAULT_MEMBERS
            ],
        )
        api = box.api()
        custom = client.CustomObjectsApi(api)

        def clusters_composed():
            found = custom.list_cluster_custom_object(
                "modelplane.ai", "v1alpha1", "inferenceclusters"
            )["items"]
            assert len(found) == len(DEFAULT_MEMBERS), len(found)
            assert all(is_true(c, "Composed") for c in found), [
                json.dumps(c.get("status", {}).get("conditions")) for c in found
            ]
            return True

        wait_for("the example InferenceClusters composed", clusters_composed, 600)
        api.close()
        results = []
        for run in range(args.runs):
            results.append(one_run(box, f"bench-first-token-{run}"))
            parts = ", ".join(f"{what} {seconds:.1f}" for what, seconds in results[-1].items())
            print(f"run {run + 1}: {parts} (s)", flush=True)
        for what in results[0]:
            values = [r[what] for r in results]
            figures = ", ".join(f"{v:.1f}" for v in values)
            median = statistics.median(values)
            print(f"{what}: median {median:.1f} s over {len(values)} ({figures})")
        worst_status = max(r[STATUS_LEG] for r in results)
        worst_rest = max(r["rest"] for r in results)
        print(
            f"worst of {len(results)} runs: status leg {worst_status:.1f} s "
            f"(bound {STATUS_BOUND_SECONDS:.0f} s), rest {worst_rest:.1f} s "
            f"(bound {REST_BOUND_SECONDS:.0f} s): "
            + (
                "within both"
                if worst_status <= STATUS_BOUND_SECONDS and worst_rest <= REST_BOUND_SECONDS
                else "OUTSIDE a bound"
            )
        )
        opened = {c: n for c, n in breaker_opens(box).items() if n}
        print(f"core circuit breakers opened (since the box started): {opened or 'never'}")
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
