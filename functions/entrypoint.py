"""`modelplane COMMAND|COMPONENT [ARGS...]`: the image's entrypoint.

One image serves every function, the runtime and the operator's commands; the component
is the first argument or, for a Function package whose runtime passes no arguments, the
MODELPLANE_COMPONENT environment variable (set in its DeploymentRuntimeConfig).
`modelplane --help` lists the commands and the components; a first argument that is
neither is refused with the same list.
"""

import importlib
import os
import sys

from functions.common.contracts import FUNCTIONS

RUNTIME = "runtime"
# The operator's commands (`modelplane status`), reading the control plane: the same
# names as functions.runtime.operator.cli.COMMANDS (asserted by the unit tests), kept
# here so the dispatcher imports nothing it does not run.
OPERATOR_COMMANDS = ("status", "explain", "retry", "suggest", "rollout")
# The operator CLI's own options, which a user puts before the command as with kubectl
# (`modelplane --kubeconfig cp.yaml status`); each takes a value.
OPERATOR_OPTIONS = ("--kubeconfig", "--context")
HELP_OPTIONS = ("--help", "-h")
# Exit status for a command line that names nothing runnable (click's, for usage errors).
USAGE_ERROR = 2


def _operator_command(args: list[str]) -> bool:
    """Whether the arguments name an operator command, after any operator options."""
    rest = list(args)
    while rest and rest[0].split("=", 1)[0] in OPERATOR_OPTIONS:
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return bool(rest) and rest[0] in OPERATOR_COMMANDS


def _components() -> list[str]:
    return [*FUNCTIONS, RUNTIME]


def _component_summary(component: str) -> str:
    """One line per component, from where it already says it (its package docstring, or
    the runtime's subcommands), so this list cannot drift from what runs."""
    if component == RUNTIME:
        commands = importlib.import_module("functions.runtime.cli").main.commands
        return f"The fleet runtime: {', '.join(commands)} (modelplane runtime --help)."
    package = importlib.import_module(f"functions.{_package_of(component)}")
    first = (package.__doc__ or "").strip().splitlines()[0]
    what = first.split(": ", 1)[-1]  # "compose-x: what it does" -> "what it does"
    return what[:1].upper() + what[1:]


def _package_of(component: str) -> str:
    return component.removeprefix("function-").replace("-", "_")


def usage() -> str:
    """`modelplane --help`: the operator's commands (with the options that may come
    before them) and the components, each with the line it describes itself with."""
    import click  # noqa: PLC0415 (only for help: dispatching needs none of it)

    operator = importlib.import_module("functions.runtime.operator.cli")
    formatter = click.HelpFormatter(width=100)
    formatter.write_usage("modelplane", "[--kubeconfig FILE] [--context NAME] COMMAND [ARGS]...")
    formatter.write_usage("modelplane", "COMPONENT [ARGS]...", prefix="   or: ")
    formatter.write_paragraph()
    formatter.write_text(
        "One image for the modelplane fleet. The commands are the operator's: they read the "
        "fleet from its control plane (also as `kubectl modelplane COMMAND`). The components "
        "are what the image runs; a Function package names its own in MODELPLANE_COMPONENT."
    )
    context = click.Context(operator.main, info_name="modelplane")
    with formatter.section("Commands"):
        formatter.write_dl(
            [
                (name, operator.main.commands[name].get_short_help_str(limit=100))
                for name in operator.COMMANDS
            ]
        )
    with formatter.section("Options (before a command, as with kubectl)"):
        records = [p.get_help_record(context) for p in operator.main.params]
        formatter.write_dl(
            [r for r in records if r] + [(", ".join(HELP_OPTIONS[::-1]), "Show this list.")]
        )
    with formatter.section("Components"):
        formatter.write_dl(
            [(c, _component_summary(c)) for c in _components()],
            col_max=max(map(len, _components())) + 1,
        )
    formatter.write_paragraph()
    formatter.write_text(
        "`modelplane COMMAND --help` or `modelplane COMPONENT --help`: its options."
    )
    return formatter.getvalue()


def _refuse(why: str) -> None:
    """The list and one line saying what was wrong, on stderr; a usage error's status."""
    sys.stderr.write(f"{usage()}\nError: {why}\n")
    sys.exit(USAGE_ERROR)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if _operator_command(args) or (args and args[0].split("=", 1)[0] in OPERATOR_OPTIONS):
        # Operator options without a known command are the operator CLI's to judge
        # (`modelplane --kubeconfig cp.yaml statsu` names its commands).
        operator = importlib.import_module("functions.runtime.operator.cli").main
        operator(args=args, prog_name="modelplane")
        return
    if args and args[0] in _components():
        component = args.pop(0)
    else:
        component = os.environ.get("MODELPLANE_COMPONENT", "")
    if not component:
        if args and args[0] in HELP_OPTIONS:
            sys.stdout.write(usage())
            return
        if not args:
            _refuse("name a command or a component (or set MODELPLANE_COMPONENT)")
        _refuse(f"{args[0]!r} is not a modelplane command or component")
    if component not in _components():
        _refuse(
            f"MODELPLANE_COMPONENT={component!r} is not a component "
            f"(one of: {', '.join(_components())})"
        )
    if component == RUNTIME:
        command = importlib.import_module("functions.runtime.cli").main
    else:
        command = importlib.import_module(f"functions.{_package_of(component)}.main").cli
    command(args=args, prog_name=f"modelplane {component}")


if __name__ == "__main__":
    main()
