"""``run.stream(..., retry=, classify=)``: a stream that fails as it opens (a real 429
from a local server, through httpx) is retried like a decision; one that breaks after
chunks reached the agent fails for good with the partial text kept as evidence, and a
replay raises the same error at the same call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from engine import Engine, EngineConfig, RetryPolicy, Transient
from tests import model_kit
from tests.conftest import all_backends
from tests.model_kit import ModelServer

openai_server = model_kit.openai_server  # the kit's fixture, used below

FAST = RetryPolicy(max_attempts=4, initial=0.0, jitter=False)


def _attempts(eng: Engine, run_id: str) -> list[tuple[str, Any]]:
    kinds = {"tool_failed", "retry_scheduled", "llm_decided"}
    return [(e.type, e.data.get("attempt")) for e in eng.events(run_id) if e.type in kinds]


@all_backends
def test_a_429_as_the_stream_opens_is_retried(eng: Engine, openai_server: ModelServer) -> None:
    openai_server.script = [429, 503]

    def model(prompt: str) -> Iterator[str]:
        httpx.post(openai_server.url + "/v1/chat", json={"p": prompt}).raise_for_status()
        yield from ["Hi ", prompt]

    @eng.agent
    def writer(run: Any, prompt: str) -> str:
        return "".join(run.stream("answer", model, prompt, retry=FAST))

    r = eng.run(writer, prompt="Ada")
    assert (r.status, r.output) == ("completed", "Hi Ada"), r.error
    assert openai_server.requests == 3
    assert _attempts(eng, r.run_id) == [
        ("tool_failed", 1),
        ("retry_scheduled", 2),
        ("tool_failed", 2),
        ("retry_scheduled", 3),
        ("llm_decided", 3),
    ]
    assert eng.resume(r.run_id).output == "Hi Ada" and openai_server.requests == 3


@all_backends
def test_an_async_stream_is_retried_off_the_loop(eng: Engine, openai_server: ModelServer) -> None:
    openai_server.script = [429]

    async def model(n: int) -> AsyncIterator[str]:
        async with httpx.AsyncClient() as client:
            (await client.post(openai_server.url + "/v1/chat", json={})).raise_for_status()
        for i in range(n):
            yield f"{i};"

    @eng.agent
    async def writer(run: Any) -> str:
        return "".join([c async for c in run.stream("count", model, 3, retry=FAST)])

    r = eng.run(writer)
    assert (r.status, r.output, openai_server.requests) == ("completed", "0;1;2;", 2), r.error


@all_backends
def test_a_stream_broken_midway_fails_for_good_with_its_partial_text(eng: Engine) -> None:
    calls: list[int] = []

    def model() -> Iterator[str]:
        calls.append(1)
        yield "The answer "
        yield "is "
        if len(calls) == 1:
            raise ConnectionResetError("the connection dropped mid-stream")
        yield "42"

    @eng.agent
    def writer(run: Any) -> str:
        return "".join(run.stream("answer", model, retry=FAST))

    r = eng.run(writer)
    assert r.status == "failed" and r.error is not None and "dropped mid-stream" in r.error
    (failed,) = [e.data for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert failed["final"] and failed["decision"] and failed["kind"] == "transient"
    assert failed["evidence"]["chunks"] == 2
    assert failed["evidence"]["partial"] == "The answer is "
    assert not [e for e in eng.events(r.run_id) if e.type == "llm_decided"]
    again = eng.resume(r.run_id)  # the failure that ended the run: the model is asked again
    assert (again.status, again.output, len(calls)) == ("completed", "The answer is 42", 2)


def test_a_caught_broken_stream_is_replayed_as_the_same_error() -> None:
    eng = Engine("memory://")
    calls: list[int] = []
    crash = {"once": True}

    def model() -> Iterator[str]:
        calls.append(1)
        yield "partial"
        raise ConnectionResetError("dropped")

    @eng.agent
    def writer(run: Any) -> str:
        got: list[str] = []
        try:
            for chunk in run.stream("answer", model):
                got.append(chunk)
        except Transient as e:
            got.append(f"|{type(e).__name__}")
        run.checkpoint("after")
        if crash.pop("once", False):
            raise RuntimeError("dies")
        return "".join(got)

    assert eng.run(writer).status == "failed"
    r = eng.resume(eng.runs()[0].run_id)
    # Live the agent saw "partial" before the error; a replay raises at once: what a
    # broken stream gave is evidence, never a recorded value.
    assert (r.status, r.output, len(calls)) == ("completed", "|Transient", 1), r.error


def test_a_permanent_failure_as_it_opens_is_not_retried() -> None:
    eng = Engine("memory://", config=EngineConfig(sleep=lambda s: None))
    calls: list[int] = []

    def model() -> Iterator[str]:
        calls.append(1)
        raise ValueError("bad request")
        yield ""  # a generator

    @eng.agent
    def writer(run: Any) -> str:
        return "".join(run.stream("answer", model))

    r = eng.run(writer)
    assert r.status == "failed" and len(calls) == 1


def test_stream_policies_it_does_not_take_are_refused() -> None:
    eng = Engine("memory://")

    @eng.agent
    def writer(run: Any) -> str:
        return "".join(run.stream("answer", lambda: iter(["x"]), timeout=5))

    r = eng.run(writer)
    assert r.status == "failed" and "takes retry= and classify=, not timeout=" in str(r.error)
    assert str(r.error).startswith("UsageError")
