"""How names and numbers are spelled inside the collector configs we generate.

The cluster collector (compose-serving-stack) and the fleet gateway (compose-telemetry)
both write OTTL statements and Prometheus label names into their configs; a spelling
that differed between the two would be a series one tier writes and the other never
matches.
"""

import re
from decimal import Decimal
from typing import Final

_NOT_IN_LABEL: Final = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_label(name: str) -> str:
    """A Kubernetes label or OpenTelemetry attribute name as Prometheus spells it.

    Every character outside `[a-zA-Z0-9_]` becomes `_`: how Prometheus' Kubernetes
    discovery writes pod labels into meta labels, and how the exporters escape attributes.
    """
    return _NOT_IN_LABEL.sub("_", name)


def plain_decimal(value: float) -> str:
    """A float in plain decimal digits (no exponent), shortest round-trip, no trailing zeros.

    Go's shortest 'f' format, which is how Prometheus writes an `le` label.
    """
    text = format(Decimal(repr(float(value))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def ottl_float(value: float) -> str:
    """A float as an OTTL float literal: plain decimal digits, always with a point."""
    text = plain_decimal(value)
    return text if "." in text else f"{text}.0"
