"""Shared helpers for the hostile-import tests (no tests here): honest exports taken
apart into line documents, forged files with a recomputed hash chain, and fingerprints
of a store's bytes to prove that a refused import changed nothing."""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from conftest import schema_of

from engine import Engine
from engine.store import stream_id
from replay import export_lines

Doc = dict[str, Any]
PAID: list[str] = []  # orders the payment tool really paid
source = Engine.open("memory://")


@source.tool(side_effect=True, key=lambda order: f"pay:{order}")
def pay(order: str, *, idempotency_key: str) -> dict[str, str]:
    PAID.append(order)
    return {"paid": order}


@source.agent
def payer(run: Any, order: str) -> dict[str, str]:
    run.decide("plan", lambda: {"raw": b"\x00\xff", "nan": float("nan")})  # a msgpack line
    run.checkpoint("planned")
    paid: dict[str, str] = pay(order)
    return paid


LEDGER_HEX = stream_id("effect:pay:o1").hex  # a run id that is a ledger stream's uuid


@functools.cache
def honest_export() -> bytes:
    """The export of a completed payer run (order o0): six events, one carried as msgpack."""
    r = source.run(payer, order="o0")
    return b"".join(export_lines(source, r.run_id))


def docs_of(data: bytes) -> list[Doc]:
    """An export file as line documents, without their ``hash`` and ``sig``."""
    out = []
    for raw in data.splitlines():
        doc = json.loads(raw)
        doc.pop("hash")
        doc.pop("sig", None)
        out.append(doc)
    return out


def renumber(docs: list[Doc]) -> list[Doc]:
    """``docs`` with index, position and total made consistent again (as a forger would)."""
    for i, doc in enumerate(docs, start=1):
        doc["index"] = doc["position"] = i
        doc["total"] = len(docs)
    return docs


def forge(docs: list[Doc]) -> bytes:
    """A file of ``docs`` with a correct hash chain: anyone can compute one."""
    previous, lines = "", []
    for doc in docs:
        body = json.dumps(doc, separators=(",", ":")).encode()
        previous = hashlib.sha256(previous.encode() + body).hexdigest()
        lines.append(body[:-1] + b',"hash":"' + previous.encode() + b'"}\n')
    return b"".join(lines)


def with_run_id(docs: list[Doc], run_id: str) -> list[Doc]:
    for doc in docs:
        doc["run_id"] = run_id
    return docs


def fingerprint(url: str) -> str:
    """A digest of everything the store holds: the SQLite file's bytes (its WAL folded in
    first), or every row of every table of the PostgreSQL schema."""
    if url.startswith("sqlite"):
        path = Path(url.split("?")[0][len("sqlite:///") :])
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = path.with_name(path.name + "-wal")
        extra = wal.read_bytes() if wal.exists() else b""
        return hashlib.sha256(path.read_bytes() + extra).hexdigest()
    schema = schema_of(url)
    dump = []
    with psycopg.connect(url.split("?")[0]) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t ORDER BY 1').fetchall()
            dump.append(f"{table}:{rows!r}")
    return hashlib.sha256("\n".join(dump).encode()).hexdigest()
