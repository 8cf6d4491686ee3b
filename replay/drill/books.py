"""The drill's books: a SQLite file beside each round's store where the drilled processes
write what the engine cannot see (every send of a side-effecting tool, every verifier's
answer, the faults already injected, the first live call after a restart), each committed
before the step it describes goes on, so a SIGKILL loses none of it."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ops (id INTEGER PRIMARY KEY, op TEXT NOT NULL, run TEXT,"
    " tool TEXT NOT NULL, key TEXT, found INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS receipts (tool TEXT NOT NULL, key TEXT NOT NULL,"
    " PRIMARY KEY (tool, key))",
    "CREATE TABLE IF NOT EXISTS faults (run TEXT NOT NULL, call INTEGER NOT NULL,"
    " tool TEXT NOT NULL, PRIMARY KEY (run, call, tool))",
    "CREATE TABLE IF NOT EXISTS live (step TEXT PRIMARY KEY, at REAL NOT NULL)",
)


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
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def close(self) -> None:
        self._db.close()

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

    def has_receipt(self, tool: str, key: str) -> bool:
        """Whether the stubbed service holds an effect of ``tool`` under ``key``."""
        row = self._db.execute(
            "SELECT 1 FROM receipts WHERE tool = ? AND key = ?", (tool, key)
        ).fetchone()
        return row is not None

    def verified(self, run: str, tool: str, key: str, found: bool) -> None:
        """Book a verifier's answer for ``key``."""
        self._db.execute(
            "INSERT INTO ops (op, run, tool, key, found) VALUES ('verify', ?, ?, ?, ?)",
            (run, tool, key, int(found)),
        )

    def first_fault(self, run: str, call: int, tool: str) -> bool:
        """True the first time a fault is injected into call ``call`` of ``run``."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO faults (run, call, tool) VALUES (?, ?, ?)", (run, call, tool)
        )
        return cur.rowcount == 1

    def live(self, step: str) -> None:
        """Book the first live call of the process running ``step`` (its time)."""
        self._db.execute("INSERT OR IGNORE INTO live (step, at) VALUES (?, ?)", (step, time.time()))

    def went_live(self, step: str) -> float | None:
        """When ``step``'s process made its first live call (None: it made none)."""
        row = self._db.execute("SELECT at FROM live WHERE step = ?", (step,)).fetchone()
        return None if row is None else float(row[0])

    def ops(self) -> list[Op]:
        """Every send and verify, in the order they were booked."""
        rows = self._db.execute("SELECT op, tool, key, found FROM ops ORDER BY id").fetchall()
        return [Op(op, tool, key, bool(found)) for op, tool, key, found in rows]
