#!/usr/bin/env python3
"""Render XRs through the real `crossplane render` and our real functions.

Starts the four functions on free loopback ports (the SDK server, `--insecure`), writes a
Functions file whose annotations point `crossplane render`'s Development runtime at
them, renders each XR with the Composition for its kind, and always stops the functions.

    hack/render.py XR.yaml [XR.yaml ...] [-e REQUIRED] [-o OBSERVED] [-r]
    hack/render.py --fleet         the examples as one fleet: the YAML stream `make render` prints

`render_fleet` renders the examples the way a control plane would see them: every XR gets
the other examples it reads as its required resources, and the ModelReplicas that
placement composes are rendered in turn (hack/demo.py summarizes that render).

Tests import `FunctionServers`, `render` and `render_fleet` from here, so the demo and
the render tests exercise one code path.
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

from functions.common.contracts import (  # noqa: E402
    API_GROUP,
    FUNCTIONS,
    KIND_INFERENCE_CLUSTER,
    KIND_MODEL_DEPLOYMENT,
    KIND_MODEL_REPLICA,
)
from tests.ledgers import with_ledgers  # noqa: E402
from tests.ports import free_port  # noqa: E402

# Until a function server listens (polled; a healthy start returns at once). Under `make
# test` the render tier's servers start while both fleet boxes and a real vLLM start on the
# same two cores: one start took over 30 s there, and every later render test on that
# worker failed with it.
STARTUP_TIMEOUT_SECONDS = 180
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


def module_for(function: str) -> str:
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
        port = free_port()
        log = self.workdir / f"{function}.log"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module_for(function),
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


def _dump(documents: list[dict]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


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
    # crossplane runs in the repo (cwd=REPO); a path the user gave relative to where they
    # stand would otherwise be read from the repo instead.
    xr = xr.resolve()
    required = required.resolve() if required is not None else None
    observed = observed.resolve() if observed is not None else None
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
    """Every XR a user applies: examples/. The MetricMappings that ship are not among
    them: they are in effect with nothing applied (functions/common/builtin_mappings)."""
    return sorted((REPO / "examples").rglob("*.yaml"))


@dataclass
class FleetRender:
    """One XR of the fleet, rendered: where it came from, and what render printed."""

    source: str  # a path under the repo, or the ModelDeployment that composed it
    xr: dict  # the XR as given to render (render prints only its status back)
    result: RenderResult

    @property
    def composite(self) -> dict:
        return self.result.documents[0]

    @property
    def composed(self) -> list[dict]:
        return [d for d in self.result.documents[1:] if d.get("kind") != "Result"]

    @property
    def results(self) -> list[dict]:
        return [d for d in self.result.documents[1:] if d.get("kind") == "Result"]


@dataclass
class Fleet:
    renders: list[FleetRender]

    def of_kind(self, kind: str) -> list[FleetRender]:
        return [r for r in self.renders if r.composite["kind"] == kind]

    @property
    def failed(self) -> list[FleetRender]:
        return [r for r in self.renders if r.result.returncode != 0]

    def stream(self) -> str:
        """Every render's output, each under a comment naming its source."""
        return "".join(f"# ---- {r.source} ----\n{r.result.stdout}" for r in self.renders)


def _source(path: Path) -> str:
    return (
        str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path)
    )


def _identity(document: dict) -> tuple[str, str, str]:
    meta = document.get("metadata") or {}
    return document["kind"], meta.get("namespace", ""), meta["name"]


