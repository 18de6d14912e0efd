"""The DRA device-selector CEL environment, on cel-python.

A member's `nodeSelector.devices[].selectors[].cel` is written as for a Kubernetes
DeviceClass or ResourceClaim, so it is evaluated against the same variables and library
functions the kube-scheduler offers there:

- `device.driver` (string), `device.attributes["<domain>"].<name>` (string, int, bool or
  semver version) and `device.capacity["<domain>"].<name>` (a quantity). An unknown
  domain is an empty map; an unknown name inside a known domain is an evaluation error
  (the DRA rule: "any reference to an unknown field will cause an evaluation error").
- the Kubernetes quantity library: `quantity()`, `isQuantity()`, `compareTo()`,
  `isGreaterThan()`, `isLessThan()`, `add()`, `sub()`, `asInteger()`,
  `asApproximateFloat()`, `sign()`, `isInteger()`;
- the Kubernetes semver library: `semver()`, `isSemver()`, `compareTo()`,
  `isGreaterThan()`, `isLessThan()`, `major()`, `minor()`, `patch()`;
- `cel.bind(name, value, expression)`, which DRA enables (rewritten to a one-element
  `map`, since cel-python has no bind macro).

`==` and `!=` between values of different types are false and true (CEL's heterogeneous
equality at run time, which cel-go applies and cel-python does not): a version attribute
compared with a string literal does not match, it does not fail.

Compiling costs milliseconds (a lark parse) and evaluating a fraction of one, so a
compiled program is cached by its text and a result by (text, device profile): a fleet
of a thousand pools usually has a handful of distinct device profiles.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache, total_ordering
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError

from functions.common.quantity import parse_quantity

# --- Quantities (k8s.io/apimachinery resource.Quantity, exact) -------------------------


@total_ordering
class Quantity:
    """A CEL `Quantity` value: compared by exact value, as resource.Quantity.Cmp does."""

    __slots__ = ("text", "value")

    def __init__(self, value: Fraction, text: str) -> None:
        self.value = value
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            raise TypeError(f"no such overload: Quantity < {type(other).__name__}")
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


# --- Semantic versions (semver 2.0 precedence) -------------------------------------------

_SEMVER_RE = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class Semver:
    """A CEL `Semver` value; build metadata does not take part in precedence."""

    __slots__ = ("major", "minor", "patch", "prerelease", "text")

    def __init__(self, text: str) -> None:
        match = _SEMVER_RE.fullmatch(text)
        if not match:
            raise ValueError(f"invalid semver {text!r}")
        self.text = text
        self.major, self.minor, self.patch = (int(match[i]) for i in (1, 2, 3))
        self.prerelease = tuple(match[4].split(".")) if match[4] else ()

    def _precedence(self) -> tuple:
        # A version without a prerelease ranks above any prerelease of it; numeric
        # identifiers rank below alphanumeric ones and compare as numbers.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if pre else 1, pre)

    def cmp(self, other: Semver) -> int:
        a, b = self._precedence(), other._precedence()
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.cmp(other) == 0

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            raise TypeError(f"no such overload: Semver < {type(other).__name__}")
        return self.cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self._precedence())

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


# --- Library functions ---------------------------------------------------------------------


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    return Quantity(parse_quantity(text), str(text))


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(text: Any) -> Semver:
    if not isinstance(text, str):
        raise TypeError("semver() takes a string")
    return Semver(str(text))


def _is_semver(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(bool(_SEMVER_RE.fullmatch(str(text))))


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.cmp(b)
    raise TypeError(f"no such overload: compare {type(a).__name__} with {type(b).__name__}")


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_compare(a, b))


def _is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) > 0)


def _is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) < 0)


def _as_quantity_operand(b: Any) -> Fraction:
    if isinstance(b, Quantity):
        return b.value
    if isinstance(b, int) and not isinstance(b, bool):
        return Fraction(int(b))
    raise TypeError(f"no such overload: quantity arithmetic with {type(b).__name__}")


def _add(a: Any, b: Any) -> Quantity:
    if not isinstance(a, Quantity):
        raise TypeError("add() needs a quantity receiver")
    value = a.value + _as_quantity_operand(b)
    return Quantity(value, str(value))


def _sub(a: Any, b: Any) -> Quantity:
    if not isinstance(a, Quantity):
        raise TypeError("sub() needs a quantity receiver")
    value = a.value - _as_quantity_operand(b)
    return Quantity(value, str(value))


def _as_integer(a: Any) -> celtypes.IntType:
    if not isinstance(a, Quantity):
        raise TypeError("asInteger() needs a quantity receiver")
    if a.value.denominator != 1 or not -(2**63) <= a.value < 2**63:
        raise ValueError(f"{a.text} is not representable as an integer")
    return celtypes.IntType(int(a.value))


def _as_approximate_float(a: Any) -> celtypes.DoubleType:
    if not isinstance(a, Quantity):
        raise TypeError("asApproximateFloat() needs a quantity receiver")
    return celtypes.DoubleType(float(a.value))


def _sign(a: Any) -> celtypes.IntType:
    if not isinstance(a, Quantity):
        raise TypeError("sign() needs a quantity receiver")
    return celtypes.IntType((a.value > 0) - (a.value < 0))


def _is_integer(a: Any) -> celtypes.BoolType:
    if not isinstance(a, Quantity):
        raise TypeError("isInteger() needs a quantity receiver")
    return celtypes.BoolType(a.value.denominator == 1)


def _version_part(index: int) -> Callable[[Any], celtypes.IntType]:
    def part(a: Any) -> celtypes.IntType:
        if not isinstance(a, Semver):
            raise TypeError("major()/minor()/patch() need a semver receiver")
        return celtypes.IntType((a.major, a.minor, a.patch)[index])

    return part


def _heterogeneous_eq(a: Any, b: Any) -> Any:
    for operand in (a, b):
        if isinstance(operand, CELEvalError):
            return operand
    numbers = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return celtypes.BoolType(float(a) == float(b))
    return celtypes.BoolType(_same_kind(a, b) and a == b)


def _heterogeneous_ne(a: Any, b: Any) -> Any:
    equal = _heterogeneous_eq(a, b)
    return equal if isinstance(equal, CELEvalError) else celtypes.BoolType(not equal)


def _same_kind(a: Any, b: Any) -> bool:
    # CEL compares numbers across int, uint and double; every other pair of distinct
    # types is simply unequal.
    numbers = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return True
    if isinstance(a, celtypes.BoolType) or isinstance(b, celtypes.BoolType):
        return isinstance(a, celtypes.BoolType) and isinstance(b, celtypes.BoolType)
    for kind in (
        celtypes.StringType,
        celtypes.BytesType,
        celtypes.ListType,
        celtypes.MapType,
        Quantity,
        Semver,
    ):
        if isinstance(a, kind) or isinstance(b, kind):
            return isinstance(a, kind) and isinstance(b, kind)
    return type(a) is type(b)


# The longest string, bytes or list `+` builds (see "Bounded cost" below).
MAX_VALUE_SIZE: Final = 64 * 1024


class CostExceeded(Exception):
    """A selector outgrew its runtime budget; deliberately not an error cel-python catches,
    so it ends the evaluation at once."""


def _bounded_add(a: Any, b: Any) -> Any:
    """CEL `+`, refusing a string, bytes or list past MAX_VALUE_SIZE.

    The result keeps its CEL type (Python's `+` on two StringTypes gives a plain str,
    which CEL equality would then compare as another type)."""
    if isinstance(a, str | bytes | list) and isinstance(b, str | bytes | list):
        if len(a) + len(b) > MAX_VALUE_SIZE:
            raise CostExceeded(f"a value grew past {MAX_VALUE_SIZE} characters or elements")
        if isinstance(a, celtypes.StringType) and isinstance(b, str):
            return celtypes.StringType(str(a) + str(b))
        if isinstance(a, celtypes.BytesType) and isinstance(b, bytes):
            return celtypes.BytesType(bytes(a) + bytes(b))
        if isinstance(a, celtypes.ListType) and isinstance(b, list):
            return celtypes.ListType([*a, *b])
    return operator.add(a, b)


LIBRARY: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "add": _add,
    "sub": _sub,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "sign": _sign,
    "isInteger": _is_integer,
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
    "_==_": _heterogeneous_eq,
    "_+_": _bounded_add,
    "_!=_": _heterogeneous_ne,
}

# CEL's standard functions and macros cel-python provides, plus the library above: a
# call to anything else is reported when the selector is compiled, not per device.
_STANDARD = frozenset(celpy.evaluation.base_functions) | {
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
}
KNOWN_FUNCTIONS = frozenset(LIBRARY) | _STANDARD


# --- Compiling ----------------------------------------------------------------------------


class SelectorError(ValueError):
    """A selector that cannot be compiled; the message says why."""


_ENV = celpy.Environment()

# --- Bounded cost ---------------------------------------------------------------------------
#
# Kubernetes bounds a DRA selector three ways: its length (the XRD: 1024 characters), the
# parser's nesting depth, and a cost budget (CELSelectorExpressionMaxCost, 1,000,000)
# estimated before it runs and tracked while it runs. cel-python tracks no cost, so the
# budget is estimated here, statically and conservatively, in evaluation steps. The
# budget is 10,000 steps, not 1,000,000: an interpreted step costs about 20 µs in
# cel-python (a hundred times cel-go), so 10,000 steps is about 0.2 s for one (selector,
# device profile) pair, and every realistic selector costs under 100. Every AST
# node is one step, and a comprehension (all, exists, exists_one, map, filter, and the
# cel.bind rewritten to map) costs its body once per element of its range. A range's size
# is known for a list literal (its elements) and a map/filter of one (its range's size);
# any other range is taken as MAX_UNKNOWN_RANGE elements (more than a device has
# attributes). Values can still grow while a selector runs (cel.bind doubling a string),
# so `+` refuses to build a string or list past MAX_VALUE_SIZE: an evaluation error, no
# match, as the scheduler would answer once its runtime budget ran out.
MAX_SELECTOR_LENGTH: Final = 1024
MAX_NESTING_DEPTH: Final = 32
MAX_COST: Final = 10_000
# All of a deployment's selectors together (up to 4 engines x 4 members x 4 devices x 8
# selectors = 512 by the XRD): about 1 s per distinct device profile in the fleet, once
# (results are memoized per selector and profile across reconciles).
MAX_DEPLOYMENT_COST: Final = 50_000
MAX_UNKNOWN_RANGE: Final = 64
_COMPREHENSIONS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of `text` outside string literals."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _comprehension(node: lark.Tree) -> bool:
    return (
        node.data == "member_dot_arg"
        and len(node.children) > 2
        and str(node.children[1]) in _COMPREHENSIONS
    )


def _range_size(node: Any) -> int:
    """How many elements an expression that a comprehension ranges over may have."""
    while (
        isinstance(node, lark.Tree)
        and len(node.children) == 1
        and isinstance(node.children[0], lark.Tree)
    ):
        if node.data == "list_lit":
            break
        node = node.children[0]
    if not isinstance(node, lark.Tree):
        return MAX_UNKNOWN_RANGE
    if node.data == "list_lit":
        exprlist = node.children[0] if node.children else None
        return len(exprlist.children) if isinstance(exprlist, lark.Tree) else 0
    if _comprehension(node) and str(node.children[1]) in ("map", "filter"):
        return _range_size(node.children[0])
    return MAX_UNKNOWN_RANGE


def estimated_cost(node: Any) -> int:
    """Evaluation steps a selector may take at most (see above); saturates past MAX_COST."""
    if not isinstance(node, lark.Tree):
        return 0
    if _comprehension(node):
        receiver, _name, args = node.children[0], node.children[1], node.children[2]
        body = sum(estimated_cost(c) for c in getattr(args, "children", ())[1:])
        cost = 1 + estimated_cost(receiver) + _range_size(receiver) * max(body, 1)
    else:
        cost = 1 + sum(estimated_cost(c) for c in node.children)
    return min(cost, MAX_COST + 1)


@lru_cache(maxsize=1)
def warm_up() -> None:
    """Build the parser's lexer now: lark builds it on its first parse (about 20 ms of
    regular-expression compiling), which would otherwise fall on a server's first
    reconcile. Once per process."""
    _ENV.compile('device.driver == ""')


def compile_selector(text: str) -> celpy.Runner:
    """Parse a selector and bind the DRA library; SelectorError if it cannot run anywhere
    or is over the cost limits above (the message names the limit)."""
    return _compiled(text)[0]


def selector_cost(text: str) -> int:
    """The estimated cost of a selector (SelectorError as compile_selector)."""
    return _compiled(text)[1]


@lru_cache(maxsize=4096)
def _compiled(text: str) -> tuple[celpy.Runner, int]:
    """Parse a selector and bind the DRA library; SelectorError if it cannot run anywhere
    or is over the cost limits above (the message names the limit)."""
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"is {len(text)} characters; at most {MAX_SELECTOR_LENGTH}")
    if _nesting_depth(text) > MAX_NESTING_DEPTH:
        raise SelectorError(
            f"nests brackets {_nesting_depth(text)} deep; at most {MAX_NESTING_DEPTH}"
        )
    try:
        ast = _ENV.compile(text)
    except (celpy.CELParseError, lark.exceptions.LarkError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else "syntax error"
        raise SelectorError(f"does not compile: {first_line}") from None
    except RecursionError:
        raise SelectorError(f"nests too deeply to parse (at most {MAX_NESTING_DEPTH})") from None
    ast = _rewrite_binds(ast)
    cost = estimated_cost(ast)
    if cost > MAX_COST:
        raise SelectorError(
            f"estimated cost exceeds the budget of {MAX_COST} evaluation steps (each "
            "comprehension costs its body once per element); simplify the selector"
        )
    unknown = sorted(_called_functions(ast) - KNOWN_FUNCTIONS)
    if unknown:
        raise SelectorError(
            f"calls unknown function {unknown[0]!r} "
            "(DRA selectors may use the CEL standard library, quantity and semver)"
        )
    variables = _root_identifiers(ast) - {"device"}
    if variables:
        raise SelectorError(
            f"refers to {sorted(variables)[0]!r}; a device selector can only read `device`"
        )
    return _ENV.program(ast, functions=LIBRARY), cost


def _is_cel_bind(node: lark.Tree) -> bool:
    if node.data != "member_dot_arg" or str(node.children[1]) != "bind":
        return False
    receiver = node.children[0]
    return (
        isinstance(receiver, lark.Tree)
        and receiver.data == "member"
        and isinstance(receiver.children[0], lark.Tree)
        and receiver.children[0].data == "primary"
        and isinstance(receiver.children[0].children[0], lark.Tree)
        and receiver.children[0].children[0].data == "ident"
        and str(receiver.children[0].children[0].children[0]) == "cel"
    )


def _rewrite_binds(node: lark.Tree) -> lark.Tree:
    """`cel.bind(v, init, body)`, which DRA enables, as `[init].map(v, body)[0]`.

    cel-python has no bind macro; a one-element map binds the name the same way (the
    value is computed once, and `v` is only visible inside `body`).
    """
    for i, child in enumerate(node.children):
        if isinstance(child, lark.Tree):
            node.children[i] = _rewrite_binds(child)
    if not _is_cel_bind(node):
        return node
    args = node.children[2].children if len(node.children) > 2 and node.children[2] else []
    if len(args) != 3:
        raise SelectorError("cel.bind takes a name, a value and an expression")
    variable, init, body = args
    template = _ENV.compile("[__INIT__].map(__VAR__, __BODY__)[0]")
    member_index = next(t for t in template.iter_subtrees() if t.data == "member_index")
    for holder in member_index.iter_subtrees():
        for j, grandchild in enumerate(holder.children):
            if isinstance(grandchild, lark.Tree) and grandchild.data == "expr":
                name = next(
                    (str(v) for v in grandchild.scan_values(lambda v: isinstance(v, lark.Token))),
                    "",
                )
                replacement = {"__INIT__": init, "__VAR__": variable, "__BODY__": body}.get(name)
                if replacement is not None:
                    holder.children[j] = replacement
    return member_index


def _called_functions(ast: lark.Tree) -> set[str]:
    names: set[str] = set()
    for node in ast.iter_subtrees():
        if node.data == "member_dot_arg":
            names.add(str(node.children[1]))
        elif node.data == "ident_arg":
            names.add(str(node.children[0]))
    return names


def _root_identifiers(ast: lark.Tree) -> set[str]:
    """Free variables, minus the ones a comprehension macro binds (its first argument)."""
    bound: set[str] = set()
    for node in ast.iter_subtrees():
        if (
            node.data == "member_dot_arg"
            and str(node.children[1]) in {"all", "exists", "exists_one", "map", "filter"}
            and len(node.children) > 2
            and isinstance(node.children[2], lark.Tree)
            and node.children[2].children
        ):
            first = node.children[2].children[0]
            bound |= {str(v) for v in first.scan_values(lambda v: isinstance(v, lark.Token))}
    identifiers = {
        str(node.children[0])
        for node in ast.iter_subtrees()
        if node.data == "ident" and node.children
    }
    return identifiers - bound


# --- The device -------------------------------------------------------------------------


class _DomainMap(celtypes.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


AttributeValue = str | int | bool | Semver


@dataclass(frozen=True)
class DeviceProfile:
    """What a pool's devices look like to a selector (all devices of a pool are alike).

    `attributes` and `capacity` are keyed by fully qualified name (`<domain>/<name>`);
    the key doubles as the cache identity of the profile.
    """

    driver: str
    attributes: tuple[tuple[str, str, Any], ...]  # (qualified name, kind, value)
    capacity: tuple[tuple[str, str], ...]  # (qualified name, quantity text)

    def known_names(self, which: str, domain: str) -> list[str]:
        entries = self.attributes if which == "attributes" else self.capacity
        prefix = f"{domain}/"
        return sorted(e[0][len(prefix) :] for e in entries if e[0].startswith(prefix))

    def domains(self, which: str) -> list[str]:
        entries = self.attributes if which == "attributes" else self.capacity
        return sorted({e[0].rsplit("/", 1)[0] for e in entries})


def qualify(name: str, driver: str) -> str:
    """A bare attribute name belongs to the driver's domain, as in a ResourceSlice."""
    return name if "/" in name else f"{driver}/{name}"


