"""A service that times its calls: every ``POST /work`` is an interval (its partition,
the caller's pid, start and end on this process's monotonic clock) that lasts the
``seconds`` the caller asks for (or until its gate opens: ``hold``), and books its
``op`` under its ``key`` once (the pids that asked are kept). It tells how many calls
overlapped at most, in all and per partition: a queue's limits as its callers' service
sees them.

A caller SIGKILLed mid-call leaves its request served to the end here, though nobody
waits for it: ``cut(pid, at)`` ends that process's intervals at ``at`` (the moment
before the kill), so a takeover's new call is not counted as overlapping a dead one.

    POST /work  {partition, pid, seconds, op, key}  -> {"receipt": ...}
    POST /find  {key}                               -> {"receipt": ... or None}
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .httpd import Served, json_routes, post_json

URL_ENV = "AGENTLOG_OVERLAP_URL"  # where the agents find the service
GATE_PATIENCE = 300.0  # seconds a held call waits for its gate at most


@dataclass
class Interval:
    partition: str
    pid: int
    op: str
    start: float
    end: float | None = None  # None while the call is served


@dataclass
class Booking:
    op: str
    receipt: str
    pids: list[int] = field(default_factory=list)


class Intervals:
    """The service's books behind one lock, and its HTTP server (``url``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Interval] = []
        self.booked: dict[str, Booking] = {}
        self.cuts: dict[int, float] = {}
        self.gates: dict[str, threading.Event] = {}  # op -> open when its calls may end
        self.served = Served(_handler(self))
        self.url = self.served.url

    def close(self) -> None:
        self.served.close()

    def work(self, body: dict[str, Any]) -> dict[str, Any]:
        call = Interval(str(body["partition"]), int(body["pid"]), str(body["op"]), 0.0)
        with self.lock:
            call.start = time.monotonic()
            self.calls.append(call)
        time.sleep(float(body["seconds"]))
        gate = self.gates.get(call.op)
        if gate is not None:
            gate.wait(GATE_PATIENCE)
        with self.lock:
            call.end = time.monotonic()
            key = str(body["key"])
            booking = self.booked.setdefault(key, Booking(call.op, f"{call.op}#{len(self.booked)}"))
            booking.pids.append(call.pid)
            return {"receipt": booking.receipt}

    def find(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            found = self.booked.get(str(body["key"]))
            return {"receipt": None if found is None else found.receipt}

    def hold(self, op: str) -> threading.Event:
        """Calls of ``op`` last until the gate returned is set (``GATE_PATIENCE`` at
        most): a test decides when a long call ends."""
        return self.gates.setdefault(op, threading.Event())

    def cut(self, pid: int, at: float) -> None:
        """``pid`` is dead from ``at`` on: its calls end there."""
        with self.lock:
            self.cuts[pid] = at

    def open_calls(self, op_prefix: str = "") -> list[Interval]:
        with self.lock:
            return [c for c in self.calls if c.end is None and c.op.startswith(op_prefix)]

    def peaks(self) -> tuple[int, dict[str, int]]:
        """The most calls served at once, in all and per partition (a dead caller's
        calls ended at its cut)."""
        with self.lock:
            spans = [(c.partition, c.start, self._end(c)) for c in self.calls]
        total = _peak([(s, e) for _, s, e in spans])
        parts: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for p, s, e in spans:
            parts[p].append((s, e))
        return total, {p: _peak(v) for p, v in sorted(parts.items())}

    def _end(self, c: Interval) -> float:
        end = math.inf if c.end is None else c.end
        return min(end, self.cuts.get(c.pid, math.inf))


def _peak(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) open at once (one ending as another starts
    at the same instant does not overlap it)."""
    edges = sorted([(e, -1) for s, e in spans if e > s] + [(s, 1) for s, e in spans if e > s])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _handler(service: Intervals) -> type[BaseHTTPRequestHandler]:
    return json_routes({"/work": service.work, "/find": service.find})


def call(path: str, **body: Any) -> dict[str, Any]:
    """A request to the service at ``$AGENTLOG_OVERLAP_URL`` (from an agent's tool)."""
    return post_json(os.environ[URL_ENV] + path, {"pid": os.getpid(), **body}, timeout=120)
