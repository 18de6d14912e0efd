"""Glue between the function SDK and our shells: the CLI, and reading the request.

Pure code never imports this module; it is for `fn.py` and `main.py` only.
"""

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Generic, TypeVar

import click
import grpc
from crossplane.function import cli as sdkcli
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from functions.common import budget, conditions
from functions.common.redact import redact

T = TypeVar("T")

# gRPC message limits, in MB as the SDK's flags take them. Crossplane v2.2.1 dials a
# function with grpc-go's defaults (internal/xfn/function_runner.go: grpc.NewClient with
# no call options): it sends requests of any size up to 2 GiB and receives responses of
# at most 4 MiB. The SDK's server default (4 MB both ways) is what stops a fleet-wide
# request first: every ModelReplica of the fleet travels in each compose-model-deployment
# request, about 7 KB each as the API server lists them (managedFields, owner refs,
# conditions): 4 MB stopped at ~219 deployments over 50 clusters (tests/bench/
# bench_fleet_resync.py). Receiving 256 MB holds about 40,000 of them (~14,000
# deployments of 1-20 replicas on up to three clusters each); sending stays at the 4 MiB
# Crossplane accepts, so an oversized response fails here, naming the limit. Both stay
# overridable by the SDK's flags and MAX_RECV_MESSAGE_SIZE / MAX_SEND_MESSAGE_SIZE.
MAX_RECV_MESSAGE_MB: Final = 256
MAX_SEND_MESSAGE_MB: Final = 4

# Core's watch circuit breaker (v2.3: internal/circuit). An XR that receives more watch
# events than its token bucket allows (burst 100, 1 a second by default; a ModelReplica's
# dozen composed Objects send more than that while they are created) has its breaker
# opened for 5 minutes: core then drops the XR's watch events (its own spec changing, its
# composed resources progressing) but one every 30 s, says so in the XR's condition
# `Responsive: False` (reason WatchCircuitOpen), and reconciles it otherwise only when
# the TTL its pipeline returned ends (60 s by default; a TTL requeue is no watch event).
# A change a parent makes to it (a rollout's next wave) then waits up to a minute. While
# the observed XR says its breaker is open, every response asks to be called back within
# WATCH_CIRCUIT_OPEN_CALL_BACK_SECONDS: level-triggered progress at a pace of our choosing
# for as long as events cannot be relied on, and the usual TTL once they can.
CONDITION_RESPONSIVE: Final = "Responsive"
WATCH_CIRCUIT_OPEN_CALL_BACK_SECONDS: Final = 5.0


def make_cli(name: str, runner: Callable[[], grpcv1.FunctionRunnerServiceServicer]):
    """A click command that serves one function with the SDK's standard flags.

    `--insecure` for local use (the render harness), `--tls-server-certs-dir` for the
    mTLS Crossplane uses in a cluster.
    """

    @click.command(
        name=name,
        help=f"Serve the {name} composition function over gRPC.",
        # Below the flags and their environment variables, above the SDK's defaults.
        context_settings={
            "default_map": {
                "max_recv_message_size": MAX_RECV_MESSAGE_MB,
                "max_send_message_size": MAX_SEND_MESSAGE_MB,
            }
        },
    )
    @sdkcli.standard_options
    def cli(**kwargs) -> None:
        sdkcli.run(runner(), **kwargs)

    return cli


def observed_composite(req: fnv1.RunFunctionRequest) -> dict:
    """The observed XR as a plain dict (numbers come back as floats)."""
    return resource.struct_to_dict(req.observed.composite.resource)


def observed_resources(req: fnv1.RunFunctionRequest) -> dict[str, dict]:
    """What this function composed before, as observed, by composed-resource key."""
    return {key: resource.struct_to_dict(r.resource) for key, r in req.observed.resources.items()}


# --- Required resources: not fetched, absent, present ------------------------------------


class Fetched(Enum):
    """How Crossplane answered one required resource (STYLE.md: inputs are resolved
    explicitly). Not fetched yet is never "none exist": the shell waits and keeps what it
    composed; absent and present are answers it decides on."""

    NOT_FETCHED = "not fetched"
    ABSENT = "absent"
    PRESENT = "present"


@dataclass(frozen=True)
class Required(Generic[T]):
    """One required resource's answer: its state, and the items when it was fetched."""

    name: str
    state: Fetched
    items: tuple[T, ...] = ()

    @property
    def fetched(self) -> bool:
        return self.state is not Fetched.NOT_FETCHED


def required(
    req: fnv1.RunFunctionRequest,
    name: str,
    convert: Callable[[struct_pb2.Struct], T] = resource.struct_to_dict,
) -> Required[T]:
    """The answer to the required resource `name`; `convert` reads each item (plain dicts
    by default; a shell that memoizes on the Struct passes its own)."""
    if name not in req.required_resources:
        return Required(name, Fetched.NOT_FETCHED)
    items = tuple(convert(i.resource) for i in req.required_resources[name].items)
    return Required(name, Fetched.PRESENT if items else Fetched.ABSENT, items)


