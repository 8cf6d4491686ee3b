"""``with run.lock(name, ttl) as fence`` in one process, on every store: the lock is
recorded (lock_acquired, lock_released), its fence increases per name, a pause inside the
block keeps the hold (no record) and the answered run takes it again with the same fence,
or runs with its stale fence when another took the lock meanwhile; an exception leaving
the block releases it; a run that ends or is abandoned frees what it holds; the
heartbeat keeps a short-ttl lock held while the block runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from agents.kit import log_of, wait_until
from conftest import all_backends
from structlog.testing import capture_logs

from engine import Engine
from engine import observe as engine_log
from engine.errors import UsageError


def _lock_events(eng: Engine, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(t, d) for _, t, d in log_of(eng, run_id) if t.startswith("lock_")]


def _held(eng: Engine) -> list[tuple[str, str, int]]:
    return [(r.name, r.holder, r.fence) for r in eng.store.locks.held()]


def _holding(eng: Engine, ttl: float) -> tuple[threading.Event, threading.Thread, list[Any]]:
    """A run holding lock "a" in a thread of its own, inside its block by the time this
    returns, until the event is set; its result lands in the list."""
    entered, leave = threading.Event(), threading.Event()

    @eng.agent
    def holder(run: Any) -> int:
        with run.lock("a", ttl=ttl) as fence:
            entered.set()
            leave.wait(30)
        return int(fence)

    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(eng.run(holder)))
    t.start()
    assert entered.wait(30)
    return leave, t, results


@all_backends
def test_a_lock_block_records_its_fence_and_frees_the_lock(eng: Engine) -> None:
    """Inside the block the run holds the lock with fence 1 (listed as held); the log
    records lock_acquired then lock_released with that fence; afterwards nothing is held."""
    inside: list[list[tuple[str, str, int]]] = []

    @eng.agent
    def worker(run: Any) -> int:
        with run.lock("customer:42", ttl=30) as fence:
            inside.append(_held(eng))
        return int(fence)

    r = eng.run(worker)
    assert (r.status, r.output) == ("completed", 1)
    assert inside == [[("customer:42", r.run_id, 1)]]
    assert _lock_events(eng, r.run_id) == [
        ("lock_acquired", {"call": 1, "name": "customer:42", "fence": 1, "ttl": 30.0}),
        ("lock_released", {"call": 1, "name": "customer:42", "fence": 1}),
    ]
    assert _held(eng) == []


@all_backends
def test_fences_increase_per_name_across_runs(eng: Engine) -> None:
    @eng.agent
    def worker(run: Any, name: str) -> int:
        with run.lock(name) as fence:
            return int(fence)

    got = [eng.run(worker, name=n).output for n in ("a", "a", "b", "a", "b")]
    assert got == [1, 2, 1, 3, 2]


@all_backends
def test_an_exception_leaving_the_block_releases_the_lock(eng: Engine) -> None:
    """The lock is free as soon as the exception leaves the block (the run goes on), and
    a run failing inside its block ends holding nothing."""
    after: list[list[tuple[str, str, int]]] = []

    @eng.agent
    def caught(run: Any) -> str:
        try:
            with run.lock("a"):
                raise ValueError("boom")
        except ValueError:
            after.append(_held(eng))
        return "went on"

    @eng.agent
    def failing(run: Any) -> None:
        with run.lock("a"):
            raise ValueError("boom")

    r = eng.run(caught)
    assert (r.status, after) == ("completed", [[]])
    assert [t for t, _ in _lock_events(eng, r.run_id)] == ["lock_acquired", "lock_released"]
    r = eng.run(failing)
    assert r.status == "failed" and "boom" in (r.error or "")
    assert [t for t, _ in _lock_events(eng, r.run_id)] == ["lock_acquired", "lock_released"]
    assert _held(eng) == []


@all_backends
def test_a_hold_that_expired_while_paused_is_retaken_with_its_fence(eng: Engine) -> None:
    """Paused inside its block past the lock's ttl, with nobody taking the lock
    meanwhile: the answered run holds it again, with the same fence, until the block
    ends."""
    seen: list[list[tuple[str, str, int]]] = []

    @eng.agent
    def worker(run: Any) -> None:
        with run.lock("a", ttl=0.2):
            run.ask("go on?")
            seen.append(_held(eng))

    r = eng.run(worker)
    wait_until(lambda: not eng.store.locks.held(), "the paused hold to expire")
    assert eng.answer(r.run_id, "yes").status == "completed"
    assert seen == [[("a", r.run_id, 1)]]
    assert _held(eng) == []


@all_backends
def test_a_pause_inside_the_block_keeps_the_hold_and_answer_retakes_the_same_fence(
    eng: Engine,
) -> None:
    """ask inside the block pauses the run: nothing released or recorded, the lock stays
    held by the run (no heartbeat: it would expire at its ttl). answer replays the block
    with the recorded fence, takes the lock again keeping it, then records the release."""
    seen: list[tuple[int, list[tuple[str, str, int]]]] = []

    @eng.agent
    def worker(run: Any) -> str:
        with run.lock("a", ttl=60) as fence:
            answer = run.ask("go on?")
            seen.append((fence, _held(eng)))
        return str(answer)

    r = eng.run(worker)
    assert r.status == "paused"
    assert _held(eng) == [("a", r.run_id, 1)]
    assert [t for t, _ in _lock_events(eng, r.run_id)] == ["lock_acquired"]
    assert not eng.lock_keeper.holds(r.run_id, "a")  # a paused run renews nothing
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "yes")
    assert seen == [(1, [("a", r.run_id, 1)])]
    assert [t for t, _ in _lock_events(eng, r.run_id)] == ["lock_acquired", "lock_released"]
    assert _held(eng) == []


@all_backends
def test_a_stale_fence_is_returned_on_replay_when_another_took_the_lock(eng: Engine) -> None:
    """A run paused inside its block whose hold expired: another run takes the lock with
    fence 2. Answered, the first replays with its recorded fence 1 (determinism), does not
    take the lock from the other, and its release leaves the other's hold alone."""
    fences: list[int] = []

    @eng.agent
    def slow(run: Any) -> str:
        with run.lock("a", ttl=0.2) as fence:
            answer = run.ask("go on?")
            fences.append(fence)
        return str(answer)

    paused = eng.run(slow)
    wait_until(lambda: not eng.store.locks.held(), "the paused hold to expire")
    leave, t, results = _holding(eng, ttl=60)
    keeper_id = eng.store.locks.held()[0].holder
    first = eng.answer(paused.run_id, "late")
    assert (first.status, fences) == ("completed", [1])
    assert _held(eng) == [("a", keeper_id, 2)]  # the other's hold is untouched
    leave.set()
    t.join(30)
    assert (results[0].status, results[0].output) == ("completed", 2)
    assert [d["fence"] for t, d in _lock_events(eng, paused.run_id)] == [1, 1]


