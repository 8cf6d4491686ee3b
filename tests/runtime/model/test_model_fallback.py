"""``@engine.model(fallback=[small_model, rules])``: tried in order when the primary's
transient failure is final (retries spent) or its breaker is open; the decision records
which one answered; replay calls none; budgets count each."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from engine import Budget, CircuitBreaker, Engine, Permanent, RetryPolicy, Transient
from tests.conftest import backends

FAST = RetryPolicy(max_attempts=2, initial=0.0, jitter=False)


def _models(eng: Engine, calls: Counter[str], *, small_fails: bool = False) -> Any:
    def rules(text: str) -> dict[str, Any]:
        calls["rules"] += 1
        return {"label": "rules", "usage": {"input_tokens": 0, "output_tokens": 0}}

    @eng.model(retry=FAST)
    def small(text: str) -> dict[str, Any]:
        calls["small"] += 1
        if small_fails:
            raise Transient("small model down too")
        return {"label": "small", "usage": {"input_tokens": 30, "output_tokens": 5}}

    @eng.model(retry=FAST, fallback=[small, rules])
    def big(text: str) -> dict[str, Any]:
        calls["big"] += 1
        raise Transient("503 from the big model")

    return big


def _decided(eng: Engine, rid: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(rid) if e.type == "llm_decided"]


@backends("sqlite", "postgres")
def test_the_first_fallback_answers_once_retries_are_spent(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    big = _models(eng, calls)

    @eng.agent
    def triage(run: Any, text: str) -> str:
        return str(big(text)["label"])

    r = eng.run(triage, text="refund please")
    assert (r.status, r.output) == ("completed", "small")
    assert calls == {"big": 2, "small": 1}  # both attempts of the primary, then small
    [d] = _decided(eng, r.run_id)
    assert d["answered_by"] == "_models.<locals>.small"
    assert (d["tokens_in"], d["tokens_out"]) == (30, 5)
    assert eng.state(r.run_id).tokens_in == 30  # the budget counts the fallback's usage
    eng.verify(r.run_id)  # a replay from the log calls no model at all
    assert calls == {"big": 2, "small": 1}


@backends("sqlite", "postgres")
def test_the_rules_answer_when_the_small_model_fails_too(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    big = _models(eng, calls, small_fails=True)

    @eng.agent
    def triage(run: Any, text: str) -> str:
        return str(big(text)["label"])

    r = eng.run(triage, text="x")
    assert r.output == "rules" and calls == {"big": 2, "small": 1, "rules": 1}
    assert _decided(eng, r.run_id)[-1]["answered_by"] == "_models.<locals>.rules"


def test_an_open_breaker_goes_straight_to_the_fallback(eng: Engine) -> None:
    """Once the primary's breaker opens, later calls do not reach the primary."""
    calls: Counter[str] = Counter()

    @eng.model(retry=FAST, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=600))
    def flaky(text: str) -> str:
        calls["flaky"] += 1
        raise Transient("rate limited")

    @eng.model(retry=FAST, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=600),
               fallback=lambda text: f"rules:{text}")  # fmt: skip
    def primary(text: str) -> str:
        return flaky(text)

    @eng.agent
    def labels(run: Any) -> list[str]:
        return [primary("a"), primary("b"), primary("c")]

    r = eng.run(labels)
    assert r.output == ["rules:a", "rules:b", "rules:c"]
    assert calls["flaky"] == 1  # the breaker opened on the first failure
    assert all(d["answered_by"].endswith("<lambda>") for d in _decided(eng, r.run_id))


def test_a_permanent_failure_is_not_degraded(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    def rules(text: str) -> str:
        calls["rules"] += 1
        return "rules"

    @eng.model(retry=FAST, fallback=[rules])
    def strict(text: str) -> str:
        raise Permanent("invalid request")

    @eng.agent
    def one(run: Any) -> str:
        return strict("x")

    r = eng.run(one)
    assert r.status == "failed" and "invalid request" in (r.error or "")
    assert calls["rules"] == 0


def test_the_budget_counts_what_a_fallback_spent(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    big = _models(eng, calls)

    @eng.agent(budget=Budget(tokens=10))
    def costly(run: Any) -> list[str]:
        return [big("a")["label"], big("b")["label"]]

    r = eng.run(costly)
    assert r.status == "failed" and "budget" in (r.error or "").lower()
    assert calls["small"] == 1  # the first answer went past the budget: no second call


def test_fallback_must_be_functions(eng: Engine) -> None:
    from engine.errors import UsageError

    with pytest.raises(UsageError, match="fallback"):

        @eng.model(fallback=["not callable"])  # type: ignore[list-item]
        def m(text: str) -> str:
            return text


def test_the_timeline_says_which_fallback_answered(eng: Engine) -> None:
    from replay.timeline import story, views

    calls: Counter[str] = Counter()
    big = _models(eng, calls)

    @eng.agent
    def shown(run: Any) -> str:
        return str(big("x")["label"])

    rid = eng.run(shown).run_id
    text = "".join(
        str(p if isinstance(p, str) else p[0]) for row in story(views(eng, rid)) for p in row
    )
    assert "answered by fallback _models.<locals>.small" in text