def not_fetched(*answers: Required) -> list[str]:
    """The names of the answers Crossplane has not fetched yet, in the order given."""
    return [a.name for a in answers if not a.fetched]


# --- Keep what was observed ---------------------------------------------------------------

KEPT_FIELDS: Final = ("apiVersion", "kind", "metadata", "spec")
KEPT_METADATA: Final = ("name", "namespace", "labels", "annotations")


def kept_manifest(observed: Mapping[str, Any], metadata: Iterable[str] = KEPT_METADATA) -> dict:
    """A composed resource as observed, cut to what a desired resource carries."""
    kept = {k: observed[k] for k in KEPT_FIELDS if k in observed}
    meta = kept.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}  # whatever shape it was observed in
    kept["metadata"] = {k: meta[k] for k in metadata if k in meta}
    return kept


def keep_observed(
    rsp: fnv1.RunFunctionResponse,
    observed: Mapping[str, Mapping[str, Any]],
    *,
    replaced: Iterable[str] = (),
    metadata: Iterable[str] = KEPT_METADATA,
) -> None:
    """Write every observed composed resource back as desired, but those in `replaced`.

    For a result that cannot decide (an input not fetched yet, or one it cannot use): a
    resource missing from the desired state is deleted, so never drop what runs because
    of a wait. A fatal result needs none of this: Crossplane then applies nothing.
    """
    skip = set(replaced)
    fields = tuple(metadata)
    for key, manifest in observed.items():
        if key not in skip:
            resource.update(rsp.desired.resources[key], kept_manifest(manifest, fields))


def describe_composite(xr: Any) -> str:
    """`Kind namespace/name` of an XR, for messages a person reads (whatever its shape)."""
    xr = xr if isinstance(xr, Mapping) else {}
    meta = xr.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name") or "<unnamed>")
    if meta.get("namespace"):
        name = f"{meta['namespace']}/{name}"
    return f"{xr.get('kind') or '<unknown kind>'} {name}"


# --- Every request gets a response ----------------------------------------------------------

# How much of an unexpected exception's text a fatal result quotes.
CRASH_MESSAGE_LIMIT: Final = 300


# The worker threads every function's requests run on. Not asyncio's default pool
# (cpu + 4 threads): a request waiting its turn for counted work (budget.FairGate) holds
# a thread without using the CPU, and a cheap request must not queue behind those.
# Crossplane calls a function once per reconcile, at most --max-reconcile-rate (10 by
# default) at once; 64 leaves room for several Crossplanes or a higher rate.
RUNNER_THREADS: Final = 64
RUNNERS: Final = concurrent.futures.ThreadPoolExecutor(RUNNER_THREADS, thread_name_prefix="run")


class GuardedRunner(grpcv1.FunctionRunnerServiceServicer):
    """A function's shell: subclasses write `run(req) -> rsp`, plain synchronous code.

    `RunFunction` runs it on a worker thread (RUNNERS), so CPU-bound work (parsing a fleet,
    evaluating selectors) never blocks the event loop that answers other requests; and it
    turns an exception nobody anticipated into a fatal result naming the XR, never a gRPC
    error. A fatal result makes Crossplane apply nothing, and every fatal response (the
    shell's own or the guard's) still carries every observed composed resource as
    desired: one bad request never deletes what runs.
    """

    def __init__(self) -> None:
        self.log = logging.get_logger()

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        raise NotImplementedError

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, context: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        # The request's work budget (functions.common.budget) rides into the worker
        # thread with the context: counted work stops at the caller's deadline, or as
        # soon as the caller cancels, so no thread runs on for a caller that left.
        remaining = context.time_remaining() if context is not None else None
        work, token = budget.begin(remaining)
        try:
            run = functools.partial(contextvars.copy_context().run, self.run, req)
            rsp = await asyncio.get_running_loop().run_in_executor(RUNNERS, run)
        except asyncio.CancelledError:
            work.cancel()
            raise
        except budget.WorkStopped as stopped:
            return self.stopped(req, stopped)
        except Exception as err:  # the point: no exception escapes
            return self.crashed(req, err)
        finally:
            budget.end(token)
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            # Crossplane applies nothing after a fatal result; say the same in the
            # response, so no reader of it (a test, a newer Crossplane) sees a deletion.
            observed = observed_resources(req)
            keep_observed(
                rsp, observed, replaced=[k for k in observed if k in rsp.desired.resources]
            )
        if watch_circuit_open(req):
            call_back_within(rsp, WATCH_CIRCUIT_OPEN_CALL_BACK_SECONDS)
        return redact_messages(rsp)

    def stopped(
        self, req: fnv1.RunFunctionRequest, stopped: budget.WorkStopped
    ) -> fnv1.RunFunctionResponse:
        """A request whose work was stopped (its budget spent, its deadline passed): a
        fatal naming the field and the rule, every observed resource kept."""
        rsp = response.to(req)
        name = describe_composite(observed_composite(req))
        keep_observed(rsp, observed_resources(req))
        self.log.info("work stopped", composite=name, reason=str(stopped))
        response.fatal(rsp, f"{name}: {stopped}")
        return rsp

    def crashed(self, req: fnv1.RunFunctionRequest, err: Exception) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        try:
            name = describe_composite(observed_composite(req))
        except Exception:
            name = "the composite resource"
        with contextlib.suppress(Exception):  # a fatal alone still applies nothing
            keep_observed(rsp, observed_resources(req))
        detail = redact(f"{type(err).__name__}: {err}")[:CRASH_MESSAGE_LIMIT]
        self.log.error("unexpected error", composite=name, error=detail)
        response.fatal(
            rsp,
            f"{name}: unexpected error in the function ({detail}); nothing was applied and "
            "every resource composed before is kept. Please report this with the input.",
        )
        return rsp


