"""The import graph of ``engine/``, ``projections/`` and ``replay/``, read from the source with
``ast``: every import counts, including those under ``if TYPE_CHECKING:`` and inside
functions. The packages stand in an order (LAYERS, top to bottom): an import may only go
down the list or stay within its layer, and no module imports itself through others."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPWARD = ("projections", "replay")  # packages above engine/ (the CLI is replay.cli)
TOPS = ("engine", "projections", "replay")

# Top to bottom. ``pkg/`` is a package and everything in it (a longer entry wins); a bare
# name is that one module. docs/architecture.md draws this list.
LAYERS = [
    "replay.cli/ replay.__main__",  # the agentlog command line
    "replay.ui/",  # the web UI (agentlog ui, replay.ui.app)
    "replay/",  # the operator library: timeline, context, diff, export/import
    "projections/",
    "engine",  # the face: from engine import X
    "engine.integrations/",
    "engine.runtime engine.runtime.engine",  # the runtime's face: Engine
    "engine.runtime.workers/",  # enqueue, wait, send from outside, the worker
    "engine.runtime.retention/",  # prune, key expiry, storage
    "engine.runtime.schedules/",
    "engine.runtime.lifecycle/",
    "engine.runtime.waits/",
    "engine.runtime.children/",
    "engine.runtime.declare/",
    "engine.runtime.model/",
    "engine.runtime.undo/",
    "engine.runtime.call/",
    "engine.runtime.run/",
    "engine.runtime.journal/",
    "engine.runtime.defs/",
    "engine.runtime.host/",
    "engine.stats",
    "engine.log/",
    "engine.showing",  # what users may see of an event: results and every reader
    "engine.store/",
    "engine.policy/",
    "engine.events/",
    "engine.observe",
    "engine.secrets",
    "engine.codec",
    "engine.failpoints",
    "engine.tokens",  # counting a text's tokens (tiktoken, else an estimate)
    "engine.polling",
    "engine.errors",
    "engine.kinds",
    "engine._lazy",
]
# Imports up the list that are known and on their way out (none today).
KNOWN_UPWARD: set[str] = set()


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


def layer_of(module: str, layers: list[str] = LAYERS) -> int | None:
    """The index in ``layers`` of the entry ``module`` belongs to (the longest that names it)."""
    best: tuple[int, int] | None = None
    for i, entry in enumerate(layers):
        for name in entry.split():
            package = name.endswith("/")
            name = name.rstrip("/")
            names_it = module == name or (package and module.startswith(name + "."))
            if names_it and (best is None or len(name) > best[0]):
                best = (len(name), i)
    return None if best is None else best[1]


def all_edges(root: Path = ROOT, tops: tuple[str, ...] = TOPS) -> dict[str, set[str]]:
    """Each module of ``tops`` and the modules of ``tops`` it imports (across packages)."""
    found = {n: p for top in tops if (root / top).is_dir() for n, p in modules(top, root).items()}
    known = set(found)
    return {
        name: {m for m in imported(name, path, known) if m in known and m != name}
        for name, path in found.items()
    }


def against_the_order(
    edges: dict[str, set[str]], layers: list[str] = LAYERS
) -> tuple[list[str], list[str]]:
    """The modules in no layer, and each import of a module in a layer above its own."""
    unplaced = sorted(m for m in edges if layer_of(m, layers) is None)
    upward_found = []
    for name, targets in sorted(edges.items()):
        here = layer_of(name, layers)
        for m in sorted(targets):
            there = layer_of(m, layers)
            if here is not None and there is not None and there < here:
                above = layers[there].split()[0].rstrip("/")
                upward_found.append(f"{name} imports {m} (the layer of {above} is above)")
    return unplaced, upward_found


def test_every_module_stands_in_a_layer() -> None:
    """A new module or package gets its place in LAYERS (where its imports allow it)."""
    unplaced, _ = against_the_order(all_edges())
    assert unplaced == [], "in no layer of LAYERS (add each where it belongs): " + ", ".join(
        unplaced
    )


def test_imports_only_go_down_the_layers() -> None:
    """No module imports a module of a layer above its own (within a layer anything goes)."""
    _, found = against_the_order(all_edges())
    found = [f for f in found if f.split(" (")[0] not in KNOWN_UPWARD]
    assert found == [], "imports up the layers:\n" + "\n".join(found)


def test_no_import_cycle_among_projections_or_replay_modules() -> None:
    """No module of projections/ or replay/ imports, however indirectly, one that imports it."""
    assert cycles(graph("projections")) == []
    assert cycles(graph("replay")) == []


def test_the_order_checker_sees_an_import_toward_a_later_package(tmp_path: Path) -> None:
    """An import from a lower layer of one above it is named, function-level or not; one
    downward and one inside a layer are not; a module no layer names is named."""
    pkg = tmp_path / "engine"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from ..low import b\nfrom . import c\n")
    (pkg / "high" / "c.py").write_text("")
    (pkg / "low" / "b.py").write_text("def f():\n    from ..high import a\n")
    (pkg / "stray.py").write_text("")
    layers = ["engine", "engine.high/", "engine.low/"]
    unplaced, found = against_the_order(all_edges(tmp_path, ("engine",)), layers)
    assert unplaced == ["engine.stray"]
    assert found == ["engine.low.b imports engine.high.a (the layer of engine.high is above)"]
