"""AgentlogSaver's thread snapshots and prune: a fresh process reads the newest
checkpoint of a long thread from a snapshot and its tail (counted in events read, not
time), and gets what the whole fold gives; a deleted thread's rows are freed by prune."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import backends
from structlog.testing import capture_logs
from test_langgraph_saver import ITEM, _graph

from engine import Engine
from engine.integrations import _lg_snap
from engine.integrations.langgraph import AgentlogSaver, thread_run_id
from engine.log.history import read_events, rebuild, run_stream
from engine.store.codec import encode_event
from replay.cli.entry import run_cli

LONG = 300  # checkpoints of the long thread


def _counted(eng: Engine) -> list[int]:
    """Wrap ``eng``'s store so each read adds how many events it returned."""
    store, reads = eng.store, []
    plain = store.read

    def read(*args: Any, **kwargs: Any) -> Any:
        found = plain(*args, **kwargs)
        reads.append(len(found))
        return found

    store.read = read  # type: ignore[method-assign]
    return reads


def _same(a: Any, b: Any) -> None:
    assert a is not None and b is not None
    assert a.checkpoint == b.checkpoint
    assert a.metadata == b.metadata and a.config == b.config
    assert a.parent_config == b.parent_config
    assert sorted(map(repr, a.pending_writes)) == sorted(map(repr, b.pending_writes))


@pytest.fixture
def other(store_url: str) -> Iterator[Any]:
    """Opens fresh engines on this test's store (another process's view), closes them."""
    opened: list[Engine] = []

    def make() -> Engine:
        opened.append(Engine.open(store_url))
        return opened[-1]

    yield make
    for e in opened:
        e.close()


@backends("sqlite", "postgres")
def test_a_fresh_reader_of_a_long_thread_reads_a_snapshot_and_its_tail(
    eng: Engine, other: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 checkpoints: a fresh engine's get_tuple reads at most EVERY events (the tail
    after the newest snapshot), and its tuple equals the full fold's; an older
    checkpoint, which the snapshot lacks, is read from the whole stream."""
    monkeypatch.setattr("test_langgraph_saver.STEPS", LONG)
    config: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": 1000}
    _graph(AgentlogSaver(eng)).invoke({"history": [], "title": "t", "n": 0}, config)
    total = len(read_events(eng.store, thread_run_id("long")))
    assert total > 3 * _lg_snap.EVERY

    fresh = other()
    reads = _counted(fresh)
    tup = AgentlogSaver(fresh).get_tuple(config)
    assert 0 < sum(reads) <= _lg_snap.EVERY, (sum(reads), total)

    full = AgentlogSaver(other())
    whole = next(iter(full.list(config, limit=1)))  # list folds the whole stream
    _same(tup, whole)
    assert tup is not None
    assert tup.checkpoint["channel_values"]["history"] == [f"{i}:{ITEM}" for i in range(LONG)]

    older = list(full.list(config))[LONG // 2]
    again = AgentlogSaver(other()).get_tuple(older.config)
    _same(again, older)


@backends("sqlite", "postgres")
def test_prune_frees_a_deleted_threads_rows(eng: Engine) -> None:
    """A deleted thread's run is final: prune deletes its rows (storage falls, the run
    is gone); a live thread stays; the saver starts the thread afresh afterwards."""
    saver = AgentlogSaver(eng)
    graph = _graph(saver)
    gone: Any = {"configurable": {"thread_id": "gone"}}
    kept: Any = {"configurable": {"thread_id": "kept"}}
    for config in (gone, kept):
        graph.invoke({"history": [], "title": "t", "n": 50}, config)
    before = eng.storage()["total_bytes"]
    assert eng.prune(older_than=0)["runs"] == 0  # a live thread is not final

    saver.delete_thread("gone")
    assert eng.prune(older_than=0, dry_run=True)["run_ids"] == [thread_run_id("gone")]
    report = eng.prune(older_than=0)
    assert report["run_ids"] == [thread_run_id("gone")] and report["bytes_freed"] > 0
    after = eng.storage()["total_bytes"]
    assert after <= before - report["bytes_freed"] // 2 and after < before
    assert {r.run_id for r in eng.store.runs()} == {thread_run_id("kept")}
    assert saver.get_tuple(kept) is not None

    out = graph.invoke({"history": [], "title": "t", "n": 58}, gone)
    assert out["n"] == 60 and saver.get_tuple(gone) is not None
    assert read_events(eng.store, thread_run_id("gone"))[0].position == 1


def test_snapshots_stay_a_fraction_of_the_threads_bytes(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with a snapshot allowed every 20 events, the snapshots of a growing history
    hold at most 1/RATIO of the bytes its events do (storage stays linear)."""
    monkeypatch.setattr("test_langgraph_saver.STEPS", LONG)
    monkeypatch.setattr(_lg_snap, "EVERY", 20)
    config: Any = {"configurable": {"thread_id": "bytes"}, "recursion_limit": 1000}
    _graph(AgentlogSaver(eng)).invoke({"history": [], "title": "t", "n": 0}, config)
    rid = thread_run_id("bytes")
    events = sum(len(encode_event(r.event)[1]) for r in read_events(eng.store, rid))
    snaps = [len(s.payload) for s in eng.store.snapshots(run_stream(rid), None)]
    assert len(snaps) >= 2
    assert sum(snaps) <= events / _lg_snap.RATIO, (sum(snaps), events)
    with capture_logs() as logs:  # the run's own state reader skips them without a word
        assert rebuild(eng.store, rid).position == len(read_events(eng.store, rid))
    assert [e for e in logs if e["event"] == "snapshot_skipped"] == []


def test_agentlog_prune_frees_a_deleted_thread(
    store_url: str, eng: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's prune takes the deleted thread (and `storage` shows it gone)."""
    saver = AgentlogSaver(eng)
    config: Any = {"configurable": {"thread_id": "cli"}}
    _graph(saver).invoke({"history": [], "title": "t", "n": 55}, config)
    saver.delete_thread("cli")
    capsys.readouterr()
    assert run_cli(["prune", "--older-than", "0s", "--url", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_ids"] == [thread_run_id("cli")]
    assert run_cli(["storage", "--url", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []
