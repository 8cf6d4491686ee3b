"""Where each store and its baseline live: agentlog's stores by variant, and the raw
drivers (dict under a lock, sqlite3, psycopg) doing the same durable inserts."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from engine.store import Store, open_store

# --- environments: where each store and its baseline live ------------------------------


@dataclass
class Env:
    tmp: Path
    pg_base: str | None  # libpq URL without query, or None when PostgreSQL is unavailable
    prefix: str  # schema prefix for this invocation
    schemas: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh_name(self, tag: str) -> str:
        self.counter += 1
        return f"{tag}_{self.counter}"

    def schema(self, tag: str) -> str:
        name = f"{self.prefix}_{self.fresh_name(tag)}"
        self.schemas.append(name)
        return name

    def sqlite_path(self, tag: str) -> Path:
        return self.tmp / f"{self.fresh_name(tag)}.db"

    def pg_url(self, schema: str) -> str:
        assert self.pg_base is not None
        return f"{self.pg_base}?schema={schema}"

    def drop_schemas(self) -> None:
        if self.pg_base is None or not self.schemas:
            return
        with psycopg.connect(self.pg_base, autocommit=True) as conn:
            for s in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        self.schemas.clear()


@dataclass(frozen=True)
class Variant:
    """One store configuration for the append benchmark."""

    label: str
    kind: str  # memory, sqlite, postgres
    synchronous: str = "FULL"

    @property
    def raw_label(self) -> str:
        return {
            "memory": "dict+lock",
            "sqlite": f"sqlite3 {self.synchronous}",
            "postgres": "psycopg",
        }[self.kind]


def open_ours(env: Env, v: Variant, tag: str) -> Store:
    if v.kind == "memory":
        return open_store("memory://")
    if v.kind == "sqlite":
        url = f"sqlite:///{env.sqlite_path(tag)}"
        if v.synchronous != "FULL":
            url += f"?synchronous={v.synchronous}"
        return open_store(url)
    return open_store(env.pg_url(env.schema(tag)))


# --- raw baselines ---------------------------------------------------------------------


class RawMemory:
    """A dict of per-stream lists plus a global list, under one lock, with the same
    optimistic position check a log needs. The floor for any in-process store."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: dict[uuid.UUID, list[tuple[str, bytes]]] = {}
        self.log: list[tuple[uuid.UUID, int, str, bytes]] = []

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        with self.lock:
            nxt: dict[uuid.UUID, int] = {}
            for sid, pos, _, _ in rows:
                expected = nxt.get(sid) or len(self.streams.get(sid, ())) + 1
                if pos != expected:
                    raise RuntimeError("position taken")
                nxt[sid] = pos + 1
            ids = []
            for sid, pos, topic, state in rows:
                self.streams.setdefault(sid, []).append((topic, state))
                self.log.append((sid, pos, topic, state))
                ids.append(len(self.log))
            return ids

    def close(self) -> None:
        pass


RAW_SQLITE_DDL = (
    "CREATE TABLE IF NOT EXISTS raw_events (originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
)


class RawSQLite:
    """sqlite3 with our pragmas (WAL, same synchronous) and our table's shape."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute("PRAGMA busy_timeout=30000")
        self.conn.execute(RAW_SQLITE_DDL)
        self.cur = self.conn.cursor()

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        cur = self.cur
        cur.execute("BEGIN")
        ids = []
        try:
            for sid, pos, topic, state in rows:
                cur.execute("INSERT INTO raw_events VALUES (?,?,?,?)", (sid.hex, pos, topic, state))
                ids.append(cur.lastrowid or 0)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        return ids

    def close(self) -> None:
        self.conn.close()


def raw_pg_ddl(schema: str) -> list[str]:
    return [
        f'CREATE SCHEMA IF NOT EXISTS "{schema}"',
        f'CREATE TABLE IF NOT EXISTS "{schema}".raw_events (originator_id uuid NOT NULL, '
        "originator_version bigint NOT NULL, topic text, state bytea, id bigserial, "
        "PRIMARY KEY (originator_id, originator_version))",
        # Our table has the same unique index, so the log can be read in global order.
        f'CREATE UNIQUE INDEX IF NOT EXISTS raw_events_id ON "{schema}".raw_events (id)',
    ]


class RawPostgres:
    """psycopg, autocommit off: one ``unnest`` INSERT ... RETURNING id, then COMMIT."""

    def __init__(self, base: str, schema: str) -> None:
        self.conn = psycopg.connect(base, autocommit=False)
        for stmt in raw_pg_ddl(schema):
            self.conn.execute(stmt)
        self.conn.commit()
        self.sql = (
            f'INSERT INTO "{schema}".raw_events (originator_id, originator_version, topic, state) '
            "SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[]) "
            "RETURNING id"
        )
        self.schema = schema

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        cols = list(zip(*rows, strict=True))
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql, (list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3])))
                ids = [r[0] for r in cur.fetchall()]
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()
        return ids

    def close(self) -> None:
        self.conn.close()


Raw = RawMemory | RawSQLite | RawPostgres


def open_raw(env: Env, v: Variant, tag: str) -> Raw:
    if v.kind == "memory":
        return RawMemory()
    if v.kind == "sqlite":
        return RawSQLite(env.sqlite_path(tag), v.synchronous)
    assert env.pg_base is not None
    return RawPostgres(env.pg_base, env.schema(tag))
