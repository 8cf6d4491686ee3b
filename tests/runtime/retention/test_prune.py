"""``engine.prune``: whole trees of old finished runs go, each run in one transaction
(events, inbox, snapshots, blobs nobody else points at, index row, view tracking); what
is still running, paused or waiting, and every run of its tree, stays; what stays reads,
resumes, rewinds and verifies as before, and the views equal a rebuild."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import backends, write_raw_row
from eventsourcing.cipher import AESCipher

from engine import Engine, EngineConfig
from engine import events as ev
from engine.errors import CorruptData, UsageError
from engine.log.history import run_stream
from engine.runtime.call import ledger
from engine.store import Append, Store
from engine.store.cipher import CIPHER_ENV
from engine.store.prune import Pruner, RunRows
from projections import Runner
from projections.views import all_views
from replay.transfer import import_run

DAY = 86400.0


class Clock:
    """The engine's wall clock: real time, or stopped where the test put it (events keep
    their real times)."""

    def __init__(self) -> None:
        self.stopped: float | None = None

    def __call__(self) -> float:
        return time.time() if self.stopped is None else self.stopped

    def at(self, when: float | None) -> None:
        self.stopped = when


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def eng(store_url: str, clock: Clock) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(wall=clock, inline_wait=0))
    yield e
    e.close()


class Shop:
    """Agents of a shop: a charge under a business key, a question, a failure, a child."""

    def __init__(self, eng: Engine) -> None:
        self.sent: list[str] = []
        self.fail = False
        self.asking = False

        @eng.tool(side_effect=True, key=lambda order, big=False: f"order:{order}")
        def charge(order: str, big: bool = False) -> dict[str, Any]:
            self.sent.append(order)
            return {"order": order, "receipt": os.urandom(200_000 if big else 5).hex()}

        @eng.agent(name="tests:buy")
        def buy(run: Any, order: str, big: bool = False) -> dict[str, Any]:
            run.checkpoint("start")
            return charge(order, big)

        @eng.agent(name="tests:ask")
        def ask(run: Any) -> str:
            run.checkpoint("start")
            return str(run.ask("ok?"))

        @eng.agent(name="tests:parent")
        def parent(run: Any, order: str, wait: bool = False) -> Any:
            done = run.call(buy, order=order) if order else None
            return run.call(ask) if wait else done

        @eng.agent(name="tests:flaky")
        def flaky(run: Any) -> str:
            run.checkpoint("start")
            if self.fail:
                raise ValueError("not today")
            return str(run.ask("more?")) if self.asking else "ok"

        self.buy, self.ask, self.parent, self.flaky = buy, ask, parent, flaky


def _gone(store: Store, run_id: str) -> bool:
    return store.last_position(run_stream(run_id)) == 0 and store.indexed_position(run_id) is None


def _stats_equal_a_rebuild(eng: Engine) -> Any:
    before = eng.stats()
    Runner(eng.store, all_views()).rebuild()
    assert eng.stats() == before
    return before


@backends("memory", "sqlite", "postgres")
def test_prune_takes_the_old_half_and_every_other_run_reads_resumes_rewinds_and_verifies(
    eng: Engine, clock: Clock, tmp_path: Path
) -> None:
    """Old finished runs (with a blob, children) go; newer ones, a paused and a failed
    one stay and go on as before; stats equal a rebuild; storage falls."""
    shop = Shop(eng)
    old = [eng.run(shop.buy, order=f"old{i}").run_id for i in range(100)]
    old.append(eng.run(shop.buy, order="big", big=True).run_id)  # a result kept as a blob
    old_parent = eng.run(shop.parent, order="kid")
    cut = time.time()
    new = [eng.run(shop.buy, order=f"new{i}").run_id for i in range(100)]
    shop.fail = True
    failed = eng.run(shop.flaky).run_id
    shop.fail = False
    paused = eng.run(shop.ask).run_id
    eng.stats()  # the views hold every run now
    before = eng.storage()
    clock.at(cut + 30 * DAY)
    report = eng.prune(older_than="30d", archive=tmp_path / "archive")
    pruned = set(report["run_ids"])
    assert set(old) | {old_parent.run_id} <= pruned and len(pruned) == len(old) + 2
    assert report["runs"] == len(pruned) and report["skipped"] == 0
    assert all(_gone(eng.store, r) for r in pruned)
    assert not pruned & {*new, failed, paused}
    after = eng.storage()
    assert after["total_bytes"] < before["total_bytes"] - report["bytes_freed"] // 2
    assert report["bytes_freed"] > 300_000  # the blobs went with their run
    for rid in new:
        assert eng.verify(rid).status == "completed"
        assert eng.state(rid).status == "completed"
    fork = eng.rewind(new[0], to="start")
    assert fork.status == "completed" and shop.sent.count("new0") == 1  # reused, not re-sent
    assert eng.answer(paused, "yes").output == "yes"
    assert eng.resume(failed).status == "completed"
    stats = _stats_equal_a_rebuild(eng)
    assert stats.runs.total == len(new) + 3
    files = sorted(p.stem for p in (tmp_path / "archive").glob("*.jsonl"))
    assert files == sorted(pruned)


@backends("sqlite", "postgres")
def test_an_unfinished_run_keeps_its_whole_tree_and_a_live_lease_keeps_its_run(
    eng: Engine, clock: Clock
) -> None:
    """A parent waiting on a paused child keeps its completed child; a completed run
    with a paused fork stays: each chosen run is named with why; a run a live owner holds
    stays too."""
    shop = Shop(eng)
    waiting = eng.run(shop.parent, order="kid", wait=True)
    [done_child, paused_child] = [r.run_id for r in eng.store.children(waiting.run_id)]
    old = eng.run(shop.flaky).run_id
    shop.asking = True
    paused_fork = eng.rewind(old, to="start").run_id
    asked = eng.run(shop.ask)
    done = eng.run(shop.buy, order="o1").run_id
    forked = eng.rewind(asked.run_id, to="start")  # a fork of a paused run: paused too
    held = eng.run(shop.buy, order="o2").run_id
    later = time.time() + DAY  # the engine's own lease on it has expired by then
    assert eng.store.take_lease(held, "someone", until=later + 99 * DAY, now=later) == "someone"
    clock.at(time.time() + 31 * DAY)
    report = eng.prune(older_than="30d")
    assert report["run_ids"] == [done]
    skipped = {s["run_id"]: s["reason"] for s in report["skipped_runs"]}
    assert held in skipped and "changed" in skipped[held]
    assert "of its tree is paused" in skipped[done_child]
    assert "of its tree is paused" in skipped[old]
    assert waiting.run_id not in skipped  # not finished: not chosen, so not skipped either
    for rid in (waiting.run_id, done_child, paused_child, old, paused_fork):
        assert not _gone(eng.store, rid)
    for rid in (asked.run_id, forked.run_id, held):
        assert not _gone(eng.store, rid)
    assert eng.state(held).status == "completed"
    assert eng.answer(asked.run_id, "fine").status == "completed"


@backends("sqlite")
def test_a_business_key_inside_its_ttl_still_dedupes_after_its_run_is_pruned(
    store_url: str, clock: Clock
) -> None:
    """The key's stream outlives its run while inside the TTL (a later run with the key
    sends nothing); past the TTL it is recorded expired, goes with its run, and the key
    sends again."""
    eng = Engine.open(store_url, key_ttl="60d", config=EngineConfig(wall=clock))
    try:
        shop = Shop(eng)
        first = eng.run(shop.buy, order="k1").run_id
        clock.at(time.time() + 31 * DAY)
        assert eng.prune(older_than="30d")["run_ids"] == [first]
        assert ledger.read(eng.store, "order:k1").committed is not None
        clock.at(None)
        assert eng.run(shop.buy, order="k1").status == "completed" and shop.sent == ["k1"]
    finally:
        eng.close()
    eng = Engine.open(store_url, key_ttl="7d", config=EngineConfig(wall=clock))
    try:
        shop2 = Shop(eng)
        clock.at(time.time() + 31 * DAY)
        report = eng.prune(older_than="30d")
        assert report["runs"] == 1 and report["keys_expired"] == 1
        assert eng.store.read(ledger.stream_of("order:k1")) == []  # gone with its run
        clock.at(None)
        eng.run(shop2.buy, order="k1")
        assert shop2.sent == ["k1"]  # expired: a new effect
    finally:
        eng.close()


@backends("sqlite")
def test_archived_runs_import_back_whole(eng: Engine, clock: Clock, tmp_path: Path) -> None:
    """Each archive file is an export: importing it restores the run's events."""
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="a1").run_id
    events = [(e.type, e.position) for e in eng.events(rid)]
    clock.at(time.time() + 31 * DAY)
    eng.prune(archive=tmp_path)
    assert _gone(eng.store, rid)
    assert import_run(eng, (tmp_path / f"{rid}.jsonl").read_bytes()) == (rid, True)
    assert [(e.type, e.position) for e in eng.events(rid)][: len(events)] == events


