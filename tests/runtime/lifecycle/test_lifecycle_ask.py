"""Humans in the loop, on every store: ``run.ask`` records its question and pauses the run;
``engine.answer`` records the answer and continues it (several asks in a row, JSON
answers reach ``run.ask`` as given); answering a run that waits for nothing is a clear
UsageError that records nothing; a run paused because nobody can tell whether a side
effect happened names the tool and key, and is settled by 'done', 'not done' or abandon.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from agents.kit import Crash, log_of
from conftest import all_backends

from engine import Engine, Given, RetryPolicy
from engine.errors import RunNotFound, UsageError


def _types(eng: Engine, run_id: str) -> list[str]:
    return [e.type for e in eng.events(run_id)]


@all_backends
def test_ask_records_the_question_pauses_and_answer_continues(eng: Engine) -> None:
    """run.ask writes human_input_requested and the run pauses (status paused, waiting =
    the question, no lease held); answer writes human_input_provided and the run
    continues from the ask with the answer, executing nothing twice."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def prepare(order: str, *, idempotency_key: str) -> str:
        count["prepare"] += 1
        return f"P-{order}"

    @eng.agent
    def approve(run: Any, order: str) -> dict[str, Any]:
        prepared = prepare(order)
        verdict = run.ask(f"approve {order}?")
        count["after"] += 1
        return {"prepared": prepared, "verdict": verdict}

    r = eng.run(approve, order="o1")
    assert (r.status, r.output, r.error) == ("paused", None, None)
    assert r.waiting == "approve o1?"
    state = eng.state(r.run_id)
    assert (state.status, state.waiting) == ("paused", "approve o1?")
    asked = [d for _, t, d in log_of(eng, r.run_id) if t == "human_input_requested"]
    assert asked == [{"call": 2, "question": "approve o1?", "reason": "question"}]
    assert eng.store.lease(r.run_id) is None
    assert eng.runs(status="paused")[0].run_id == r.run_id

    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", {"prepared": "P-o1", "verdict": "yes"})
    provided = [d for _, t, d in log_of(eng, r.run_id) if t == "human_input_provided"]
    assert provided == [{"call": 2, "value": "yes", "confirmed": False}]
    assert eng.state(r.run_id).waiting is None
    assert count == {"prepare": 1, "after": 1}
    assert eng.store.lease(r.run_id) is None


@all_backends
def test_several_asks_in_a_row_each_pause_and_each_answer_reaches_its_ask(eng: Engine) -> None:
    """Three questions: each answer continues to the next question; earlier answers are
    replayed from the log (never asked again); the tool between them runs once each."""
    count: Counter[str] = Counter()

    @eng.tool
    def lookup(q: int) -> int:
        count[f"lookup{q}"] += 1
        return q * 10

    @eng.agent
    def interview(run: Any) -> list[Any]:
        out = []
        for q in range(3):
            out.append((lookup(q), run.ask(f"question {q}?")))
        return out

    r = eng.run(interview)
    for q, value in enumerate(["a", "b"]):
        assert (r.status, r.waiting) == ("paused", f"question {q}?")
        r = eng.answer(r.run_id, value)
    assert (r.status, r.waiting) == ("paused", "question 2?")
    r = eng.answer(r.run_id, "c")
    assert (r.status, r.output) == ("completed", [[0, "a"], [10, "b"], [20, "c"]])
    assert count == {"lookup0": 1, "lookup1": 1, "lookup2": 1}
    types = _types(eng, r.run_id)
    assert types.count("human_input_requested") == 3
    assert types.count("human_input_provided") == 3


@all_backends
def test_a_json_answer_reaches_run_ask_as_given(eng: Engine) -> None:
    """A dict answer (nested lists, numbers, booleans, null, unicode) comes back from
    run.ask equal to what was given, also when the run is replayed later."""
    given = {"approve": True, "limit": [1, 2.5, {"x": None}], "note": "ok ✓", "n": 3}

    @eng.agent
    def ask_json(run: Any) -> dict[str, Any]:
        value = run.ask("terms?")
        assert isinstance(value, dict)
        return {"value": value, "types": sorted(type(v).__name__ for v in value.values())}

    r = eng.run(ask_json)
    done = eng.answer(r.run_id, given)
    assert done.status == "completed"
    assert done.output["value"] == given
    assert done.output["types"] == ["bool", "int", "list", "str"]
    assert eng.resume(r.run_id).output["value"] == given  # replayed from the log
    provided = [d for _, t, d in log_of(eng, r.run_id) if t == "human_input_provided"]
    assert provided[0]["value"] == given


