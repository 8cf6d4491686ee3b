"""The projection runner on every store: each event applied exactly once (from any
position, in any batch size, with two runners racing), a rebuild equal to the incremental
build, an undecodable event stopping the views before it, a changed version rebuilding."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import all_backends, backends, write_raw_row
from projection_kit import (
    ALL,
    Count,
    Steps,
    append_steps,
    counted,
    expected,
    rows,
    tallies,
    test_views,
)

from engine import Engine
from engine.errors import ConcurrencyError, CorruptData
from engine.log.history import run_stream
from engine.store import Store, open_store
from projections import Projection, Runner
from projections.views import all_views


def _streams(n: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(n)]


@all_backends
def test_catch_up_from_any_position_applies_every_event_once(store: Store) -> None:
    """Caught up in stages, in batches that cut commits apart, beside a view that starts
    later, the count equals the log's."""
    streams = _streams(7)
    runner = Runner(store, [Count()], batch=13)
    assert runner.catch_up() == 0 and counted(store) == {}
    for per_stream in (1, 5, 20):
        append_steps(store, streams, per_stream)
        runner.catch_up()
        runner = Runner(store, test_views(), batch=13)  # a view added: it starts at 0
        assert counted(store) == expected(store)
        assert runner.position("t_count") == store.max_global_position()
    fresh = Runner(store, test_views(), batch=1000)  # another runner goes on from the place
    assert fresh.catch_up() == 0
    assert counted(store)[ALL][0] == 7 * 26


@backends("sqlite", "postgres")
def test_rebuild_equals_incremental(eng: Engine) -> None:
    """Every view (the product's and the test ones), built batch by batch while runs
    (a fork among them) and other streams grew the log, holds the same rows after a
    rebuild from scratch."""
    views: list[Projection[Any]] = [*all_views(), *test_views()]
    runner = Runner(eng.store, views, batch=7)
    agent = _shop(eng)
    streams = _streams(5)
    for per_stream in (3, 4, 11):
        append_steps(eng.store, streams, per_stream)
        parent = eng.run(agent)
        runner.catch_up()
        eng.rewind(parent.run_id, to="start")
        runner.catch_up()
    before = {v.name: rows(eng.store, v) for v in views}
    assert before["t_count"] and before["t_steps"]
    for v in views:
        runner.rebuild(v.name)
        assert rows(eng.store, v) == before[v.name], v.name


@backends("sqlite", "postgres")
def test_runners_racing_on_one_view_apply_each_event_once(store_url: str) -> None:
    """Four runners, each with its own connection, create one view and catch it up at
    once: they take turns creating it, and every event is counted once."""
    setup = open_store(store_url)
    append_steps(setup, _streams(6), 40)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def race() -> None:
        store = open_store(store_url)
        try:
            start.wait()
            Runner(store, [Count()], batch=5).catch_up()
        except BaseException as e:
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert counted(setup) == expected(setup)
    setup.close()


@all_backends
def test_a_batch_that_lost_the_race_writes_nothing_and_goes_on_from_the_winner(
    store: Store,
) -> None:
    """Of one batch's commit, a view another runner has moved past gets nothing written
    and carries on from where the winner is; the batch's other views commit."""
    append_steps(store, _streams(2), 5)
    slow, quick = Runner(store, test_views()), Runner(store, [Count()])
    slow.directory.learn(store.read_all())
    envelopes = slow._envelopes(store.read_all())
    assert slow.position("t_count") == slow.position("t_steps") == 0
    quick.catch_up()
    done = counted(store)
    head = store.max_global_position()
    assert slow._apply({"t_count": 0, "t_steps": 0}, envelopes) == {
        "t_count": head,
        "t_steps": head,
    }
    assert counted(store) == done == expected(store)
    assert sum(t.events for t in tallies(store, Steps()).values()) == 10


@all_backends
def test_a_runner_of_other_code_rebuilding_the_view_stops_this_one(store: Store) -> None:
    """When a runner of another version resets the view under a batch, this runner says
    so and stops rather than resetting it back (two versions would take turns forever)."""

    class Newer(Count):
        version = "2"

    append_steps(store, _streams(2), 5)
    old = Runner(store, [Count()])
    assert old.position("t_count") == 0
    envelopes = old._envelopes(store.read_all())
    Runner(store, [Newer()]).catch_up()
    with pytest.raises(ConcurrencyError, match=r"view t_count: another runner rebuilt it"):
        old._apply({"t_count": 0}, envelopes)
    assert store.views.tracking("t_count").version == "2/clear"  # type: ignore[union-attr]


