"""The drill's books: a SQLite file beside each round's store where the drilled processes
write what the engine cannot see (every send of a side-effecting tool, every verifier's
answer, the faults already injected, the first live call after a restart), each committed
before the step it describes goes on, so a SIGKILL loses none of it."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ops (id INTEGER PRIMARY KEY, op TEXT NOT NULL, run TEXT,"
    " tool TEXT NOT NULL, key TEXT, found INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS receipts (tool TEXT NOT NULL, key TEXT NOT NULL,"
    " PRIMARY KEY (tool, key))",
    "CREATE TABLE IF NOT EXISTS faults (run TEXT NOT NULL, call INTEGER NOT NULL,"
    " tool TEXT NOT NULL, PRIMARY KEY (run, call, tool))",
    "CREATE TABLE IF NOT EXISTS live (step TEXT PRIMARY KEY, at REAL NOT NULL)",
)


def _locked(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` under the books' lock (sqlite3 connections are not for many threads)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


@dataclass(frozen=True)
class Op:
    """One line of the books: a ``send`` of ``tool`` under ``key``, or a ``verify`` that
    ``found`` the effect (or not)."""

    op: str
    tool: str
    key: str
    found: bool


class Books:
    """The books at ``path`` (created on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        # One connection for the process's threads (a tree's child runs), one at a time.
        self._db = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.RLock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def close(self) -> None:
        self._db.close()

    @_locked
    def send(self, run: str, tool: str, key: str, *, stub: bool) -> bool:
        """Book a send of ``tool`` under ``key``; for a stub, whether a send under the same
        key was booked before (the stubbed service already has the effect)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO ops (op, run, tool, key) VALUES ('send', ?, ?, ?)", (run, tool, key)
            )
            if not stub:
                return False
            cur = self._db.execute(
                "INSERT OR IGNORE INTO receipts (tool, key) VALUES (?, ?)", (tool, key)
            )
            return cur.rowcount == 0

    @_locked
    def has_receipt(self, tool: str, key: str) -> bool:
        """Whether the stubbed service holds an effect of ``tool`` under ``key``."""
        row = self._db.execute(
            "SELECT 1 FROM receipts WHERE tool = ? AND key = ?", (tool, key)
        ).fetchone()
        return row is not None

    @_locked
    def verified(self, run: str, tool: str, key: str, found: bool) -> None:
        """Book a verifier's answer for ``key``."""
        self._db.execute(
            "INSERT INTO ops (op, run, tool, key, found) VALUES ('verify', ?, ?, ?, ?)",
            (run, tool, key, int(found)),
        )

    @_locked
    def first_fault(self, run: str, call: int, tool: str) -> bool:
        """True the first time a fault is injected into call ``call`` of ``run``."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO faults (run, call, tool) VALUES (?, ?, ?)", (run, call, tool)
        )
        return cur.rowcount == 1

    @_locked
    def live(self, step: str) -> None:
        """Book the first live call of the process running ``step`` (its time)."""
        self._db.execute("INSERT OR IGNORE INTO live (step, at) VALUES (?, ?)", (step, time.time()))

    @_locked
    def went_live(self, step: str) -> float | None:
        """When ``step``'s process made its first live call (None: it made none)."""
        row = self._db.execute("SELECT at FROM live WHERE step = ?", (step,)).fetchone()
        return None if row is None else float(row[0])

    @_locked
    def ops(self) -> list[Op]:
        """Every send and verify, in the order they were booked."""
        rows = self._db.execute("SELECT op, tool, key, found FROM ops ORDER BY id").fetchall()
        return [Op(op, tool, key, bool(found)) for op, tool, key, found in rows]
