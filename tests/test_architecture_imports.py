"""The import graph of ``engine/``, read from the source with ``ast``: every import counts,
including those under ``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPWARD = ("projections", "replay")  # packages above engine/ (the CLI is replay.cli)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``package`` by dotted name."""
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The modules ``name`` imports: ``from pkg import sub`` names the module ``pkg.sub``
    when there is one, else ``pkg``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, path, node)
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield sub if sub in known else base


def graph(package: str = "engine", root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports."""
    found = modules(package, root)
    known = set(found)
    return {
        name: {m for m in imported(name, path, known) if m in known and m != name}
        for name, path in found.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_engine_modules() -> None:
    """No module of engine/ imports, however indirectly, a module that imports it."""
    assert cycles(graph()) == []


def upward(package: str = "engine", root: Path = ROOT) -> list[str]:
    """Each import in ``package`` of a package above it."""
    return [
        f"{name} imports {m}"
        for name, path in modules(package, root).items()
        for m in imported(name, path, set())
        if m.split(".")[0] in UPWARD
    ]


def test_engine_never_imports_projections_replay_or_the_cli() -> None:
    """engine/ is the bottom layer: no import of projections/, replay/ (the CLI) at all."""
    assert upward() == []


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    """A function-level import of the CLI from engine/ is an upward import."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "a.py").write_text("def f():\n    from replay import cli\n")
    assert upward("engine", tmp_path) == ["engine.a imports replay"]


def test_the_checker_sees_cycles_hidden_under_type_checking_and_in_functions(
    tmp_path: Path,
) -> None:
    """A cycle through a TYPE_CHECKING import or a function-level import is found."""
    pkg = tmp_path / "engine"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\nx = 1\n"
    )
    assert cycles(graph("engine", tmp_path)) == [["engine.a", "engine.c", "engine.sub.b"]]
    (pkg / "c.py").write_text("x = 1\n")
    assert cycles(graph("engine", tmp_path)) == []
