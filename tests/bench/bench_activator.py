"""Requests per second and p99 through the on-demand activator, and its memory under a
slow-client flood (issue #34, item 3).

    .venv/bin/python tests/bench/bench_activator.py [--runs 3] [--seconds 5]

Three processes: the activator (`runtime activator`'s server with its default limits,
the control plane and the member's routes as in-memory stand-ins: 20 on-demand models
of two namespaces, each with a ready replica here, so every request is checked, looked
up and proxied), a minimal keep-alive HTTP/1.1 engine, and this one, the clients.

- Throughput: 1, 50 and 500 concurrent clients, each a keep-alive connection sending
  a 200-byte chat completion after the last answer, spread over the 20 models (per-model
  limit 32, in-flight limit 128: at 500 clients some requests are refused with 503 and
  Retry-After, which is the limit at work: the count is printed, and the client waits
  as Retry-After says before its next request). Per run: answers per second, 200s per
  second, p50 and p99 latency of every answer.
- Slow clients: 1,000 and 5,000 connections (5,000 is past max_connections, 1,024),
  a third silent, a third trickling headers, a third with a 1 MiB Content-Length
  trickling its body; the activator's RSS and thread count before and at the peak, and
  the latency of a normal request in the middle of the flood.

Every figure is the median of `--runs` runs. Not a test: pytest does not collect
bench_*.py.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from functions.common import contracts  # noqa: E402

MODELS = [(f"team-{'ab'[i % 2]}", f"model-{i}") for i in range(20)]
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 120}]}).encode()
CONCURRENCY = (1, 50, 500)
FLOODS = (1000, 5000)


# --- the processes under test -----------------------------------------------------------


def serve_activator(upstream: str, port_file: str) -> None:
    from functions.runtime.activator import server as shell  # noqa: PLC0415
    from tests.unit.test_activator import composed_route  # noqa: PLC0415

    class Plane:
        def get(self, namespace, name):
            return {
                "spec": {"onDemand": {"activationTimeout": "60s"}},
                "status": {"placements": [{"cluster": "here", "readyReplicas": 1}]},
            }

        def activate(self, namespace, name, attempt_id):
            pass

    class Routes:
        def __init__(self):
            self.routes = [composed_route(ns, name) for ns, name in MODELS]

        def list(self):
            return self.routes

    served = shell.serve(
        Plane(),
        Routes(),
        "here",
        "127.0.0.1:0",
        shell.Upstreams("here", upstream, {}),
        health_listen="127.0.0.1:0",
    )
    Path(port_file).write_text(str(served.port))
    while True:
        time.sleep(3600)


def serve_engine(port_file: str) -> None:
    answer = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
    response = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(answer), answer)
    )

    async def connection(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                writer.write(response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=4096)
        Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(main())


def _start(args: list[str], workdir: Path, name: str) -> tuple[subprocess.Popen, int]:
    port_file = workdir / f"{name}.port"
    process = subprocess.Popen(
        [sys.executable, __file__, *args, str(port_file)],
        cwd=REPO,
        stdout=(workdir / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{name} did not start: {(workdir / f'{name}.log').read_text()}")
        time.sleep(0.05)
    return process, int(port_file.read_text())


def _proc_status(pid: int) -> tuple[int, int]:
    """(RSS KiB, threads) of a process."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


# --- the clients ------------------------------------------------------------------------


def _request(index: int) -> bytes:
    namespace, name = MODELS[index % len(MODELS)]
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: activator\r\n"
        b"content-type: application/json\r\n%s: %s/%s\r\n%s: %s\r\n"
        b"content-length: %d\r\n\r\n%s"
        % (
            contracts.HEADER_DEPLOYMENT.encode(),
            namespace.encode(),
            name.encode(),
            contracts.HEADER_ROUTE_TOKEN.encode(),
            _token(namespace, name),
            len(BODY),
            BODY,
        )
    )