@backends("sqlite")
def test_a_dry_run_writes_nothing_and_says_what_would_go(eng: Engine, clock: Clock) -> None:
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="d1").run_id
    clock.at(time.time() + 31 * DAY)
    head = eng.store.max_global_position()
    report = eng.prune(dry_run=True)
    assert report["run_ids"] == [rid] and report["bytes_freed"] > 0 and report["dry_run"]
    assert eng.store.max_global_position() == head and not _gone(eng.store, rid)
    assert eng.storage()["prune"]["runs"] == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"older_than": "soon"},
        {"older_than": -1},
        {"status": ("paused",)},
        {"status": ()},
        {"status": ("running", "completed")},
    ],
)
def test_bad_arguments_are_one_usage_error_before_anything_is_read(kwargs: Any) -> None:
    eng = Engine("memory://")
    with pytest.raises(UsageError):
        eng.prune(**kwargs)
    eng.close()


@backends("sqlite")
def test_an_encrypted_store_prunes_its_blobs_too(
    store_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed blob pointers are opened to find the blobs a run's rows point at."""
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    eng = Engine(store_url, config=EngineConfig(wall=clock))
    try:
        assert eng.store.encrypted
        shop = Shop(eng)
        rid = eng.run(shop.buy, order="sealed", big=True).run_id
        clock.at(time.time() + 31 * DAY)
        report = eng.prune()
        assert report["run_ids"] == [rid] and report["bytes_freed"] > 400_000
    finally:
        eng.close()


@backends("memory", "sqlite")
def test_a_blob_pointer_that_does_not_read_is_one_clear_error_and_nothing_goes(
    eng: Engine, store_url: str, clock: Clock
) -> None:
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="p1").run_id
    stream = uuid.uuid4()
    write_raw_row(store_url, eng.store, "events", stream, 1, "tool_succeeded:1@blob", b"\xc1")
    clock.at(time.time() + 31 * DAY)
    with pytest.raises(CorruptData, match="should name a blob"):
        eng.prune()
    assert not _gone(eng.store, rid)


