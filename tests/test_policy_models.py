"""Model-call errors, classified by default (tests/test_policy_table.py has the rows),
through the real OpenAI and Anthropic clients against a real local HTTP server: a tool
calling a model retries a 429, a 503 or a 529 and fails fast on a 400.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from engine import Engine, RetryPolicy

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


def _chat_engine(url: str) -> tuple[Engine, Any]:
    eng = Engine("memory://")
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)

    @eng.tool(retry=RetryPolicy(max_attempts=4, initial=0.0))
    def chat(prompt: str) -> str:
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}]
        )
        return str(reply.choices[0].message.content)

    @eng.agent
    def talker(run: Any) -> str:
        return chat("hello")

    return eng, talker


def test_openai_429_and_503_are_retried_then_the_answer_recorded(
    openai_server: ModelServer,
) -> None:
    openai_server.script = [429, 503]
    eng, talker = _chat_engine(openai_server.url)
    r = eng.run(talker)
    assert (r.status, r.output) == ("completed", "hi"), r.error
    assert openai_server.requests == 3
    kinds = [e.data["kind"] for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert kinds == ["transient", "transient"]


def test_openai_400_fails_at_once(openai_server: ModelServer) -> None:
    openai_server.script = [400]
    eng, talker = _chat_engine(openai_server.url)
    r = eng.run(talker)
    assert r.status == "failed"
    assert openai_server.requests == 1
    failed = [e.data for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert [f["kind"] for f in failed] == ["permanent"]


def test_anthropic_overloaded_529_is_retried(anthropic_server: ModelServer) -> None:
    anthropic_server.script = [529]
    eng = Engine("memory://")
    client = anthropic.Anthropic(base_url=anthropic_server.url, api_key="sk-test", max_retries=0)

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=0.0))
    def say(prompt: str) -> str:
        msg = client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": prompt}]
        )
        return str(msg.content[0].text)  # type: ignore[union-attr]

    @eng.agent
    def speaker(run: Any) -> str:
        return say("hi")

    r = eng.run(speaker)
    assert (r.status, r.output) == ("completed", "hello"), r.error
    assert anthropic_server.requests == 2
