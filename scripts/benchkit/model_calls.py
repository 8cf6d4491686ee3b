"""The model-call rows of scripts/bench_steps.py: a recorded decision whose function
returns a 2 KB pydantic model, and a ``run.stream`` of 200 chunks, each measured against
the same function called bare (no engine) in the same run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

Runner = Callable[[int], float]  # calls -> seconds


def _reply_type() -> Any:
    """A chat completion as an SDK returns it, as a pydantic model (None: no pydantic)."""
    try:
        from pydantic import BaseModel
    except ImportError:
        return None

    class Choice(BaseModel):
        index: int
        text: str
        finish_reason: str

    class Usage(BaseModel):
        input_tokens: int
        output_tokens: int

    class Reply(BaseModel):
        id: str
        model: str
        choices: list[Choice]
        usage: Usage

    return Reply


REPLY = _reply_type()
CHUNKS = 200
_TEXT = "The quick brown fox jumps over the lazy dog; " * 8  # 360 characters


def chat(i: int) -> REPLY:  # type: ignore[valid-type]
    """The model call: builds a ~2 KB pydantic reply (as an SDK parses one)."""
    choices = [{"index": k, "text": f"{k}:{i} {_TEXT}", "finish_reason": "stop"} for k in range(5)]
    usage = {"input_tokens": 100 + i % 7, "output_tokens": 50}
    return REPLY.model_validate(  # type: ignore[no-any-return]
        {"id": f"r{i}", "model": "bench", "choices": choices, "usage": usage}
    )


def tokens(i: int) -> Iterator[str]:
    """The streamed model call: 200 text chunks."""
    for k in range(CHUNKS):
        yield f"t{k}.{i} "


def bare_runner(stream: bool) -> Runner:
    """The same model function called directly, no engine (a stream: joined)."""

    def go(steps: int) -> float:
        started = time.perf_counter()
        for i in range(steps):
            if stream:
                "".join(tokens(i))
            else:
                chat(i)
        return time.perf_counter() - started

    return go


def model_runner(url: str, stream: bool) -> Runner:
    """``steps`` recorded model calls in one run: decisions, or 200-chunk streams."""
    from engine import Engine

    engine = Engine.open(url)

    @engine.agent(name=f"bench:model_{'stream' if stream else 'decide'}")
    def agent(run: Any, steps: int) -> int:
        for i in range(steps):
            if stream:
                assert "".join(run.stream("answer", tokens, i)).startswith("t0.")
            else:
                assert isinstance(run.decide("chat", chat, i), REPLY)
        return steps

    return timed_run(engine, agent)


def timed_run(engine: Any, agent: Any) -> Runner:
    """``steps`` -> the seconds one run of ``agent(steps=steps)`` takes to complete."""

    def go(steps: int) -> float:
        started = time.perf_counter()
        result = engine.run(agent, steps=steps)
        elapsed = time.perf_counter() - started
        assert result.status == "completed", result
        return elapsed

    return go


MODEL_ROWS = {  # row -> (bare row it is measured against, stream?)
    "decision -> 2 KB pydantic model": ("bare call -> 2 KB pydantic model", False),
    "stream of 200 chunks": ("bare 200-chunk generator, joined", True),
}


def model_table(samples: dict[str, list[float]], repeat: int, steps: int) -> list[str]:
    """Recorded model calls against the bare call, measured in the same run."""
    lines = [
        f"Model calls, ms per call (median of {repeat} runs x {steps} calls; "
        "2 cores, shared VM). Command: `python scripts/bench_steps.py "
        f"--repeat {repeat} --steps {steps} --models-only`",
        "",
        "| call | ms/call | bare ms/call | vs bare | added ms/call | vs read-only tool step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row, (bare, _) in MODEL_ROWS.items():
        if bare not in samples:
            lines.append(f"| {row} | pydantic not installed | | | | |")
            continue
        base = statistics.median(samples[bare])
        for store in ("sqlite", "postgres"):
            name = f"agentlog {store} {row}"
            if name in samples:
                med = statistics.median(samples[name])
                step = statistics.median(samples[f"agentlog {store} (read-only step)"])
                lines.append(
                    f"| {name} | {med:.3f} | {base:.4f} | {med / base:.1f}x | {med - base:.3f} "
                    f"| {med / step:.2f}x |"
                )
    return lines