@all_backends
def test_answering_a_run_that_is_not_waiting_is_a_usage_error_recording_nothing(
    eng: Engine,
) -> None:
    """Completed, crashed (running), failed, abandoned, already answered: answer raises a
    UsageError saying the run is not waiting and what it is; the log is unchanged.
    An unknown run id is a RunNotFound (a UsageError too)."""
    crash = {"on": True}

    @eng.tool
    def step(n: int) -> int:
        if crash["on"] and n == 1:
            raise Crash()
        return n

    @eng.tool(retry=None)
    def fragile() -> int:
        raise ValueError("bad input")

    @eng.agent
    def plain(run: Any) -> int:
        return step(0) + step(1)

    @eng.agent
    def failing(run: Any) -> int:
        return int(fragile())

    @eng.agent
    def asking(run: Any) -> Any:
        return run.ask("go?")

    with pytest.raises(Crash):
        eng.run(plain, run_id="crashed")
    crash["on"] = False
    completed = eng.run(plain)
    failed = eng.run(failing)
    abandoned = eng.run(asking)
    eng.abandon(abandoned.run_id)
    answered = eng.run(asking)
    eng.answer(answered.run_id, "yes")
    cases = {
        "crashed": "running",
        completed.run_id: "completed",
        failed.run_id: "failed",
        abandoned.run_id: "abandoned",
        answered.run_id: "completed",
    }
    for rid, status in cases.items():
        before = log_of(eng, rid)
        with pytest.raises(UsageError, match=f"not waiting for an answer.*{status}"):
            eng.answer(rid, "yes")
        assert log_of(eng, rid) == before
        assert eng.store.lease(rid) is None
    with pytest.raises(RunNotFound):
        eng.answer("no-such-run", "yes")


@all_backends
def test_a_run_paused_on_an_uncertain_effect_names_the_tool_and_key(eng: Engine) -> None:
    """A side effect with no verifier and no idempotency key crashed mid-call: resume
    pauses with a question naming the tool and its key (RunResult.waiting and
    state.waiting); an unclear answer is refused; 'done' completes it without sending
    the effect again (the person's answer stands in for its result)."""
    sent: list[str] = []
    crash = {"on": True}

    @eng.tool(side_effect=True, key=lambda order: f"fax:{order}")
    def fax(order: str) -> str:
        sent.append(order)
        if crash["on"]:
            raise Crash()  # the fax went out; the process died before recording it
        return f"F-{order}"

    @eng.agent
    def faxing(run: Any, order: str) -> Any:
        return fax(order)

    with pytest.raises(Crash):
        eng.run(faxing, run_id="fx", order="o7")
    crash["on"] = False
    r = eng.resume("fx")
    assert r.status == "paused"
    assert r.waiting is not None and "fax" in r.waiting and "fax:o7" in r.waiting
    state = eng.state("fx")
    assert (state.status, state.waiting) == ("paused", r.waiting)
    asked = [d for _, t, d in log_of(eng, "fx") if t == "human_input_requested"]
    assert asked[-1]["reason"] == "uncertain"
    before = log_of(eng, "fx")
    with pytest.raises(UsageError, match="done"):
        eng.answer("fx", "maybe")
    assert log_of(eng, "fx") == before
    with pytest.raises(UsageError, match="--json-value"):
        eng.answer("fx", "done")  # fax returns str: a bare 'done' gives it no result
    assert log_of(eng, "fx") == before
    done = eng.answer("fx", Given("F-o7"))
    assert (done.status, done.output) == ("completed", "F-o7")
    assert sent == ["o7"]
    sources = [d["source"] for _, t, d in log_of(eng, "fx") if t == "tool_succeeded"]
    assert sources == ["human"]


