"""Model-call errors, classified by default (tests/test_policy_table.py has the rows),
through the real OpenAI and Anthropic clients against a real local HTTP server: a tool
calling a model retries a 429, a 503 or a 529 and fails fast on a 400.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai

from engine import Engine, RetryPolicy
from tests import model_kit
from tests.model_kit import ModelServer

openai_server = model_kit.openai_server  # the kit's fixtures, used below
anthropic_server = model_kit.anthropic_server


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
