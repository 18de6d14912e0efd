"""Whether a MetricMapping may be used, and why not: the answer its status reports.

One set of rules for everyone: the parse compose-serving-stack renders from
(`functions.common.metricmapping.parse_mappings` — strict names, vocabulary
targets, each target once with several `from` names only as version alternatives,
positive scale, one mapping per engine, no rename onto a reserved or roll-up label). A
mapping is valid when it parses; compose-serving-stack renders exactly the mappings that
parse, so the status a platform team reads and the collector config they get never
disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common import conditions
from functions.common.conditions import Condition
from functions.common.metricmapping import parse_mappings

REASON_VALID: Final = "Valid"
REASON_INVALID: Final = "Invalid"
REASON_COMPOSED: Final = "Composed"


@dataclass(frozen=True)
class MappingError:
    field: str
    rule: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.rule}"


def validate_mapping(
    resource: Mapping[str, Any], others: Iterable[Mapping[str, Any]] = ()
) -> list[MappingError]:
    """Every reason this MetricMapping may not be used; empty when it is valid.

    `others` are the fleet's other MetricMappings, for the one-mapping-per-engine rule
    (the first by name keeps the engine); without them only the mapping's own rules run.
    """
    name = str((resource.get("metadata") or {}).get("name", ""))
    others_by_name = {
        str((o.get("metadata") or {}).get("name", "")): o
        for o in others
        if str((o.get("metadata") or {}).get("name", "")) != name
    }
    parsed = parse_mappings([resource, *others_by_name.values()])
    refused = [r for r in parsed.refused if r.name == name]
    if refused:
        return [MappingError(r.field, r.rule) for r in refused]
    return []


@dataclass(frozen=True)
class Verdict:
    """What a MetricMapping's reconcile says: a warning ("" when valid) and conditions."""

    warning: str
    conditions: list[Condition]


def verdict(composite: str, resource: Mapping[str, Any], errors: list[MappingError]) -> Verdict:
    """`composite`: the mapping as messages name it. A mapping composes nothing, so
    Composed is always True; MappingValid says whether collectors use it, and why not."""
    composed = Condition(
        conditions.COMPOSED, conditions.TRUE, REASON_COMPOSED, "nothing to compose"
    )
    if errors:
        message = f"{composite} is not used by any collector: " + "; ".join(
            e.message for e in errors
        )
        invalid = Condition(conditions.MAPPING_VALID, conditions.FALSE, REASON_INVALID, message)
        return Verdict(message, [invalid, composed])
    return Verdict(
        "",
        [
            Condition(
                conditions.MAPPING_VALID,
                conditions.TRUE,
                REASON_VALID,
                f"every cluster's collector renames engine {resource['spec']['engine']!r} with it",
            ),
            composed,
        ],
    )
