"""Usage recorded with decisions (from the result, or ``run.usage``) and a run's budget:
past it the run fails with ``BudgetExhausted``, and a resume counts from the log."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import openai
import openai.types.chat as chat
import pytest

from engine import Budget, BudgetExhausted, Engine, Permanent
from engine.errors import UsageError
from tests.conftest import all_backends
from tests.model_kit import OPENAI_REPLY, ModelServer


def _decided(eng: Engine, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == "llm_decided"]


@all_backends
def test_usage_is_read_from_an_openai_result_and_summed_in_the_state(eng: Engine) -> None:
    server = ModelServer({**OPENAI_REPLY, "usage": _openai_usage(12, 3)})
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    try:

        def chat(prompt: str) -> Any:
            return client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": prompt}]
            )

        @eng.agent
        def agent(run: Any) -> int:
            a = run.decide("a", chat, "x")  # an SDK object: its usage read, its value a dict
            b = run.decide("b", lambda: {"usage": {"input_tokens": 4, "output_tokens": 1}})
            return int(a["usage"]["prompt_tokens"]) + int(b["usage"]["input_tokens"])

        r = eng.run(agent)
    finally:
        server.server.shutdown()
    assert (r.status, r.output) == ("completed", 16), r.error
    used = [(d["tokens_in"], d["tokens_out"]) for d in _decided(eng, r.run_id)]
    assert used == [(12, 3), (4, 1)]
    state = eng.state(r.run_id)
    assert (state.tokens_in, state.tokens_out, state.cost) == (16, 4, None)


def _openai_usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


@all_backends
def test_run_usage_inside_a_decision_rides_with_it_and_outside_is_a_call(eng: Engine) -> None:
    @eng.agent
    def agent(run: Any) -> str:
        def model() -> str:
            run.usage(7, 2, cost=0.25)
            return "ok"

        out = run.decide("m", model)
        run.usage(1, 1, cost=0.5)  # agent code: a call of its own
        return str(out)

    r = eng.run(agent)
    assert r.status == "completed", r.error
    (d,) = _decided(eng, r.run_id)
    assert (d["tokens_in"], d["tokens_out"], d["cost"]) == (7, 2, 0.25)
    (u,) = [e.data for e in eng.events(r.run_id) if e.type == "usage_recorded"]
    assert (u["call"], u["tokens_in"], u["cost"]) == (2, 1, 0.5)
    state = eng.state(r.run_id)
    assert (state.tokens_in, state.tokens_out, state.cost) == (8, 3, 0.75)
    assert eng.resume(r.run_id).status == "completed"  # replayed: the same calls


@all_backends
def test_a_token_budget_fails_the_run_and_a_resume_fails_it_again(eng: Engine) -> None:
    calls: list[int] = []

    def model(n: int) -> dict[str, Any]:
        calls.append(n)
        return {"n": n, "usage": {"input_tokens": 40, "output_tokens": 10}}

    effects: list[int] = []

    @eng.agent(budget=Budget(tokens=120))
    def agent(run: Any) -> int:
        for n in range(5):
            run.decide("step", model, n)
            effects.append(n)  # what the agent does after each decision
        return 5

    r = eng.run(agent)
    assert r.status == "failed" and r.error is not None
    assert r.error.startswith("BudgetExhausted") and "150 tokens of a budget of 120" in r.error
    assert calls == [0, 1, 2] and effects == [0, 1]
    again = eng.resume(r.run_id)
    assert again.status == "failed" and again.error == r.error
    assert calls == [0, 1, 2] and effects == [0, 1, 0, 1]  # no model call, stops as live


@all_backends
def test_a_used_up_budget_refuses_the_next_model_call(eng: Engine) -> None:
    calls: list[str] = []

    def model(name: str) -> str:
        calls.append(name)
        run_ = holder["run"]
        run_.usage(0, 0, cost=1.0)
        return name

    holder: dict[str, Any] = {}

    @eng.agent(budget=Budget(cost=2.0))
    def agent(run: Any) -> str:
        holder["run"] = run
        run.decide("a", model, "a")
        run.decide("b", model, "b")  # spends exactly the budget: allowed
        try:
            run.decide("c", model, "c")
        except BudgetExhausted as e:
            assert isinstance(e, Permanent)
            raise
        return "unreachable"

    r = eng.run(agent)
    assert r.status == "failed" and r.error is not None and "cost budget of 2" in r.error
    assert calls == ["a", "b"]


@all_backends
def test_a_resume_continues_the_count_from_the_log(eng: Engine) -> None:
    calls: list[int] = []
    crash = {"once": True}

    def model(n: int) -> dict[str, Any]:
        calls.append(n)
        return {"usage": {"input_tokens": 30, "output_tokens": 0}}

    @eng.agent(budget=Budget(tokens=50))
    def agent(run: Any) -> str:
        run.decide("a", model, 1)
        if crash.pop("once", False):
            raise RuntimeError("the process dies")
        run.decide("b", model, 2)  # 60 > 50: only if the first 30 were counted
        return "done"

    first = eng.run(agent)
    assert first.status == "failed" and "RuntimeError" in str(first.error)
    r = eng.resume(first.run_id)
    assert r.status == "failed" and "BudgetExhausted" in str(r.error)
    assert calls == [1, 2]


def test_token_counts_in_a_decision_value_are_kept_not_redacted() -> None:
    eng = Engine("memory://")
    value = {"usage": {"input_tokens": 3, "max_tokens": 9}, "access_token": "s3cr3t-v4lue"}

    @eng.agent
    def agent(run: Any) -> Any:
        return run.decide("m", lambda: value)

    r = eng.run(agent)
    assert r.output == {
        "usage": {"input_tokens": 3, "max_tokens": 9},
        "access_token": "<redacted>",
    }


def test_bad_usage_and_budgets_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="tokens= or cost="):
        Budget()
    with pytest.raises(UsageError, match="cost"):
        Budget(cost=float("nan"))
    eng = Engine("memory://")
    with pytest.raises(UsageError, match="budget= takes a Budget"):
        eng.agent(budget=100)(lambda run: None)  # type: ignore[arg-type]

    @eng.agent
    def agent(run: Any) -> None:
        run.usage(-1, 0)

    r = eng.run(agent)
    assert r.status == "failed" and "tokens_in must be an int >= 0" in str(r.error)


@all_backends
def test_concurrent_decisions_exhaust_the_budget_where_they_did_live(eng: Engine) -> None:
    """Live, the decision recorded second goes past the budget, whichever call it is; a
    replay fails the same one (log order, not call order)."""
    calls: list[str] = []
    crash = {"once": True}

    def model(first: asyncio.Event, then: asyncio.Event) -> Any:
        async def answer(name: str) -> dict[str, Any]:
            if name == "a":
                await first.wait()  # b answers first (and is most likely recorded first)
                await asyncio.sleep(0.05)
            calls.append(name)
            then.set()
            return {"name": name, "usage": {"input_tokens": 10, "output_tokens": 0}}

        return answer

    async def guarded(run: Any, name: str, fn: Any) -> str:
        try:
            return str((await run.decide(name, fn, name))["name"])
        except BudgetExhausted:
            return f"over:{name}"

    @eng.agent(budget=Budget(tokens=15))
    async def agent(run: Any) -> list[str]:
        b_done, a_done = asyncio.Event(), asyncio.Event()
        out = await asyncio.gather(
            guarded(run, "a", model(b_done, a_done)),
            guarded(run, "b", model(asyncio.Event(), b_done)),
        )
        run.checkpoint("both")
        if crash.pop("once", False):
            live.append(list(out))
            raise RuntimeError("dies after both")
        return list(out)

    live: list[list[str]] = []
    first = eng.run(agent)
    assert first.status == "failed" and "dies after both" in str(first.error)
    r = eng.resume(first.run_id)
    assert (r.status, r.output) == ("completed", live[0]), r.error  # over where it was live
    assert sorted(live[0]) in (["a", "over:b"], ["b", "over:a"])
    assert calls == ["b", "a"]  # the resume asked no model


def test_an_sdk_usage_with_details_keeps_its_declared_type() -> None:
    """OpenAI's usage details (dicts of counts, None when absent) are counts, not secrets:
    a decision declared to return the SDK's own type gets it back, live and replayed."""
    eng = Engine("memory://")
    reply = chat.ChatCompletion.model_validate(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 5,
                "completion_tokens": 2,
                "total_tokens": 7,
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": None},
                "prompt_tokens_details": {"cached_tokens": 3},
            },
        }
    )

    def model() -> chat.ChatCompletion:
        return reply

    crash = {"once": True}

    @eng.agent
    def agent(run: Any) -> int:
        got = run.decide("m", model)
        assert isinstance(got, chat.ChatCompletion) and got == reply
        if crash.pop("once", False):
            raise RuntimeError("dies")
        assert got.usage is not None and got.usage.prompt_tokens_details is not None
        return int(got.usage.prompt_tokens_details.cached_tokens or 0)

    assert eng.run(agent).status == "failed"
    r = eng.resume(eng.runs()[0].run_id)
    assert (r.status, r.output) == ("completed", 3), r.error
    assert (eng.state(r.run_id).tokens_in, eng.state(r.run_id).tokens_out) == (5, 2)