@functools.cache
def _token(namespace: str, name: str) -> bytes:
    """The token the model's route sets (the Gateway's proxy sends it with the identity);
    main() computes them all before any clock starts."""
    from tests.unit.test_activator import token_of  # noqa: PLC0415

    return token_of(f"{namespace}/{name}").encode()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool, float]:
    """(status, the server keeps the connection, Retry-After) of one answer, its body
    read whole."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    length, chunked, close, retry_after = 0, False, False, 0.0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and value == b"chunked":
            chunked = True
        elif name == b"connection" and value == b"close":
            close = True
        elif name == b"retry-after":
            retry_after = float(value)
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status, not close, retry_after


async def _client(port: int, index: int, until: float, out: list[tuple[float, int]]) -> None:
    reader = writer = None
    request = _request(index)
    while time.monotonic() < until:
        if writer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        began = time.perf_counter()
        try:
            writer.write(request)
            await writer.drain()
            status, keep, retry_after = await _read_answer(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            writer = None
            out.append((time.perf_counter() - began, 0))
            continue
        out.append((time.perf_counter() - began, status))
        if not keep:
            writer.close()
            writer = None
        if retry_after:
            await asyncio.sleep(retry_after)  # as a client honouring Retry-After does
    if writer is not None:
        writer.close()


def _throughput(port: int, clients: int, seconds: float) -> dict[str, float]:
    async def run() -> list[tuple[float, int]]:
        out: list[tuple[float, int]] = []
        until = time.monotonic() + seconds
        await asyncio.gather(*(_client(port, i, until, out) for i in range(clients)))
        return out

    began = time.monotonic()
    answers = asyncio.run(run())
    elapsed = time.monotonic() - began
    latencies = sorted(latency for latency, _ in answers)
    served = sum(1 for _, status in answers if status == 200)
    return {
        "answers_per_s": len(answers) / elapsed,
        "served_per_s": served / elapsed,
        "refused": sum(1 for _, status in answers if status in (429, 503)),
        "failed": sum(1 for _, status in answers if status not in (200, 429, 503)),
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000,
    }


async def _slow(port: int, kind: int, hold: asyncio.Event) -> None:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    try:
        if kind == 1:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        elif kind == 2:
            namespace, name = MODELS[0]
            writer.write(
                b"POST / HTTP/1.1\r\nHost: x\r\n%s: %s/%s\r\n%s: %s\r\n"
                b"content-length: %d\r\n\r\n{"
                % (
                    contracts.HEADER_DEPLOYMENT.encode(),
                    namespace.encode(),
                    name.encode(),
                    contracts.HEADER_ROUTE_TOKEN.encode(),
                    _token(namespace, name),
                    1024 * 1024,
                )
            )
        await writer.drain()
        while not hold.is_set():
            await asyncio.sleep(0.5)
            if kind:
                writer.write(b"x")  # a byte now and then: no single read times out
                await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _flood(port: int, pid: int, size: int) -> dict[str, float]:
    async def run() -> dict[str, float]:
        rss0, threads0 = _proc_status(pid)
        hold = asyncio.Event()
        tasks = [asyncio.ensure_future(_slow(port, i % 3, hold)) for i in range(size)]
        peak_rss, peak_threads = rss0, threads0
        for _ in range(10):  # 2 s of flood: the header and body timeouts are longer
            await asyncio.sleep(0.2)
            rss, threads = _proc_status(pid)
            peak_rss, peak_threads = max(peak_rss, rss), max(peak_threads, threads)
        began = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_request(1))
            await writer.drain()
            status, _, _ = await asyncio.wait_for(_read_answer(reader), 30)
            writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            status = 0
        during = time.perf_counter() - began
        hold.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "rss_before_mib": rss0 / 1024,
            "rss_peak_mib": peak_rss / 1024,
            "threads_before": threads0,
            "threads_peak": peak_threads,
            "normal_request_ms": during * 1000,
            "normal_request_status": status,
        }

    result = asyncio.run(run())
    time.sleep(1)
    return result


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for namespace, name in MODELS:
        _token(namespace, name)
    import resource  # noqa: PLC0415

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    with tempfile.TemporaryDirectory(prefix="bench-activator-") as workdir:
        engine, engine_port = _start(["--engine"], Path(workdir), "engine")
        activator, port = _start(
            ["--activator", f"http://127.0.0.1:{engine_port}"], Path(workdir), "activator"
        )
        try:
            print(f"cpus: {os.cpu_count()}; activator limits: the defaults (runtime activator)")
            print(f"throughput, {args.seconds:g} s per run, median of {args.runs} runs")
            print("clients  answers/s  served/s  refused  failed  p50 ms   p99 ms")
            for clients in CONCURRENCY:
                runs = [_throughput(port, clients, args.seconds) for _ in range(args.runs)]
                result = _median(runs)
                print(
                    f"{clients:>7}  {result['answers_per_s']:9.0f}  {result['served_per_s']:8.0f}"
                    f"  {result['refused']:7.0f}  {result['failed']:6.0f}"
                    f"  {result['p50_ms']:6.1f}  {result['p99_ms']:7.1f}"
                )
            print(f"slow-client flood, median of {args.runs} runs")
            print("clients  RSS before  RSS peak  threads before/peak  a normal request")
            for size in FLOODS:
                result = _median([_flood(port, activator.pid, size) for _ in range(args.runs)])
                print(
                    f"{size:>7}  {result['rss_before_mib']:7.1f} MiB"
                    f"  {result['rss_peak_mib']:5.1f} MiB"
                    f"  {result['threads_before']:6.0f} / {result['threads_peak']:.0f}"
                    f"         {result['normal_request_status']:.0f} in "
                    f"{result['normal_request_ms']:.0f} ms"
                )
        finally:
            for process in (activator, engine):
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--activator"]:
        serve_activator(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--engine"]:
        serve_engine(sys.argv[2])
    else:
        main()