@all_backends
def test_a_changed_version_rebuilds_the_view(store: Store) -> None:
    """A view whose version changed is built again from the start by the new code."""

    class Doubled(Count):
        version = "2"

        def keys(self, env: Any) -> tuple[str, ...]:
            return (ALL,)

    append_steps(store, _streams(3), 4)
    Runner(store, [Count()]).catch_up()
    assert len(tallies(store)) == 4
    runner = Runner(store, [Doubled()])
    [status] = runner.status()
    assert (status.version, status.current, status.lag) == ("1/clear", False, 0)
    runner.catch_up()
    assert list(tallies(store)) == [ALL]
    assert tallies(store)[ALL].events == 12
    [status] = runner.status()
    assert (status.version, status.current) == ("2/clear", True)


@all_backends
def test_an_event_that_does_not_decode_stops_every_view_before_it(
    store: Store, store_url: str
) -> None:
    """One error names the views and the event's global position; nothing of its batch is
    applied, and the views stay where they were."""
    streams = _streams(2)
    append_steps(store, streams, 3)
    runner = Runner(store, test_views(), batch=4)
    runner.catch_up()
    before = {v.name: rows(store, v) for v in test_views()}
    at = store.max_global_position()
    append_steps(store, streams, 2)
    write_raw_row(store_url, store, "events", streams[0], 5, "step_started", b"\xc1garbage")
    bad = next(r.global_position for r in _raw(store_url, store) if r == (streams[0], 5))
    with pytest.raises(CorruptData) as caught:
        runner.catch_up()
    message = str(caught.value)
    assert "view t_count, t_steps stops" in message
    assert f"the event at global position {bad}" in message
    assert {v.name: rows(store, v) for v in test_views()} == before
    assert runner.position("t_count") == runner.position("t_steps") == at


class _At(msgspec.Struct, frozen=True):
    stream: uuid.UUID
    position: int
    global_position: int | None

    def __eq__(self, other: object) -> bool:
        return other == (self.stream, self.position)

    __hash__ = None  # type: ignore[assignment]


def _raw(store_url: str, store: Store) -> list[_At]:
    """Where each row of the log is, without decoding it."""
    found = store._events.select_notifications(1, 10**6)  # type: ignore[attr-defined]
    return [_At(uuid.UUID(str(n.originator_id)), n.originator_version, n.id) for n in found]


@all_backends
def test_status_of_a_store_never_projected(store: Store) -> None:
    """Every view at 0, not current, its lag the whole log."""
    append_steps(store, _streams(1), 3)
    found = Runner(store, test_views()).status()
    assert [(s.name, s.position, s.head, s.lag, s.version, s.current) for s in found] == [
        ("t_count", 0, 3, 3, "", False),
        ("t_steps", 0, 3, 3, "", False),
    ]


