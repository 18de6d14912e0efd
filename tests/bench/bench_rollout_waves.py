"""How soon a rollout's next wave starts once the wave before it passed its gates, in the
fleet box: real Crossplane core, our functions, provider-kubernetes (watching the
members), the members' controller managers, kube-scheduler and KWOK pods.

    .venv/bin/python tests/bench/bench_rollout_waves.py [--runs 5] [--bake 5]

Size: two Standard-stack GPU clusters, one replica (one KWOK pod, one GPU) on each:
us-east-1 (the example cluster, the first wave: a selector wave on its tier) and
e2e-rollout (a copy of its H100 pool on the member e2e-a: the last wave). Each run
applies a new revision (one engine flag changed) and watches, from before the apply,
both members' engine Deployments and, on the control plane, the ModelDeployment, its
ModelReplicas and their workload Objects. Printed, median of `--runs`:

- gates passed → next wave's first change: from the moment wave 1's gates passed (its
  member's Deployment fully rolled to the new revision and Ready, plus the bake time)
  to the first change of the wave-2 member's Deployment (the issue's acceptance:
  within 30 s);
- where that time goes, each step from the one before: the member's rollout seen in
  its ModelReplica's status (provider-kubernetes' watch, core, compose-model-replica),
  seen by compose-model-deployment (bakingSince), the bake's end, wave 2's ModelReplica's
  spec (composed by it), its workload Object's manifest (compose-model-replica), the
  member's Deployment (provider-kubernetes' apply);
- apply → wave 1's change; apply → Complete;
- in how many runs core's watch circuit breaker was open on the ModelDeployment or a
  ModelReplica (its Responsive condition False: core drops its watch events, and only
  its call-back reconciles it; the functions then ask for one within 5 s).

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from fleetbox import gpu  # noqa: E402
from fleetbox.box import FleetBox, missing_tools  # noqa: E402
from functions.common.contracts import LABEL_REVISION  # noqa: E402
from tests.e2e import claims  # noqa: E402
from tests.e2e import test_rollouts_live as live  # noqa: E402

REAL, SPARE = live.REAL, live.SPARE


def _document(bake: float, run: int) -> dict:
    document = live._document(("--max-num-seqs", str(run + 1)))
    document["metadata"]["name"] = live.NAME
    labels = document["spec"]["template"]["metadata"]["labels"]
    labels.pop(live.REAL_RUN_LABEL, None)  # KWOK pods on both members
    document["spec"]["rollout"]["bakeTime"] = f"{bake:.0f}s"
    return document


class Milestones:
    """The first time (time.time()) each named check held on an object of one listing,
    kept current by a watch in a thread; `reset` forgets what was seen (a new run)."""

    def __init__(self, api, list_call, checks: dict, *args, **kwargs) -> None:
        self.api, self.list_call, self.checks = api, list_call, checks
        self.args, self.kwargs = args, kwargs
        self.seen: dict[str, float] = {}
        self.values: dict[str, object] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()
            self.values.clear()

    def _observe(self, obj: dict) -> None:
        now = time.time()
        with self.lock:
            for name, check in self.checks.items():
                if name in self.seen:
                    continue
                value = check(obj)
                if value:
                    self.seen[name] = now
                    self.values[name] = value

    def _run(self) -> None:
        version = None
        while not self.stop.is_set():
            try:
                if version is None:
                    listed = self.list_call(*self.args, **self.kwargs)
                    version = listed["metadata"]["resourceVersion"]
                    for item in listed["items"]:
                        self._observe(item)
                for event in watch.Watch().stream(
                    self.list_call,
                    *self.args,
                    resource_version=version,
                    timeout_seconds=5,
                    **self.kwargs,
                ):
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    self._observe(obj)
                    if self.stop.is_set():
                        break
            except ApiException as error:
                if error.status != 410:
                    raise
                version = None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)


def _control_plane_milestones(box, before: dict) -> list[Milestones]:
    """What the control plane shows of a run's new revision: any but `before["old"]`
    (the one serving before the run's apply)."""
    api = box.api()
    custom = client.CustomObjectsApi(api)

    def md_check(check):
        def wrapped(md):
            return md["metadata"]["name"] == live.NAME and check(live._rollout(md))

        return wrapped

    def replica(cluster, check):
        def wrapped(mr):
            spec = mr.get("spec") or {}
            if (spec.get("cluster") or {}).get("name") != cluster:
                return None
            return check(spec, mr.get("status") or {})

        return wrapped

    def new(value):
        return bool(value) and value != before["old"]

    def workload(cluster):
        def wrapped(obj):
            manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
            if manifest.get("kind") != "Deployment":
                return None
            labels = (manifest.get("metadata") or {}).get("labels") or {}
            containers = manifest["spec"]["template"]["spec"]["containers"]
            return (
                obj["metadata"]["name"].startswith(f"{live.NAME}-{cluster}-")
                and any(c["name"] == "engine" for c in containers)
                and new(labels.get(LABEL_REVISION))
            )

        return wrapped

    def responsive_false(xr):
        return xr["metadata"]["name"].startswith(live.NAME) and any(
            c.get("type") == "Responsive" and c.get("status") == "False"
            for c in (xr.get("status") or {}).get("conditions") or []
        )

    spare = live.SPARE_CLUSTER
    return [
        Milestones(
            api,
            custom.list_namespaced_custom_object,
            {
                "baking": md_check(
                    lambda r: new(r.get("revision")) and r.get("wave") == 1 and r.get("bakingSince")
                ),
                "circuit open": responsive_false,
            },
            live.GROUP,
            live.VERSION,
            live.NAMESPACE,
            live.PLURAL,
        ),
        Milestones(
            api,
            custom.list_namespaced_custom_object,
            {
                "wave 1 replica rolled": replica(
                    REAL,
                    lambda spec, status: (
                        new(status.get("revision"))
                        and (status.get("readyReplicas") or 0) >= (spec.get("replicas") or 1)
                    ),
                ),
                "wave 2 replica spec": replica(
                    spare, lambda spec, status: new(spec.get("revision"))
                ),
                "circuit open": responsive_false,
            },
            live.GROUP,
            live.VERSION,
            live.NAMESPACE,
            "modelreplicas",
        ),
        Milestones(
            api,
            custom.list_namespaced_custom_object,
            {"wave 2 object": workload(spare)},
            "kubernetes.m.crossplane.io",
            "v1alpha1",
            live.NAMESPACE,
            "objects",
        ),
    ]


def _median(values: list[float]) -> str:
    figures = ", ".join(f"{v:.1f}" for v in values)
    return f"median {statistics.median(values):.1f} s over {len(values)} ({figures})"


def _timeline(
    run: int,
    *,
    milestones: list[Milestones],
    rolled_at: float,
    changed_at: float,
    bake: float,
    steps: dict[str, list[float]],
) -> bool:
    """Print one run's way from wave 1 rolled to wave 2's change, each step from the one
    before, and add each step to `steps`; whether the circuit breaker opened."""
    seen = {k: v for m in milestones for k, v in m.seen.items()}
    values = {k: v for m in milestones for k, v in m.values.items()}
    timeline: list[tuple[str, float | None]] = [("wave 1 member rolled", rolled_at)]
    for name in ("wave 1 replica rolled", "baking"):
        timeline.append((name, seen.get(name)))
    if "baking" in values:
        stamp = datetime.fromisoformat(str(values["baking"]).replace("Z", "+00:00"))
        timeline.append(("bake ends", stamp.timestamp() + bake))
    # Core applies the composed ModelReplicas before it writes the XR's status: the
    # wave-2 ModelReplica's spec is the first sign of wave 2 (status.rollout.wave 2
    # follows it).
    for name in ("wave 2 replica spec", "wave 2 object"):
        timeline.append((name, seen.get(name)))
    timeline.append(("wave 2 member changed", changed_at))
    line, previous = [], None
    for name, at in timeline:
        if at is None:
            line.append(f"{name} ?")
            continue
        if previous is not None:
            steps.setdefault(name, []).append(at - previous)
            line.append(f"{name} +{at - previous:.1f}")
        else:
            line.append(name)
        previous = at
    print(f"run {run}: " + " -> ".join(line), flush=True)
    return "circuit open" in seen


def _report(
    args,
    *,
    passed: list[float],
    steps: dict[str, list[float]],
    circuit_open: int,
    wave1: list[float],
    complete: list[float],
) -> None:
    size = "2 clusters x 1 replica (KWOK pods), waves [selector, 100%]"
    print(f"size: {size}, bakeTime {args.bake:.0f}s")
    print(f"wave 1 gates passed -> wave 2's first change on its member: {_median(passed)}")
    for name, values in steps.items():
        print(f"  step to {name}: {_median(values)}")
    print(
        "runs during which core's watch circuit breaker was open on the ModelDeployment or a"
        f" ModelReplica: {circuit_open}/{args.runs}"
    )
    print(f"apply -> wave 1's first change on its member: {_median(wave1)}")
    print(f"apply -> Complete: {_median(complete)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bake", type=float, default=5.0)
    args = parser.parse_args()
    missing = missing_tools(gpu=True)
    if missing:
        print(f"missing tools {missing}: run 'bash hack/tools.sh'", file=sys.stderr)
        return 1
    box = FleetBox(members=(REAL, SPARE), gpu=(REAL, SPARE))
    try:
        box.start()
        print(f"fleet box: control plane + 2 GPU members started in {box.timings['start']:.1f} s")
        first = claims.example("inferenceclusters/us-east-h100.yaml")
        first["metadata"]["labels"][live.ROLLOUT_LABEL] = "true"
        spare = live._spare_cluster()
        gpu.add_nodes(
            box, SPARE, [n for p in spare["spec"]["nodePools"] for n in gpu.pool_nodes(spare, p)]
        )
        claims.apply_document(box, first)
        claims.apply_document(box, spare)
        for cluster in (REAL, live.SPARE_CLUSTER):
            live.wait_ledger(box, cluster)
        recorders = {m: live.Recorder(box, m).start() for m in (REAL, SPARE)}
        claims.apply_document(box, _document(args.bake, 0))
        md = live._deployment(
            box, lambda md: live._rollout(md).get("phase") == "Complete" and md, "first", 300
        )
        serving = live._rollout(md)["revision"]
        for recorder in recorders.values():
            live._wait_rolled(recorder, serving, 300)
        live._seen_serving(box)
        passed, wave1, complete = [], [], []
        steps: dict[str, list[float]] = {}
        circuit_open = 0
        before = {"old": serving}
        milestones = _control_plane_milestones(box, before)
        for run in range(1, args.runs + 1):
            for m in milestones:
                m.reset()
            before["old"] = serving
            began = time.time()
            claims.apply_document(box, _document(args.bake, run))
            md = live._deployment(
                box,
                lambda md, old=serving: (
                    live._rollout(md).get("phase") == "Complete"
                    and live._rollout(md).get("revision") != old
                    and md
                ),
                f"run {run} Complete",
                300,
            )
            complete.append(time.time() - began)
            rollout = live._rollout(md)
            serving = rollout["revision"]
            rolled = live._wait_rolled(recorders[REAL], serving, 60)
            second = next(c for c in recorders[SPARE].changed_since(began) if c.revision == serving)
            first_change = next(
                c for c in recorders[REAL].changed_since(began) if c.revision == serving
            )
            passed.append(second.at - (rolled.at + args.bake))
            wave1.append(first_change.at - began)
            circuit_open += _timeline(
                run,
                milestones=milestones,
                rolled_at=rolled.at,
                changed_at=second.at,
                bake=args.bake,
                steps=steps,
            )
        for recorder in recorders.values():
            recorder.close()
        for m in milestones:
            m.close()
        _report(
            args, passed=passed, steps=steps, circuit_open=circuit_open, wave1=wave1,
            complete=complete,
        )  # fmt: skip
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
