"""A launch line written as a shell script (`sh -c "..."`): the script owns it.

compose-model-replica adds no flags to one (appended words would become the script's
`$0 $1 ...`), and neither function judges its layout: both read the rule here.
"""

from __future__ import annotations

from typing import Final

SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "zsh"})


def is_shell_script(command: list[str], args: list[str]) -> bool:
    """`sh -c "..."` (or bash, ...): the script owns the launch line."""
    argv = [*command, *args]
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in SHELLS and "-c" in argv[1:3]
