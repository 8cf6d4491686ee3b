"""Size limits on the product's code: no module in engine/, projections/, replay/ or scripts/
over 400 lines, no function over 60 (complexity and branch limits are ruff's, in
pyproject.toml). A failure names every offender, with its size."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "projections", "replay", "scripts")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules(root: Path = ROOT) -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((root / package).rglob("*.py"))


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function's qualified name (``Class.method``, ``outer.inner``) and its length in
    lines, from ``def`` to its last line."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                yield name, (node.end_lineno or node.lineno) - node.lineno + 1
            yield from functions(node, name + ".")


def oversized(root: Path = ROOT) -> dict[str, int]:
    """Every module and function over its limit under ``root``, by ``path`` or
    ``path::function``, with its length in lines."""
    found: dict[str, int] = {}
    for path in modules(root):
        rel = path.relative_to(root).as_posix()
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found[rel] = lines
        for name, length in functions(ast.parse(source, rel)):
            if length > MAX_FUNCTION_LINES:
                found[f"{rel}::{name}"] = length
    return found


def test_no_module_over_400_lines_nor_function_over_60() -> None:
    over = oversized()
    assert not over, "over the limits (module 400 lines, function 60): " + ", ".join(
        f"{k} ({v} lines)" for k, v in sorted(over.items())
    )


def test_the_walk_reads_every_package_and_measures_from_def_to_last_line(
    tmp_path: Path,
) -> None:
    """A 61-line method and a 401-line module in a scratch tree are both named; a 60-line
    function is not."""
    assert {p.relative_to(ROOT).parts[0] for p in modules()} == set(PACKAGES)
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (tmp_path / "engine" / "ok.py").write_text(f"def fits():\n{body}\n")
    long = "\n".join(f"        x{i} = {i}" for i in range(60))
    (tmp_path / "replay" / "big.py").write_text(
        f"class C:\n    def grows(self):\n{long}\n" + "\n" * (401 - 62)
    )
    assert oversized(tmp_path) == {"replay/big.py": 401, "replay/big.py::C.grows": 61}
