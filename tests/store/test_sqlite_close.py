"""Closing a SQLite store while another thread is inside one of its transactions: that
transaction finishes on its connection, which is closed when it is given back (closing it
under the thread's feet can crash the process inside sqlite3)."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.store import open_store


def test_a_store_closed_mid_transaction_lets_the_transaction_finish(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/s.db")
    inside, closed = threading.Event(), threading.Event()
    seen: list[object] = []

    def reader() -> None:
        try:
            with store._events.datastore.transaction(commit=False) as c:
                c.execute("SELECT 1")
                inside.set()
                closed.wait(30)
                c.execute("SELECT COUNT(*) FROM agentlog_runs")
                seen.append(c.fetchone()[0])
        except Exception as e:  # the assertion names it
            seen.append(e)

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(30)
    store.close()
    closed.set()
    t.join(30)
    assert seen == [0]
    pool = store._events.datastore.pool
    assert not pool._in_use and not pool._pool  # every connection closed in the end
