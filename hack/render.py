#!/usr/bin/env python3
"""Render XRs through the real `crossplane render` and our real functions.

Starts the four functions on free loopback ports (the SDK server, `--insecure`), writes a
Functions file whose annotations point `crossplane render`'s Development runtime at
them, renders each XR with the Composition for its kind, and always stops the functions.

    hack/render.py XR.yaml [XR.yaml ...] [-e REQUIRED] [-o OBSERVED] [-r]
    hack/render.py --demo          every example XR, the way `make demo` prints them

Tests import `FunctionServers` and `render` from here, so the demo and the render tests
exercise one code path.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from functions.common.contracts import API_GROUP, FUNCTIONS  # noqa: E402

STARTUP_TIMEOUT_SECONDS = 30
RENDER_TIMEOUT = "60s"
DEVELOPMENT_RUNTIME = "render.crossplane.io/runtime"
DEVELOPMENT_TARGET = "render.crossplane.io/runtime-development-target"


class HarnessError(RuntimeError):
    """The harness could not do its job (a tool is missing, a function did not start)."""


def tools_bin() -> Path:
    override = os.environ.get("MODELPLANE_TOOLS")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (Path(override) if override else cache / "modelplane" / "tools") / "bin"


def crossplane_binary() -> Path:
    binary = tools_bin() / "crossplane"
    if not binary.exists():
        raise HarnessError(
            f"crossplane CLI not found at {binary}: run 'bash hack/tools.sh crossplane' "
            "(or 'make tools')"
        )
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _module_for(function: str) -> str:
    # function-compose-model-replica -> functions.compose_model_replica.main
    return "functions." + function.removeprefix("function-").replace("-", "_") + ".main"


def _package_refs() -> dict[str, str]:
    """Each function's package, from the Configuration's dependencies (one source)."""
    meta = yaml.safe_load((REPO / "package" / "crossplane.yaml").read_text())
    refs = {}
    for dep in meta["spec"]["dependsOn"]:
        name = dep["package"].rsplit("/", 1)[-1]
        if dep["kind"] == "Function":
            refs[name] = dep["package"]
    return refs


@dataclass
class _Server:
    function: str
    port: int
    process: subprocess.Popen
    log: Path


class FunctionServers:
    """The four functions, each serving on its own loopback port until closed."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: list[_Server] = []
        self.functions_file = workdir / "functions.yaml"

    def __enter__(self) -> FunctionServers:
        try:
            for function in FUNCTIONS:
                self._start(function)
            for server in self.servers:
                self._wait_ready(server)
            self._write_functions_file()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _start(self, function: str) -> None:
        port = _free_port()
        log = self.workdir / f"{function}.log"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                _module_for(function),
                "--insecure",
                "--address",
                f"127.0.0.1:{port}",
            ],
            cwd=REPO,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.servers.append(_Server(function, port, process, log))

    def _wait_ready(self, server: _Server) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise HarnessError(
                    f"{server.function} exited with {server.process.returncode} before "
                    f"serving:\n{server.log.read_text()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", server.port), timeout=0.5),
            ):
                return
            time.sleep(0.05)
        raise HarnessError(f"{server.function} did not listen within {STARTUP_TIMEOUT_SECONDS}s")

    def _write_functions_file(self) -> None:
        refs = _package_refs()
        documents = [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {
                    "name": server.function,
                    "annotations": {
                        DEVELOPMENT_RUNTIME: "Development",
                        DEVELOPMENT_TARGET: f"127.0.0.1:{server.port}",
                    },
                },
                "spec": {"package": f"{refs[server.function]}:v0.1.0"},
            }
            for server in self.servers
        ]
        self.functions_file.write_text(yaml.safe_dump_all(documents, sort_keys=False))

    def logs(self) -> str:
        return "\n".join(f"--- {s.function}\n{s.log.read_text()}" for s in self.servers)

    def close(self) -> None:
        for server in self.servers:
            if server.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.process.pid, signal.SIGTERM)
        for server in self.servers:
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait()


@dataclass
class RenderResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def documents(self) -> list[dict]:
        return [d for d in yaml.safe_load_all(self.stdout) if d]


def composition_for(xr_path: Path) -> Path:
    """The Composition that composes this XR's kind: apis/<plural>/composition.yaml."""
    xr = yaml.safe_load(xr_path.read_text())
    group = xr["apiVersion"].split("/")[0]
    if group != API_GROUP:
        raise HarnessError(f"{xr_path}: {xr['apiVersion']} is not a {API_GROUP} XR")
    for composition in sorted((REPO / "apis").glob("*/composition.yaml")):
        doc = yaml.safe_load(composition.read_text())
        if doc["spec"]["compositeTypeRef"]["kind"] == xr["kind"]:
            return composition
    raise HarnessError(f"{xr_path}: no Composition under apis/ composes {xr['kind']}")


def render(
    servers: FunctionServers,
    xr: Path,
    *,
    required: Path | None = None,
    observed: Path | None = None,
    include_results: bool = True,
    extra_args: tuple[str, ...] = (),
) -> RenderResult:
    composition = composition_for(xr)
    args = [
        str(crossplane_binary()),
        "render",
        str(xr),
        str(composition),
        str(servers.functions_file),
        f"--timeout={RENDER_TIMEOUT}",
        f"--xrd={composition.parent / 'definition.yaml'}",
    ]
    if include_results:
        args.append("--include-function-results")
    if required is not None:
        args.append(f"--required-resources={required}")
    if observed is not None:
        args.append(f"--observed-resources={observed}")
    args.extend(extra_args)
    done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=REPO)
    return RenderResult(done.returncode, done.stdout, done.stderr)


@contextlib.contextmanager
def running_functions() -> Iterator[FunctionServers]:
    with (
        tempfile.TemporaryDirectory(prefix="modelplane-render-") as workdir,
        FunctionServers(Path(workdir)) as servers,
    ):
        yield servers


def example_xrs() -> list[Path]:
    """Every XR a user applies: examples/ and the MetricMappings that ship."""
    paths = sorted((REPO / "examples").rglob("*.yaml"))
    paths += sorted((REPO / "apis" / "metricmappings" / "builtin").glob("*.yaml"))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xrs", nargs="*", type=Path, help="XR files to render")
    parser.add_argument("--demo", action="store_true", help="render every example XR")
    parser.add_argument("-e", "--required-resources", type=Path)
    parser.add_argument("-o", "--observed-resources", type=Path)
    args = parser.parse_args()
    xrs = example_xrs() if args.demo else args.xrs
    if not xrs:
        parser.error("name XR files, or --demo")

    failed = 0
    try:
        with running_functions() as servers:
            for xr in xrs:
                result = render(
                    servers,
                    xr,
                    required=args.required_resources,
                    observed=args.observed_resources,
                )
                print(f"# ---- {xr.resolve().relative_to(REPO)} ----")
                print(result.stdout, end="")
                if result.returncode != 0:
                    failed += 1
                    print(
                        f"# render failed ({result.returncode}):\n{result.stderr}", file=sys.stderr
                    )
    except HarnessError as err:
        print(f"render harness: {err}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
