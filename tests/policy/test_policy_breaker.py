"""Circuit breakers, per tool and per process: closed -> open after ``failure_threshold``
failures in a row; open fails fast (nothing executes) or takes the ``fallback``
(recorded as tool_succeeded with source "fallback"); half-open after ``reset_timeout``
on the injectable clock lets one trial through: success closes, failure reopens. Every
transition is an event in the tool's own stream, ``stream_id("tool:" + name)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engine
from agents.kit import log_of, tool_def
from conftest import all_backends

from engine import CircuitBreaker, Engine, Permanent, RetryPolicy, Transient
from engine.policy.failure import NO_RETRY
from engine.runtime.host.guards import Breaker
from engine.store import stream_id

OPENED, HALF, CLOSED = "circuit_opened", "circuit_half_opened", "circuit_closed"


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=9)


def transitions(eng: Engine, tool: Any) -> list[str]:
    """The breaker events recorded in the tool's stream, in order."""
    name = tool_def(tool).name
    return [str(r.event.__struct_config__.tag) for r in eng.store.read(stream_id("tool:" + name))]


# --- the state machine -----------------------------------------------------------------


def test_breaker_opens_after_failures_in_a_row_and_lets_one_trial_through_after_reset() -> None:
    t = FakeTime()
    b = Breaker(CircuitBreaker(failure_threshold=3, reset_timeout=10.0), t)
    assert b.allow() == (True, None)
    assert [b.failure(), b.failure()] == [None, None]
    assert b.success() is None and b.failures == 0  # failures must come in a row
    assert [b.failure(), b.failure(), b.failure()] == [None, None, "open"]
    assert b.state == "open" and b.allow() == (False, None)
    t.now += 9.99
    assert b.allow() == (False, None)
    t.now += 0.01
    assert b.allow() == (True, "half_open")
    assert b.allow() == (False, None)  # one trial at a time
    assert b.failure() == "open"  # the trial failed: open again, for a new reset_timeout
    assert b.allow() == (False, None)
    t.now += 10.0
    assert b.allow() == (True, "half_open")
    assert b.success() == "closed" and b.state == "closed"
    assert b.allow() == (True, None) and b.allow() == (True, None)


def test_a_half_open_trial_that_never_reports_stops_blocking_after_reset_timeout() -> None:
    t = FakeTime()
    b = Breaker(CircuitBreaker(failure_threshold=1, reset_timeout=5.0), t)
    b.failure()
    t.now += 5.0
    assert b.allow() == (True, "half_open")  # this trial's run is killed: no report
    t.now += 4.0
    assert b.allow() == (False, None)
    t.now += 1.0
    assert b.allow() == (True, None)  # a new trial
    b.release()  # it ended in a permanent error: says nothing of health
    assert b.state == "half_open" and b.allow() == (True, None)


# --- in runs ---------------------------------------------------------------------------


@all_backends
def test_breaker_opens_fails_fast_half_opens_and_closes(eng: Engine, fake: FakeTime) -> None:
    """Threshold 2 across runs of the process: two failing runs open it; the third run
    fails fast without executing; after reset_timeout a trial that fails reopens it, and
    a later trial that succeeds closes it. Transitions are events in the tool's stream."""
    count = Counter[str]()
    healthy = {"on": False}

    @eng.tool(retry=NO_RETRY, breaker=CircuitBreaker(failure_threshold=2, reset_timeout=30.0))
    def inventory(sku: str) -> int:
        count["calls"] += 1
        if not healthy["on"]:
            raise ConnectionError("inventory service unreachable")
        return 7

    @eng.agent
    def agent(run: Any, sku: str) -> int:
        return int(inventory(sku))

    assert [eng.run(agent, sku=s).status for s in ("a", "b")] == ["failed", "failed"]
    assert transitions(eng, inventory) == ["circuit_opened"]
    opened = eng.store.read(stream_id("tool:" + tool_def(inventory).name))[0].event
    assert opened.failures == 2  # type: ignore[attr-defined]

    fast = eng.run(agent, sku="c")
    assert fast.status == "failed" and "circuit open" in (fast.error or "")
    assert count["calls"] == 2  # nothing executed
    (final,) = [d for _, t, d in log_of(eng, fast.run_id) if t == "tool_failed"]
    assert final["final"] and final["kind"] == "transient" and final["attempt"] == 1

    fake.now += 29.0
    assert "circuit open" in (eng.run(agent, sku="d").error or "") and count["calls"] == 2
    fake.now += 1.0
    trial = eng.run(agent, sku="e")
    assert trial.status == "failed" and count["calls"] == 3
    assert transitions(eng, inventory) == [OPENED, HALF, OPENED]
    assert "circuit open" in (eng.run(agent, sku="f").error or "") and count["calls"] == 3

    fake.now += 30.0
    healthy["on"] = True
    ok = eng.run(agent, sku="g")
    assert (ok.status, ok.output) == ("completed", 7) and count["calls"] == 4
    assert transitions(eng, inventory) == [
        "circuit_opened",
        "circuit_half_opened",
        "circuit_opened",
        "circuit_half_opened",
        "circuit_closed",
    ]
    assert eng.run(agent, sku="h").status == "completed" and count["calls"] == 5


