"""The model workload's model: a real HTTP server in the campaign's driver process that
the agents' children call with ``httpx``, and its books.

    POST /v1/plan    a Plan as JSON, after 0-2 answers of 429 per decision
    POST /v1/stream  the summary's lines, written one by one (a kill mid-stream cuts it)
    POST /v1/check   the agent's report of a value it got (live or replayed), right or not

Every model request names its run and decision. The server looks the decision up in the
campaign's store as the request arrives: a request for a decision the log already
records is a **duplicated decision** (a replay that called the model, or a recorded
value lost), which must never happen. Runs the store does not know (the uncrashed
reference runs, in the driver's memory store) are served but not looked up.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .httpd import QuietHandler, Served
from .model_replies import plan_for, rate_limited, stream_lines

URL_ENV = "AGENTLOG_MODEL_URL"  # where the agents find the server
CHUNK_PAUSE = 0.001  # seconds between two streamed lines: the window a kill lands in


@dataclass
class Books:
    """What the model server saw."""

    requests: Counter[str] = field(default_factory=Counter)  # "campaign plan", ...
    rate_limited: Counter[str] = field(default_factory=Counter)  # 429s: campaign, reference
    limited: Counter[tuple[str, str]] = field(default_factory=Counter)  # 429s per decision
    answered: Counter[tuple[str, str]] = field(default_factory=Counter)  # 200s per decision
    duplicated: list[str] = field(default_factory=list)  # "run decision" already recorded
    streams_cut: set[tuple[str, str]] = field(default_factory=set)  # a reader died mid-way
    streams_done: set[tuple[str, str]] = field(default_factory=set)
    checks: Counter[str] = field(default_factory=Counter)  # live / replayed
    mismatches: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        again = [k for k, n in self.answered.items() if n > 1]
        return {
            "model_requests": dict(sorted(self.requests.items())),
            "rate_limited_429": dict(sorted(self.rate_limited.items())),
            "decisions_asked_again_unrecorded": len(again),
            "streams_cut": len(self.streams_cut),
            "streams_cut_then_completed": len(self.streams_cut & self.streams_done),
            "typed_checks": dict(sorted(self.checks.items())),
        }


class ModelServer:
    """The local model API; ``recorded(run_id, name)`` says whether the campaign's store
    already holds that decision (called from the server's threads)."""

    def __init__(self, recorded: Any) -> None:
        self.books = Books()
        self.lock = threading.Lock()
        self.recorded = recorded
        self.served = Served(_handler(self))
        self.url = self.served.url

    def close(self) -> None:
        self.served.close()

    # --- the endpoints -------------------------------------------------------------

    def asked(self, endpoint: str, body: dict[str, Any]) -> tuple[str, str]:
        key = (body["run"], body["name"])
        already = self.recorded(*key)
        with self.lock:
            self.books.requests[f"{_who(key[0])} {endpoint}"] += 1
            if already:
                self.books.duplicated.append(f"{key[0]} {key[1]} ({endpoint})")
        return key

    def plan(self, body: dict[str, Any]) -> tuple[int, bytes]:
        key = self.asked("plan", body)
        with self.lock:
            if self.books.limited[key] < rate_limited(*key):
                self.books.limited[key] += 1
                self.books.rate_limited[_who(key[0])] += 1
                return 429, b'{"error": {"message": "rate limited", "type": "rate_limit"}}'
            self.books.answered[key] += 1
        return 200, plan_for(body["op"], body["cents"]).model_dump_json().encode()

    def check(self, body: dict[str, Any]) -> None:
        """A value the agent got; a reference run's is not counted as a check (its
        replays, in this process, cannot tell themselves from live calls), but a wrong
        one is a mismatch all the same."""
        with self.lock:
            if str(body["run"]).startswith("campaign-"):
                self.books.checks["replayed" if body["replayed"] else "live"] += 1
            if not body["ok"]:
                self.books.mismatches.append(f"{body['run']} {body['name']}: {body['detail']}")


def _who(run_id: str) -> str:
    """Whose request: a crashed run's (``campaign``) or an uncrashed twin's."""
    return "campaign" if run_id.startswith("campaign-") else "reference"


def _handler(model: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path == "/v1/plan":
                self._send(*model.plan(body))
            elif self.path == "/v1/stream":
                self._stream(body)
            elif self.path == "/v1/check":
                model.check(body)
                self._send(204, b"")
            else:
                self._send(404, b"{}")

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, body: dict[str, Any]) -> None:
            key = model.asked("stream", body)
            lines = [s.encode() for s in stream_lines(body["op"], body["receipt"])]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(sum(map(len, lines))))
            self.end_headers()
            try:
                for line in lines:
                    self.wfile.write(line)
                    self.wfile.flush()
                    time.sleep(CHUNK_PAUSE)
            except OSError:  # the reader was killed mid-stream
                with model.lock:
                    model.books.streams_cut.add(key)
                return
            with model.lock:
                model.books.streams_done.add(key)

    return Handler
