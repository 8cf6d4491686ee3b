"""Retries: exponential backoff with full jitter, every attempt an event, bounded by
attempts and by elapsed time, continued (not restarted) by a resumed run.

Time is a fake clock that moves only when the engine sleeps, and the jitter's random
source is seeded, so the chosen delays are known exactly and nothing really waits.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engine
from agents.kit import log_of
from conftest import all_backends
from hypothesis import given
from hypothesis import strategies as st

from engine import Engine, RetryPolicy, Transient

SEED = 20240611


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=SEED)


def of_type(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == kind]


# --- the policy itself -----------------------------------------------------------------

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 50),
    initial=st.floats(0.0, 100.0, allow_nan=False),
    maximum=st.floats(0.0, 1000.0, allow_nan=False),
    multiplier=st.floats(1.0, 10.0, allow_nan=False),
    jitter=st.booleans(),
)


@given(policy=policies, attempt=st.integers(1, 5000), seed=st.integers(0, 2**32))
def test_jitter_stays_within_zero_and_the_capped_exponential(
    policy: RetryPolicy, attempt: int, seed: int
) -> None:
    """Full jitter: the delay is in [0, min(maximum, initial * multiplier**(attempt-1))];
    without jitter it is that ceiling exactly. Huge attempt numbers do not overflow."""
    try:
        exact = policy.initial * policy.multiplier ** (attempt - 1)
    except OverflowError:
        exact = float("inf") if policy.initial > 0 else 0.0
    ceiling = min(policy.maximum, exact)
    assert policy.backoff(attempt) == pytest.approx(ceiling)
    delay = policy.delay(attempt, random.Random(seed))
    assert 0.0 <= delay <= ceiling
    if not policy.jitter:
        assert delay == ceiling
    assert policy.backoff(attempt + 1) >= policy.backoff(attempt)  # never shrinks


def test_jitter_spreads_delays_over_the_whole_range() -> None:
    """Full jitter, not 'ceiling plus a little': draws cover the range, mean ~ ceiling/2."""
    policy = RetryPolicy(initial=1.0, multiplier=2.0, maximum=30.0)
    rng = random.Random(3)
    draws = [policy.delay(4, rng) for _ in range(2000)]
    assert min(draws) < 0.4 and max(draws) > 7.6
    assert 3.6 < sum(draws) / len(draws) < 4.4


def test_retry_policy_defaults_and_refuses_out_of_range_settings() -> None:
    p = RetryPolicy()
    assert (p.max_attempts, p.initial, p.multiplier, p.maximum, p.jitter) == (
        3,
        0.5,
        2.0,
        30.0,
        True,
    )
    for bad in (
        {"max_attempts": 0},
        {"initial": -1.0},
        {"maximum": -1.0},
        {"multiplier": 0.5},
    ):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


# --- retries in a run ------------------------------------------------------------------


@all_backends
def test_every_attempt_is_an_event_with_the_chosen_delay(eng: Engine, fake: FakeTime) -> None:
    """tool_failed for each failed attempt (attempt, kind, message), retry_scheduled with
    the jittered delay actually slept, then the success on the third attempt."""
    count = Counter[str]()
    policy = RetryPolicy(max_attempts=5, initial=1.0, maximum=10.0, multiplier=3.0)

    @eng.tool(retry=policy)
    def fetch(url: str) -> str:
        count["fetch"] += 1
        if count["fetch"] < 3:
            raise ConnectionError(f"connection refused ({count['fetch']})")
        return "page"

    @eng.agent
    def agent(run: Any) -> str:
        return str(fetch("https://example.test"))

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "page")
    rng = random.Random(SEED)
    expected = [rng.uniform(0, 1.0), rng.uniform(0, 3.0)]
    assert fake.slept == expected
    types = [t for _, t, _ in log_of(eng, r.run_id)]
    assert types == [
        "agent_started",
        "tool_invoked",
        "tool_failed",
        "retry_scheduled",
        "tool_failed",
        "retry_scheduled",
        "tool_succeeded",
        "agent_finished",
    ]
    failed = of_type(eng, r.run_id, "tool_failed")
    assert [(d["attempt"], d["kind"], d["final"]) for d in failed] == [
        (1, "transient", False),
        (2, "transient", False),
    ]
    assert [d["message"] for d in failed] == [
        "ConnectionError: connection refused (1)",
        "ConnectionError: connection refused (2)",
    ]
    retries = of_type(eng, r.run_id, "retry_scheduled")
    assert [(d["attempt"], d["delay"], d["kind"]) for d in retries] == [
        (2, expected[0], "transient"),
        (3, expected[1], "transient"),
    ]
    assert of_type(eng, r.run_id, "tool_succeeded")[0]["attempt"] == 3
    assert eng.state(r.run_id).retries == 2


@all_backends
def test_without_jitter_delays_are_the_capped_exponential(eng: Engine, fake: FakeTime) -> None:
    """jitter=False: 1, 2, 4 capped at 3 -> 1, 2, 3, 3; the last attempt fails for good."""
    count = Counter[str]()

    @eng.tool(retry=RetryPolicy(max_attempts=5, initial=1.0, maximum=3.0, jitter=False))
    def flaky() -> None:
        count["n"] += 1
        raise Transient("503 service unavailable")

    @eng.agent
    def agent(run: Any) -> None:
        flaky()

    r = eng.run(agent)
    assert r.status == "failed" and "503" in (r.error or "")
    assert count["n"] == 5 and fake.slept == [1.0, 2.0, 3.0, 3.0]
    assert [d["delay"] for d in of_type(eng, r.run_id, "retry_scheduled")] == fake.slept
    failed = of_type(eng, r.run_id, "tool_failed")
    assert [d["attempt"] for d in failed] == [1, 2, 3, 4, 5]
    assert [d["final"] for d in failed] == [False] * 4 + [True]


@all_backends
def test_max_elapsed_stops_retries_by_the_clock(eng: Engine, fake: FakeTime) -> None:
    """max_elapsed=5 s with delays 2, 4, 8: after the second retry 6 s have passed, so the
    third failure is final although attempts remain."""
    count = Counter[str]()
    policy = RetryPolicy(max_attempts=10, initial=2.0, jitter=False, max_elapsed=5.0)

    @eng.tool(retry=policy)
    def flaky() -> None:
        count["n"] += 1
        raise Transient("still warming up")

    @eng.agent
    def agent(run: Any) -> None:
        flaky()

    r = eng.run(agent)
    assert r.status == "failed"
    assert count["n"] == 3 and fake.slept == [2.0, 4.0]
    assert of_type(eng, r.run_id, "tool_failed")[-1]["final"]


@all_backends
def test_max_elapsed_counts_the_time_attempts_take(eng: Engine, fake: FakeTime) -> None:
    """An attempt that itself takes 10 s (on the clock) leaves no room for a retry."""
    count = Counter[str]()

    @eng.tool(retry=RetryPolicy(max_attempts=10, initial=0.1, max_elapsed=5.0))
    def slow() -> None:
        count["n"] += 1
        fake.now += 10.0
        raise Transient("gateway timeout")

    @eng.agent
    def agent(run: Any) -> None:
        slow()

    r = eng.run(agent)
    assert r.status == "failed" and count["n"] == 1 and fake.slept == []
    (failed,) = of_type(eng, r.run_id, "tool_failed")
    assert failed["duration"] == 10.0


# --- a run stopped mid-sequence continues its attempt count --------------------------


class Stop(KeyboardInterrupt):
    """What an operator's Ctrl-C (or a kill) does in the middle of a backoff sleep."""


