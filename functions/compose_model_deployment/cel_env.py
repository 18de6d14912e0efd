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

Work is counted while a selector runs, not only estimated before ("Bounded cost"
below): every node the interpreter visits and every element an operator copies or
compares is charged to the selector's budget and to the request's, and the request's
deadline and cancellation are checked as it goes.
"""

from __future__ import annotations

import contextvars
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
from celpy.evaluation import CELEvalError, Evaluator

from functions.common import budget
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


_NUMBERS: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _heterogeneous_eq(a: Any, b: Any) -> Any:
    for operand in (a, b):
        if isinstance(operand, CELEvalError):
            return operand
    return celtypes.BoolType(_equal(a, b, _meter()))


def _heterogeneous_ne(a: Any, b: Any) -> Any:
    equal = _heterogeneous_eq(a, b)
    return equal if isinstance(equal, CELEvalError) else celtypes.BoolType(not equal)


def _equal(a: Any, b: Any, meter: _Meter) -> bool:
    """CEL equality, element by element and charged per element: Python's own `==` on
    lists walks nested lists in C without a word to the meter, and lists of references
    to lists (built in a few steps by `map`) make it cost millions of comparisons."""
    meter.elements(1)
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return float(a) == float(b)
    if not _same_kind(a, b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y, meter) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        if len(a) != len(b):
            return False
        meter.elements(len(a))
        return all(k in b and _equal(v, b[k], meter) for k, v in a.items())
    if isinstance(a, str | bytes):
        meter.characters(len(a))
    return bool(a == b)


def _contained(item: Any, container: Any) -> Any:
    """CEL `in`: membership in a list compares with CEL equality, charged per element; a
    map's keys are hashed (one step)."""
    meter = _meter()
    if isinstance(container, list):
        return celtypes.BoolType(any(_equal(item, element, meter) for element in container))
    if isinstance(container, Mapping):
        meter.elements(1)
        try:
            return celtypes.BoolType(item in container)
        except TypeError:
            return celtypes.BoolType(False)
    raise TypeError(f"no such overload: in {type(container).__name__}")


def _same_kind(a: Any, b: Any) -> bool:
    # CEL compares numbers across int, uint and double; every other pair of distinct
    # types is simply unequal.
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
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
    """CEL `+`, charged for what it copies, refusing a string, bytes or list past
    MAX_VALUE_SIZE.

    The result keeps its CEL type (Python's `+` on two StringTypes gives a plain str,
    which CEL equality would then compare as another type)."""
    if isinstance(a, str | bytes | list) and isinstance(b, str | bytes | list):
        if len(a) + len(b) > MAX_VALUE_SIZE:
            raise CostExceeded(f"a value grew past {MAX_VALUE_SIZE} characters or elements")
        if isinstance(a, list):
            _meter().elements(len(a) + len(b))
        else:
            _meter().characters(len(a) + len(b))
        if isinstance(a, celtypes.StringType) and isinstance(b, str):
            return celtypes.StringType(str(a) + str(b))
        if isinstance(a, celtypes.BytesType) and isinstance(b, bytes):
            return celtypes.BytesType(bytes(a) + bytes(b))
        if isinstance(a, celtypes.ListType) and isinstance(b, list):
            return celtypes.ListType([*a, *b])
    return operator.add(a, b)


def _ordered(name: str) -> Callable[[Any, Any], Any]:
    """`<`, `<=`, `>`, `>=`: CEL orders no lists or maps (Python would, element by
    element and uncounted)."""
    compare = celpy.evaluation.base_functions[name]

    def ordered(a: Any, b: Any) -> Any:
        if isinstance(a, list | Mapping) or isinstance(b, list | Mapping):
            raise TypeError(f"no such overload: {name} on a list or map")
        return compare(a, b)

    return ordered


