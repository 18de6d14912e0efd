"""Whether a MetricMapping may be used, and why not: the answer its status reports.

One set of rules for everyone: the parse compose-serving-stack renders from
(`functions.compose_serving_stack.mappings.parse_mappings` — strict names, vocabulary
targets, each target once with several `from` names only as version alternatives,
positive scale, one mapping per engine) plus the rules the fleet roll-up adds here
(`fleet_rules`). A mapping is valid when both pass; compose-serving-stack renders only
mappings for which `validate_mapping` returns no errors, so the status a platform team
reads and the collector config they get never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common.contracts import RESOURCE_ATTRIBUTE_CLUSTER, RESOURCE_ATTRIBUTE_SCOPE
from functions.compose_serving_stack.mappings import MetricMapping, parse_mappings
from functions.compose_telemetry.rollup import RESOURCE_ATTRIBUTE_GATEWAY, prometheus_label

# Labels the fleet roll-up owns: a rename onto one would make an engine's series look
# like another cluster's, or like a fleet series, and be summed into the wrong total.
ROLLUP_LABELS: Final = frozenset(
    prometheus_label(a)
    for a in (RESOURCE_ATTRIBUTE_CLUSTER, RESOURCE_ATTRIBUTE_SCOPE, RESOURCE_ATTRIBUTE_GATEWAY)
)


@dataclass(frozen=True)
class MappingError:
    field: str
    rule: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.rule}"


def fleet_rules(mapping: MetricMapping) -> list[MappingError]:
    """The roll-up's own rules over a mapping that already parsed."""
    errors = []
    for i, label in enumerate(mapping.labels):
        if label.target in ROLLUP_LABELS:
            owned = ", ".join(sorted(ROLLUP_LABELS))
            errors.append(
                MappingError(
                    f"spec.labels[{i}].to",
                    f"{label.target!r} is a fleet roll-up label (reserved: {owned})",
                )
            )
    return errors


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
    mapping = next(m for m in parsed.accepted if m.name == name)
    # The parsed labels keep the spec's order, so fleet_rules' indexes are the spec's.
    return fleet_rules(mapping)
