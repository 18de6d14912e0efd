"""A benign render's latency while hostile selectors are in flight (issue #34, item 4).

    .venv/bin/python tests/bench/bench_cel_isolation.py [--runs 3] [--benign 20]

compose-model-deployment runs as Crossplane runs it (its own process, gRPC on loopback,
each call with a deadline of DEADLINE seconds). Hostile clients call it back to back,
each request a ModelDeployment whose eight selectors double a 16-element list by `+`
to 512 elements and walk it (each under the per-selector budget, together past the
request's): every request carries new selector texts, so nothing is answered from the
memo. Meanwhile one client renders the benign example ModelDeployment `--benign` times
in a row, its selector once answered from the memo and once new each time. Printed per
number of hostile clients (0, 1, 4, 8): the benign render's median and p99 latency (the
median over `--runs` rounds), and what the hostile requests got.

Not a test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from crossplane.function.proto.v1 import run_function_pb2 as fnv1  # noqa: E402
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1  # noqa: E402

from functions.compose_model_deployment.fn import REQUIRED_CLUSTERS  # noqa: E402
from tests.ports import free_port  # noqa: E402

DEADLINE = 20.0  # seconds: each call's gRPC deadline
HOSTILE_CLIENTS = (0, 1, 4, 8)
EXAMPLES = REPO / "examples"
SIXTEEN = "[" + ",".join("0" * 16) + "]"
_unique = itertools.count()


def _doubled(seed: int) -> str:
    expression = f"x5.all(e, e == 0) || {seed} < 0"
    for i in range(5, 0, -1):
        expression = f"cel.bind(x{i}, x{i - 1} + x{i - 1}, {expression})"
    return f"cel.bind(x0, {SIXTEEN}, {expression})"


def _request(hostile: bool, fresh: bool = False) -> fnv1.RunFunctionRequest:
    """The example deployment; `hostile`: eight new doubling selectors; `fresh`: its own
    selector made new (`|| N < 0`), so it is evaluated, not answered from the memo."""
    xr = yaml.safe_load((EXAMPLES / "modeldeployments" / "llama-8b-vllm.yaml").read_text())
    device = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]
    if hostile:
        device["devices"][0]["selectors"] = [{"cel": _doubled(next(_unique))} for _ in range(8)]
    elif fresh:
        selector = device["devices"][0]["selectors"][0]
        selector["cel"] = f"{selector['cel']} || {next(_unique)} < 0"
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.required_resources[REQUIRED_CLUSTERS].SetInParent()
    for path in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml")):
        cluster = yaml.safe_load(path.read_text())
        req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(cluster)
    return req


def _outcome(rsp: fnv1.RunFunctionResponse) -> str:
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if not fatal:
        return "composed"
    return "fatal: request budget" if "budget of 50,000" in fatal[0] else "fatal: other"


def _serve(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "functions.compose_model_deployment.main",
            "--insecure",
            "--address",
            f"127.0.0.1:{port}",
        ],
        cwd=REPO,
        stdout=(workdir / "function.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=60)
    channel.close()
    return process, port


def _round(
    port: int, hostile_clients: int, benign: int, fresh: bool
) -> tuple[list[float], dict[str, int]]:
    stop = threading.Event()
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def hostile() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            while not stop.is_set():
                try:
                    outcome = _outcome(stub.RunFunction(_request(True), timeout=DEADLINE))
                except grpc.RpcError as err:
                    outcome = f"gRPC {err.code().name}"
                with lock:
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1

    threads = [threading.Thread(target=hostile, daemon=True) for _ in range(hostile_clients)]
    for thread in threads:
        thread.start()
    time.sleep(0.5 if hostile_clients else 0)  # the flood is running before we measure
    seconds: list[float] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for _ in range(benign):
            req = _request(False, fresh)
            began = time.perf_counter()
            rsp = stub.RunFunction(req, timeout=DEADLINE)
            seconds.append(time.perf_counter() - began)
            assert _outcome(rsp) == "composed", rsp.results
    stop.set()
    for thread in threads:
        thread.join()
    return seconds, outcomes


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--benign", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cel-") as workdir:
        process, port = _serve(Path(workdir))
        try:
            _round(port, 0, 3, False)  # warm: the first render compiles and memoizes
            for fresh, what in ((False, "memoized"), (True, "new each time")):
                print(
                    f"benign render of the example ModelDeployment, {args.benign} in a row, "
                    f"its selector {what}"
                )
                print("hostile  median      p99         hostile outcomes (all rounds)")
                for clients in HOSTILE_CLIENTS:
                    medians, p99s, outcomes = [], [], {}
                    for _ in range(args.runs):
                        seconds, got = _round(port, clients, args.benign, fresh)
                        medians.append(statistics.median(seconds))
                        p99s.append(_p99(seconds))
                        for key, count in got.items():
                            outcomes[key] = outcomes.get(key, 0) + count
                    print(
                        f"{clients:>7}  {statistics.median(medians) * 1000:7.1f} ms  "
                        f"{statistics.median(p99s) * 1000:7.1f} ms  {outcomes or '-'}"
                    )
        finally:
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
