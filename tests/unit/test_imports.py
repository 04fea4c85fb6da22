"""The layering, read from the source: the library never imports the daemon, and no module
imports itself back through others — function-level imports included, so a loop cannot hide
inside a function body. Imports under ``if TYPE_CHECKING:`` are type annotations only (never
executed) and are not edges."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streammom", "service")
#: What the library must never import: the daemon's transports, web and metrics stacks.
SERVICE_ONLY = ("service", "kafka", "prometheus_client", "typer", "pydantic", "pydantic_settings")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(node: ast.AST):
    """Every node under ``node`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for other in child.orelse:
                yield from _runtime_nodes(other)
            continue
        yield from _runtime_nodes(child)


def _imports(path: Path, name: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (absolute names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        # "from pkg import mod" names a module; "from mod import func" names the module
        graph[name] = {m for m in _imports(path, name) if m in files and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _package_init_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exports its modules; importing ``pkg.mod`` runs ``pkg``
    first, which is not a loop of ours. Drop edges from a module to its own package."""
    return {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in graph.items()}


def test_no_import_cycles() -> None:
    graph = _package_init_edges(_graph())
    assert len(graph) > 40  # the walk found the packages
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_hidden_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_function_level_imports_are_seen(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import typer\n"
                   "def f():\n    from service.worker import Worker\n    import kafka\n")
    found = _imports(src, "m")
    assert {"service.worker", "kafka"} <= found and "typer" not in found


@pytest.mark.parametrize("path", sorted((ROOT / "streammom").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_library_never_imports_the_daemon(path: Path) -> None:
    bad = {m for m in _imports(path, _module_name(path))
           if m.split(".")[0] in SERVICE_ONLY}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
