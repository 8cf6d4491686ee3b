"""``run.stream``: a model call's chunks reach the agent live; the assembled value is
recorded once (one ``llm_decided``), and a replay yields it as one chunk, so code that
joins what it receives gets the same value without calling the model. A run killed
mid-stream records nothing of it, and its resume calls the model again.
"""

from __future__ import annotations

import signal
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.kit import Crash, engine_call, python
from conftest import all_backends, backends

from engine import Engine


def _decided(eng: Engine, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == "llm_decided"]


@all_backends
def test_chunks_arrive_live_and_replay_yields_the_joined_value_once(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    received: list[list[str]] = []

    def model(prompt: str) -> Iterator[str]:
        calls["model"] += 1
        yield from ["Hel", "lo, ", prompt]

    @eng.agent
    def writer(run: Any, prompt: str) -> str:
        chunks = list(run.stream("answer", model, prompt))
        received.append(chunks)
        run.ask("more?")
        return "".join(chunks)

    r = eng.run(writer, prompt="world")
    assert r.status == "paused", r.error
    assert received == [["Hel", "lo, ", "world"]]
    assert [d["value"] for d in _decided(eng, r.run_id)] == ["Hello, world"]

    done = eng.answer(r.run_id, "no")
    assert (done.status, done.output) == ("completed", "Hello, world")
    assert received[-1] == ["Hello, world"]  # replayed: one chunk, the recorded value
    assert calls["model"] == 1
    assert len(_decided(eng, r.run_id)) == 1


@all_backends
def test_async_generators_stream_with_async_for(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    async def model(n: int) -> AsyncIterator[str]:
        calls["model"] += 1
        for i in range(n):
            yield str(i)

    @eng.agent
    async def counter(run: Any) -> str:
        out = [chunk async for chunk in run.stream("digits", model, 4)]
        return "|".join(out)

    r = eng.run(counter)
    assert (r.status, r.output) == ("completed", "0|1|2|3"), r.error
    assert [d["value"] for d in _decided(eng, r.run_id)] == ["0123"]
    assert calls["model"] == 1


@all_backends
def test_assemble_builds_the_recorded_value_from_the_chunks(eng: Engine) -> None:
    def deltas() -> Iterator[dict[str, Any]]:
        yield {"text": "a", "n": 1}
        yield {"text": "b", "n": 2}

    def merge(chunks: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "text": "".join(c["text"] for c in chunks),
            "n": sum(c["n"] for c in chunks),
        }

    @eng.agent
    def merged(run: Any) -> Any:
        return list(run.stream("reply", deltas, assemble=merge))

    r = eng.run(merged)
    assert r.output == [{"text": "a", "n": 1}, {"text": "b", "n": 2}], r.error
    assert _decided(eng, r.run_id)[0]["value"] == {"text": "ab", "n": 3}
    assert eng.verify(r.run_id).status == "completed"


@all_backends
def test_a_crash_mid_stream_records_nothing_and_resume_calls_the_model_again(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    def model() -> Iterator[str]:
        calls["model"] += 1
        yield "par"
        if calls["model"] == 1:
            raise Crash("killed mid-stream")
        yield "tial"

    @eng.agent
    def fragile(run: Any) -> str:
        return "".join(run.stream("answer", model))

    with pytest.raises(Crash):
        eng.run(fragile, run_id="stream-crash")
    assert _decided(eng, "stream-crash") == []
    assert eng.state("stream-crash").status == "running"
    done = eng.resume("stream-crash")
    assert (done.status, done.output) == ("completed", "partial"), done.error
    assert calls["model"] == 2
    assert [d["value"] for d in _decided(eng, "stream-crash")] == ["partial"]


def test_a_durable_tool_called_inside_the_stream_is_a_plain_call() -> None:
    """The stream's body runs outside the run (as a decision's does): a tool it calls is
    covered by the recorded value, so the call numbers stay aligned on replay."""
    eng = Engine("memory://")
    calls: Counter[str] = Counter()

    @eng.tool
    def lookup(q: str) -> str:
        calls["lookup"] += 1
        return q.upper()

    def model() -> Iterator[str]:
        yield lookup("x")
        yield lookup("y")

    @eng.agent
    def agent(run: Any) -> str:
        text = "".join(run.stream("s", model))
        run.ask("ok?")
        return text

    r = eng.run(agent)
    assert [e.type for e in eng.events(r.run_id)].count("tool_succeeded") == 0
    assert eng.answer(r.run_id, "y").output == "XY"
    assert calls["lookup"] == 2


def test_assemble_must_be_a_function() -> None:
    eng = Engine("memory://")

    @eng.agent
    def bad(run: Any) -> Any:
        return list(run.stream("s", lambda: iter("ab"), assemble="join"))

    r = eng.run(bad)
    assert r.status == "failed" and r.error is not None and "assemble=" in r.error


AGENT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from engine import Engine

    engine = Engine.open(os.environ["URL"])
    marks = Path(os.environ["MARKS"])

    def model():
        with marks.open("a") as f:
            f.write("call\\n")
        yield "one "
        if os.environ.get("KILL") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        yield "two"

    @engine.agent
    def streamer(run):
        return "".join(run.stream("answer", model))

    if __name__ == "__main__":
        print(engine.run(streamer, run_id=sys.argv[1]).output)
    """
)


@backends("sqlite", "postgres")  # a killed process takes an in-memory store with it
def test_sigkill_mid_stream_then_resume_in_a_new_process(store_url: str, tmp_path: Path) -> None:
    script = tmp_path / "stream_agent.py"
    script.write_text(AGENT)
    marks = tmp_path / "marks"
    env = {"URL": store_url, "MARKS": str(marks), "KILL": "1"}
    killed = python(str(script), "killed-stream", env=env, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL
    eng = Engine(store_url)
    assert _decided(eng, "killed-stream") == []
    out = engine_call(store_url, "resume", "killed-stream", env={**env, "KILL": "0"}, cwd=tmp_path)
    assert (out["status"], out["output"]) == ("completed", "one two"), out
    assert marks.read_text().splitlines() == ["call", "call"]
    assert [d["value"] for d in _decided(eng, "killed-stream")] == ["one two"]
    eng.close()


@all_backends
def test_an_agent_that_stops_reading_early_records_what_it_received(eng: Engine) -> None:
    """``break`` out of a stream: what the agent received is the decision, recorded then,
    so its replay gets the same and calls no model again."""
    calls: Counter[str] = Counter()

    def model() -> Iterator[str]:
        calls["model"] += 1
        yield from ["first ", "second ", "third"]

    @eng.agent
    def impatient(run: Any) -> str:
        got = []
        for chunk in run.stream("answer", model):
            got.append(chunk)
            if len(got) == 2:
                break
        run.ask("go on?")
        return "".join(got)

    r = eng.run(impatient)
    assert r.status == "paused", r.error
    assert [d["value"] for d in _decided(eng, r.run_id)] == ["first second "]
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "first second "), done.error
    assert calls["model"] == 1


@all_backends
def test_chunks_that_are_not_text_replay_one_by_one(eng: Engine) -> None:
    """With the default assembly, chunks that are not text are kept as a list and a
    replay yields them one by one, as they came live."""
    seen: list[list[Any]] = []

    def events() -> Iterator[dict[str, int]]:
        yield {"i": 1}
        yield {"i": 2}

    @eng.agent
    def collector(run: Any) -> None:
        seen.append(list(run.stream("events", events)))
        run.ask("again?")

    r = eng.run(collector)
    eng.answer(r.run_id, "yes")
    assert seen[0] == seen[-1] == [{"i": 1}, {"i": 2}]
