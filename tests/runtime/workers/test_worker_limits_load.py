"""A queue's limits hold across worker processes under load and a kill: with
``engine.queue("q", concurrency=2, per_partition=1)``, three workers (four runs each at
most) serve twelve runs of three partitions (the first six of one) whose calls a local
service times; one worker is SIGKILLed mid-call and restarted. The service never sees
more than two calls at once, nor two of one partition (a killed worker's call counts
until the kill)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine import Engine
from engine.polling import poll_until
from tests.conftest import backends
from tests.runtime.workers.worker_kit import limits_agent, serving, started

pytestmark = pytest.mark.processes  # worker processes, killed and drained

PARTS = ("a", "b", "c")
RUNS = 12
# The first half of the line is partition a: only its limit keeps two of it apart.
PARTITION = ["a"] * 6 + ["b", "c"] * 3
CALLS = 3
SECONDS = 0.25


@backends("sqlite", "postgres")
def test_limits_hold_across_three_workers_and_a_kill(store_url: str, tmp_path: Path) -> None:
    engine = Engine.open(store_url)
    engine.queue("q", concurrency=2, per_partition=1)
    with serving(store_url, tmp_path, queues="q") as (service, fleet):
        procs = {slot: started(fleet, slot) for slot in range(3)}
        rids = [
            engine.enqueue(
                limits_agent.limited,
                queue="q",
                partition=PARTITION[i],
                part=PARTITION[i],
                i=i,
                calls=CALLS,
                seconds=SECONDS,
            ).run_id
            for i in range(RUNS)
        ]
        # A worker mid-call: kill it (its call ends at the kill), start another in its slot.
        busy = poll_until(lambda: service.open_calls("lim:") or None, 120)
        assert busy, "no call was made"
        slot = next(s for s, p in procs.items() if p.pid == busy[0].pid)
        at = time.monotonic()
        killed = fleet.kill(slot, before_reap=lambda: service.cut(busy[0].pid, at))
        started(fleet, slot)
        results = [engine.wait(rid, timeout=300) for rid in rids]
    engine.close()
    assert [r.status for r in results] == ["completed"] * RUNS
    assert [r.output for r in results] == list(range(RUNS))
    total, by_partition = service.peaks()
    assert total == 2, f"at most 2 calls at once, and the load reached 2: {total}"
    assert by_partition == dict.fromkeys(PARTS, 1), by_partition
    pids = {c.pid for c in service.calls}
    assert killed.pid in pids and len(pids) >= 2  # the killed worker called, and another
