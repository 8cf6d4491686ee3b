"""A fake outside service (a payment/shipping API) that keeps its own books in SQLite.

Every request is counted, and every effect it performs is a row, so a test can tell a
duplicated effect (two rows for one operation) from a lost one (none). Like a real
payment API it deduplicates by idempotency key, but only for requests that carry one:
a tool that sends no key gets a second effect for a second request. Voiding a receipt
is naturally idempotent (voiding it again is a no-op that is still counted).

The file is named by ``$AGENTLOG_TEST_SERVICE`` (read at every call, so a parent can
point its own calls elsewhere) or passed explicitly. Each call is one short SQLite
transaction (``BEGIN IMMEDIATE``), so a process killed with SIGKILL leaves the books
either with or without the effect, never half of it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from contextlib import closing

_DDL = (
    "CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, tool TEXT NOT NULL, "
    "op TEXT NOT NULL, idem TEXT, kind TEXT NOT NULL, pid INTEGER, at REAL)",
    "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, tool TEXT NOT NULL, "
    "op TEXT NOT NULL, idem TEXT, receipt TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS effects_idem ON effects (idem)",
    "CREATE INDEX IF NOT EXISTS effects_op ON effects (tool, op)",
    "CREATE TABLE IF NOT EXISTS voids (receipt TEXT PRIMARY KEY)",
)


def path(explicit: str | None = None) -> str:
    found = explicit or os.environ.get("AGENTLOG_TEST_SERVICE")
    if not found:
        raise RuntimeError("no service file: set AGENTLOG_TEST_SERVICE")
    return found


def _connect(where: str | None) -> sqlite3.Connection:
    conn = sqlite3.connect(path(where), timeout=60, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
    return conn


def reset(where: str | None = None) -> None:
    """Create (or empty) the service's books."""
    with closing(_connect(where)) as conn:
        for ddl in _DDL:
            conn.execute(ddl)
        for table in ("requests", "effects", "voids"):
            conn.execute(f"DELETE FROM {table}")


def perform(tool: str, op: str, idem: str | None = None, *, delay: float = 0.0) -> str:
    """Do the effect ``tool`` on ``op`` (once per ``idem`` when one is given)."""
    if delay:
        time.sleep(delay)  # network latency: the window a crash can land in
    with closing(_connect(None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO requests (tool, op, idem, kind, pid, at) VALUES (?,?,?,?,?,?)",
            (tool, op, idem, "perform", os.getpid(), time.time()),
        )
        receipt: str | None = None
        if idem is not None:
            row = conn.execute("SELECT receipt FROM effects WHERE idem=?", (idem,)).fetchone()
            receipt = row[0] if row else None
        if receipt is None:
            receipt = f"{tool}:{op}"
            conn.execute(
                "INSERT INTO effects (tool, op, idem, receipt) VALUES (?,?,?,?)",
                (tool, op, idem, receipt),
            )
        conn.execute("COMMIT")
    return receipt


def read_only(tool: str, op: str) -> None:
    """Count a read-only request (no effect)."""
    with closing(_connect(None)) as conn:
        conn.execute(
            "INSERT INTO requests (tool, op, idem, kind, pid, at) VALUES (?,?,?,?,?,?)",
            (tool, op, None, "read", os.getpid(), time.time()),
        )


def void(receipt: str, idem: str | None = None) -> dict[str, str]:
    """Undo the effect behind ``receipt``; voiding twice changes nothing the second time."""
    with closing(_connect(None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO requests (tool, op, idem, kind, pid, at) VALUES (?,?,?,?,?,?)",
            ("void", receipt, idem, "void", os.getpid(), time.time()),
        )
        conn.execute("INSERT OR IGNORE INTO voids (receipt) VALUES (?)", (receipt,))
        conn.execute("COMMIT")
    return {"voided": receipt}


def by_key(idem: str, where: str | None = None) -> str | None:
    """The receipt of the effect made under idempotency key ``idem``, if any."""
    with closing(_connect(where)) as conn:
        row = conn.execute("SELECT receipt FROM effects WHERE idem=?", (idem,)).fetchone()
    return row[0] if row else None


def by_op(tool: str, op: str, where: str | None = None) -> str | None:
    """The receipt of ``tool``'s effect on ``op``, if it happened."""
    with closing(_connect(where)) as conn:
        row = conn.execute(
            "SELECT receipt FROM effects WHERE tool=? AND op=? ORDER BY id LIMIT 1", (tool, op)
        ).fetchone()
    return row[0] if row else None


def effects(where: str | None = None) -> Counter[tuple[str, str]]:
    """How many times each ``(tool, op)`` effect happened."""
    with closing(_connect(where)) as conn:
        rows = conn.execute("SELECT tool, op FROM effects").fetchall()
    return Counter((t, o) for t, o in rows)


def requests(
    where: str | None = None, kind: str | None = None
) -> list[tuple[str, str, str | None]]:
    """Every request received, in order: ``(tool, op, idempotency key)``."""
    sql = "SELECT tool, op, idem FROM requests"
    params: tuple[str, ...] = ()
    if kind is not None:
        sql += " WHERE kind=?"
        params = (kind,)
    with closing(_connect(where)) as conn:
        rows = conn.execute(sql + " ORDER BY id", params).fetchall()
    return [(t, o, k) for t, o, k in rows]


def voids(where: str | None = None) -> set[str]:
    with closing(_connect(where)) as conn:
        return {r[0] for r in conn.execute("SELECT receipt FROM voids").fetchall()}