def _over_text(name: str) -> Callable[..., Any]:
    """A string function (`matches`, `contains`, ...) charged for the text it reads."""
    function = celpy.evaluation.base_functions[name]

    def counted(*args: Any) -> Any:
        _meter().characters(sum(len(a) for a in args if isinstance(a, str | bytes)))
        return function(*args)

    return counted


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
    "_in_": _contained,
    **{name: _ordered(name) for name in ("_<_", "_<=_", "_>_", "_>=_")},
    **{name: _over_text(name) for name in ("matches", "contains", "startsWith", "endsWith")},
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
# estimated before it runs and tracked while it runs. Both are done here, in evaluation
# steps; the budget is 10,000 steps, not 1,000,000, because an interpreted step costs
# about 25 µs in cel-python (a hundred times cel-go): 10,000 steps is about a quarter of a
# second for one (selector, device profile) pair, and every realistic selector costs
# under 100.
#
# Before it runs (compile time, a cheap first refusal that names the rule): every AST
# node is one step, and a comprehension (all, exists, exists_one, map, filter, and the
# cel.bind rewritten to map) costs its body once per element of its range. A range's
# size is known for a list literal and a map/filter of one; any other range is taken as
# MAX_UNKNOWN_RANGE elements. That is an estimate, and values built while a selector
# runs make it wrong (`+` doubling a list 16 elements at a time reaches 65,536 in a
# dozen steps), so it is not what bounds the work.
#
# While it runs (what bounds it): the interpreter is a subclass of cel-python's that
# charges one step per node it visits (a comprehension's body once per element, since
# it is visited once per element), and the operators that walk values charge for the
# elements they touch: `+` for what it copies, `==`, `!=` and `in` per element compared
# (a CEL-level walk here, not Python's), string functions per ELEMENTS_PER_STEP * 8
# characters; lists and maps are never ordered. At MAX_COST steps the selector stops
# (CostExceeded: no match, and the shell refuses the deployment naming the field), and
# each step also counts against the request (functions.common.budget): all selectors of
# one request together may use MAX_DEPLOYMENT_COST steps, and a request whose deadline
# passed or whose caller went away stops at the next step. `+` also refuses to build a
# string or list past MAX_VALUE_SIZE.
MAX_SELECTOR_LENGTH: Final = 1024
MAX_NESTING_DEPTH: Final = 32
# The deepest parse tree a selector may have: the interpreter recurses once or twice per
# level, and 340 (32 nested brackets take 330) leaves room under Python's recursion
# limit for the caller's own frames. `!!!!…true` or `1+1+…` nest without brackets.
MAX_TREE_DEPTH: Final = 340
MAX_COST: Final = 10_000
# All of a deployment's selectors together (up to 4 engines x 4 members x 4 devices x 8
# selectors = 512 by the XRD): about 1 s per distinct device profile in the fleet, once
# (results are memoized per selector and profile across reconciles).
MAX_DEPLOYMENT_COST: Final = 50_000
MAX_UNKNOWN_RANGE: Final = 64
_COMPREHENSIONS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Elements compared or copied per evaluation step: CEL equality on lists costs about 2 µs
# per element in Python, a step about 25 µs, so 8 is on the safe side; characters are
# cheaper still (C loops), ELEMENTS_PER_STEP * 8 per step.
ELEMENTS_PER_STEP: Final = 8
CHARACTERS_PER_ELEMENT: Final = 8
# How often (in steps) a running selector looks at the request's deadline.
CHECK_EVERY: Final = 32
# The request's allowance of counted selector work, in budget.WorkBudget.spend.
BUDGET_KIND: Final = "cel"
# One selector evaluates at a time in the process, the request that has spent the least
# first: a request that has used its budget on hostile selectors waits behind a benign
# one, and cached answers (the common case) never wait at all.
EVALUATION_GATE: Final = budget.FairGate()


