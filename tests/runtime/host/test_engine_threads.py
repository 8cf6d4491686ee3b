"""The engine's threads (SQLite files and PostgreSQL): one keeper thread renews every
owner lease and cross-agent lock its runs hold, started with the first hold, and
``Engine.close`` stops and joins it; after close no thread of the engine stays alive."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine import Engine, EngineConfig, RetryPolicy
from tests.agents.kit import wait_until
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
RUNS = 3
NOTIFIER = "agentlog-pg-notify"


@pytest.fixture
def others() -> set[threading.Thread]:
    """The threads alive before the test (other tests may leave an abandoned tool's)."""
    return set(threading.enumerate())


def _engine_threads(others: set[threading.Thread]) -> list[str]:
    """The names of the engine threads alive now that were not alive before the test."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.is_alive() and t.name.startswith("agentlog") and t not in others
    )


@STORES
def test_one_keeper_thread_renews_every_lease_and_lock_and_close_joins_it(
    store_url: str, others: set[threading.Thread]
) -> None:
    eng = Engine(store_url, config=EngineConfig(lease_ttl=0.6))
    inside, leave = threading.Barrier(RUNS + 1), threading.Event()

    @eng.tool
    def hold() -> str:
        inside.wait(30)
        assert leave.wait(30)
        return "held"

    @eng.agent
    def holder(run: Any, n: int) -> str:
        with run.lock(f"lock-{n}", ttl=0.6):
            return hold()

    results: list[Any] = []
    runners = [
        threading.Thread(target=lambda n=n: results.append(eng.run(holder, run_id=f"r{n}", n=n)))
        for n in range(RUNS)
    ]
    for t in runners:
        t.start()
    try:
        inside.wait(30)
        first = {n: eng.store.lease(f"r{n}") for n in range(RUNS)}
        locks = {r.name: r.expires_at for r in eng.store.locks.held()}
        assert len(locks) == RUNS and all(first.values())

        def renewed() -> bool:
            leases = {n: eng.store.lease(f"r{n}") for n in range(RUNS)}
            held = {r.name: r.expires_at for r in eng.store.locks.held()}
            return all(leases[n][1] > first[n][1] for n in range(RUNS)) and all(  # type: ignore[index]
                held.get(name, 0) > until for name, until in locks.items()
            )

        wait_until(renewed, "every lease and lock renewed")
        # One keeper, not a heartbeat per lease; on PostgreSQL the store's one notifier
        # (a NOTIFY per burst of commits) beside it, stopped by close like the keeper.
        named = _engine_threads(others)
        assert [n for n in named if n != NOTIFIER] == ["agentlog-keeper"]
        assert named.count(NOTIFIER) <= 1
    finally:
        leave.set()
        for t in runners:
            t.join(30)
    assert sorted((r.status, r.output) for r in results) == [("completed", "held")] * RUNS

    @eng.tool
    async def echo(x: int) -> int:
        return x

    @eng.agent
    async def asynchronous(run: Any) -> int:
        await run.sleep(0.01)
        return await echo(7) + int(await run.decide("d", echo, 1))

    assert eng.run(asynchronous).output == 8
    assert "agentlog-call_0" in _engine_threads(others)  # its decision ran in the engine's pool
    eng.close()
    assert "agentlog-keeper" not in _engine_threads(others)  # stopped and joined by close
    # The pool is shut down without waiting (a tool abandoned in it is not waited for):
    # its idle threads end by themselves.
    wait_until(lambda: _engine_threads(others) == [], "the pool's idle threads ended")


def test_a_hung_tool_occupies_at_most_tool_threads_and_the_next_timed_attempt_fails_busy(
    store_url: str, others: set[threading.Thread]
) -> None:
    """With ``tool_threads=2``, two attempts abandoned at their timeout keep their
    threads; a third timed attempt starts no thread: it fails with ToolBusy, a transient
    failure (nothing was sent). Once the dependency answers, the tool runs again."""
    eng = Engine(store_url, config=EngineConfig(tool_threads=2))
    answers = threading.Event()

    @eng.tool(timeout=0.2, retry=RetryPolicy(max_attempts=1))
    def lookup(q: str) -> str:
        answers.wait(30)
        return q

    @eng.agent
    def asking(run: Any, q: str) -> str:
        return lookup(q)

    try:
        for q in ("a", "b"):
            r = eng.run(asking, q=q)
            assert r.status == "failed" and "TimeoutError" in (r.error or ""), r.error
        busy = eng.run(asking, q="c")
        [failed] = [e.data for e in eng.events(busy.run_id) if e.type == "tool_failed"]
        assert (failed["kind"], failed["error_type"]) == ("transient", "ToolBusy"), failed
        assert "all 2 threads of the tool's timed attempts stayed busy" in failed["message"]
        assert _engine_threads(others).count("agentlog-tool") == 2
    finally:
        answers.set()
    wait_until(
        lambda: "agentlog-tool" not in _engine_threads(others), "the abandoned attempts ended"
    )
    assert eng.run(asking, q="d").output == "d"
    eng.close()


def test_a_renewal_that_raises_does_not_end_the_keeper() -> None:
    """One renewal raising (a user's wall clock, say) is logged and tried again: the keeper
    thread goes on renewing every other hold, and letting the failing one go returns."""
    from engine.runtime.host.lockkeeper import Keeper

    keeper = Keeper()
    failed, others = threading.Event(), threading.Event()
    tries: list[int] = []

    def broken() -> bool:
        tries.append(1)
        failed.set()
        raise RuntimeError("a clock that breaks")

    keeper.every("broken", 0.01, broken)
    assert failed.wait(30)
    keeper.every("other", 0.01, lambda: others.set() or True)
    assert others.wait(30)  # renewed after the other one raised
    keeper.cancel("broken", wait=True)  # returns: nothing stays busy
    keeper.close()
    assert len(tries) >= 1
