"""`functions/common` is the only shared room (ARCHITECTURE.md, Layout).

A function imports nothing from another function or from the runtime, and the runtime
imports no function. Read from the import graph itself (every `import` and
`from ... import` under functions/, at any depth, including ones inside a function
body), so the rule stays true as code moves; a failure names the file, the line and the
import that broke it.
"""

import ast
from pathlib import Path

import pytest

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
SHARED = "common"
# The image's entrypoint dispatches to every component by design (by name, at run time).
DISPATCHER = FUNCTIONS / "entrypoint.py"


def _components() -> list[str]:
    return sorted(p.parent.name for p in FUNCTIONS.glob("*/__init__.py"))


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from functions import compose_x` names the component in the alias.
            if node.module == "functions":
                found.extend((node.lineno, f"functions.{a.name}") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def _component_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "functions" and len(parts) > 1 else None


def _violations(component: str) -> list[str]:
    broken: list[str] = []
    for path in sorted((FUNCTIONS / component).rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue  # generated stubs, never committed
        where = path.relative_to(FUNCTIONS.parent)
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            if module.startswith("."):
                broken.append(f"{where}:{line}: relative import {module!r}; import by full name")
                continue
            target = _component_of(module)
            if target is None or target in (component, SHARED):
                continue
            if target not in _components():
                continue  # a module at the top of functions/ (the entrypoint)
            rule = (
                "common imports no component"
                if component == SHARED
                else f"{component} may import only itself and {SHARED}"
            )
            broken.append(f"{where}:{line}: imports {module} ({rule})")
    return broken


@pytest.mark.parametrize("component", _components())
def test_component_imports_only_itself_and_common(component: str) -> None:
    assert _violations(component) == []


def test_the_rule_sees_every_component() -> None:
    # A guard against the test above passing vacuously after a move.
    assert {"common", "runtime", "compose_telemetry", "compose_serving_stack"} <= set(_components())
    assert DISPATCHER.exists()


# --- The runtime's wings (functions/runtime/__init__.py) --------------------------------

RUNTIME = FUNCTIONS / "runtime"
# Which wing may import which (besides itself, functions.common and the standard
# library). `cli.py`, the process entry, may import every wing. The operator's CLI reads
# the control plane only: no hub, agent or election internals.
WING_MAY_IMPORT: dict[str, frozenset[str]] = {
    "shared": frozenset(),
    "kube": frozenset({"shared"}),
    "election": frozenset({"shared", "kube"}),
    "hub": frozenset({"shared", "kube"}),
    "scaler": frozenset({"shared", "kube"}),
    "activator": frozenset({"shared", "kube"}),
    "operator": frozenset({"shared", "kube"}),
    "agent": frozenset({"shared", "kube", "hub"}),
}
ENTRY = "cli.py"


def _wings() -> list[str]:
    return sorted(p.parent.name for p in RUNTIME.glob("*/__init__.py") if p.parent.name != "proto")


def _wing_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["functions", "runtime"] or len(parts) < 3:
        return None
    return parts[2]


def _wing_violations(wing: str, root: Path = RUNTIME) -> list[str]:
    allowed = WING_MAY_IMPORT[wing] | {wing}
    broken: list[str] = []
    for path in sorted((root / wing).rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        where = path.relative_to(root.parent.parent)
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            target = _wing_of(module)
            if module == "functions.runtime":
                broken.append(f"{where}:{line}: imports {module} (name a wing)")
            elif target is not None and target not in allowed:
                may = ", ".join(sorted(WING_MAY_IMPORT[wing])) or "no other wing"
                broken.append(f"{where}:{line}: imports {module} ({wing} may import {may})")
    return broken


@pytest.mark.parametrize("wing", sorted(WING_MAY_IMPORT))
def test_each_wing_imports_only_the_wings_it_may(wing: str) -> None:
    assert _wing_violations(wing) == []


def test_every_runtime_module_lives_in_a_wing_with_a_rule() -> None:
    loose = sorted(p.name for p in RUNTIME.glob("*.py") if p.name not in {"__init__.py", ENTRY})
    assert loose == [], "a runtime module outside every wing; move it into one"
    assert set(_wings()) == set(WING_MAY_IMPORT), "a wing without an import rule"
    for wing in _wings():
        doc = ast.get_docstring(ast.parse((RUNTIME / wing / "__init__.py").read_text()))
        assert doc, f"functions/runtime/{wing}/__init__.py must say what the wing decides"


def test_the_wing_rule_fails_on_a_planted_bad_import(tmp_path: Path) -> None:
    # The operator's CLI reaching into the hub is the import the rule exists to stop.
    planted = tmp_path / "functions" / "runtime"
    (planted / "operator").mkdir(parents=True)
    (planted / "operator" / "__init__.py").write_text('"""planted"""\n')
    (planted / "operator" / "cli.py").write_text(
        "from functions.runtime.hub.decision import Decision\n"
        "def f():\n    from functions.runtime.agent import loop\n"
    )
    broken = _wing_violations("operator", planted)
    assert len(broken) == 2
    assert "imports functions.runtime.hub.decision (operator may import kube, shared)" in broken[0]
    assert "functions.runtime.agent" in broken[1]