class Gateway:
    """Dedupes by idempotency key and counts every request it sees."""

    def __init__(self) -> None:
        self.effects: dict[str, str] = {}
        self.requests: list[str] = []

    def send(self, what: str, key: str) -> str:
        self.requests.append(key)
        return self.effects.setdefault(key, f"{what}-{len(self.effects) + 1}")


@all_backends
def test_a_resumed_run_continues_the_attempt_count(eng: Engine, fake: FakeTime) -> None:
    """The run is stopped during the backoff before attempt 3 (KeyboardInterrupt from the
    injected sleep). The resume runs attempt 3, not attempt 1: attempt numbers continue
    across the two executions, the effect committed before the stop is not repeated, and
    only the attempts left in the policy are made."""
    gw = Gateway()
    count = Counter[str]()
    down = {"until": 4}

    @eng.tool(side_effect=True)
    def reserve(item: str, *, idempotency_key: str) -> str:
        count["reserve"] += 1
        return gw.send(item, idempotency_key)

    @eng.tool(retry=RetryPolicy(max_attempts=4, initial=1.0, jitter=False))
    def quote(item: str) -> int:
        count["quote"] += 1
        if count["quote"] < down["until"]:
            raise Transient(f"pricing busy ({count['quote']})")
        return 99

    @eng.agent
    def buyer(run: Any, item: str) -> list[Any]:
        return [reserve(item), quote(item)]

    def stop_before_third() -> None:
        if len(fake.slept) == 2:
            raise Stop

    fake.then = stop_before_third
    with pytest.raises(KeyboardInterrupt):
        eng.run(buyer, run_id="mid-retry", item="lamp")
    assert eng.state("mid-retry").status == "running"
    assert count == {"reserve": 1, "quote": 2}

    fake.then = None
    r = eng.resume("mid-retry")
    assert (r.status, r.output) == ("completed", ["lamp-1", 99])
    assert count == {"reserve": 1, "quote": 4}
    assert gw.requests == ["mid-retry:1"]
    failed = of_type(eng, "mid-retry", "tool_failed")
    assert [d["attempt"] for d in failed] == [1, 2, 3]
    assert [d["attempt"] for d in of_type(eng, "mid-retry", "retry_scheduled")] == [2, 3, 4]
    done = [d for d in of_type(eng, "mid-retry", "tool_succeeded") if d["call"] == 2]
    assert done[0]["attempt"] == 4
    assert fake.slept == [1.0, 2.0, 4.0]
    assert eng.state("mid-retry").retries == 3