def watch_circuit_open(req: fnv1.RunFunctionRequest) -> bool:
    """Core says the observed XR's watch circuit breaker is open (`Responsive: False`).
    Read from the Struct without converting the XR (an InferenceCluster's status is
    large)."""
    status = req.observed.composite.resource.fields.get("status")
    if status is None or not status.HasField("struct_value"):
        return False
    found = status.struct_value.fields.get("conditions")
    if found is None or not found.HasField("list_value"):
        return False
    for entry in found.list_value.values:
        if not entry.HasField("struct_value"):
            continue
        fields = entry.struct_value.fields
        kind, state = fields.get("type"), fields.get("status")
        if (
            kind is not None
            and kind.string_value == CONDITION_RESPONSIVE
            and state is not None
            and state.string_value == "False"
        ):
            return True
    return False


def call_back_within(rsp: fnv1.RunFunctionResponse, seconds: float) -> None:
    """Lower the response's TTL (core's requeue after it) to `seconds`, never raise it;
    millisecond precision."""
    if not rsp.meta.HasField("ttl") or seconds < rsp.meta.ttl.ToTimedelta().total_seconds():
        rsp.meta.ttl.FromMilliseconds(math.floor(seconds * 1000))


def redact_messages(rsp: fnv1.RunFunctionResponse) -> fnv1.RunFunctionResponse:
    """Every result and condition message with URL credentials redacted: a message that
    quotes a value a user wrote in the wrong field (a URL with a password where a count
    goes) must not carry the password into an event or `kubectl describe`."""
    for result in rsp.results:
        result.message = redact(result.message)
    for condition in rsp.conditions:
        if condition.HasField("message"):
            condition.message = redact(condition.message)
    return rsp


class ByKind(GuardedRunner):
    """One function that composes several kinds: the observed XR's kind picks the shell.

    Each kind keeps its own shell (its own `fn.py`-style pipeline); this only chooses,
    so a function's `main.py` lists what it serves in one place. A kind not listed goes
    to `default`, the function's first kind, as it did when one shell branched on the
    kind. The guard is this runner's: a shell's exception is answered here, the same
    fatal result naming the XR.
    """

    def __init__(self, default: GuardedRunner, shells: Mapping[str, GuardedRunner]) -> None:
        super().__init__()
        self.default = default
        self.shells = dict(shells)

    def shell_for(self, req: fnv1.RunFunctionRequest) -> GuardedRunner:
        kind = req.observed.composite.resource.fields.get("kind")
        if kind is None or kind.WhichOneof("kind") != "string_value":
            return self.default
        return self.shells.get(kind.string_value, self.default)

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        return self.shell_for(req).run(req)


def sdk_condition(condition: conditions.Condition) -> resource.Condition:
    return resource.Condition(
        typ=condition.type,
        status=condition.status,
        reason=condition.reason,
        message=condition.message,
    )


def set_conditions(rsp: fnv1.RunFunctionResponse, *decided: conditions.Condition) -> None:
    """Write the conditions pure code decided onto the XR, in the order given."""
    response.set_conditions(rsp, *(sdk_condition(c) for c in decided))


def emit(rsp: fnv1.RunFunctionResponse, *decided: conditions.Event) -> None:
    """Write the events pure code decided as results, in the order given."""
    for event in decided:
        (response.warning if event.warning else response.normal)(rsp, event.message)


def report_not_composing_yet(
    rsp: fnv1.RunFunctionResponse, function: str, given: str, issue: str
) -> None:
    """Say plainly that this function received its input but composes nothing yet.

    Used by a function whose composition is still to be written: the harness and the
    Composition wiring are proven end to end, and nobody mistakes that for the
    function doing its job.
    """
    message = f"{function} received {given}; composing its resources is {issue}, not done yet"
    response.normal(rsp, message)
    response.set_conditions(
        rsp,
        resource.Condition(
            typ=conditions.COMPOSED,
            status="False",
            reason=conditions.REASON_NOT_IMPLEMENTED,
            message=message,
        ),
    )
