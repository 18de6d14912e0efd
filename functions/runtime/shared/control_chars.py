"""Control characters written as escapes: what reaches a terminal from a value that came
from a cluster or a tenant (operator/terminal.py prints with it; the health agent stores
termination messages with it, agent/health.py). Backslashes are kept as they are, so
escaping is idempotent: a value already escaped is not escaped again by a later layer.
"""

from __future__ import annotations

import re
from typing import Final

# C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional
# marks, embeddings, overrides and isolates (a reordered line says something else).
_UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every control character written as its escape (`\\x1b`, `\\r`, ...)."""
    return _UNSAFE.sub(_escape_one, text)