@all_backends
def test_a_resumed_run_does_not_get_fresh_attempts(eng: Engine, fake: FakeTime) -> None:
    """Stopped after attempt 2 of 3: the resume makes only attempt 3, then fails for good."""
    count = Counter[str]()

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=1.0, jitter=False))
    def flaky() -> None:
        count["n"] += 1
        raise Transient("down")

    @eng.agent
    def agent(run: Any) -> None:
        flaky()

    def stop_second() -> None:
        if len(fake.slept) == 2:
            raise Stop

    fake.then = stop_second
    with pytest.raises(KeyboardInterrupt):
        eng.run(agent, run_id="no-fresh")
    fake.then = None
    r = eng.resume("no-fresh")
    assert r.status == "failed" and count["n"] == 3
    failed = of_type(eng, "no-fresh", "tool_failed")
    assert [(d["attempt"], d["final"]) for d in failed] == [(1, False), (2, False), (3, True)]


@all_backends
def test_a_side_effect_stopped_mid_retry_is_resent_with_its_key_and_counts_on(
    eng: Engine, fake: FakeTime
) -> None:
    """A side-effecting call stopped in its backoff is uncertain on resume: it is re-sent
    under the same key (the gateway dedupes) with the next attempt number."""
    gw = Gateway()
    count = Counter[str]()

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=5, initial=1.0, jitter=False))
    def book(seat: str, *, idempotency_key: str) -> str:
        count["book"] += 1
        if count["book"] == 1:
            raise Transient("429 slow down")
        return gw.send(seat, idempotency_key)

    @eng.agent
    def agent(run: Any) -> str:
        return str(book("12A"))

    def stop() -> None:
        raise Stop

    fake.then = stop
    with pytest.raises(KeyboardInterrupt):
        eng.run(agent, run_id="book-stop")
    fake.then = None
    r = eng.resume("book-stop")
    assert (r.status, r.output) == ("completed", "12A-1")
    assert gw.requests == ["book-stop:1"] and count["book"] == 2
    keys = {d["key"] for d in of_type(eng, "book-stop", "tool_invoked")}
    assert keys == {"book-stop:1"}
    assert of_type(eng, "book-stop", "tool_succeeded")[0]["attempt"] == 2
