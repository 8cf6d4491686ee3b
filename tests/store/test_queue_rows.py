"""Forged rows in the queue tables (agentlog_queues, agentlog_workers, agentlog_queue):
a value no ``engine.queue`` / worker could have written is one clear ``CorruptData`` as
it is read, never a limit silently obeyed (a negative concurrency holding a queue shut
for ever, a NaN rate window letting every start through) nor a bare TypeError."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import backends, raw_sql

from engine.errors import CorruptData
from engine.store import Store, open_store
from engine.store.queueing import QueueLimits, QueueRow, WorkerRow

T0 = 1_700_000_000.0
FORGED_LIMITS = [
    ("concurrency = -1", "concurrency"),
    ("per_partition = 0", "per_partition"),
    ("rate_count = 2, rate_seconds = 'NaN'", "seconds"),
    ("rate_count = -3, rate_seconds = 10", "count"),
    ("rate_count = 3, rate_seconds = NULL", "seconds"),
]


def _queued_run(store_url: str, s: Store, run_id: str) -> None:
    """A run waiting in line (its place and its index row), so a claim reads the limits."""
    s.queues.put_queued(QueueRow(run_id, "default", enqueued_at=T0))
    sql = (
        "INSERT INTO {s}agentlog_runs (run_id, agent, status, started_at, updated_at) "
        "VALUES (?, 'a', 'queued', 0, 0)"
    )
    raw_sql(store_url, sql, (run_id,))


@backends("sqlite", "postgres")
@pytest.mark.parametrize(("forged", "named"), FORGED_LIMITS)
def test_a_forged_queue_limit_is_one_clear_error(store_url: str, forged: str, named: str) -> None:
    s = open_store(store_url)
    s.queues.set_limits(QueueLimits("default", concurrency=2))
    _queued_run(store_url, s, "r1")
    nan = forged.replace("'NaN'", "'NaN'::float8") if store_url.startswith("postgres") else forged
    raw_sql(store_url, f"UPDATE {{s}}agentlog_queues SET {nan}")
    with pytest.raises(CorruptData, match=f"agentlog_queues.*{named}"):
        s.queues.limits()
    with pytest.raises(CorruptData, match="agentlog_queues"):
        s.queues.claim_next(["default"], "w1", T0 + 30, T0)
    s.close()


@backends("sqlite")
def test_a_limit_of_another_type_is_one_clear_error(store_url: str) -> None:
    """SQLite keeps text in an INTEGER column: refused, not a TypeError mid-claim."""
    s = open_store(store_url)
    s.queues.set_limits(QueueLimits("default", concurrency=2))
    _queued_run(store_url, s, "r1")
    raw_sql(store_url, "UPDATE {s}agentlog_queues SET concurrency = 'many'")
    with pytest.raises(CorruptData, match="agentlog_queues"):
        s.queues.claim_next(["default"], "w1", T0 + 30, T0)
    s.close()


@backends("sqlite", "postgres")
def test_a_forged_worker_row_is_one_clear_error(store_url: str) -> None:
    s = open_store(store_url)
    s.queues.beat_worker(WorkerRow("w1", "h", 1, ("default",), T0, T0))
    raw_sql(store_url, "UPDATE {s}agentlog_workers SET queues = 'not json'")
    with pytest.raises(CorruptData, match="agentlog_workers"):
        s.queues.workers(T0 - 1, T0)
    s.close()


@backends("sqlite")
def test_a_forged_place_in_line_is_one_clear_error(store_url: str) -> None:
    s = open_store(store_url)
    s.queues.put_queued(QueueRow("r1", "default", enqueued_at=T0))
    raw_sql(store_url, "UPDATE {s}agentlog_queue SET priority = 'top', queue = 7")
    with pytest.raises(CorruptData, match=r"agentlog_queue\b"):
        s.queues.queued("r1")
    s.close()


@backends("sqlite")
def test_an_idle_claim_takes_no_write_lock(store_url: str) -> None:
    """A worker's pass over an empty line (or one holding only runs it passes over) reads
    and writes nothing: on SQLite a claim's lock is the file's one write lock, and idle
    workers taking it every pass starved other writers (engine.send) of it."""
    s = open_store(store_url)
    _queued_run(store_url, s, "r1")
    db = store_url.split("?")[0].removeprefix("sqlite:///")

    def claims() -> int:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT claims FROM agentlog_claims").fetchone()
        return 0 if row is None else int(row[0])

    assert s.queues.claim_next(["other"], "w1", T0 + 30, T0) is None
    assert s.queues.claim_next(["default"], "w1", T0 + 30, T0, skip=["r1"]) is None
    assert claims() == 0
    assert s.queues.claim_next(["default"], "w1", T0 + 30, T0) == "r1"
    assert claims() == 1
    s.close()