def _cel_attribute(kind: str, value: Any) -> Any:
    if kind == "string":
        return celtypes.StringType(value)
    if kind == "int":
        return celtypes.IntType(int(value))
    if kind == "bool":
        return celtypes.BoolType(bool(value))
    return Semver(str(value))


@lru_cache(maxsize=4096)
def device_activation(profile: DeviceProfile) -> Mapping[str, Any]:
    attributes: dict[str, dict] = {}
    for qualified, kind, value in profile.attributes:
        domain, name = qualified.rsplit("/", 1)
        attributes.setdefault(domain, {})[celtypes.StringType(name)] = _cel_attribute(kind, value)
    capacity: dict[str, dict] = {}
    for qualified, text in profile.capacity:
        domain, name = qualified.rsplit("/", 1)
        capacity.setdefault(domain, {})[celtypes.StringType(name)] = _quantity(text)
    device = celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(profile.driver),
            celtypes.StringType("attributes"): _DomainMap(
                {celtypes.StringType(d): celtypes.MapType(v) for d, v in attributes.items()}
            ),
            celtypes.StringType("capacity"): _DomainMap(
                {celtypes.StringType(d): celtypes.MapType(v) for d, v in capacity.items()}
            ),
        }
    )
    return {"device": device}


# --- Evaluating -------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """A selector's answer for one device profile: matched, or not, or an error."""

    matched: bool
    error: str = ""
    missing_name: str = ""  # set when the error is an unknown attribute/capacity name


