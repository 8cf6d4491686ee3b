"""When a stream's value is recorded: read to its end, at once; let go (``break``, the
stream held in a variable, an async generator the loop closes later), before the
reader's next call or as the agent returns; never when the agent fails or pauses
mid-stream. A stream read on after another call fails for good, the same on resume.
Replayed chunks come back as the chunk type the stream function declares."""

from __future__ import annotations

import contextlib
import signal
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
from agents.kit import engine_call, python
from conftest import all_backends, backends

from engine import Budget, Engine


def _decided(eng: Engine, run_id: str) -> list[Any]:
    return [e.data["value"] for e in eng.events(run_id) if e.type == "llm_decided"]


KILLED = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from engine import Engine

    engine = Engine.open(os.environ["URL"])
    marks = Path(os.environ["MARKS"])

    def model():
        with marks.open("a") as f:
            f.write("call\\n")
        yield f"answer-{os.getpid()} "
        yield "more"

    async def amodel():
        with marks.open("a") as f:
            f.write("call\\n")
        yield f"answer-{os.getpid()} "
        yield "more"

    @engine.tool(side_effect=True)
    def act(x: str) -> dict:
        with marks.open("a") as f:
            f.write("act " + x + "\\n")
        return {"did": x}

    def die():
        if os.environ.get("KILL") == "1":
            os.kill(os.getpid(), signal.SIGKILL)

    @engine.agent
    def held(run):
        s = run.stream("s", model)  # held in a variable: not closed by the break
        for first in s:
            break
        act(first)
        die()
        return first

    @engine.agent
    async def abroke(run):
        async for first in run.stream("s", amodel):
            break  # an async generator is closed by the loop, later
        await asyncio.sleep(0)
        act(first)
        die()
        return first

    if __name__ == "__main__":
        agent = held if sys.argv[2] == "held" else abroke
        print(engine.run(agent, run_id=sys.argv[1]).output)
    """
)


@backends("sqlite", "postgres")
def test_a_stream_let_go_is_recorded_before_the_next_call_so_a_kill_after_it_replays(
    store_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "let_go.py"
    script.write_text(KILLED)
    for agent in ("held", "abroke"):
        marks = tmp_path / f"marks-{agent}"
        env = {"URL": store_url, "MARKS": str(marks), "KILL": "1"}
        killed = python(str(script), agent, agent, env=env, cwd=tmp_path)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        out = engine_call(store_url, "resume", agent, env={**env, "KILL": "0"}, cwd=tmp_path)
        lines = marks.read_text().splitlines()
        assert lines[0] == "call" and lines[1].startswith("act answer-")
        first = lines[1].removeprefix("act ")
        assert (out["status"], out["output"]) == ("completed", first), out
        assert lines == ["call", "act " + first]  # no second model call, no second act


@all_backends
def test_an_error_mid_stream_records_nothing_and_the_resume_asks_again(eng: Engine) -> None:
    calls: list[int] = []
    fail = {"on": True}

    def model() -> Iterator[str]:
        calls.append(1)
        yield from ["The refund ", "is NOT ", "approved."]

    @eng.agent
    def relay(run: Any) -> str:
        got = []
        for chunk in run.stream("answer", model):
            if fail["on"] and len(got) == 1:
                raise ConnectionResetError("the client went away")
            got.append(chunk)
        return "".join(got)

    r = eng.run(relay)
    assert r.status == "failed" and _decided(eng, r.run_id) == []
    fail["on"] = False
    done = eng.resume(r.run_id)
    assert (done.status, done.output, len(calls)) == ("completed", "The refund is NOT approved.", 2)


@all_backends
def test_a_stream_read_on_after_another_call_fails_for_good(eng: Engine) -> None:
    calls: list[str] = []

    def model() -> Iterator[str]:
        yield from ["a", "b", "c"]

    @eng.tool
    def forward(chunk: str) -> str:
        calls.append(chunk)
        return chunk

    @eng.agent
    def per_chunk(run: Any) -> str:
        return "".join(forward(c) for c in run.stream("answer", model))

    r = eng.run(per_chunk)
    assert r.status == "failed" and "before making other calls" in str(r.error)
    again = eng.resume(r.run_id)  # not completed with what was recorded: the same failure
    assert again.status == "failed" and again.error == r.error


@all_backends
def test_a_budget_past_by_a_stream_let_go_fails_the_run(eng: Engine) -> None:
    sent: list[str] = []

    def model() -> Iterator[str]:
        yield "x"
        yield "y"

    @eng.tool(side_effect=True)
    def email(text: str) -> str:
        sent.append(text)
        return "sent"

    @eng.agent(budget=Budget(tokens=100))
    def agent(run: Any) -> str:
        def counted() -> Iterator[str]:
            run.usage(1000, 0)  # inside the stream: recorded with it
            yield from model()

        chunk = next(iter(run.stream("s", counted)))  # one chunk taken, the stream held
        return str(email(chunk))

    r = eng.run(agent)
    assert r.status == "failed" and "BudgetExhausted" in str(r.error) and sent == []


class Delta(msgspec.Struct):
    text: str


class Chunk(msgspec.Struct):
    delta: Delta


@all_backends
def test_replayed_chunks_come_back_as_the_declared_chunk_type(eng: Engine) -> None:
    seen: list[list[Any]] = []

    def model() -> Iterator[Chunk]:
        yield Chunk(Delta("Hel"))
        yield Chunk(Delta("lo"))

    async def amodel() -> AsyncIterator[Chunk]:
        yield Chunk(Delta("!"))

    @eng.agent
    async def agent(run: Any) -> str:
        got = [c for c in run.stream("a", model)]
        got += [c async for c in run.stream("b", amodel)]
        seen.append(got)
        run.ask("more?")
        return "".join(c.delta.text for c in got)

    r = eng.run(agent)
    assert r.status == "paused", r.error
    done = eng.answer(r.run_id, "no")
    assert (done.status, done.output) == ("completed", "Hello!"), done.error
    assert seen[0] == seen[-1] and all(type(c) is Chunk for c in seen[-1])


@all_backends
def test_a_stream_let_go_before_the_agent_returns_is_recorded_then(eng: Engine) -> None:
    calls: list[int] = []

    def model() -> Iterator[str]:
        calls.append(1)
        yield from ["first ", "second"]

    @eng.agent
    def agent(run: Any) -> str:
        stream = run.stream("s", model)  # held: not closed by the break
        first = next(iter(stream))  # one chunk taken, then let go
        return str(first)

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "first "), r.error
    assert _decided(eng, r.run_id) == ["first "]
    assert eng.resume(r.run_id).output == "first " and calls == [1]


class Abandon(Exception):
    pass


@all_backends
def test_a_stream_its_reader_throws_into_is_not_recorded(eng: Engine) -> None:
    """A reader that gives a stream up by throwing into it (as pydantic-ai's wrapper does
    for a response it drops) records nothing, even if the agent goes on."""
    calls: list[int] = []

    def model() -> Iterator[str]:
        calls.append(1)
        yield from ["a", "b"]

    @eng.agent
    def agent(run: Any) -> str:
        stream = run.stream("s", model)
        first = next(stream)
        with contextlib.suppress(Abandon):
            stream.throw(Abandon())
        run.checkpoint("went on")
        return str(first)

    r = eng.run(agent)
    assert r.status == "completed" and _decided(eng, r.run_id) == []
