"""A token budget spent to the last token lets the call that spent it stand and starts
no further model call; one token short of it starts the next. On SQLite and PostgreSQL,
live and on resume."""

from __future__ import annotations

from typing import Any

from conftest import backends

from engine import Budget, Engine

STORES = backends("sqlite", "postgres")


def _spender(eng: Engine, spends: list[int]) -> tuple[Any, list[int]]:
    """An agent with a budget of 100 tokens whose model calls report ``spends`` tokens,
    in order (it returns the last call's text), and the list of the calls started."""
    started: list[int] = []

    def model(n: int) -> dict[str, Any]:
        started.append(n)
        return {"text": f"call {n}", "usage": {"input_tokens": spends[n] - 1, "output_tokens": 1}}

    @eng.agent(budget=Budget(tokens=100))
    def agent(run: Any) -> str:
        return [run.decide(f"m{n}", model, n) for n in range(len(spends))][-1]["text"]

    return agent, started


@STORES
def test_a_token_budget_used_up_exactly_starts_no_further_model_call(eng: Engine) -> None:
    agent, started = _spender(eng, [60, 40, 1])  # 100 of 100 after the second
    r = eng.run(agent)
    assert started == [0, 1]
    assert r.status == "failed" and r.error is not None
    assert r.error.startswith("BudgetExhausted") and "all 100 tokens" in r.error
    again = eng.resume(r.run_id)
    assert (again.status, again.error) == (r.status, r.error)
    assert started == [0, 1]  # the resume replays both and starts no third call


@STORES
def test_one_token_short_of_the_budget_starts_the_next_model_call(eng: Engine) -> None:
    agent, started = _spender(eng, [99, 1])  # 100 of 100 only once the second answered
    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "call 1")
    assert started == [0, 1]