@all_backends
def test_abandoning_a_run_paused_inside_a_block_frees_its_lock(eng: Engine) -> None:
    @eng.agent
    def worker(run: Any) -> None:
        with run.lock("a", ttl=60):
            run.ask("go on?")

    r = eng.run(worker)
    assert _held(eng) == [("a", r.run_id, 1)]
    assert eng.abandon(r.run_id).status == "abandoned"
    assert _held(eng) == []


@all_backends
def test_a_lock_held_past_the_block_by_the_store_is_freed_when_the_run_ends(
    eng: Engine,
) -> None:
    """Whatever the store still holds for a run when it completes (here planted behind
    the block's back) is freed by the engine after the run."""

    @eng.agent
    def worker(run: Any) -> str:
        assert eng.store.locks.acquire("stray", run.run_id, 60) == 1
        return "done"

    r = eng.run(worker)
    assert r.status == "completed"
    assert _held(eng) == []


@all_backends
def test_replay_returns_the_recorded_fence_and_takes_nothing(eng: Engine) -> None:
    """A finished lock block re-executed (the run resumed after a later pause, then
    verified) gets its recorded fence although other runs moved the fence on; no lock
    is taken and nothing more is recorded."""
    fences: list[int] = []

    @eng.agent
    def first(run: Any) -> int:
        with run.lock("a") as fence:
            fences.append(fence)
        run.ask("go on?")
        return int(fence)

    @eng.agent
    def other(run: Any) -> int:
        with run.lock("a") as fence:
            assert _held(eng) == [("a", run.run_id, fence)]
            return int(fence)

    r = eng.run(first)
    assert [eng.run(other).output for _ in range(2)] == [2, 3]
    assert eng.answer(r.run_id, "yes").output == 1
    eng.verify(r.run_id)
    assert len(fences) >= 3 and set(fences) == {1}  # live, answered, verified
    assert [t for t, _ in _lock_events(eng, r.run_id)] == ["lock_acquired", "lock_released"]
    assert eng.run(other).output == 4


