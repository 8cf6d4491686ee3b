"""A real HTTP service on a loopback socket for the client-library tests.

``POST /charge`` with a JSON body ``{"order": ...}`` charges the order: the service counts
every request it receives and every effect it applies, deduplicating effects by the
``Idempotency-Key`` header when the client sends one. ``GET /effects/KEY`` answers the
effect recorded under KEY (200) or 404: what a verifier asks. How the next POSTs are
answered is scripted (``script``, consumed in order; then ``ok``):

- ``ok``: apply the effect, answer 200 with the receipt
- ``stall``: apply the effect, then never answer (until the service stops)
- ``drop``: apply the effect, then close the connection without a response
- ``chunked``: apply the effect, then close mid-way through a chunked 200 response
- ``"503"``, ``"429"``, ``"400"``, ...: answer that status without applying anything
- ``"500+"``: apply the effect, then answer 500 (the server acted, then failed)

The service can start *refusing* (bound, not listening: connections are refused) or as a
*black hole* (listening with a full backlog: connects time out), and ``up()`` makes it
serve on the same port.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

READ_TIMEOUT = 1.0  # a client's read timeout against a stalling service (never elapsed-checked)


class Loopback:
    """The service's state: requests received, effects applied, the script of answers."""

    def __init__(self, start: str = "up") -> None:
        self.requests: list[tuple[str, str | None]] = []  # (order, idempotency key)
        self.effects: dict[str, dict[str, Any]] = {}  # by key (or a fresh id): receipt
        self.lookups: list[str] = []
        self.script: list[str] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self), False)
        self.server.daemon_threads = True
        # A dropped or stalled connection is the point here, not an error to print.
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self.server.server_bind()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._fillers: list[socket.socket] = []
        self._thread: threading.Thread | None = None
        if start == "up":
            self.up()
        elif start == "black_hole":
            self._black_hole()

    def _black_hole(self) -> None:
        """Listen with a backlog already full: a new connect is never answered."""
        self.server.socket.listen(0)
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with suppress(BlockingIOError):  # the connect completes in the backlog
                filler.connect(self.server.server_address)
            self._fillers.append(filler)

    def up(self) -> None:
        """Start serving on the service's port (idempotent)."""
        if self._thread is not None:
            return
        for filler in self._fillers:
            filler.close()
        self.server.server_activate()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        if self._thread is not None:
            self.server.shutdown()
        self.server.server_close()
        for filler in self._fillers:
            filler.close()

    def charges(self, order: str) -> int:
        """How many effects were applied for ``order``."""
        with self.lock:
            return sum(1 for e in self.effects.values() if e["order"] == order)

    def keys(self) -> list[str | None]:
        with self.lock:
            return [key for _, key in self.requests]

    def _receive(self, order: str, key: str | None) -> tuple[str, dict[str, Any] | None]:
        with self.lock:
            self.requests.append((order, key))
            answer = self.script.pop(0) if self.script else "ok"
            if answer.isdigit():  # refused or not served: nothing applied
                return answer, None
            slot = key if key is not None else f"nokey-{len(self.requests)}"
            if slot not in self.effects:
                receipt = f"r-{order}-{len(self.effects) + 1}"
                self.effects[slot] = {"order": order, "receipt": receipt}
            return answer, self.effects[slot]


def _handler(svc: Loopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            key = self.path.removeprefix("/effects/")
            with svc.lock:
                svc.lookups.append(key)
                found = svc.effects.get(key)
            self._send(200, found) if found else self._send(404, {"error": "no such effect"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            answer, effect = svc._receive(body["order"], self.headers.get("Idempotency-Key"))
            if answer == "stall":
                svc.release.wait()
            elif answer in ("drop", "chunked"):
                if answer == "chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b'9\r\n{"receipt\r\n')
                    self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            elif answer.rstrip("+").isdigit():
                error = {"error": f"status {answer}", "detail": "x" * 5000}  # > 2 KiB
                self._send(int(answer.rstrip("+")), error)
            else:
                assert effect is not None
                self._send(200, effect)
            self.close_connection = True

    return Handler


@contextmanager
def loopback(start: str = "up") -> Iterator[Loopback]:
    svc = Loopback(start)
    try:
        yield svc
    finally:
        svc.stop()