@backends("sqlite")
def test_an_archive_that_cannot_be_written_stops_the_prune_before_the_run_goes(
    eng: Engine, clock: Clock, tmp_path: Path
) -> None:
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="w1").run_id
    (tmp_path / "file").write_text("not a directory")
    clock.at(time.time() + 31 * DAY)
    with pytest.raises(UsageError, match="archive directory"):
        eng.prune(archive=tmp_path / "file")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / f".{rid}.jsonl.part").mkdir()  # where the file would be written
    with pytest.raises(UsageError, match=f"archive of run {rid}"):
        eng.prune(archive=tmp_path / "ro")
    assert not _gone(eng.store, rid)


@backends("memory", "sqlite", "postgres")
def test_a_run_or_a_key_that_moved_since_the_plan_is_left_whole(eng: Engine) -> None:
    """The transaction checks the run's last position and each expired key's: a key
    claimed again since (or a run appended to) keeps everything, nothing is written."""
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="m1").run_id
    key = ledger.stream_of("order:m1")
    at = eng.store.last_position(key)
    stream, end = run_stream(rid), eng.store.last_position(run_stream(rid))
    pruner = Pruner(eng.store)
    plan = RunRows(rid, stream, end, ("completed",), (stream, key), (), ((key, at),))
    claim = ev.EffectClaimed(at=time.time(), key="order:m1", run_id="other", call=1)
    eng.store.append([Append(key, at + 1, claim)])
    assert not pruner.delete(plan, time.time())
    assert len(eng.store.read(key)) == at + 1 and not _gone(eng.store, rid)
    moved = RunRows(rid, stream, end - 1, ("completed",), (stream,))
    assert not pruner.delete(moved, time.time()) and not _gone(eng.store, rid)
    assert pruner.delete(RunRows(rid, stream, end, ("completed",), (stream,)), time.time())
    assert _gone(eng.store, rid) and len(eng.store.read(key)) == at + 1


