"""How soon a rollout's next wave starts once the wave before it passed its gates, in the
fleet box: real Crossplane core, our functions, provider-kubernetes (watching the
members), the members' controller managers, kube-scheduler and KWOK pods.

    .venv/bin/python tests/bench/bench_rollout_waves.py [--runs 5] [--bake 5]

Size: two Standard-stack GPU clusters, one replica (one KWOK pod, one GPU) on each:
us-east-1 (the example cluster, the first wave: a selector wave on its tier) and
e2e-rollout (a copy of its H100 pool on the member e2e-a: the last wave). Each run
applies a new revision (one engine flag changed) and watches both members'
engine Deployments from before the apply. Printed, median of `--runs`:

- gates passed → next wave's first change: from the moment wave 1's gates passed (its
  member's Deployment fully rolled to the new revision and Ready, plus the bake time)
  to the first change of the wave-2 member's Deployment (the issue's acceptance:
  within 30 s);
- apply → wave 1's change; apply → Complete.

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from fleetbox import gpu  # noqa: E402
from fleetbox.box import FleetBox, missing_tools  # noqa: E402
from tests.e2e import claims  # noqa: E402
from tests.e2e import rollouts_live as live  # noqa: E402

REAL, SPARE = live.REAL, live.SPARE


def _document(bake: float, run: int) -> dict:
    document = live._document(("--max-num-seqs", str(run + 1)))
    document["metadata"]["name"] = live.NAME
    labels = document["spec"]["template"]["metadata"]["labels"]
    labels.pop(live.REAL_RUN_LABEL, None)  # KWOK pods on both members
    document["spec"]["rollout"]["bakeTime"] = f"{bake:.0f}s"
    return document


def _median(values: list[float]) -> str:
    figures = ", ".join(f"{v:.1f}" for v in values)
    return f"median {statistics.median(values):.1f} s over {len(values)} ({figures})"


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
        revision = live._rollout(md)["revision"]
        for recorder in recorders.values():
            live._wait_rolled(recorder, revision, 300)
        live._seen_serving(box)
        passed, wave1, complete = [], [], []
        for run in range(1, args.runs + 1):
            began = time.time()
            claims.apply_document(box, _document(args.bake, run))
            md = live._deployment(
                box,
                lambda md, old=revision: (
                    live._rollout(md).get("phase") == "Complete"
                    and live._rollout(md).get("revision") != old
                    and md
                ),
                f"run {run} Complete",
                300,
            )
            complete.append(time.time() - began)
            rollout = live._rollout(md)
            revision = rollout["revision"]
            rolled = live._wait_rolled(recorders[REAL], revision, 60)
            second = next(
                c for c in recorders[SPARE].changed_since(began) if c.revision == revision
            )
            first_change = next(
                c for c in recorders[REAL].changed_since(began) if c.revision == revision
            )
            passed.append(second.at - (rolled.at + args.bake))
            wave1.append(first_change.at - began)
        for recorder in recorders.values():
            recorder.close()
        size = "2 clusters x 1 replica (KWOK pods), waves [selector, 100%]"
        print(f"size: {size}, bakeTime {args.bake:.0f}s")
        print(f"wave 1 gates passed -> wave 2's first change on its member: {_median(passed)}")
        print(f"apply -> wave 1's first change on its member: {_median(wave1)}")
        print(f"apply -> Complete: {_median(complete)}")
    finally:
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
