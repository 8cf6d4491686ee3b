"""The tree campaign's outside service: effects counted per operation (no
deduplication of its own, so a re-sent effect is a second row, a duplicate), and a
fenced ledger that refuses a write whose fencing token is lower than one it has seen
for that lock, as a storage service guarding itself with fencing tokens does.

Its books say whether two holders of one lock acted at once: two holders writing under
one token (accepted: the lock handed out a token twice, damage), and writes under a
token lower than one already seen (refused: a holder whose lease expired came back
with its old token; fencing at work, nothing took effect).
The file is ``$AGENTLOG_TREE_SERVICE``, read at every call; every call is one short
SQLite transaction, so a SIGKILL leaves an effect whole or absent.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from contextlib import closing

_DDL = (
    "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, op TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS effects_op ON effects (op)",
    "CREATE TABLE IF NOT EXISTS fenced (id INTEGER PRIMARY KEY, lock TEXT NOT NULL, "
    "fence INTEGER NOT NULL, holder TEXT NOT NULL, op TEXT NOT NULL, refused INTEGER NOT NULL)",
)


def _connect(where: str | None) -> sqlite3.Connection:
    found = where or os.environ.get("AGENTLOG_TREE_SERVICE")
    if not found:
        raise RuntimeError("no service file: set AGENTLOG_TREE_SERVICE")
    conn = sqlite3.connect(found, timeout=60, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def reset(where: str) -> None:
    """Create (or empty) the books."""
    with closing(_connect(where)) as conn:
        for ddl in _DDL:
            conn.execute(ddl)
        conn.execute("DELETE FROM effects")
        conn.execute("DELETE FROM fenced")


def perform(op: str) -> str:
    """Do the effect ``op`` (again, if asked again: the service does not deduplicate)."""
    with closing(_connect(None)) as conn:
        conn.execute("INSERT INTO effects (op) VALUES (?)", (op,))
    return f"done:{op}"


def write(lock: str, fence: int, holder: str, op: str) -> dict[str, object]:
    """The fenced write ``op`` of ``holder`` under ``lock``'s token ``fence``: refused
    (``ok`` False, nothing done) when a higher token was seen for ``lock``; else done,
    as an effect."""
    with closing(_connect(None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(
            "SELECT MAX(fence) FROM fenced WHERE lock=? AND refused=0", (lock,)
        ).fetchone()
        refused = row[0] is not None and fence < row[0]
        conn.execute(
            "INSERT INTO fenced (lock, fence, holder, op, refused) VALUES (?,?,?,?,?)",
            (lock, fence, holder, op, int(refused)),
        )
        if not refused:
            conn.execute("INSERT INTO effects (op) VALUES (?)", (op,))
        conn.execute("COMMIT")
    return {"ok": not refused, "receipt": None if refused else f"done:{op}"}


def done(op: str, where: str | None = None) -> bool:
    """Whether the effect ``op`` happened (the verifier of an uncertain call)."""
    with closing(_connect(where)) as conn:
        row = conn.execute("SELECT 1 FROM effects WHERE op=? LIMIT 1", (op,)).fetchone()
    return row is not None


def effects(where: str) -> Counter[str]:
    """How many times each effect happened."""
    with closing(_connect(where)) as conn:
        return Counter(op for (op,) in conn.execute("SELECT op FROM effects"))


def holders(where: str) -> tuple[int, int]:
    """``(tokens two holders wrote under, stale writes refused)`` as the fenced ledger
    saw them."""
    with closing(_connect(where)) as conn:
        shared = conn.execute(
            "SELECT COUNT(*) FROM (SELECT lock, fence FROM fenced WHERE refused=0 "
            "GROUP BY lock, fence HAVING COUNT(DISTINCT holder) > 1)"
        ).fetchone()[0]
        refused = conn.execute("SELECT COUNT(*) FROM fenced WHERE refused=1").fetchone()[0]
    return int(shared), int(refused)


def refused(where: str) -> list[tuple[str, int, str]]:
    """Each refused write: ``(holder, token, "op token N < M (holder of M: RUN)")``."""
    out = []
    with closing(_connect(where)) as conn:
        rows = conn.execute(
            "SELECT id, lock, fence, holder, op FROM fenced WHERE refused=1 ORDER BY id"
        ).fetchall()
        for at, lock, fence, holder, op in rows:
            top = conn.execute(
                "SELECT fence, holder FROM fenced WHERE lock=? AND refused=0 AND id<? "
                "ORDER BY fence DESC LIMIT 1",
                (lock, at),
            ).fetchone()
            text = f"{op} by {holder}: token {fence} < {top[0]} (holder of {top[0]}: {top[1]})"
            out.append((holder, int(fence), text))
    return out
