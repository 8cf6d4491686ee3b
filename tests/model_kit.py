"""A local model API for tests: the real OpenAI and Anthropic clients talk to it over
HTTP; it answers each POST with the next scripted status, then 200 with the reply.
Its fixtures (``openai_server``, ``anthropic_server``) are registered in conftest."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

OPENAI_REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}
ANTHROPIC_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


class ModelServer:
    """A local model API: answers each POST with the next scripted status (then 200 with
    the reply), counting the requests."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.script: list[int] = []
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                status = outer.script.pop(0) if outer.script else 200
                body = json.dumps(reply if status == 200 else {"error": {"message": "no"}})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def openai_server() -> Iterator[ModelServer]:
    s = ModelServer(OPENAI_REPLY)
    yield s
    s.server.shutdown()


@pytest.fixture
def anthropic_server() -> Iterator[ModelServer]:
    s = ModelServer(ANTHROPIC_REPLY)
    yield s
    s.server.shutdown()
