"""Retry budgets stop retry storms: a per-run budget (``EngineConfig.run_retry_budget``,
counted from the run's log, so a resume does not refill it) and a per-tool token bucket
shared by every run of the process (``tool_retry_capacity`` / ``tool_retry_rate``,
refilled by the configured clock). An exhausted budget fails the call fast with an
error naming it. No real time passes: the clock moves only when a test moves it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engines
from agents.kit import log_of
from conftest import all_backends

from engine import Engine, RetryPolicy, Transient
from engine.runtime.host.guards import TokenBucket

NOW = RetryPolicy(max_attempts=20, initial=0.0, jitter=False)  # retries without waiting


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def engine_with(store_url: str, fake: FakeTime) -> Iterator[Callable[..., Engine]]:
    """Engines on fake time built with the budgets a test names."""
    yield from timed_engines(store_url, fake, seed=5)


def count_types(eng: Engine, run_id: str, kind: str) -> int:
    return sum(1 for _, t, _ in log_of(eng, run_id) if t == kind)


def final_failure(eng: Engine, run_id: str) -> dict[str, Any]:
    return [d for _, t, d in log_of(eng, run_id) if t == "tool_failed" and d["final"]][-1]


# --- the token bucket ------------------------------------------------------------------


def test_token_bucket_spends_capacity_and_refills_with_the_clock() -> None:
    t = FakeTime()
    bucket = TokenBucket(capacity=3, rate=0.5, clock=t)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    t.now += 1.0  # half a token
    assert not bucket.take()
    t.now += 1.0  # one token
    assert bucket.take() and not bucket.take()
    t.now += 1000.0  # refills to capacity, never beyond
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


# --- the per-run budget ----------------------------------------------------------------


@all_backends
def test_run_retry_budget_fails_the_call_fast_naming_the_budget(
    engine_with: Callable[..., Engine],
) -> None:
    """Budget 3, policy 20 attempts: three retries, then the fourth failure is final with
    an error naming the run's retry budget; agent code sees Transient."""
    eng = engine_with(run_retry_budget=3)
    count = Counter[str]()
    seen: list[str] = []

    @eng.tool(retry=NOW)
    def flaky() -> None:
        count["n"] += 1
        raise Transient("upstream 503")

    @eng.agent
    def agent(run: Any) -> None:
        try:
            flaky()
        except Transient as e:
            seen.append(str(e))
            raise

    r = eng.run(agent)
    assert r.status == "failed" and count["n"] == 4
    assert "retry budget (3 retries) is exhausted" in (r.error or "")
    assert "upstream 503" in (r.error or "")
    assert count_types(eng, r.run_id, "retry_scheduled") == 3
    final = final_failure(eng, r.run_id)
    assert final["attempt"] == 4 and "the run's retry budget" in final["message"]
    assert len(seen) == 1 and "the run's retry budget" in seen[0]


@all_backends
def test_the_run_budget_is_shared_by_its_calls_and_survives_a_resume(
    engine_with: Callable[..., Engine],
) -> None:
    """Budget 4: the first tool spends 3 retries, the second gets one; a resume of the
    failed run re-attempts the call once but gets no retry (the log holds the count)."""
    eng = engine_with(run_retry_budget=4)
    count = Counter[str]()

    @eng.tool(retry=NOW)
    def first() -> str:
        count["first"] += 1
        if count["first"] <= 3:
            raise Transient("busy")
        return "ok"

    @eng.tool(retry=NOW)
    def second() -> str:
        count["second"] += 1
        raise Transient("busy too")

    @eng.agent
    def agent(run: Any) -> list[str]:
        return [first(), second()]

    r = eng.run(agent)
    assert r.status == "failed" and "retry budget (4 retries)" in (r.error or "")
    assert count == {"first": 4, "second": 2}
    assert eng.state(r.run_id).retries == 4

    again = eng.resume(r.run_id)
    assert again.status == "failed" and "retry budget (4 retries)" in (again.error or "")
    assert count == {"first": 4, "second": 3}
    assert eng.state(r.run_id).retries == 4


# --- the per-tool bucket, shared by runs -------------------------------------------------


@all_backends
def test_tool_bucket_is_shared_by_runs_and_refills_with_the_clock(
    engine_with: Callable[..., Engine], fake: FakeTime
) -> None:
    """Capacity 2, 0.5 token/s. Run A spends both tokens and then fails fast; run B gets
    no retry at all; another tool's bucket is untouched; 2 s later run C gets one."""
    eng = engine_with(tool_retry_capacity=2, tool_retry_rate=0.5)
    count = Counter[str]()

    @eng.tool(retry=NOW)
    def search(q: str) -> str:
        count[q] += 1
        raise Transient("search cluster overloaded")

    @eng.tool(retry=NOW)
    def other(q: str) -> str:
        count["other"] += 1
        if count["other"] == 1:
            raise Transient("blip")
        return "fine"

    @eng.agent
    def agent(run: Any, q: str) -> str:
        return str(search(q))

    @eng.agent
    def calm(run: Any) -> str:
        return str(other("x"))

    a = eng.run(agent, q="a")
    assert a.status == "failed" and count["a"] == 3
    assert "global retry budget of tool" in (a.error or "") and "search" in (a.error or "")
    assert count_types(eng, a.run_id, "retry_scheduled") == 2

    b = eng.run(agent, q="b")
    assert b.status == "failed" and count["b"] == 1
    assert count_types(eng, b.run_id, "retry_scheduled") == 0
    assert "global retry budget" in final_failure(eng, b.run_id)["message"]

    c = eng.run(calm)
    assert (c.status, c.output) == ("completed", "fine")  # its own bucket

    fake.now += 2.0
    d = eng.run(agent, q="d")
    assert d.status == "failed" and count["d"] == 2
    assert count_types(eng, d.run_id, "retry_scheduled") == 1
    assert fake.slept == [0.0, 0.0, 0.0, 0.0]


@all_backends
def test_budgets_also_bound_resends_of_an_indeterminate_effect(
    engine_with: Callable[..., Engine], fake: FakeTime
) -> None:
    """A side effect that keeps timing out is re-sent (same key) with backoff, each re-send
    a retry_scheduled event; when the run's budget runs out it is verified once more and
    fails for good naming the budget, instead of hammering the service."""
    eng = engine_with(run_retry_budget=2)
    keys: list[str] = []
    verified: list[str] = []

    def find(key: str) -> None:
        verified.append(key)

    @eng.tool(
        side_effect=True,
        verify=find,
        retry=RetryPolicy(max_attempts=10, initial=1.0, jitter=False),
    )
    def pay(cents: int, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        raise TimeoutError("gateway timeout")

    @eng.agent
    def agent(run: Any) -> str:
        return str(pay(100))

    r = eng.run(agent)
    assert r.status == "failed" and "retry budget (2 retries)" in (r.error or "")
    assert keys == [f"{r.run_id}:1"] * 3
    assert fake.slept == [1.0, 2.0]
    assert verified == [f"{r.run_id}:1"] * 3  # after each backoff, and once at the end
    retries = [d for _, t, d in log_of(eng, r.run_id) if t == "retry_scheduled"]
    assert [(d["attempt"], d["kind"]) for d in retries] == [
        (2, "indeterminate"),
        (3, "indeterminate"),
    ]
    assert final_failure(eng, r.run_id)["kind"] == "indeterminate"
