"""A PostgreSQL store across ``os.fork()`` (engine/store/postgres_fork.py): the child
appends and its followers' hint goes out on connections of its own (not the parent's
sessions, which it inherited), its close leaves the parent's sessions alone, and the
parent's appends and hints go on."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest
from projection_kit import step
from psycopg.sql import SQL, Identifier
from test_postgres_append import PATIENCE, _conninfo, _recorder

from engine.polling import poll_until
from engine.store import Append, Store, open_store

pytestmark = pytest.mark.postgres


def _sessions(conn: psycopg.Connection[object]) -> set[int]:
    """Backend pids of this database's sessions other than ``conn``'s."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()"
    ).fetchall()
    return {int(r[0]) for r in rows}  # type: ignore[call-overload]


def _child(store: Store) -> int:
    """In the forked child: append, wait for its hint to be sent, close; the exit code."""
    recorder = _recorder(store)
    store.append([Append(uuid.uuid4(), 1, step(2))])
    sent = poll_until(lambda: recorder.notifier.sent >= 1 or None, PATIENCE)
    store.close()
    return 0 if sent else 3


def test_a_forked_child_appends_and_notifies_on_connections_of_its_own(pg_url: str) -> None:
    store = open_store(pg_url)
    recorder = _recorder(store)
    try:
        with psycopg.connect(_conninfo(recorder), autocommit=True) as listener:
            listener.execute(SQL("LISTEN {0}").format(Identifier(recorder.channel_name)))
            store.append([Append(uuid.uuid4(), 1, step(1))])
            assert len(list(listener.notifies(timeout=PATIENCE, stop_after=1))) == 1
            parents = _sessions(listener)  # the parent's pool, open and in use
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the child: never back into pytest)
                code = 1
                try:
                    code = _child(store)
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, "the child's append or hint failed"
            heard = list(listener.notifies(timeout=PATIENCE, stop_after=1))
            assert heard and heard[0].pid not in parents, "the child used a parent's session"
            store.append([Append(uuid.uuid4(), 1, step(3))])  # its sessions are whole
            again = list(listener.notifies(timeout=PATIENCE, stop_after=1))
            assert again and again[0].pid in parents | _sessions(listener)
        assert len(store.read_all(after=0)) == 3
    finally:
        store.close()
