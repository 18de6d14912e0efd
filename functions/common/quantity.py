"""Kubernetes resource quantities (`500m`, `80Gi`, `1e3`, `4`), read exactly.

compose-model-deployment compares device capacities in CEL selectors, where two
quantities must compare as resource.Quantity.Cmp does (exactly, so `1Gi` equals
`1024Mi`); the runtime sums node allocatable and pod requests, where a float is enough.
Both read the text with the one grammar here, so a quantity one accepts the other does.

Bounded, as Kubernetes bounds resource.Quantity: the text is at most MAX_TEXT characters,
an exponent (`1e9`) is within ±MAX_EXPONENT, and the magnitude is at most 2^63-1 (the
int64 Kubernetes keeps; it caps larger values, this refuses them, saying so). Without
these, `1e999999999` in a selector or a cluster capacity would compute a number with a
billion digits.
"""

import re
from fractions import Fraction
from typing import Any, Final

_QUANTITY_RE: Final = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
)
MAX_TEXT: Final = 64
MAX_EXPONENT: Final = 64
MAX_MAGNITUDE: Final = 2**63 - 1
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
    if len(text) > MAX_TEXT:
        raise ValueError(f"a quantity is at most {MAX_TEXT} characters, got {len(text)}")
    match = _QUANTITY_RE.fullmatch(text)
    if not match:
        raise ValueError(f"invalid quantity {text!r}")
    value = Fraction(match["num"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    elif suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"quantity {text!r}: the exponent is outside ±{MAX_EXPONENT}")
        value *= Fraction(10) ** exponent
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"quantity {text!r} is larger than {MAX_MAGNITUDE}")
    return value


def quantity_float(value: Any) -> float:
    """A quantity as a float; a number (as JSON carries some) is taken as it is."""
    if isinstance(value, int | float):
        return float(value)
    return float(parse_quantity(str(value)))


def format_millicores(milli: int) -> str:
    """CPU as a quantity a person reads: whole cores (`8`), else millicores (`1500m`)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(value: int) -> str:
    """Memory as a quantity a person reads: the largest binary suffix that divides it."""
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)