@backends("memory", "sqlite", "postgres")
def test_a_fork_made_after_the_plan_keeps_its_parent(eng: Engine) -> None:
    """A rewind appends nothing to the run it forks: a fork made between a prune's plan
    and its parent's transaction still keeps the parent (the fork reads it as it goes on:
    the effects it reuses, what a dry run stands in with)."""
    shop = Shop(eng)
    rid = eng.run(shop.buy, order="f1").run_id
    stream, end = run_stream(rid), eng.store.last_position(run_stream(rid))
    plan = RunRows(rid, stream, end, ("completed",), (stream,))
    fork = eng.rewind(rid, to="start", effects="reuse")
    assert fork.parent_run_id == rid
    assert not Pruner(eng.store).delete(plan, time.time())
    assert not _gone(eng.store, rid)


@backends("memory", "sqlite", "postgres")
def test_a_tree_whose_run_was_forked_after_the_plan_stays_whole(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of a planned tree's parent, made after the plan (a prune of a large store
    runs for minutes), reads the parent's children too: the tree stays whole, none of
    its runs goes (a leaf first, then the parent refused, would leave half a tree)."""
    from engine.runtime.retention import pruning

    shop = Shop(eng)
    parent = eng.run(shop.parent, order="t1").run_id
    [child] = [r.run_id for r in eng.store.children(parent)]
    planned = pruning.select
    forks: list[str] = []

    def select_then_fork(*args: Any) -> Any:
        found = planned(*args)
        forks.append(eng.rewind(parent, to=1, effects="reuse").run_id)
        return found

    monkeypatch.setattr(pruning, "select", select_then_fork)
    report = eng.prune(older_than=0)
    assert forks and report["runs"] == 0
    assert {s["run_id"] for s in report["skipped_runs"]} == {parent, child}
    assert not _gone(eng.store, parent) and not _gone(eng.store, child)


@backends("sqlite", "postgres")
def test_an_expired_key_goes_with_the_last_of_its_claimers_in_one_prune(
    store_url: str, clock: Clock
) -> None:
    """Two runs of two trees claimed one key: the prune that takes both deletes the
    expired key's stream with the second, not only when a later prune meets the key
    again (no later prune meets it: no run left names it)."""
    eng = Engine.open(store_url, key_ttl="7d", config=EngineConfig(wall=clock))
    try:
        shop = Shop(eng)
        first = eng.run(shop.buy, order="two").run_id
        second = eng.run(shop.buy, order="two").run_id  # deduped: the key's result
        key, now = ledger.stream_of("order:two"), time.time()
        at = eng.store.last_position(key)
        claimed = ev.EffectClaimed(at=now, key="order:two", run_id=second, call=2)
        done = ev.EffectCommitted(at=now, key="order:two", run_id=second, call=2, result={})
        eng.store.append([Append(key, at + 1, claimed), Append(key, at + 2, done)])
        clock.at(now + 31 * DAY)
        report = eng.prune(older_than="30d")
        assert sorted(report["run_ids"]) == sorted([first, second])
        assert eng.store.read(key) == []
    finally:
        eng.close()