@all_backends
def test_an_uncertain_effect_answered_not_done_is_sent_once_more_under_its_key(
    eng: Engine,
) -> None:
    """'not done': the effect is sent again, once, under the same key (business key
    claimed by this run all along), and the run completes with its real result."""
    sent: list[str] = []
    crash = {"on": True}

    @eng.tool(side_effect=True, key=lambda order: f"fax:{order}")
    def fax(order: str) -> str:
        if crash["on"]:
            raise Crash()  # died before sending anything
        sent.append(order)
        return f"F-{order}"

    @eng.agent
    def faxing(run: Any, order: str) -> Any:
        return fax(order)

    with pytest.raises(Crash):
        eng.run(faxing, run_id="fx2", order="o8")
    crash["on"] = False
    assert eng.resume("fx2").status == "paused"
    r = eng.answer("fx2", "not done")
    assert (r.status, r.output) == ("completed", "F-o8")
    assert sent == ["o8"]
    keys = {d["key"] for _, t, d in log_of(eng, "fx2") if t == "tool_invoked"}
    assert keys == {"fax:o8"}
    with pytest.raises(UsageError):
        eng.answer("fx2", "not done")  # settled: nothing waits any more
    assert sent == ["o8"]


@all_backends
def test_a_run_paused_on_an_uncertain_effect_can_be_abandoned(eng: Engine) -> None:
    """Abandon instead of answering: the run is abandoned, the uncertain effect is not
    sent again, the committed effect before it is compensated, and answering afterwards
    is refused."""
    voided: list[str] = []
    sent: list[str] = []
    crash = {"on": True}

    @eng.tool(side_effect=True, compensate=lambda receipt: voided.append(receipt))
    def hold(order: str, *, idempotency_key: str) -> str:
        return f"H-{order}"

    @eng.tool(side_effect=True)
    def note(order: str) -> str:
        sent.append(order)
        if crash["on"]:
            raise Crash()
        return f"N-{order}"

    @eng.agent
    def noting(run: Any, order: str) -> Any:
        return [hold(order), note(order)]

    with pytest.raises(Crash):
        eng.run(noting, run_id="nt", order="o9")
    crash["on"] = False
    paused = eng.resume("nt")
    assert paused.status == "paused" and "note" in str(paused.waiting)
    gone = eng.abandon("nt")
    assert gone.status == "abandoned"
    assert sent == ["o9"] and voided == ["H-o9"]
    state = eng.state("nt")
    assert (state.status, state.waiting) == ("abandoned", None)
    with pytest.raises(UsageError, match="abandoned"):
        eng.answer("nt", "done")


@all_backends
def test_two_uncertain_effects_of_one_gather_are_asked_one_at_a_time(eng: Engine) -> None:
    """Two concurrent effects nobody can verify are left uncertain by a crash: resume asks
    about one of them (the question shown is the one recorded last, so the answer
    reaches it), then, answered, about the other; neither is sent twice."""
    import asyncio

    sent: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool(side_effect=True, key=lambda op, send: f"post:{op}")
    async def post(op: str, send: bool) -> str:
        await asyncio.sleep(0.01)
        if send or not crash["on"]:
            sent[op] += 1
        if crash["on"]:
            raise Crash()
        return f"P-{op}"

    @eng.agent
    async def posting(run: Any) -> list[Any]:
        return list(await asyncio.gather(post("a", True), post("b", False)))

    with pytest.raises(Crash):
        eng.run(posting, run_id="two")
    crash["on"] = False
    truth: dict[str, Any] = {"a": Given("P-a"), "b": "not done"}
    r = eng.resume("two")
    asked = []
    while r.status == "paused":
        assert len(asked) < 3, asked
        state = eng.state("two")
        assert (state.status, state.waiting) == ("paused", r.waiting)
        requests = [d for _, t, d in log_of(eng, "two") if t == "human_input_requested"]
        assert requests[-1]["question"] == r.waiting
        op = "a" if "post:a" in str(r.waiting) else "b"
        assert f"post:{op}" in str(r.waiting)
        asked.append(op)
        r = eng.answer("two", truth[op])
    assert sorted(asked) == ["a", "b"]
    assert (r.status, r.output) == ("completed", ["P-a", "P-b"])
    assert sent == {"a": 1, "b": 1}


@all_backends
async def _question_recorded(eng: Engine) -> None:
    """Until the one run in the store has recorded a question (a condition, not a sleep:
    a fixed pause lost the race on a loaded machine); gives up after a minute."""
    for _ in range(6000):
        runs = eng.runs()
        if runs and "human_input_requested" in {e.type for e in eng.events(runs[0].run_id)}:
            return
        await asyncio.sleep(0.01)


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
        await _question_recorded(eng)  # finishes after the question is recorded
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
    done = eng.answer(r.run_id, {"wired": "o1"})  # a value, not a word: the result
    assert done.status == "completed", done.error
    assert done.output == [{"wired": "o1"}, {"sent": "o1"}]
    assert sent == Counter(wire=1, email=1)
