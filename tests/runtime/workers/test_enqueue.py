"""engine.enqueue, run handles, engine.wait and engine.send from outside a run, on every
backend: a queued run is recorded once, claimed in line, within its queue's limits."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from engine import Engine, EngineConfig, RunFailed
from engine.errors import RunNotFound, UsageError
from engine.log.history import read_events
from tests.conftest import all_backends, backends

# A worker thread that outlives its engine's close fails on the closed store during a
# later test: an error here, not a warning.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0))
    yield e
    e.close()


def _agents(eng: Engine) -> tuple[object, object]:
    @eng.agent(name="tests.workers:add")
    def add(run: object, a: int, b: int) -> int:
        return a + b

    @eng.agent(name="tests.workers:fail")
    def fail(run: object) -> None:
        raise ValueError("no such order")

    return add, fail


@all_backends
def test_enqueue_records_a_queued_run_once(eng: Engine) -> None:
    add, _ = _agents(eng)
    h = eng.enqueue(add, run_id="order-1", a=1, b=2)
    again = eng.enqueue(add, run_id="order-1", a=100, b=200)
    assert (h.run_id, again.run_id) == ("order-1", "order-1")
    assert h.status() == "queued"
    tags = [type(r.event).__struct_config__.tag for r in read_events(eng.store, "order-1")]
    assert tags == ["agent_started", "run_queued"]  # the second enqueue wrote nothing
    assert eng.events("order-1")[0].data["input"] == {"a": 1, "b": 2}
    assert [r.run_id for r in eng.store.runs("queued")] == ["order-1"]


@all_backends
def test_bad_arguments_write_nothing(eng: Engine) -> None:
    add, _ = _agents(eng)
    for bad in ({"queue": ""}, {"queue": "a\nb"}, {"priority": True}, {"partition": 7}):
        with pytest.raises(UsageError):
            eng.enqueue(add, run_id="x", a=1, b=2, **bad)  # type: ignore[arg-type]
    assert eng.store.runs() == []
    with pytest.raises(UsageError):
        eng.queue("default", concurrency=0)
    with pytest.raises(UsageError):
        eng.queue("default", rate=(5, float("inf")))


@all_backends
def test_claims_go_by_priority_then_age_within_the_limits(eng: Engine) -> None:
    add, _ = _agents(eng)
    line = (("old", 0, "p1"), ("new", 0, "p1"), ("urgent", 5, "p2"), ("other", 0, "p3"))
    for rid, prio, part in line:
        eng.enqueue(add, run_id=rid, priority=prio, partition=part, a=1, b=1)
    eng.queue("default", concurrency=2, per_partition=1)
    q, now = eng.store.queues, eng.config.wall()
    claim = lambda who: q.claim_next(["default"], who, now + 30, now)  # noqa: E731
    assert claim("w1") == "urgent"
    assert claim("w2") == "old"
    assert claim("w3") is None  # two run at once: the queue is full
    eng.queue("default", concurrency=3, per_partition=1)
    assert claim("w3") == "other"  # "new" shares p1 with "old": passed over
    assert claim("w4") is None
    assert q.claim_run("new", "w5", now + 30, now) is False
    # A run taken over from a dead owner counts once against the limits: its own lease.
    assert q.claim_run("old", "w5", now + 30, now, dead="w2") is True
    assert eng.store.lease("old") == ("w5", now + 30)
    eng.store.drop_lease("urgent", "w1")  # back in line (never started), first by priority
    assert claim("w6") == "urgent"


@all_backends
def test_a_flooded_partition_starves_no_other(eng: Engine) -> None:
    """More runs of one partition than a claim looks at in one go, held back by
    per_partition, do not hide the runs queued behind them (nor do runs passed over)."""
    from engine.store.queueing import CLAIM_SCAN

    add, _ = _agents(eng)
    for i in range(CLAIM_SCAN + 1):
        eng.enqueue(add, run_id=f"hot{i:03}", partition="customer:hot", a=i, b=0)
    eng.enqueue(add, run_id="cold", partition="customer:cold", a=0, b=0)
    eng.queue("default", per_partition=1)
    q, now = eng.store.queues, eng.config.wall()
    assert q.claim_next(["default"], "w1", now + 30, now) == "hot000"
    assert q.claim_next(["default"], "w2", now + 30, now) == "cold"
    assert q.claim_next(["default"], "w3", now + 30, now) is None
    eng.store.drop_lease("hot000", "w1")  # a worker that cannot execute it passes it
    skipped = [f"hot{i:03}" for i in range(CLAIM_SCAN)]
    assert q.claim_next(["default"], "w4", now + 30, now, skip=skipped) == f"hot{CLAIM_SCAN}"


@all_backends
def test_a_rate_limit_counts_starts_in_its_window(eng: Engine) -> None:
    add, _ = _agents(eng)
    for i in range(3):
        eng.enqueue(add, run_id=f"r{i}", a=i, b=0)
    eng.queue("default", rate=(2, 60.0))
    q, now = eng.store.queues, eng.config.wall()
    got = [q.claim_next(["default"], f"w{i}", now + 1000, now) for i in range(3)]
    assert got == ["r0", "r1", None]
    later = now + 61
    assert q.claim_next(["default"], "w9", later + 30, later) == "r2"


@all_backends
def test_a_worker_runs_queued_runs_and_handles_see_results(eng: Engine) -> None:
    add, fail = _agents(eng)
    ok = [eng.enqueue(add, a=i, b=1) for i in range(3)]
    bad = eng.enqueue(fail)
    w = eng.worker(concurrency=2, grace=5)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert [h.result(timeout=60) for h in ok] == [1, 2, 3]
        with pytest.raises(RunFailed, match="no such order"):
            bad.result(timeout=60)
        assert eng.wait(bad.run_id, timeout=60).status == "failed"
    finally:
        w.stop()
        t.join()
    tags = [type(r.event).__struct_config__.tag for r in read_events(eng.store, ok[0].run_id)]
    assert tags[:3] == ["agent_started", "run_queued", "run_dequeued"]


@all_backends
def test_wait_times_out_and_names_unknown_runs(eng: Engine) -> None:
    add, _ = _agents(eng)
    h = eng.enqueue(add, a=1, b=1)
    with pytest.raises(TimeoutError, match="queued"):
        eng.wait(h.run_id, timeout=0.2)
    with pytest.raises(TimeoutError):
        h.result(timeout=0)
    with pytest.raises(RunNotFound):
        eng.wait("no-such-run", timeout=1)


@all_backends
def test_send_from_outside_wakes_a_waiting_receiver(eng: Engine) -> None:
    @eng.agent(name="tests.workers:listen")
    def listen(run: object) -> object:
        return run.recv("webhook")  # type: ignore[attr-defined]

    r = eng.run(listen)
    assert r.status == "waiting"
    eng.send(r.run_id, "webhook", {"paid": True, "api_key": "sk-live-123"})
    done = eng.wait(r.run_id, timeout=60)
    assert done.status == "completed"
    assert done.output == {"paid": True, "api_key": "<redacted>"}  # never in clear
    with pytest.raises(UsageError, match="receives no more"):
        eng.send(r.run_id, "webhook", 1)

    @eng.agent(name="tests.workers:inner")
    def inner(run: object) -> None:
        eng.send(r.run_id, "x", 1)

    refused = eng.run(inner)  # from inside a run, run.send is the durable way
    assert refused.status == "failed" and "inside a run" in (refused.error or "")


@all_backends
def test_the_async_twins_keep_the_loop_running(eng: Engine) -> None:
    """aenqueue, aresult and await_run on an event loop: a ticker task on the same loop
    keeps ticking while they wait (nothing blocks the loop)."""
    import asyncio

    @eng.agent(name="tests.workers:slow_add")
    def slow_add(run: object, a: int, b: int) -> int:
        run.sleep(0.3)  # type: ignore[attr-defined]  (a worker wakes it: aresult waits)
        return a + b

    w = eng.worker(concurrency=1, grace=5)

    async def main() -> tuple[object, str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        h = await eng.aenqueue(slow_add, a=20, b=22)
        threading.Thread(target=w.run).start()
        before = ticks
        out = await h.aresult(timeout=60)
        during = ticks - before  # the loop ran while the result was awaited
        done = await eng.await_run(h.run_id, timeout=60)
        task.cancel()
        return out, str(done.status), during

    try:
        out, status, ticks = asyncio.run(main())
    finally:
        w.stop()
    assert (out, status) == (42, "completed")
    assert ticks >= 3  # 0.3 s of sleeping run at least: a blocked loop would tick none


@all_backends
def test_aenqueue_inside_an_async_run_is_refused_as_enqueue_is(eng: Engine) -> None:
    """The executor thread aenqueue hands its commit to does not see the run's context:
    the refusal is decided on the loop, before the hand-off, or every resume of the run
    would enqueue another run."""
    add, _ = _agents(eng)

    @eng.agent(name="tests.workers:async_parent")
    async def parent(run: object) -> str:
        h = await eng.aenqueue(add, a=1, b=2)
        return h.run_id

    refused = eng.run(parent)
    assert refused.status == "failed" and "inside a run" in (refused.error or "")
    assert [r.run_id for r in eng.runs()] == [refused.run_id]  # nothing was enqueued


@backends("memory", "sqlite", "postgres")
def test_a_wake_in_this_process_obeys_its_queues_limits(eng: Engine) -> None:
    """A message sent to a waiting run of a full queue wakes it only when a slot frees:
    the in-process wake claims as a worker does."""
    from engine.polling import poll_until

    @eng.agent(name="tests.workers:hear")
    def hear(run: object) -> object:
        return run.recv("webhook")  # type: ignore[attr-defined]

    eng.queue("q", concurrency=1)
    first, second = eng.enqueue(hear, queue="q"), eng.enqueue(hear, queue="q")
    for h in (first, second):  # both start and wait for their message
        now = eng.config.wall()
        assert eng.store.queues.claim_next(["q"], eng.owner, now + 30, now) == h.run_id
        assert eng.work(h.run_id).status == "waiting"  # type: ignore[union-attr]
    now = eng.config.wall()
    assert eng.store.queues.claim_run(first.run_id, "another-worker", now + 600, now)
    eng.send(second.run_id, "webhook", "hi")
    assert poll_until(lambda: not eng._background, 60)  # the wake looked, and gave way
    assert second.status() == "waiting"  # the queue's one slot is taken
    eng.store.drop_lease(first.run_id, "another-worker")
    eng.wake(second.run_id)
    assert eng.wait(second.run_id, timeout=60).output == "hi"