def test_an_encrypted_store_rebuilds_views_built_in_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened with a cipher key, a store's views tracked in clear are not current; the
    next catch-up rebuilds them sealed (no row body in clear)."""
    from eventsourcing.cipher import AESCipher

    from engine.store.cipher import CIPHER_ENV

    url = f"sqlite:///{tmp_path}/a.db"
    clear = open_store(url)  # views tracked before any event, then the key comes
    Runner(clear, [Count()]).catch_up()
    assert [s.version for s in Runner(clear, [Count()]).status()] == ["1/clear"]
    clear.close()
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    sealed = open_store(url)
    append_steps(sealed, _streams(2), 3)
    runner = Runner(sealed, [Count()])
    assert [s.current for s in runner.status()] == [False]
    runner.catch_up()
    assert [(s.version, s.current) for s in runner.status()] == [("1/sealed", True)]
    assert counted(sealed) == expected(sealed)
    sealed.close()
    with sqlite3.connect(tmp_path / "a.db") as conn:
        bodies = [b for (b,) in conn.execute("SELECT body FROM agentlog_view_t_count")]
    assert bodies and not any(b"all" in b for b in bodies)


def test_views_of_an_empty_database_opened_for_reading(tmp_path: Path) -> None:
    """A database with no tables yet, opened without create (as reading commands do),
    reads as an empty store: status and catch-up work and the file stays untouched."""
    from engine.runtime.run.catalog import Catalog

    path = tmp_path / "empty.db"
    path.touch()
    catalog = Catalog(f"sqlite:///{path}", create=False)
    runner = Runner(catalog.store, [Count(), Steps()])
    assert [(s.position, s.head, s.current) for s in runner.status()] == [(0, 0, False)] * 2
    assert runner.catch_up() == 0
    catalog.close()
    assert path.stat().st_size == 0


def _shop(eng: Engine) -> Any:
    @eng.tool(name="t_price")
    def price(item: str) -> int:
        return len(item)

    @eng.agent(name="tests:projected")
    def agent(run: Any) -> int:
        run.checkpoint("start")
        return price("abc") + price("de")

    return agent


@all_backends
def test_events_carry_their_runs_facts_from_the_log_and_the_index(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run's events carry its id (a narrow look at the index, never all of it), its
    agent and, for a fork, which events are its parent's copies."""
    agent = _shop(eng)
    parent = eng.run(agent)
    fork = eng.rewind(parent.run_id, to="start")
    monkeypatch.setattr(eng.store, "runs", lambda *a: pytest.fail("read the whole index"))
    Runner(eng.store, [Count()], batch=3).catch_up()
    found = tallies(eng.store)
    for run in (parent, fork):
        row = found[run_stream(run.run_id).hex]
        assert (row.run_id, row.agent) == (run.run_id, "tests:projected")
        assert row.events == len(eng.events(run.run_id))
    started = eng.events(fork.run_id)[0].data
    assert found[run_stream(fork.run_id).hex].copied == started["inherited"] > 0
    assert found[run_stream(parent.run_id).hex].copied == 0


@backends("sqlite")
def test_runs_missing_from_the_index_still_count_each_under_its_stream(
    eng: Engine, tmp_path: Path
) -> None:
    """Run streams whose index rows are gone (a damaged index) are still runs': their
    events are folded with the facts their first events hold, each under the run id its
    ``agent_started`` holds, or, in a log from before it was kept, under its stream's
    name (``?<hex>``, never a run id), so the real views keep them apart."""
    from engine.events import AgentStarted
    from engine.store.codec import encode_event

    shop = _shop(eng)
    runs = [eng.run(shop), eng.run(shop)]
    events = len(eng.events(runs[0].run_id))
    old = run_stream(runs[1].run_id)  # as an older agentlog wrote it: no run id
    head = eng.store.read(old, upto=1)[0].event
    assert isinstance(head, AgentStarted) and head.run_id == runs[1].run_id
    _topic, payload = encode_event(msgspec.structs.replace(head, run_id=None))
    with sqlite3.connect(tmp_path / "agentlog.db") as conn:  # in place: its order kept
        conn.execute(
            "UPDATE agentlog_events SET state = ? WHERE originator_id = ? "
            "AND originator_version = 1",
            (payload, old.hex),
        )
        conn.execute("DELETE FROM agentlog_runs")
    Runner(eng.store, [Count(), *all_views()]).catch_up()
    row = tallies(eng.store)[run_stream(runs[0].run_id).hex]
    assert (row.run_id, row.agent, row.events) == (runs[0].run_id, "tests:projected", events)
    assert tallies(eng.store)[old.hex].run_id == "?" + old.hex
    figures = eng.stats()
    assert figures.runs.total == 2 and figures.runs.by_status == {"completed": 2}


@all_backends
def test_reserved_words_are_column_names_like_any_other(store: Store) -> None:
    """Columns are quoted in every statement: a view may filter and sort by ``window`` or
    ``order`` on every store (PostgreSQL refused to create such a table)."""
    from engine.store.ports import Column, ViewQuery, ViewRow, ViewTable

    table = ViewTable("t_words", (Column("window", "real"), Column("order")))
    store.views.reset(table, "v1")
    rows_in = [ViewRow("a", (1.0, "x"), b"A"), ViewRow("b", (2.0, "y"), b"B")]
    assert store.views.commit(table, 0, 2, rows_in)
    assert store.views.query(table, ViewQuery(equal={"order": "y"})) == [b"B"]
    late = ViewQuery(at_least={"window": 0.5}, order_by="window", descending=False)
    assert store.views.query(table, late) == [b"A", b"B"]
