"""What the operator's CLI lets reach a terminal: every value that came from a cluster or
a tenant (a termination message, a condition's message, a name, an error's reason) is
printed with its control characters escaped, so a pod's last words cannot move the
cursor, clear the screen, retitle the window or set the clipboard (ESC and CSI
sequences, OSC 52, BEL, CR, a C1 control, a bidirectional override).

Applied to the values, never to the CLI's own text, and only for the table and text
output: `-o json|yaml` carries every value exactly (their encoders escape what a
terminal would act on). Backslashes are kept as they are, so escaping is idempotent:
a value already escaped is not escaped again by a later layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from functions.runtime.shared.control_chars import escape

__all__ = ["escape", "escaped"]

# The escaping itself is shared with the health agent, which stores termination
# messages escaped (runtime/shared/control_chars.py).


def escaped(value: Any) -> Any:
    """`value` with every string in it escaped: strings, the fields of a dataclass, and
    the items of a list, tuple or set and the values of a mapping, at any depth (mapping
    keys are looked up by the code, not printed, and are left as they are)."""
    if isinstance(value, str):
        return escape(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value) if f.init]
        return dataclasses.replace(value, **{n: escaped(getattr(value, n)) for n in names})
    if isinstance(value, Mapping):
        return {k: escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return type(value)(escaped(v) for v in value)
    return value