def render_fleet(servers: FunctionServers, workdir: Path, xrs: list[Path] | None = None) -> Fleet:
    """Render XRs as one fleet, in the order a control plane converges.

    1. ModelDeployments one at a time (sorted), each reading every InferenceCluster with
       the capacity ledger of the ModelReplicas placed before it (as compose-serving-stack
       writes it, tests/ledgers.py), as a first reconcile after `kubectl apply`.
    2. Each again, now reading the ledgers of every deployment's ModelReplicas and
       observing its own (the steady state a later reconcile reaches; this is the render
       shown).
    3. Every ModelReplica placement composed, through compose-model-replica.
    4. Everything else (InferenceClusters, TelemetryDestinations, MetricMappings), each
       reading the whole fleet; render's selector matching picks what each one asked for.

    A render that fails is kept (its returncode says so) and its XR composes nothing
    for the renders after it.
    """
    paths = example_xrs() if xrs is None else xrs
    loaded = [(p, yaml.safe_load(p.read_text())) for p in paths]
    deployments = sorted(
        ((p, d) for p, d in loaded if d["kind"] == KIND_MODEL_DEPLOYMENT),
        key=lambda pd: _identity(pd[1]),
    )
    others = [(p, d) for p, d in loaded if d["kind"] != KIND_MODEL_DEPLOYMENT]
    base = [d for _, d in loaded]
    counter = iter(range(1_000_000))

    def write(stem: str, documents: list[dict]) -> Path:
        path = workdir / f"{next(counter):03d}-{stem}.yaml"
        path.write_text(_dump(documents))
        return path

    def replicas_of(rendered: RenderResult) -> list[dict]:
        if rendered.returncode != 0:
            return []
        return [d for d in rendered.documents[1:] if d.get("kind") == KIND_MODEL_REPLICA]

    def ledgered(replicas: list[dict]) -> list[dict]:
        """`base` with each InferenceCluster's ledger of `replicas`, and `replicas`."""
        return [
            with_ledgers([d], replicas)[0] if d["kind"] == KIND_INFERENCE_CLUSTER else d
            for d in base
        ] + replicas

    # 1. First placement, in order.
    first: dict[tuple, list[dict]] = {}
    for path, deployment in deployments:
        placed_before = [r for rs in first.values() for r in rs]
        result = render(servers, path, required=write("required", ledgered(placed_before)))
        first[_identity(deployment)] = replicas_of(result)
        if result.returncode == 0:
            # The next reconcile reads the status this one wrote (unplaceable since, parking).
            deployment["status"] = result.documents[0].get("status") or {}

    # 2. Steady state: every other deployment's replicas, its own observed.
    renders: list[FleetRender] = []
    settled: list[dict] = []
    for path, deployment in deployments:
        own = first[_identity(deployment)]
        everyone = [r for rs in first.values() for r in rs]
        xr = write(path.stem, [deployment])
        result = render(
            servers,
            xr,
            required=write("required", ledgered(everyone)),
            observed=write("observed", own) if own else None,
        )
        renders.append(FleetRender(_source(path), deployment, result))
        settled += replicas_of(result)

    # 3. The ModelReplicas placement composed.
    clusters = write("clusters", base)
    for replica in sorted(settled, key=_identity):
        owner = next(
            (o["name"] for o in replica["metadata"].get("ownerReferences", [])), "a deployment"
        )
        xr = write(replica["metadata"]["name"], [replica])
        composed_by = f"ModelReplica {replica['metadata']['name']} (composed by {owner})"
        # compose-model-replica reads its InferenceCluster (provider config, pod policy).
        renders.append(FleetRender(composed_by, replica, render(servers, xr, required=clusters)))

    # 4. Clusters, destinations and mappings, each reading the whole fleet.
    fleet = write("fleet", base + settled)
    for path, document in others:
        rendered = render(servers, path, required=fleet)
        renders.append(FleetRender(_source(path), document, rendered))
    return Fleet(renders)


def fleet_render() -> Fleet:
    """Start the functions, render the examples as a fleet, stop the functions."""
    with running_functions() as servers:
        return render_fleet(servers, servers.workdir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xrs", nargs="*", type=Path, help="XR files to render")
    parser.add_argument(
        "--fleet", action="store_true", help="render the examples as one fleet (make render)"
    )
    parser.add_argument("-e", "--required-resources", type=Path)
    parser.add_argument("-o", "--observed-resources", type=Path)
    args = parser.parse_args()
    if not args.xrs and not args.fleet:
        parser.error("name XR files, or --fleet")

    try:
        if args.fleet:
            fleet = fleet_render()
            print(fleet.stream(), end="")
            for failed in fleet.failed:
                print(f"# {failed.source}: render failed:\n{failed.result.stderr}", file=sys.stderr)
            return 1 if fleet.failed else 0
        failed = 0
        with running_functions() as servers:
            for xr in args.xrs:
                result = render(
                    servers,
                    xr,
                    required=args.required_resources,
                    observed=args.observed_resources,
                )
                print(f"# ---- {_source(xr)} ----")
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