@all_backends
def test_the_heartbeat_keeps_a_short_ttl_lock_held_while_the_block_runs(eng: Engine) -> None:
    """A 0.3 s lock held for far longer than its ttl is renewed: another run cannot take
    it meanwhile, and gets the next fence once the block ends."""
    other_got: list[int | None] = []
    leave, t, results = _holding(eng, ttl=0.3)
    for _ in range(10):  # about four ttls in all
        time.sleep(0.12)
        other_got.append(eng.store.locks.acquire("a", "intruder", 1))
    leave.set()
    t.join(30)
    assert other_got == [None] * 10
    assert results[0].output == 1
    assert eng.store.locks.acquire("a", "intruder", 1) == 2


@all_backends
def test_a_second_run_waits_for_the_lock_and_gets_the_next_fence(eng: Engine) -> None:
    """Two runs in two threads of one engine: the second waits inside ``run.lock`` while
    the first holds it, then gets fence 2; the blocks never overlap."""
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    @eng.agent
    def worker(run: Any, tag: str) -> int:
        with run.lock("a", ttl=30) as fence:
            order.append(f"{tag}+")
            if tag == "first":
                first_in.set()
                release.wait(30)
            order.append(f"{tag}-")
        return int(fence)

    results: dict[str, Any] = {}
    t1 = threading.Thread(target=lambda: results.setdefault("first", eng.run(worker, tag="first")))
    t1.start()
    assert first_in.wait(30)
    t2 = threading.Thread(
        target=lambda: results.setdefault("second", eng.run(worker, tag="second"))
    )
    engine_log.get()  # a first use may configure structlog, which would undo capture_logs
    with capture_logs() as logs:
        t2.start()
        wait_until(lambda: any(e["event"] == "lock_waiting" for e in logs), "the second waits", 30)
    assert order == ["first+"]
    release.set()
    t1.join(30)
    t2.join(30)
    assert order == ["first+", "first-", "second+", "second-"]
    assert (results["first"].output, results["second"].output) == (1, 2)


@all_backends
def test_nesting_the_same_lock_and_bad_arguments_are_usage_errors(eng: Engine) -> None:
    @eng.agent
    def nested(run: Any) -> None:
        with run.lock("a"), run.lock("a"):
            pass

    r = eng.run(nested)
    assert r.status == "failed" and "do not nest" in (r.error or "")
    assert _held(eng) == []

    @eng.agent
    def bad(run: Any, name: Any, ttl: Any) -> None:
        with run.lock(name, ttl=ttl):
            pass

    for name, ttl, what in [
        ("a\x1b[2J", 30, "lock name"),
        ("", 30, "lock name"),
        ("a", float("nan"), "ttl"),
        ("a", 1e9, "ttl"),
    ]:
        r = eng.run(bad, name=name, ttl=ttl)
        assert r.status == "failed" and what in (r.error or ""), r.error
        assert [t for _, t, _ in log_of(eng, r.run_id) if t.startswith("lock")] == []
    with pytest.raises(UsageError):
        eng.store.locks.acquire("a\n", "r", 1)
    assert eng.store.locks.held() == []
