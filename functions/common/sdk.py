"""Glue between the function SDK and our shells: the CLI, and reading the request.

Pure code never imports this module; it is for `fn.py` and `main.py` only.
"""

from collections.abc import Callable

import click
from crossplane.function import cli as sdkcli
from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions.common import conditions


def make_cli(name: str, runner: Callable[[], grpcv1.FunctionRunnerServiceServicer]):
    """A click command that serves one function with the SDK's standard flags.

    `--insecure` for local use (the render harness), `--tls-server-certs-dir` for the
    mTLS Crossplane uses in a cluster.
    """

    @click.command(name=name, help=f"Serve the {name} composition function over gRPC.")
    @sdkcli.standard_options
    def cli(**kwargs) -> None:
        sdkcli.run(runner(), **kwargs)

    return cli


def observed_composite(req: fnv1.RunFunctionRequest) -> dict:
    """The observed XR as a plain dict (numbers come back as floats)."""
    return resource.struct_to_dict(req.observed.composite.resource)


def describe_composite(xr: dict) -> str:
    """`Kind namespace/name` of an XR, for messages a person reads."""
    meta = xr.get("metadata", {})
    name = meta.get("name", "<unnamed>")
    if meta.get("namespace"):
        name = f"{meta['namespace']}/{name}"
    return f"{xr.get('kind', '<unknown kind>')} {name}"


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
