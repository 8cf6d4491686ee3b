"""The saga and forks workloads' outside service: a real HTTP ledger in the campaign's
driver process (never killed), called by the agents' children with ``urllib``.

    POST /do      {op, key}             book the effect ``op`` under idempotency ``key``
    POST /undo    {receipt}             refund it (again: a no-op, counted)
    POST /find    {key}                 the receipt booked under ``key`` (a verifier)
    POST /fenced  {lock, fence, op, key} a write (by its op's writer) guarded by a token
    POST /tick    {name, key}           a counter (a breaker's attempts; once per key)
    POST /ticked  {key}                 what the tick under ``key`` said (a verifier)
    POST /charged {op, wait}            whether ``op`` stands (waits up to ``wait`` s)

Like a payment API it deduplicates by idempotency key: a request under a key already
booked returns that booking. A second effect for one ``op`` under another key really
happens and is booked: it is a duplicate, counted at the end (``standing`` per op). A
refunded effect frees its op (a new effect then is no duplicate) and is counted as
refunded. A fenced write under a token lower than the highest accepted for its lock is
refused (``ok`` false, nothing done); two writers (keys) accepted under one token of one
lock are two holders at once (a fork taking its parent's write over is the same writer).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .httpd import Served, json_routes, post_json

URL_ENV = "AGENTLOG_LEDGER_URL"  # where the agents find the ledger


@dataclass
class Booking:
    op: str
    key: str
    receipt: str
    refunded: bool = False


@dataclass
class Books:
    """What the ledger did: bookings by key and receipt, fenced writes, requests."""

    by_key: dict[str, Booking] = field(default_factory=dict)
    by_receipt: dict[str, Booking] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    replays: int = 0  # requests under a key already booked (answered from the books)
    fences: dict[tuple[str, int], set[str]] = field(default_factory=dict)  # accepted
    top: dict[str, int] = field(default_factory=dict)  # the highest accepted token per lock
    refused: list[str] = field(default_factory=list)
    ticks: Counter[str] = field(default_factory=Counter)
    ticked: dict[str, int] = field(default_factory=dict)  # key -> the count it was given

    def standing(self) -> Counter[str]:
        return Counter(b.op for b in self.by_key.values() if not b.refunded)

    def refunds(self) -> Counter[str]:
        return Counter(b.op for b in self.by_key.values() if b.refunded)

    def two_holders(self) -> list[str]:
        fences = self.fences.items()
        return [f"{lock} token {f}: {sorted(k)}" for (lock, f), k in fences if len(k) > 1]


class Ledger:
    """The ledger's state behind one lock, and its HTTP server (a thread of this
    process); ``url`` is where children reach it."""

    def __init__(self) -> None:
        self.books = Books()
        self.lock = threading.Lock()
        self.served = Served(_handler(self))
        self.url = self.served.url

    def close(self) -> None:
        self.served.close()

    def do(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return self._book(str(body["op"]), str(body["key"]))

    def _book(self, op: str, key: str) -> dict[str, Any]:
        b = self.books
        if key in b.by_key:
            b.replays += 1
            return {"receipt": b.by_key[key].receipt}
        booking = Booking(op, key, f"{op}#{len(b.by_key) + 1}")
        b.by_key[key] = b.by_receipt[booking.receipt] = booking
        return {"receipt": booking.receipt}

    def undo(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            found = self.books.by_receipt.get(str(body["receipt"]))
            if found is None:
                raise KeyError(f"no receipt {body['receipt']}")
            found.refunded = True
            return {"refunded": found.receipt}

    def find(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            found = self.books.by_key.get(str(body["key"]))
            return {"receipt": None if found is None else found.receipt}

    def fenced(self, body: dict[str, Any]) -> dict[str, Any]:
        lock, fence, key = str(body["lock"]), int(body["fence"]), str(body["key"])
        with self.lock:
            b = self.books
            if key in b.by_key:
                b.replays += 1
                return {"ok": True, "receipt": b.by_key[key].receipt}
            if fence < b.top.get(lock, 0):
                b.refused.append(f"{body['op']} under {key}: token {fence} < {b.top[lock]}")
                return {"ok": False, "receipt": None}
            b.top[lock] = fence
            b.fences.setdefault((lock, fence), set()).add(str(body["op"]))  # the writer
            return {"ok": True, **self._book(str(body["op"]), key)}

    def tick(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            b, key = self.books, str(body["key"])
            if key not in b.ticked:
                b.ticks[str(body["name"])] += 1
                b.ticked[key] = b.ticks[str(body["name"])]
            return {"n": b.ticked[key]}

    def ticked(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return {"n": self.books.ticked.get(str(body["key"]))}

    def charged(self, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + float(body.get("wait", 0))
        while True:
            with self.lock:
                if self.books.standing()[str(body["op"])]:
                    return {"charged": True}
            if time.monotonic() >= deadline:
                return {"charged": False}
            time.sleep(0.02)


def _handler(ledger: Ledger) -> type[BaseHTTPRequestHandler]:
    routes = {
        "/do": ledger.do,
        "/undo": ledger.undo,
        "/find": ledger.find,
        "/fenced": ledger.fenced,
        "/tick": ledger.tick,
        "/ticked": ledger.ticked,
        "/charged": ledger.charged,
    }

    def seen(path: str) -> None:
        with ledger.lock:
            ledger.books.requests[path] += 1

    return json_routes(routes, seen)


def call(path: str, **body: Any) -> dict[str, Any]:
    """A request to the ledger at ``$AGENTLOG_LEDGER_URL`` (from an agent's tool)."""
    return post_json(os.environ[URL_ENV] + path, body, timeout=60)
