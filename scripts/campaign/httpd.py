"""A local HTTP server in the campaign's driver process (a thread of its own), as the
model and ledger workloads' services use it: children killed mid-request are no error."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[[dict[str, Any]], dict[str, Any]]


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and lets a killed child's connection go."""

    def log_message(self, *args: Any) -> None:
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # a killed child's connection
            self.close_connection = True


class Served:
    """``handler`` served on a free port of ``host`` (``url``) until ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_routes(
    routes: dict[str, Route], seen: Callable[[str], None] | None = None
) -> type[BaseHTTPRequestHandler]:
    """A handler of ``POST <path>`` with a JSON body, answered by ``routes[path]`` (404
    for another path, 409 when the route raises KeyError); ``seen(path)`` is told of
    each request. A body cut short by a kill is let go."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            except ValueError:  # a request cut short by a kill
                return
            route = routes.get(self.path)
            if seen is not None:
                seen(self.path)
            try:
                status, out = (200, route(body)) if route else (404, {"error": self.path})
            except KeyError as e:
                status, out = 409, {"error": str(e)}
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``POST url`` with ``body`` as JSON: the JSON answer."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return dict(json.loads(resp.read()))
