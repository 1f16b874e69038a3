"""The packages' import graph has no circles.

Read from the source (every ``import`` statement, those inside functions included, since a lazy
import that closes a circle only hides it): an edge goes from a module to each package module it
imports (``from . import x`` reaches ``x``; a package's ``__init__`` is not counted for its own
submodules, which Python imports first anyway).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2] / "packages"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGES.glob("*/src/flashinfer/**/*.py")):
        parts = (
            path.relative_to(path.parents[len(path.relative_to(PACKAGES).parts) - 3]).with_suffix("").parts
        )
        modules[".".join(part for part in parts if part != "__init__")] = path
    return modules


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()
            if submodules:
                targets |= submodules
            elif source in modules and not name.startswith(source + "."):
                targets.add(source)
    return targets - {name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_the_packages_import_no_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 50 and graph["flashinfer.gemm._compile"] >= {"flashinfer._core.custom_ops"}
    assert _circles(graph) == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