class _Meter:
    """The work one selector evaluation did: steps, with elements and characters charged
    as fractions of a step; CostExceeded at `limit` steps, budget.WorkStopped when the
    request's budget says so."""

    __slots__ = ("limit", "request", "request_left", "units")

    def __init__(self, limit: int, request: budget.WorkBudget, request_left: int) -> None:
        self.units = 0  # ELEMENTS_PER_STEP units per step
        self.limit = limit
        self.request = request
        self.request_left = request_left

    @property
    def steps(self) -> int:
        return -(-self.units // ELEMENTS_PER_STEP)

    def step(self) -> None:
        self._charge(ELEMENTS_PER_STEP)

    def elements(self, count: int) -> None:
        self._charge(count)

    def characters(self, count: int) -> None:
        self._charge(count // CHARACTERS_PER_ELEMENT)

    def _charge(self, units: int) -> None:
        before = self.units // (ELEMENTS_PER_STEP * CHECK_EVERY)
        self.units += units
        steps = self.steps
        if steps > self.limit:
            raise CostExceeded(f"used more than {self.limit:,} evaluation steps")
        if steps > self.request_left:
            raise _request_stopped()
        if self.units // (ELEMENTS_PER_STEP * CHECK_EVERY) != before:
            self.request.check()


_UNMETERED: Final = _Meter(2**62, budget.WorkBudget(), 2**62)
_CURRENT_METER: Final[contextvars.ContextVar[_Meter]] = contextvars.ContextVar(
    "modelplane_cel_meter", default=_UNMETERED
)


def _meter() -> _Meter:
    return _CURRENT_METER.get()


class _CountingEvaluator(Evaluator):
    """cel-python's interpreter, charging one step per node it visits; comprehension
    bodies run in sub-evaluators that share the meter."""

    def __init__(self, ast: lark.Tree, activation: Any, meter: _Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _CountingEvaluator(ast, self.activation, self.meter)

    def _visit_tree(self, tree: lark.Tree) -> Any:
        self.meter.step()
        return super()._visit_tree(tree)


class _CountingRunner(celpy.InterpretedRunner):
    """A compiled selector, run by the counting interpreter under the current meter."""

    def evaluate(self, context: Any) -> Any:
        return _CountingEvaluator(self.ast, self.new_activation(), _meter()).evaluate(context)


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
    depth = _tree_depth(ast)
    if depth > MAX_TREE_DEPTH:
        raise SelectorError(
            f"nests {depth} levels deep once parsed; at most {MAX_TREE_DEPTH} (a long "
            "chain of operators nests as deeply as brackets do)"
        )
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
    return _CountingRunner(_ENV, ast, LIBRARY), cost


def _tree_depth(ast: lark.Tree) -> int:
    """The parse tree's depth, walked without recursion (it may be too deep for it)."""
    deepest = 0
    pending = [(ast, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        pending.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))
    return deepest


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
    steps: int = 0  # the work it took, charged to every request that asks for it
    over_budget: bool = False  # stopped at MAX_COST steps (or MAX_VALUE_SIZE)


_MISSING_MEMBER = re.compile(r"no such member in mapping: '([^']*)'")
REQUEST_BUDGET_RULE: Final = (
    f"the device selectors of this request used their budget of {MAX_DEPLOYMENT_COST:,} "
    "evaluation steps together (counted while they run); drop or simplify selectors"
)


def evaluate(text: str, profile: DeviceProfile) -> Evaluation:
    """Evaluate one compiled selector against one device profile (memoized), charging
    its steps to the running request, whether they were spent now or when it was first
    evaluated: a request's outcome does not depend on what earlier ones left in the
    cache.

    Raises SelectorError only for a selector that does not compile, and
    budget.WorkStopped when the request's budget, deadline or caller stops the work;
    every per-device problem is an Evaluation with an error, as the scheduler treats it
    (no match).
    """
    request = budget.current()
    request.check()
    result = _evaluated(text, profile)
    request.spend(BUDGET_KIND, result.steps, MAX_DEPLOYMENT_COST, REQUEST_BUDGET_RULE)
    return result


def _request_stopped() -> budget.WorkStopped:
    return budget.WorkStopped("", REQUEST_BUDGET_RULE)


@lru_cache(maxsize=65536)
def _evaluated(text: str, profile: DeviceProfile) -> Evaluation:
    """The answer and the steps it took; only deterministic answers are returned (and so
    cached): a stop by the request (its budget, deadline, caller) raises."""
    program = compile_selector(text)
    request = budget.current()
    with EVALUATION_GATE.turn(request, BUDGET_KIND):
        return _evaluated_now(program, profile, request)


def _evaluated_now(
    program: celpy.Runner, profile: DeviceProfile, request: budget.WorkBudget
) -> Evaluation:
    meter = _Meter(MAX_COST, request, MAX_DEPLOYMENT_COST - request.spent.get(BUDGET_KIND, 0))
    token = _CURRENT_METER.set(meter)
    try:
        result = program.evaluate(device_activation(profile))
    except CELEvalError as err:
        return _with_steps(_evaluation_error(err), meter)
    except CostExceeded as err:
        return Evaluation(
            False, f"over the runtime cost budget: {err}", steps=meter.steps, over_budget=True
        )
    except (TypeError, ValueError, ArithmeticError) as err:
        return Evaluation(False, f"evaluation error: {err}", steps=meter.steps)
    except RecursionError:
        # MAX_TREE_DEPTH keeps compiled selectors under the limit; this is the backstop
        # for a caller already deep in its own stack.
        return Evaluation(
            False,
            "over the runtime cost budget: nests too deeply to evaluate",
            steps=meter.steps,
            over_budget=True,
        )
    finally:
        _CURRENT_METER.reset(token)
    if isinstance(result, CELEvalError):
        return _with_steps(_evaluation_error(result), meter)
    if not isinstance(result, celtypes.BoolType):
        return Evaluation(
            False, f"must evaluate to bool, got {type(result).__name__}", steps=meter.steps
        )
    return Evaluation(bool(result), steps=meter.steps)


# Callers and benchmarks that clear the memo of `evaluate` clear the one it reads.
evaluate.cache_clear = _evaluated.cache_clear  # type: ignore[attr-defined]


def _with_steps(evaluation: Evaluation, meter: _Meter) -> Evaluation:
    return Evaluation(
        evaluation.matched, evaluation.error, evaluation.missing_name, steps=meter.steps
    )


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
