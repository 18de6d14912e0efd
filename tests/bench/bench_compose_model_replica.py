"""How long compose-model-replica's pure planner takes per serving shape.

    .venv/bin/python tests/bench/bench_compose_model_replica.py

Prints the median of several runs of parse + compose + observe for each input under
tests/unit/testdata/model_replica/inputs, and for a standalone member whose pod template
has 30 containers (every container is copied and checked). Not a test: pytest does not
collect bench_*.py.
"""

import copy
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from functions.compose_model_replica.compose import HEALTH_KEY, compose  # noqa: E402
from functions.compose_model_replica.model import parse  # noqa: E402
from functions.compose_model_replica.status import observe  # noqa: E402

INPUTS = REPO / "tests" / "unit" / "testdata" / "model_replica" / "inputs"
RUNS = 7
LOOPS = 200


def once(xr: dict) -> int:
    replica = parse(xr)
    plan = compose(replica)
    observe(replica, plan.workloads, {}, HEALTH_KEY)
    return len(plan.composed)


def median_ms(xr: dict) -> float:
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for _ in range(LOOPS):
            once(xr)
        samples.append((time.perf_counter() - start) / LOOPS * 1000)
    return statistics.median(samples)


def main() -> None:
    cases = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(INPUTS.glob("*.yaml"))}
    wide = copy.deepcopy(cases["standalone"])
    containers = wide["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"]
    containers += [{"name": f"sidecar-{i}", "image": "busybox"} for i in range(29)]
    cases["standalone, 30 containers"] = wide
    print(f"{'shape':<28} {'objects':>7} {'median ms':>10}")
    for name, xr in cases.items():
        print(f"{name:<28} {once(xr):>7} {median_ms(xr):>10.3f}")


if __name__ == "__main__":
    main()
