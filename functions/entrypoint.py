"""`modelplane COMPONENT [ARGS...]`: the image's entrypoint.

One image serves every function and the runtime; the component is the first argument or,
for a Function package whose runtime passes no arguments, the MODELPLANE_COMPONENT
environment variable (set in its DeploymentRuntimeConfig).
"""

import importlib
import os
import sys

from functions.common.contracts import FUNCTIONS

RUNTIME = "runtime"
# The operator's commands (`modelplane status`), reading the control plane: the same
# names as functions.runtime.operator.cli.COMMANDS (asserted by the unit tests), kept
# here so the dispatcher imports nothing it does not run.
OPERATOR_COMMANDS = ("status", "explain", "retry", "suggest")
# The operator CLI's own options, which a user puts before the command as with kubectl
# (`modelplane --kubeconfig cp.yaml status`); each takes a value.
OPERATOR_OPTIONS = ("--kubeconfig", "--context")


def _operator_command(args: list[str]) -> bool:
    """Whether the arguments name an operator command, after any operator options."""
    rest = list(args)
    while rest and rest[0].split("=", 1)[0] in OPERATOR_OPTIONS:
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return bool(rest) and rest[0] in OPERATOR_COMMANDS


def _components() -> list[str]:
    return [*FUNCTIONS, RUNTIME]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if _operator_command(args):
        operator = importlib.import_module("functions.runtime.operator.cli").main
        operator(args=args, prog_name="modelplane")
        return
    if args and args[0] in _components():
        component = args.pop(0)
    else:
        component = os.environ.get("MODELPLANE_COMPONENT", "")
    if component not in _components():
        sys.exit(
            f"modelplane: name a component as the first argument or in MODELPLANE_COMPONENT "
            f"(one of: {', '.join(_components())}), or an operator command "
            f"({', '.join(OPERATOR_COMMANDS)}); got {component or 'nothing'!r}"
        )
    if component == RUNTIME:
        command = importlib.import_module("functions.runtime.cli").main
    else:
        package = component.removeprefix("function-").replace("-", "_")
        command = importlib.import_module(f"functions.{package}.main").cli
    command(args=args, prog_name=f"modelplane {component}")


if __name__ == "__main__":
    main()
