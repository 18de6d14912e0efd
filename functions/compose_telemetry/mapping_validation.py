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
from typing import Any

from functions.common.metricmapping import parse_mappings


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
