"""Kubernetes resource quantities (`500m`, `80Gi`, `1e3`, `4`), read exactly.

compose-model-deployment compares device capacities in CEL selectors, where two
quantities must compare as resource.Quantity.Cmp does (exactly, so `1Gi` equals
`1024Mi`); the runtime sums node allocatable and pod requests, where a float is enough.
Both read the text with the one grammar here, so a quantity one accepts the other does.
"""

import re
from fractions import Fraction
from typing import Any, Final

_QUANTITY_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string; ValueError if it is not one."""
    match = _QUANTITY_RE.match(text.strip())
    if not match:
        raise ValueError(f"invalid quantity {text!r}")
    value = Fraction(match["num"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    if suffix:
        return value * Fraction(10) ** int(suffix[1:])
    return value


def quantity_float(value: Any) -> float:
    """A quantity as a float; a number (as JSON carries some) is taken as it is."""
    if isinstance(value, int | float):
        return float(value)
    return float(parse_quantity(str(value)))
