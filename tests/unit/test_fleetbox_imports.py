"""The fleet box (hack/fleetbox/) imports one way: no circle between its modules.

A circle is what made box, gpu and runtime unreadable alone (each needed the others'
helpers, reached through imports hidden inside functions). Read from the import graph
itself, like test_import_rule.py reads functions/: every `import` and `from ... import`
at any depth, inside function bodies and `if TYPE_CHECKING:` blocks too (a circle a
type checker needs is still one a reader has to hold in mind), absolute or relative. A
failure names each module of the circle and the file, line and import of every edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hack" / "fleetbox"


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by its dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _within(name: str, modules: dict[str, Path]) -> str | None:
    """The package module `name` loads: itself, or the module that defines it."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _edges(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int, str]]:
    """(imported module, line, import as written) for each import of another module of
    the package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = path.read_text()
    edges: dict[tuple[str, int], str] = {}
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from fleetbox import gpu` loads the module fleetbox.gpu; `from
            # fleetbox.gpu import equip` loads fleetbox.gpu.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        written = (ast.get_source_segment(source, node) or "").splitlines()[0]
        for name in names:
            target = _within(name, modules)
            if target is not None and target != module:
                edges[(target, node.lineno)] = written
    return [(target, line, written) for (target, line), written in edges.items()]


def _circles(root: Path) -> list[str]:
    """Each set of modules that import each other round (a strongly connected component
    of the import graph), with the imports that close it."""
    modules = _modules(root)
    graph = {m: _edges(m, path, modules) for m, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for target, _, _ in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    reports = []
    for circle in circles:
        lines = [f"{' <-> '.join(circle)} import each other:"]
        for module in circle:
            where = modules[module].relative_to(root.parent)
            lines += [
                f"  {where}:{line}: {written}"
                for target, line, written in graph[module]
                if target in circle
            ]
        reports.append("\n".join(lines))
    return reports


def test_the_fleet_box_imports_one_way() -> None:
    assert _circles(PACKAGE) == []


def test_the_rule_sees_every_module_and_its_imports() -> None:
    # Guards against the test above passing vacuously after a move or a parsing slip.
    modules = _modules(PACKAGE)
    assert {
        "fleetbox",
        "fleetbox.box",
        "fleetbox.gpu",
        "fleetbox.runtime",
        "fleetbox.process",
        "fleetbox.cli",
    } <= set(modules)

    def imported(module: str) -> set[str]:
        return {target for target, _, _ in _edges(module, modules[module], modules)}

    assert {"fleetbox.gpu", "fleetbox.control_plane", "fleetbox.clusters"} <= imported(
        "fleetbox.box"
    )
    assert {"fleetbox", "fleetbox.box", "fleetbox.process"} <= imported("fleetbox.runtime")


def test_the_box_is_one_package_with_a_docstring_in_every_module() -> None:
    hack = PACKAGE.parent
    assert sorted(p.name for p in hack.glob("fleet*.py")) == [], "the box lives in hack/fleetbox/"
    for module, path in _modules(PACKAGE).items():
        assert ast.get_docstring(ast.parse(path.read_text())), f"{module} must say what it runs"


def test_the_rule_fails_on_a_planted_circle(tmp_path: Path) -> None:
    # The shape the box had: box imports gpu; gpu reaches back into box inside a
    # function and for a type; runtime and box import each other.
    planted = tmp_path / "fleetbox"
    planted.mkdir()
    (planted / "__init__.py").write_text('"""planted"""\n')
    (planted / "box.py").write_text(
        "from fleetbox import gpu\n"
        "def start():\n    from fleetbox.runtime import aggregation_args\n"
    )
    (planted / "gpu.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .box import FleetBox\n"
        "def equip():\n    from fleetbox.box import Process\n"
    )
    (planted / "runtime.py").write_text("import fleetbox.box\n")
    (planted / "process.py").write_text("from . import gpu\n")  # one way: no circle
    (circle,) = _circles(planted)
    assert circle.startswith("fleetbox.box <-> fleetbox.gpu <-> fleetbox.runtime import")
    assert "fleetbox/gpu.py:3: from .box import FleetBox" in circle
    assert "fleetbox/gpu.py:5: from fleetbox.box import Process" in circle
    assert "fleetbox/box.py:3: from fleetbox.runtime import aggregation_args" in circle
    assert "fleetbox/runtime.py:1: import fleetbox.box" in circle
    assert "process" not in circle
