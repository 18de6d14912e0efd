"""`modelplane-runtime`: the entry point of the agent and the scaler.

Both components arrive with the runtime issues (#7 election and scaler, #8 reports and
hub decisions); until then every subcommand says so and exits non-zero, so a manifest
that runs one by mistake fails loudly instead of idling.
"""

import sys

import click

_PENDING = {
    "agent": "the member agent (reports, election, hub decisions) arrives with issues #7 and #8",
    "scaler": "the KEDA external-push scaler arrives with issue #7",
}


@click.group(help="The modelplane fleet runtime.")
def main() -> None:
    pass


def _pending(name: str) -> click.Command:
    @click.command(name=name, help=_PENDING[name])
    def command() -> None:
        click.echo(f"modelplane-runtime {name}: not available yet: {_PENDING[name]}", err=True)
        sys.exit(2)

    return command


for _name in _PENDING:
    main.add_command(_pending(_name))
