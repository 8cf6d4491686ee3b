"""A run's events and its row of the run index commit together on SQLite and PostgreSQL:
when the index write fails (a trigger in the real database refuses it, as a full disk or
a constraint would), the events of that append are not stored either, and the log never
gets ahead of the index a listing reads."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from conftest import backends, schema_of

from engine import Engine
from engine import events as ev
from engine.errors import StoreError
from engine.log.history import run_stream
from engine.store import Append, RunRow, Store, open_store

STORES = backends("sqlite", "postgres")
REFUSAL = "the run index refuses this write"


def _sqlite_refusal(op: str) -> tuple[str, ...]:
    return (
        f"CREATE TRIGGER refuse_{op.lower()} BEFORE {op} ON agentlog_runs "
        f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END",
    )


def _postgres_refusal(schema: str, op: str) -> tuple[str, ...]:
    fn = f'"{schema}".refuse_index'
    return (
        f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$",
        f'CREATE TRIGGER refuse_{op.lower()} BEFORE {op} ON "{schema}".agentlog_runs '
        f"FOR EACH ROW EXECUTE FUNCTION {fn}()",
    )


@pytest.fixture
def refuse_index(store_url: str) -> Callable[[str], None]:
    """Install, in the database behind ``store_url`` (its tables created already), a
    trigger that fails every ``op`` (INSERT or UPDATE) on the run index."""

    def refuse(op: str) -> None:
        if store_url.startswith("sqlite"):
            path = store_url.split("?")[0][len("sqlite:///") :]
            with sqlite3.connect(path) as conn:
                for sql in _sqlite_refusal(op):
                    conn.execute(sql)
            return
        with psycopg.connect(store_url.split("?")[0], autocommit=True) as conn:
            for sql in _postgres_refusal(schema_of(store_url), op):
                conn.execute(sql)

    return refuse


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


def _row(run_id: str, status: str, position: int) -> RunRow:
    return RunRow(run_id, "m:agent", status, 1000.0, 1000.0 + position, None, position)


@STORES
def test_an_append_whose_index_row_fails_stores_none_of_its_events(
    store: Store, refuse_index: Callable[[str], None]
) -> None:
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    first = ev.Checkpoint(at=ev.now(), call=1, name="one")
    store.append([Append(stream, 1, first)], runs=[_row(run_id, "running", 1)])
    refuse_index("UPDATE")
    second = ev.Checkpoint(at=ev.now(), call=2, name="two")
    with pytest.raises(StoreError):  # SQLite reports a trigger's refusal as a conflict
        store.append([Append(stream, 2, second)], runs=[_row(run_id, "completed", 2)])
    assert store.last_position(stream) == 1  # the failed append left nothing behind
    assert store.indexed_position(run_id) == 1
    assert [(r.status, r.position) for r in store.runs()] == [("running", 1)]


@STORES
def test_a_run_whose_index_cannot_be_written_leaves_no_log(
    eng: Engine, store_url: str, refuse_index: Callable[[str], None]
) -> None:
    """The engine's first commit of a run (agent_started with its index row) fails
    whole: no run appears, neither in the listing nor as a stored log to resume."""
    ran: list[str] = []

    @eng.agent
    def agent(run: Any) -> str:
        ran.append("body")
        return "done"

    assert eng.runs() == []  # the tables exist before the trigger goes in
    refuse_index("INSERT")
    run_id = uuid.uuid4().hex
    with pytest.raises(StoreError):  # SQLite reports a trigger's refusal as a conflict
        eng.run(agent, run_id=run_id)
    assert ran == []
    assert eng.store.last_position(run_stream(run_id)) == 0
    assert eng.runs() == []
