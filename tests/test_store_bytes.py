"""Persistence free of domain types: the store keeps snapshots as bytes and imports no
state type, an empty store opened without creating it refuses writes, and reading never
touches the process's garbage collector."""

from __future__ import annotations

import ast
import gc
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import all_backends

from engine import Engine
from engine.errors import UsageError
from engine.events import Checkpoint
from engine.log.snapshots import encode_snapshot, save_snapshot, snapshot_at_or_before
from engine.log.state import RunState
from engine.store import Append, Snapshot, open_store

ROOT = Path(__file__).resolve().parent.parent


def _empty_url(store_url: str, tmp_path: Path) -> str:
    """``store_url`` with nothing there yet: an empty SQLite file, a schema not made."""
    if store_url.startswith("sqlite"):
        path = tmp_path / "empty.db"
        path.touch()
        return f"sqlite:///{path}"
    return store_url


@all_backends
def test_an_empty_store_opened_without_creating_refuses_appends(
    store_url: str, tmp_path: Path
) -> None:
    """``create=False`` on an empty store reads as empty and refuses an append with one
    clear error, instead of keeping the events in memory and losing them."""
    store = open_store(_empty_url(store_url, tmp_path), create=False)
    try:
        assert store.runs() == [] and store.max_global_position() == 0
        event = Checkpoint(at=1.0, call=1, name="c")
        with pytest.raises(UsageError, match=r"refuses writes\); nothing was written"):
            store.append([Append(uuid.uuid4(), 1, event)])
        with pytest.raises(UsageError, match="refuses writes"):
            store.save_snapshot(uuid.uuid4(), Snapshot(1, "run_state:2", b"\x80"))
        assert store.max_global_position() == 0
    finally:
        store.close()


@all_backends
def test_an_engine_on_an_empty_store_it_may_not_create_refuses_to_run(
    store_url: str, tmp_path: Path
) -> None:
    """A run started on such a store fails at its first commit, saying why."""
    eng = Engine(_empty_url(store_url, tmp_path), create=False)
    try:

        @eng.agent(name="store-bytes:noop")
        def noop(run: Any) -> int:
            return 1

        with pytest.raises(UsageError, match="no store here yet"):
            eng.run(noop)
    finally:
        eng.close()


def test_reading_a_long_stream_leaves_the_garbage_collector_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Store.read`` of thousands of events never disables the process's collector (a
    reader thread must not change what every other thread runs under)."""
    store = open_store("memory://")
    stream = uuid.uuid4()
    store.append([Append(stream, i, Checkpoint(at=1.0, call=1, name="c")) for i in range(1, 2502)])
    toggled: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: toggled.append("disable"))
    assert len(store.read(stream)) == 2501
    assert toggled == []


def test_snapshots_reach_the_store_as_bytes_and_decode_above_it() -> None:
    """The store returns the bytes it was given; the state decodes in engine.log.snapshots."""
    store = open_store("memory://")
    stream = uuid.uuid4()
    state = RunState(run_id="r", position=3)

    save_snapshot(store, stream, state)
    [kept] = list(store.snapshots(stream, None))
    assert kept == encode_snapshot(state) and isinstance(kept.payload, bytes)
    assert snapshot_at_or_before(store, stream, None) == state


def test_the_store_package_imports_no_state_type() -> None:
    """engine/store/ knows no domain state: nothing in it imports engine.log.state or the
    snapshot codec above it."""
    found = []
    for path in sorted((ROOT / "engine" / "store").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[-1] in ("state", "snapshots"):
                    found.append(f"{path.name}: {name}")
    assert found == []