_MISSING_MEMBER = re.compile(r"no such member in mapping: '([^']*)'")


@lru_cache(maxsize=65536)
def evaluate(text: str, profile: DeviceProfile) -> Evaluation:
    """Evaluate one compiled selector against one device profile (memoized).

    Raises SelectorError only for a selector that does not compile; every per-device
    problem is an Evaluation with an error, as the scheduler treats it (no match).
    """
    program = compile_selector(text)
    try:
        result = program.evaluate(device_activation(profile))
    except CELEvalError as err:
        return _evaluation_error(err)
    except CostExceeded as err:
        return Evaluation(False, f"over the runtime cost budget: {err}")
    except (TypeError, ValueError, ArithmeticError) as err:
        return Evaluation(False, f"evaluation error: {err}")
    if isinstance(result, CELEvalError):
        return _evaluation_error(result)
    if not isinstance(result, celtypes.BoolType):
        return Evaluation(False, f"must evaluate to bool, got {type(result).__name__}")
    return Evaluation(bool(result))


def _evaluation_error(err: CELEvalError) -> Evaluation:
    message = str(err.args[0]) if err.args else str(err)
    missing = _MISSING_MEMBER.search(message)
    if missing:
        return Evaluation(False, f"no such attribute {missing[1]!r}", missing[1])
    if message == "no such key" and len(err.args) > 2 and err.args[2]:
        name = str(err.args[2][0])
        return Evaluation(False, f"no such attribute {name!r}", name)
    if message == "return error for overflow" and len(err.args) > 2 and err.args[2]:
        return Evaluation(False, f"evaluation error: {err.args[2][0]}")
    if "no matching overload" in message or "no such overload" in message:
        return Evaluation(False, "type error: no such overload for these operand types")
    return Evaluation(False, f"evaluation error: {message.split(' (in activation')[0]}")
