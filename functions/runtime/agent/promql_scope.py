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
_KEYWORDS: Final = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end", "atan2"}
)
_LABEL_MATCHERS: Final = re.compile(
    r"""\{(?:[^{}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\}"""
)


class UnscopableQuery(ValueError):
    pass


def _matchers(scope: Mapping[str, str]) -> str:
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return ",".join(f"{label}={quoted(value)}" for label, value in sorted(scope.items()))


def scope_query(query: str, scope: Mapping[str, str]) -> str:
    """`query` with `scope`'s equality matchers added to every vector selector."""
    added = _matchers(scope)
    out: list[str] = []
    position = 0
    while position < len(query):
        match = _TOKEN.match(query, position)
        if match is None:
            raise UnscopableQuery(f"cannot read the query at {query[position : position + 20]!r}")
        kind, text = match.lastgroup, match.group()
        end = match.end()
        if kind == "ident":
            rest = query[end:].lstrip()
            if text in _GROUPING:
                out.append(text)
                if rest.startswith("("):  # its label list (optional after group_left/right)
                    close = query.find(")", len(query) - len(rest))
                    if close < 0:
                        raise UnscopableQuery("an unclosed label list in the query")
                    out.append(query[end : close + 1])
                    end = close + 1
            elif (
                text.lower() in _KEYWORDS
                or rest.startswith("(")
                or (text in _AGGREGATIONS and re.match(r"(by|without)\b", rest))
            ):
                out.append(text)  # a keyword, a function call, or an aggregation
            else:
                existing = _LABEL_MATCHERS.match(rest)
                if existing:
                    inner = existing.group()[1:-1].strip().rstrip(",")
                    out.append(f"{text}{{{added}{',' if inner else ''}{inner}}}")
                    end = len(query) - len(rest) + existing.end()
                else:
                    out.append(f"{text}{{{added}}}")
        elif kind == "brace":
            existing = _LABEL_MATCHERS.match(query, match.start())
            if existing is None:
                raise UnscopableQuery("an unbalanced `{` in the query")
            inner = existing.group()[1:-1].strip().rstrip(",")
            out.append(f"{{{added}{',' if inner else ''}{inner}}}")
            end = existing.end()
        elif kind == "comment":
            pass  # dropped: nothing after `#` may hide a selector from this reading
        else:
            out.append(text)
        position = end
    return "".join(out)