def test_absurd_or_hostile_usage_is_no_usage_and_a_cost_is_counted() -> None:
    eng = Engine("memory://")
    values = [
        {"usage": {"input_tokens": 2**60, "output_tokens": -4, "cost": float("inf")}},
        {"usage": {"input_tokens": "12", "output_tokens": True}},
        {"usage": {"input_tokens": 3, "output_tokens": 1, "cost": 0.25}},
    ]

    @eng.agent(budget=Budget(cost=1.0))
    def agent(run: Any) -> int:
        for n, v in enumerate(values):
            run.decide(f"d{n}", lambda v=v: v)
        with pytest.raises(UsageError):
            run.usage(10**30, 0)
        with pytest.raises(UsageError, match="cannot be recorded"):
            run.decide("huge", lambda: {"n": 10**30})  # fails before anything is written
        return 0

    r = eng.run(agent)
    assert r.status == "completed", r.error
    used = [(d["tokens_in"], d["tokens_out"], d["cost"]) for d in _decided(eng, r.run_id)]
    assert used == [(0, 0, None), (0, 0, None), (3, 1, 0.25)]


def test_usage_of_a_failed_decision_is_its_evidence_not_the_next_ones() -> None:
    eng = Engine("memory://")

    @eng.agent
    def agent(run: Any) -> str:
        def failing() -> str:
            run.usage(1000, 0)
            raise ValueError("the answer did not parse")  # permanent: one attempt

        with contextlib.suppress(Permanent):
            run.decide("first", failing)
        return str(run.decide("second", lambda: "ok"))

    r = eng.run(agent)
    assert r.status == "completed", r.error
    (second,) = _decided(eng, r.run_id)
    assert (second["name"], second["tokens_in"]) == ("second", 0)
    (failed,) = [e.data for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert failed["evidence"]["usage"] == {"tokens_in": 1000, "tokens_out": 0, "cost": None}


@pytest.mark.parametrize("bad", [{"tokens": 1.5}, {"tokens": "5"}, {"cost": "1"}, {"tokens": -1}])
def test_a_budget_of_what_is_no_count_is_a_usage_error(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="Budget"):
        Budget(**bad)
