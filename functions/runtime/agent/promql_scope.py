"""Scope an operator-named PromQL signal to the policy's own deployment.

A policy is written by the team that owns the deployment, and its PromQL runs against a
store that holds every tenant's series (where the TelemetryDestination writes). So the
agent adds the deployment's matchers (`k8s_namespace_name`, `modelplane_deployment`,
`modelplane_cluster` — the labels the destination receives) to EVERY vector selector of
the query before it runs: a query can then only narrow further, never reach another
deployment's series (a conflicting matcher of its own makes the selector empty).

This is a tokenizer, not a full parser: strings, comments, numbers, durations, label
lists after `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, function names
and keywords are recognised and left alone; every other identifier, and every bare
`{...}`, is a selector and gets the scope. What it does not understand it refuses.

PromQL lets a metric be named like most of its keywords (`offset`, `by`, `start`,
`AND`: the grammar's metric_identifier), and keywords match case-insensitively. So a
word is read as a keyword only where the keyword can stand: an operator or `offset`
right after an operand, a grouping word before its label list, an aggregation before
`by`/`without`, `start`/`end` as `start()`. Anywhere an operand is expected the same
word is a selector and is scoped. When the reading is wrong the scope lands on a
keyword and the query fails to parse, which is safe; the other way round would leak.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>\[[^\]]*\])
  | (?P<number>(?:0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:ms|s|m|h|d|w|y)*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:.]*)
  | (?P<brace>\{)
  | (?P<other>==|!=|>=|<=|=~|!~|[-+*/%^=<>(),@}])
    """,
    re.VERBOSE,
)
_GROUPING: Final = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_AGGREGATIONS: Final = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
# Binary operators spelled as words, and `offset`: keywords only after an operand.
_AFTER_OPERAND: Final = frozenset({"and", "or", "unless", "atan2", "offset"})
# Never a metric name (not in the grammar's metric_identifier): always a keyword.
_ALWAYS_KEYWORDS: Final = frozenset({"bool", "inf", "nan"})
_LABEL_NAME: Final = r"""(?:[a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
_LABEL_LIST: Final = re.compile(rf"\(\s*(?:{_LABEL_NAME}\s*(?:,\s*{_LABEL_NAME}\s*)*,?\s*)?\)")
_LABEL_MATCHERS: Final = re.compile(
    r"""\{(?:[^{}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\}"""
)


class UnscopableQuery(ValueError):
    pass


def _matchers(scope: Mapping[str, str]) -> str:
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return ",".join(f"{label}={quoted(value)}" for label, value in sorted(scope.items()))


def _with_scope(braces: str, added: str) -> str:
    """A selector's `{...}` with the scope's matchers first."""
    inner = braces[1:-1].strip().rstrip(",")
    return f"{{{added}{',' if inner else ''}{inner}}}"


def scope_query(query: str, scope: Mapping[str, str]) -> str:
    """`query` with `scope`'s equality matchers added to every vector selector."""
    added = _matchers(scope)
    out: list[str] = []
    position = 0
    # Whether the last token completed an operand (a selector, a number, `)`, ...): a
    # word there can be an operator; anywhere else a word names a metric.
    after_operand = False
    while position < len(query):
        match = _TOKEN.match(query, position)
        if match is None:
            raise UnscopableQuery(f"cannot read the query at {query[position : position + 20]!r}")
        kind, text = match.lastgroup, match.group()
        end = match.end()
        if kind == "ident":
            rest = query[end:].lstrip()
            word = text.lower()
            labels = _LABEL_LIST.match(rest) if word in _GROUPING else None
            if labels:
                # Its label list; a grouping clause leaves the operand state as it was
                # (`sum by (m) (q)` still waits for its operand, `sum(q) by (m)` is done).
                # Only names and commas count as one: `group_left (rate(q[5m]))` is read
                # on as an expression, so its selector is scoped.
                out.append(text + query[end : len(query) - len(rest) + labels.end()])
                end = len(query) - len(rest) + labels.end()
            elif (
                word in _GROUPING
                and word not in ("group_left", "group_right")
                and (rest.startswith("("))
            ):
                raise UnscopableQuery(f"the label list after {text!r} is not a list of names")
            elif word in ("group_left", "group_right") or word in _ALWAYS_KEYWORDS:
                out.append(text)  # never a metric name
                after_operand = word in ("inf", "nan")
            elif word in _AFTER_OPERAND and after_operand:
                out.append(text)
                after_operand = False
            elif rest.startswith("(") or (
                word in _AGGREGATIONS and re.match(r"(?i:by|without)\b", rest)
            ):
                out.append(text)  # a function call, or an aggregation with its clause
                after_operand = False
            else:
                existing = _LABEL_MATCHERS.match(rest)
                out.append(text + _with_scope(existing.group() if existing else "{}", added))
                if existing:
                    end = len(query) - len(rest) + existing.end()
                after_operand = True
        elif kind == "brace":
            existing = _LABEL_MATCHERS.match(query, match.start())
            if existing is None:
                raise UnscopableQuery("an unbalanced `{` in the query")
            out.append(_with_scope(existing.group(), added))
            end = existing.end()
            after_operand = True
        elif kind in ("space", "comment"):
            if kind == "space":
                out.append(text)
            # a comment is dropped: nothing after `#` may hide a selector from this reading
        else:
            out.append(text)
            after_operand = kind in ("string", "number", "duration") or text == ")"
        position = end
    return "".join(out)
