"""Decisions under policies: ``run.decide(..., retry=, timeout=, breaker=, classify=)`` and
``@engine.model``, with the real OpenAI and Anthropic clients against a local server.
A decision's failed attempts are ``tool_failed`` events marked ``decision``, its value one
``llm_decided``; a replay calls no model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from engine import (
    CircuitBreaker,
    Engine,
    EngineConfig,
    NonDeterminismError,
    Permanent,
    RetryPolicy,
    Transient,
)
from engine.errors import UsageError
from tests import model_kit
from tests.conftest import all_backends
from tests.model_kit import ModelServer

openai_server = model_kit.openai_server  # the kit's fixtures, used below
anthropic_server = model_kit.anthropic_server

FAST = RetryPolicy(max_attempts=4, initial=0.0, jitter=False)


def _client(server: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


def _asker(client: openai.OpenAI) -> Any:
    def ask(prompt: str) -> str:
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}]
        )
        return str(reply.choices[0].message.content)

    return ask


def _decisions(eng: Engine, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    kinds = {"tool_failed", "retry_scheduled", "llm_decided", "tool_invoked"}
    return [(e.type, e.data) for e in eng.events(run_id) if e.type in kinds]


@all_backends
def test_a_429_and_a_503_are_retried_and_the_answer_recorded_once(
    eng: Engine, openai_server: ModelServer
) -> None:
    openai_server.script = [429, 503]
    ask = _asker(_client(openai_server))

    @eng.agent
    def talker(run: Any) -> str:
        return str(run.decide("chat", ask, "hello", retry=FAST))

    r = eng.run(talker)
    assert (r.status, r.output) == ("completed", "hi"), r.error
    assert openai_server.requests == 3
    seen = _decisions(eng, r.run_id)
    assert [t for t, _ in seen] == [
        "tool_failed",
        "retry_scheduled",
        "tool_failed",
        "retry_scheduled",
        "llm_decided",
    ]
    failed = [d for t, d in seen if t == "tool_failed"]
    assert [(f["kind"], f["decision"], f["final"]) for f in failed] == [
        ("transient", True, False),
        ("transient", True, False),
    ]
    assert seen[-1][1]["attempt"] == 3
    assert eng.resume(r.run_id).output == "hi"  # a finished run: replayed, no request
    assert openai_server.requests == 3


def test_the_default_policy_retries_a_decision(openai_server: ModelServer) -> None:
    """No policy given: a decision retries a 429 as a tool does (RetryPolicy())."""
    openai_server.script = [429]
    eng = Engine("memory://", config=EngineConfig(sleep=lambda s: None))  # backoff not waited
    ask = _asker(_client(openai_server))

    @eng.agent
    def talker(run: Any) -> str:
        return str(run.decide("chat", ask, "hello"))

    r = eng.run(talker)
    assert (r.status, r.output, openai_server.requests) == ("completed", "hi", 2), r.error


@all_backends
def test_a_400_fails_at_once_and_a_resume_asks_again(
    eng: Engine, openai_server: ModelServer
) -> None:
    openai_server.script = [400]
    ask = _asker(_client(openai_server))

    @eng.agent
    def talker(run: Any) -> str:
        return str(run.decide("chat", ask, "hello", retry=FAST))

    r = eng.run(talker)
    assert r.status == "failed" and openai_server.requests == 1
    assert r.error is not None and "chat" in r.error and "BadRequestError" in r.error
    final = [d for t, d in _decisions(eng, r.run_id) if t == "tool_failed"]
    assert [(f["kind"], f["final"]) for f in final] == [("permanent", True)]
    again = eng.resume(r.run_id)  # the failure that ended the run is made again
    assert (again.status, again.output, openai_server.requests) == ("completed", "hi", 2)


@all_backends
def test_a_caught_decision_failure_is_replayed_not_asked_again(
    eng: Engine, openai_server: ModelServer
) -> None:
    openai_server.script = [400]
    ask = _asker(_client(openai_server))
    crash = {"once": True}

    @eng.agent
    def talker(run: Any) -> str:
        try:
            text = run.decide("chat", ask, "hello", retry=FAST)
        except Permanent as e:
            text = "fallback: " + type(e).__name__
        run.checkpoint("after")
        if crash.pop("once", False):
            raise RuntimeError("the process dies here")
        return str(text)

    assert eng.run(talker).status == "failed"
    r = eng.resume(eng.runs()[0].run_id)
    assert (r.status, r.output) == ("completed", "fallback: Permanent"), r.error
    assert openai_server.requests == 1


def test_anthropic_overloaded_is_retried_in_a_decision(anthropic_server: ModelServer) -> None:
    anthropic_server.script = [529]
    eng = Engine("memory://")
    client = anthropic.Anthropic(base_url=anthropic_server.url, api_key="sk-test", max_retries=0)

    def say(prompt: str) -> str:
        msg = client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": prompt}]
        )
        return str(msg.content[0].text)  # type: ignore[union-attr]

    @eng.agent
    def speaker(run: Any) -> str:
        return str(run.decide("say", say, "hi", retry=FAST))

    r = eng.run(speaker)
    assert (r.status, r.output, anthropic_server.requests) == ("completed", "hello", 2)


def test_a_decision_past_its_timeout_is_abandoned_and_retried() -> None:
    eng = Engine("memory://")
    release = threading.Event()
    calls: list[int] = []

    def slow_then_fast() -> str:
        calls.append(1)
        if len(calls) == 1:
            release.wait(30)  # held until the test ends: only the timeout frees the run
            return "late"
        return "fast"

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", slow_then_fast, timeout=0.2, retry=FAST))

    try:
        r = eng.run(agent)
    finally:
        release.set()
    assert (r.status, r.output, len(calls)) == ("completed", "fast", 2), r.error
    failed = [d for t, d in _decisions(eng, r.run_id) if t == "tool_failed"]
    assert failed[0]["kind"] == "transient" and "no result within" in failed[0]["message"]


def test_an_open_breaker_fails_the_decision_fast() -> None:
    eng = Engine("memory://")
    calls: list[int] = []

    def down() -> str:
        calls.append(1)
        raise ConnectionError("model endpoint down")

    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=600)

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", down, retry=FAST, breaker=breaker))

    r = eng.run(agent)
    assert r.status == "failed" and r.error is not None and "circuit open" in r.error
    assert len(calls) == 2  # the third attempt never reached the model


def test_classify_decides_what_a_decision_error_is() -> None:
    eng = Engine("memory://")
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ValueError("the model said something odd")  # permanent by default
        return "ok"

    def mine(exc: BaseException) -> type[Exception] | None:
        return Transient if isinstance(exc, ValueError) else None

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", flaky, retry=FAST, classify=mine))

    r = eng.run(agent)
    assert (r.status, r.output, len(calls)) == ("completed", "ok", 3), r.error


def test_policy_options_are_checked() -> None:
    eng = Engine("memory://")

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", lambda: "x", retry=3))

    r = eng.run(agent)
    assert r.status == "failed" and r.error is not None and "RetryPolicy" in r.error
    with pytest.raises(UsageError, match="timeout"):
        eng.model(timeout=-1)(lambda: "x")


class Reply(pydantic.BaseModel):
    text: str
    score: float


@dataclasses.dataclass
class Plan:
    steps: list[str]


@all_backends
def test_engine_model_records_each_call_as_a_decision_of_its_declared_type(eng: Engine) -> None:
    calls: list[str] = []

    @eng.model(retry=FAST)
    def chat(prompt: str) -> Reply:
        calls.append(prompt)
        return Reply(text=prompt.upper(), score=0.5)

    @eng.model(name="planner")
    async def plan(goal: str) -> Plan:
        calls.append(goal)
        return Plan(steps=[goal, "done"])

    crash = {"once": True}

    @eng.agent
    def agent(run: Any) -> dict[str, Any]:
        a = chat("a")
        b = asyncio.run(_planned(plan))
        assert isinstance(a, Reply) and isinstance(b, Plan)
        if crash.pop("once", False):
            raise RuntimeError("dies after both")
        return {"a": a.text, "b": b.steps}

    assert chat("outside") == Reply(text="OUTSIDE", score=0.5)  # outside a run: plain
    calls.clear()
    assert eng.run(agent).status == "failed"
    r = eng.resume(eng.runs()[0].run_id)
    assert (r.status, r.output) == ("completed", {"a": "A", "b": ["b", "done"]}), r.error
    assert calls == ["a", "b"]  # the resume called no model
    names = [e.data["name"] for e in eng.events(r.run_id) if e.type == "llm_decided"]
    assert names == [chat.__qualname__, "planner"]


async def _planned(plan: Any) -> Any:
    return await plan("b")


@all_backends
def test_an_async_agent_awaits_decisions_under_policies(eng: Engine) -> None:
    calls: list[int] = []

    async def model(n: int) -> int:
        calls.append(n)
        if calls.count(n) == 1:
            raise ConnectionError("first try fails")
        await asyncio.sleep(0)
        return n * 10

    @eng.agent
    async def agent(run: Any) -> list[int]:
        return list(
            await asyncio.gather(
                run.decide("a", model, 1, retry=FAST), run.decide("b", model, 2, retry=FAST)
            )
        )

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", [10, 20]), r.error
    assert sorted(calls) == [1, 1, 2, 2]
    assert eng.resume(r.run_id).output == [10, 20] and len(calls) == 4


def test_changed_decision_arguments_after_failed_attempts_diverge() -> None:
    """A decision whose log holds only failed attempts is still checked on replay."""
    eng = Engine("memory://")
    arg = {"v": "x"}

    def boom(v: str) -> str:
        raise ConnectionError("down")

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", boom, arg["v"], retry=RetryPolicy(max_attempts=2, initial=0)))

    r = eng.run(agent)
    assert r.status == "failed"
    arg["v"] = "y"
    with pytest.raises(NonDeterminismError, match="decide 'm'"):
        eng.resume(r.run_id)


def test_a_secret_passed_positionally_to_a_decision_is_masked() -> None:
    """The decision's arguments are named by its function's parameters: a key given by
    position is a secret too, masked where an error repeats it."""
    eng = Engine("memory://")
    key = "sk-live-0123456789abcdef"

    def chat(api_key: str, prompt: str) -> str:
        raise PermissionError(f"401 invalid key {api_key} for {prompt}")

    model = eng.model(chat)

    @eng.agent
    def agent(run: Any, which: str) -> str:
        if which == "decide":
            return str(run.decide("chat", chat, key, "hi"))
        return str(model(key, "hi"))

    for which in ("decide", "model"):
        r = eng.run(agent, which=which)
        assert r.status == "failed" and "invalid key ***" in str(r.error), r.error
        text = str([e.data for e in eng.events(r.run_id)])
        assert key not in text and key not in str(r.error)
