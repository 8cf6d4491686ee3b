"""A durable call made inside another, on every store: a tool called from a decision's
function or from another tool's body is a plain call (the outer call's recorded outcome
covers it), so re-executing the agent after an answer replays without divergence and
runs nothing twice, in sync and async agents alike."""

from __future__ import annotations

from collections import Counter
from typing import Any

from conftest import all_backends

from engine import Engine


@all_backends
def test_a_tool_called_inside_a_decision_or_a_tool_is_part_of_it(eng: Engine) -> None:
    """A tool called from inside a decision's function or another tool's body runs as a
    plain call (the outer call's recorded outcome covers it), so answering the paused run
    replays it without a NonDeterminismError and runs nothing twice."""
    count: Counter[str] = Counter()

    @eng.tool
    def fetch(q: str) -> str:
        count["fetch"] += 1
        return f"data:{q}"

    @eng.tool
    def enrich(q: str) -> str:
        count["enrich"] += 1
        return fetch(q) + "+enriched"

    def plan(q: str) -> str:
        count["plan"] += 1
        return fetch(q) + "+planned"

    @eng.agent
    def nested_agent(run: Any, q: str) -> dict[str, Any]:
        a = run.decide("plan", plan, q)
        b = enrich(q)
        c = fetch("last")
        answer = run.ask("go?")
        return {"a": a, "b": b, "c": c, "answer": answer}

    _paused_then_answered_executing_each_once(eng, nested_agent, count)


@all_backends
def test_an_async_tool_called_inside_an_async_decision_or_tool_is_part_of_it(
    eng: Engine,
) -> None:
    """The same for async agents: awaited tools inside an async tool's body or an async
    decision are plain calls, so re-execution after an answer replays without divergence."""
    count: Counter[str] = Counter()

    @eng.tool
    async def fetch(q: str) -> str:
        count["fetch"] += 1
        return f"data:{q}"

    @eng.tool
    async def enrich(q: str) -> str:
        count["enrich"] += 1
        return await fetch(q) + "+enriched"

    async def plan(q: str) -> str:
        count["plan"] += 1
        return await fetch(q) + "+planned"

    @eng.agent
    async def nested_async_agent(run: Any, q: str) -> dict[str, Any]:
        a = await run.decide("plan", plan, q)
        b = await enrich(q)
        c = await fetch("last")
        answer = run.ask("go?")
        return {"a": a, "b": b, "c": c, "answer": answer}

    _paused_then_answered_executing_each_once(eng, nested_async_agent, count)


def _paused_then_answered_executing_each_once(eng: Engine, agent: Any, count: Counter[str]) -> None:
    """``agent`` (the nested calls, then an ask) pauses; the answer re-executes it from the
    top to completion, replaying every call: the plan, enrich and three fetches ran once."""
    r = eng.run(agent, q="x")
    assert r.status == "paused", r.error
    done = eng.answer(r.run_id, "yes")
    assert done.status == "completed", done.error
    assert done.output == {
        "a": "data:x+planned",
        "b": "data:x+enriched",
        "c": "data:last",
        "answer": "yes",
    }
    assert count == Counter(plan=1, enrich=1, fetch=3)