@all_backends
def test_breaker_opening_mid_retry_stops_the_retries(eng: Engine, fake: FakeTime) -> None:
    """Threshold 3, five attempts: the third failure opens the circuit, so the retry
    scheduled after it fails fast instead of executing."""
    count = Counter[str]()

    @eng.tool(
        retry=RetryPolicy(max_attempts=5, initial=1.0, jitter=False),
        breaker=CircuitBreaker(failure_threshold=3, reset_timeout=60.0),
    )
    def flaky() -> None:
        count["n"] += 1
        raise Transient("502 bad gateway")

    @eng.agent
    def agent(run: Any) -> None:
        flaky()

    r = eng.run(agent)
    assert r.status == "failed" and "circuit open" in (r.error or "")
    assert count["n"] == 3 and fake.slept == [1.0, 2.0, 4.0]
    assert transitions(eng, flaky) == ["circuit_opened"]


@all_backends
def test_open_breaker_takes_the_fallback_recorded_as_such(eng: Engine, fake: FakeTime) -> None:
    """While open, the fallback (a degraded path) answers without executing the tool; the
    outcome is tool_succeeded with source 'fallback'. After reset the tool runs again."""
    count = Counter[str]()
    healthy = {"on": False}

    def cached_rate(currency: str) -> float:
        count["fallback"] += 1
        return 1.0

    @eng.tool(
        retry=NO_RETRY,
        breaker=CircuitBreaker(failure_threshold=1, reset_timeout=10.0),
        fallback=cached_rate,
    )
    def live_rate(currency: str) -> float:
        count["live"] += 1
        if not healthy["on"]:
            raise TimeoutError("rates API timed out")
        return 1.08

    @eng.agent
    def agent(run: Any, currency: str) -> float:
        return float(live_rate(currency))

    assert eng.run(agent, currency="EUR").status == "failed"  # opens it
    degraded = eng.run(agent, currency="EUR")
    assert (degraded.status, degraded.output) == ("completed", 1.0)
    assert count == {"live": 1, "fallback": 1}
    done = [d for _, t, d in log_of(eng, degraded.run_id) if t == "tool_succeeded"]
    assert [d["source"] for d in done] == ["fallback"]
    assert eng.resume(degraded.run_id).output == 1.0 and count["fallback"] == 1  # replayed

    fake.now += 10.0
    healthy["on"] = True
    live = eng.run(agent, currency="EUR")
    assert (live.status, live.output) == ("completed", 1.08)
    done = [d for _, t, d in log_of(eng, live.run_id) if t == "tool_succeeded"]
    assert [d["source"] for d in done] == ["executed"]
    assert transitions(eng, live_rate) == [OPENED, HALF, CLOSED]


@all_backends
def test_permanent_failures_do_not_trip_the_breaker(eng: Engine, fake: FakeTime) -> None:
    """Bad arguments say nothing about the service's health: they neither open the circuit
    nor keep a half-open trial slot."""
    count = Counter[str]()

    @eng.tool(retry=NO_RETRY, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=5.0))
    def lookup(customer: str) -> str:
        count["n"] += 1
        if customer == "down":
            raise Transient("overloaded")
        if customer == "":
            raise Permanent("empty customer id")
        return customer

    @eng.agent
    def agent(run: Any, customer: str) -> str:
        return str(lookup(customer))

    for _ in range(3):
        assert eng.run(agent, customer="").status == "failed"
    assert transitions(eng, lookup) == [] and count["n"] == 3
    assert eng.run(agent, customer="down").status == "failed"
    fake.now += 5.0
    assert eng.run(agent, customer="").status == "failed"  # the trial: permanent
    assert eng.run(agent, customer="c1").output == "c1"  # next trial goes through, closes
    assert transitions(eng, lookup) == [OPENED, HALF, CLOSED]
    assert count["n"] == 6


@all_backends
def test_breakers_are_per_tool(eng: Engine) -> None:
    @eng.tool(retry=NO_RETRY, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=60.0))
    def broken() -> None:
        raise ConnectionError("down")

    @eng.tool(retry=NO_RETRY, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=60.0))
    def fine() -> str:
        return "ok"

    @eng.agent
    def agent(run: Any) -> list[str]:
        out = [str(fine())]
        try:
            broken()
        except Transient as e:
            out.append(str(e))
        return out

    first = eng.run(agent)
    assert first.output[0] == "ok" and "down" in first.output[1]
    second = eng.run(agent)
    assert second.output[0] == "ok" and "circuit open" in second.output[1]
    assert transitions(eng, broken) == ["circuit_opened"] and transitions(eng, fine) == []
