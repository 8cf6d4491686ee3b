"""Regression tests for review findings: each proves one behaviour a bug had broken."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.kit import Crash
from conftest import all_backends

from engine import Engine, NonDeterminismError, RetryPolicy, RunState
from engine.errors import StoreError


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine.open(store_url)
    yield e
    e.close()


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

    r = eng.run(nested_agent, q="x")
    assert r.status == "paused"
    done = eng.answer(r.run_id, "yes")
    assert done.status == "completed", done.error
    assert done.output == {
        "a": "data:x+planned",
        "b": "data:x+enriched",
        "c": "data:last",
        "answer": "yes",
    }
    assert count == Counter(plan=1, enrich=1, fetch=3)


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

    r = eng.run(nested_async_agent, q="x")
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


@all_backends
def test_a_failed_snapshot_write_does_not_fail_the_committed_append(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events of a commit are durable before its snapshot is saved: a store error while
    saving the snapshot (a shortcut for rebuilds) neither fails the run nor makes the run
    write its deferred outcomes or its resume marker a second time."""
    sent: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def charge(order: str, *, idempotency_key: str) -> dict[str, str]:
        sent[order] += 1
        return {"receipt": order}

    @eng.agent(snapshot_every=2)  # the charge's commit reaches position 4: a snapshot
    def snapshotting(run: Any) -> str:
        charge("o1")  # outcome deferred into the checkpoint's commit
        run.checkpoint("after-charge")
        charge("o2")
        return "done"

    failed: list[int] = []

    def broken(_stream: Any, state: RunState) -> None:
        failed.append(state.position)
        raise StoreError("the store went away while saving a snapshot")

    monkeypatch.setattr(eng.store, "save_snapshot", broken)
    r = eng.run(snapshotting)
    assert r.status == "completed", r.error
    assert failed, "no snapshot was attempted: the test proves nothing"
    types = [e.type for e in eng.events(r.run_id)]
    assert types.count("tool_succeeded") == 2
    assert types.count("checkpoint") == 1
    assert sent == Counter(o1=1, o2=1)


@all_backends
def test_a_sibling_outcome_recorded_after_a_question_keeps_the_run_answerable(
    eng: Engine,
) -> None:
    """An async agent's gather: one side effect's outcome is unknown, so the run asks a
    person; its sibling finishes (and is recorded) after the question. The run stays
    paused on that question and the answer continues it."""
    sent: Counter[str] = Counter()

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=1))
    async def wire(order: str) -> dict[str, str]:
        sent["wire"] += 1
        raise TimeoutError("the bank did not answer")

    @eng.tool(side_effect=True)
    async def email(order: str, *, idempotency_key: str) -> dict[str, str]:
        await asyncio.sleep(0.3)  # finishes after the question is recorded
        sent["email"] += 1
        return {"sent": order}

    @eng.agent
    async def gathering(run: Any) -> Any:
        return await asyncio.gather(wire("o1"), email("o1"))

    r = eng.run(gathering)
    assert r.status == "paused", r.error
    types = [e.type for e in eng.events(r.run_id)]
    assert types.index("human_input_requested") < types.index("tool_succeeded")
    state = eng.state(r.run_id)
    assert (state.status, state.waiting) == ("paused", r.waiting)
    done = eng.answer(r.run_id, "done")
    assert done.status == "completed", done.error
    assert done.output == ["done", {"sent": "o1"}]
    assert sent == Counter(wire=1, email=1)


@all_backends
def test_a_timeout_error_raised_by_the_tool_itself_is_classified_as_such(eng: Engine) -> None:
    """A tool that raises TimeoutError itself (asyncio, sockets) fails like any TimeoutError:
    transient for a read-only tool, retried; with its own message and no late-result event,
    whether it is an async tool on the agent's loop or a sync tool with a timeout."""
    tries: Counter[str] = Counter()

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0))
    async def slow_async(q: str) -> str:
        tries["async"] += 1
        if tries["async"] == 1:
            raise TimeoutError("upstream timed out")
        return "a:" + q

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0), timeout=5.0)
    def slow_sync(q: str) -> str:
        tries["sync"] += 1
        if tries["sync"] == 1:
            raise TimeoutError("upstream timed out")
        return "s:" + q

    @eng.agent
    async def timing_out(run: Any) -> list[str]:
        return [await slow_async("x"), slow_sync("y")]

    r = eng.run(timing_out)
    assert r.status == "completed", r.error
    assert r.output == ["a:x", "s:y"]
    failures = [e.data for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert [(f["kind"], f["message"]) for f in failures] == [
        ("transient", "TimeoutError: upstream timed out"),
        ("transient", "TimeoutError: upstream timed out"),
    ]
    assert "tool_late_result" not in [e.type for e in eng.events(r.run_id)]


@all_backends
def test_verify_of_a_completed_run_reports_code_that_now_makes_more_calls(eng: Engine) -> None:
    """A completed run's log is the whole run: code that now goes on past its last
    recorded call (a new decision before returning) diverges, and verify says so instead
    of reporting agreement; the unchanged code still verifies."""

    @eng.agent(name="review:grows")
    def grows_v1(run: Any) -> str:
        run.decide("a", lambda: 1)
        return "x"

    r = eng.run(grows_v1)
    assert r.status == "completed"
    assert eng.verify(r.run_id).status == "completed"

    @eng.agent(name="review:grows")
    def grows_v2(run: Any) -> str:
        run.decide("a", lambda: 1)
        run.decide("b", lambda: 2)
        return "x"

    with pytest.raises(NonDeterminismError, match="decide 'b'"):
        eng.verify(r.run_id)


@all_backends
def test_an_uncertain_effect_is_resolved_under_the_key_it_was_sent_with(eng: Engine) -> None:
    """A crash left a side effect's outcome unknown; the code deployed since derives its
    business key differently. Resolving that effect verifies (and would re-send) under the
    key recorded with the intent, the one the service saw, never under a new one."""
    asked: list[str] = []
    sent: list[str] = []
    crash = {"now": True}

    def found(key: str) -> dict[str, str] | None:
        asked.append(key)
        return {"receipt": key} if key in sent else None

    def pay_body(order: str) -> dict[str, str]:
        sent.append(f"pay:{order}")
        if crash["now"]:
            raise Crash("killed after the request was sent")
        return {"receipt": order}

    impl: dict[str, Any] = {
        "pay": eng.tool(
            name="review:pay", side_effect=True, key=lambda o: f"pay:{o}", verify=found
        )(pay_body)
    }

    @eng.agent
    def paying(run: Any) -> Any:
        return impl["pay"]("o1")

    with pytest.raises(Crash):
        eng.run(paying, run_id="review-uncertain-key")
    crash["now"] = False
    impl["pay"] = eng.tool(
        name="review:pay", side_effect=True, key=lambda o: f"payment/{o}", verify=found
    )(pay_body)
    r = eng.resume("review-uncertain-key")
    assert r.status == "completed", r.error
    assert asked == ["pay:o1"]
    assert sent == ["pay:o1"]
    assert r.output == {"receipt": "pay:o1"}
