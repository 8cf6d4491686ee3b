"""A fencing service for the lock tests: an HTTP server in a thread that takes writes of
``(resource, fence, holder, step)`` and rejects a fence lower than the highest it has
seen for the resource, as a storage service guarding itself with fencing tokens does.

It remembers every write it accepted and rejected, in arrival order, so a test can check
that no two holders of one lock ever wrote at once as the service saw it. A write that
carries an idempotency key it has seen gets the first answer again (a re-send after a
crash), and is not counted twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FencingService:
    """The service's books: the highest fence per resource, and every write."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.highest: dict[str, int] = {}
        self.accepted: list[tuple[str, int, str, int]] = []
        self.rejected: list[tuple[str, int, str, int]] = []
        self.answers: dict[str, dict[str, Any]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def write(self, body: dict[str, Any]) -> dict[str, Any]:
        resource, fence = str(body["resource"]), int(body["fence"])
        entry = (resource, fence, str(body["holder"]), int(body["step"]))
        with self.lock:
            key = body.get("key")
            if key is not None and key in self.answers:
                return self.answers[key]
            highest = self.highest.get(resource, 0)
            if fence < highest:
                self.rejected.append(entry)
                answer = {"ok": False, "highest": highest}
            else:
                self.highest[resource] = fence
                self.accepted.append(entry)
                answer = {"ok": True, "highest": fence}
            if key is not None:
                self.answers[key] = answer
            return answer

    def wrote(self, holder: str, step: int) -> bool:
        with self.lock:
            return any(e[2] == holder and e[3] == step for e in self.accepted)

    def check_one_holder_at_a_time(self) -> None:
        """Each fence the service accepted belongs to one holder, and per resource the
        accepted writes come in blocks of one fence each, fences increasing: never two
        holders interleaved."""
        with self.lock:
            accepted = list(self.accepted)
        owners: dict[tuple[str, int], str] = {}
        for resource, fence, holder, _ in accepted:
            assert owners.setdefault((resource, fence), holder) == holder, (fence, accepted)
        for resource in {e[0] for e in accepted}:
            fences = [e[1] for e in accepted if e[0] == resource]
            assert fences == sorted(fences), accepted
            blocks = [f for i, f in enumerate(fences) if i == 0 or fences[i - 1] != f]
            assert len(blocks) == len(set(blocks)), accepted

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(svc: FencingService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            answer = svc.write(body)
            data = json.dumps(answer).encode()
            self.send_response(200 if answer["ok"] else 409)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

    return Handler


@contextmanager
def fencing_service() -> Iterator[FencingService]:
    svc = FencingService()
    try:
        yield svc
    finally:
        svc.stop()
