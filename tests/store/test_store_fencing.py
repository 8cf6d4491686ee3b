"""Fencing on every store: a run's lease has an epoch that grows when the lease passes to
another owner (never on a renewal), and an append carrying a writer's fence is refused,
atomically and writing nothing, once the run's lease is at a newer epoch."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest
from agents.kit import open_at_once
from conftest import all_backends, backends, raw_sql, schema_of

from engine import events as ev
from engine.errors import LeaseTaken
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState
from engine.store import Append, Fence, Store, open_store, stream_id

T0 = 1_700_000_000.0


def _started(run_id: str) -> ev.AgentStarted:
    return ev.AgentStarted(at=T0, agent="fenced", import_path="m", input={}, run_id=run_id)


@all_backends
def test_the_epoch_grows_when_the_lease_changes_hands_never_on_a_renewal(store: Store) -> None:
    take = store.take_lease_fenced
    assert take("r", "a", T0 + 30, T0) == ("a", 1)
    assert take("r", "a", T0 + 60, T0 + 20) == ("a", 1)  # a renewal
    assert take("r", "a", T0 + 99, T0 + 70) == ("a", 1)  # renewed late, nobody took it
    assert take("r", "b", T0 + 99, T0 + 80) == ("a", 1)  # held: refused, epoch unchanged
    assert take("r", "b", T0 + 200, T0 + 100) == ("b", 2)  # expired: taken over
    assert take("r", "c", T0 + 300, T0 + 110, dead="b") == ("c", 3)  # its holder is dead
    store.drop_lease("r", "c")
    assert store.lease("r") is None  # dropped: nobody holds it ...
    assert take("r", "c", T0 + 400, T0 + 120) == ("c", 4)  # ... and a new take is a new epoch
    assert take("other", "c", T0 + 400, T0 + 120) == ("c", 1)  # per run
    assert store.take_lease("r", "d", T0 + 400, T0 + 130) == "c"  # the holder only


@all_backends
def test_a_stale_fence_is_refused_and_nothing_of_its_commit_is_written(store: Store) -> None:
    """The old owner's commit (its run's event, another stream's event, the run's index
    row) is refused whole; the new owner's, with the new epoch, commits; the old one's
    next commit, at a position the new one took, is refused as stale (not a conflict);
    a lease dropped since keeps refusing it."""
    rid = "fenced-1"
    _, old = store.take_lease_fenced(rid, "a", T0 + 30, T0)
    writer = RunWriter(store, RunState(run_id=rid), fence=Fence(rid, old))
    writer.append(_started(rid))  # the same epoch: written
    _, new = store.take_lease_fenced(rid, "b", T0 + 100, T0 + 40)
    assert new == old + 1
    side = stream_id("effect:fenced-key")
    extra = [Append(side, 1, ev.Checkpoint(at=T0, call=1, name="side"))]
    with pytest.raises(LeaseTaken, match=rf"run {rid}.*epoch {new}.*epoch {old}"):
        writer.append(ev.Checkpoint(at=T0 + 41, call=1, name="stale"), extra=extra)
    assert store.last_position(run_stream(rid)) == 1
    assert store.last_position(side) == 0
    assert store.indexed_position(rid) == 1
    fresh = RunWriter(store, writer.state, fence=Fence(rid, new))
    fresh.append(ev.Checkpoint(at=T0 + 42, call=1, name="new owner"), extra=extra)
    assert store.last_position(run_stream(rid)) == 2 and store.last_position(side) == 1
    with pytest.raises(LeaseTaken):  # its position taken too: named as the stale owner it is
        writer.append(ev.Checkpoint(at=T0 + 43, call=1, name="stale again"))
    store.drop_lease(rid, "b")  # dropped: the epoch stays, the stale writer stays refused
    with pytest.raises(LeaseTaken):
        store.append(
            [Append(run_stream(rid), 3, ev.Checkpoint(at=T0, call=1, name="x"))], fence=writer.fence
        )


_WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND wait_event_type = 'Lock' AND query LIKE %s"
)


@pytest.mark.postgres
def test_a_fenced_append_waits_for_a_takeover_in_flight_and_is_refused(pg_url: str) -> None:
    """Another owner's takeover has updated the lease row but not committed when the old
    owner appends: the append waits for it (the row locked FOR SHARE in the append) and
    is refused once it commits; it never commits on the epoch it read before. The test
    waits until the append has either committed or queued on the row, never on a clock."""
    store = open_store(pg_url)
    schema, base = schema_of(pg_url), pg_url.split("?")[0]
    rid = "raced"
    _, old = store.take_lease_fenced(rid, "a", T0 + 30, T0)
    outcome: dict[str, str] = {}

    def stale() -> None:
        try:
            store.append([Append(run_stream(rid), 1, _started(rid))], fence=Fence(rid, old))
            outcome["append"] = "written"
        except LeaseTaken:
            outcome["append"] = "refused"

    writer = threading.Thread(target=stale)
    try:
        with psycopg.connect(base) as taker, psycopg.connect(base, autocommit=True) as watch:
            taker.execute(
                f'UPDATE "{schema}".agentlog_leases SET owner = %s, epoch = epoch + 1 '
                "WHERE run_id = %s",
                ("b", rid),
            )
            writer.start()
            queued = (f'%"{schema}".agentlog_append%',)
            while writer.is_alive() and not watch.execute(_WAITING, queued).fetchone()[0]:
                writer.join(0.01)
            taker.commit()
        writer.join()
        assert outcome == {"append": "refused"}
        assert store.last_position(run_stream(rid)) == 0
    finally:
        store.close()


@all_backends
def test_an_unfenced_append_and_a_fence_of_a_run_never_leased_are_not_checked(
    store: Store,
) -> None:
    """A writer holding no lease (an import, a message from outside) checks nothing; a
    fence names its run's lease, so another run's takeover does not refuse it."""
    store.take_lease_fenced("taken", "a", T0 + 30, T0)
    store.take_lease_fenced("taken", "b", T0 + 100, T0 + 40)
    RunWriter(store, RunState(run_id="taken")).append(_started("taken"))
    RunWriter(store, RunState(run_id="free"), fence=Fence("free", 1)).append(_started("free"))
    assert store.last_position(run_stream("taken")) == 1
    assert store.last_position(run_stream("free")) == 1


@backends("sqlite", "postgres")
def test_an_old_lease_table_gains_the_epoch_once_when_processes_open_it_at_once(
    store_url: str, tmp_path: Path
) -> None:
    """A lease table written before epochs (no column; a lease held by an older version)
    gains the column when four processes open the store at once; the old lease reads
    as epoch 0, and taking it over starts fencing."""
    open_store(store_url).close()
    raw_sql(store_url, "ALTER TABLE {s}agentlog_leases DROP COLUMN epoch")
    raw_sql(store_url, "INSERT INTO {s}agentlog_leases VALUES (?, ?, ?)", ("old", "a", T0 + 30))
    open_at_once(store_url, tmp_path)
    store = open_store(store_url)
    try:
        assert store.lease("old") == ("a", T0 + 30)
        assert store.take_lease_fenced("old", "a", T0 + 60, T0 + 10) == ("a", 0)  # a renewal
        assert store.take_lease_fenced("old", "b", T0 + 200, T0 + 100) == ("b", 1)
        stale = Fence("old", 0)
        with pytest.raises(LeaseTaken):
            store.append([Append(run_stream("old"), 1, _started("old"))], fence=stale)
        store.append([Append(run_stream("old"), 1, _started("old"))], fence=Fence("old", 1))
    finally:
        store.close()
