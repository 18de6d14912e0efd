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
