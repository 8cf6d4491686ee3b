"""Cross-agent locks between real processes, against a fencing service (an HTTP server in
this process that rejects a fence lower than the highest it saw), on SQLite and
PostgreSQL:

- two processes contending for one lock write in turn, fences 1 and 2, none rejected;
- the holder SIGKILLed inside its block: another process takes the lock once its ttl
  runs out, with a higher fence; the killed run, recovered in a new process, replays its
  recorded fence, and the service rejects its later writes;
- the holder SIGKILLed and recovered before its lock expired: the recovered run takes
  the lock again with the same fence and finishes; the waiting process gets the next.

In every case the service never saw two holders of the lock interleaved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fencing import FencingService, fencing_service
from agents.kit import ROOT, python, wait_until

from engine import Engine

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
RECOVER = (
    "import json, sys\n"
    "from engine import Engine\n"
    "e = Engine.open(sys.argv[1])\n"
    "print(json.dumps([[r.run_id, r.status, r.output] for r in e.recover()]))\n"
)


@pytest.fixture
def svc() -> Iterator[FencingService]:
    with fencing_service() as s:
        yield s


def _start(url: str, svc: FencingService, steps: int, ttl: float, pause: float) -> Any:
    """A process that runs the writer agent (its run id is its ``run_id``)."""
    run_id = uuid.uuid4().hex
    env = {
        **{k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"},
        "AGENTLOG_TEST_FENCING": svc.url,
        "AGENTLOG_TEST_LOCK_PAUSE": str(pause),
    }
    args = [url, run_id, "printer", str(steps), str(ttl)]
    p = subprocess.Popen(
        [sys.executable, "-m", "tests.agents.lock_agents", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    p.run_id = run_id  # type: ignore[attr-defined]
    return p


def _result(p: Any) -> dict[str, Any]:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def _kill(p: Any) -> None:
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)  # reaped: its owner lease reads as dead
    assert p.returncode == -signal.SIGKILL


def _killed_in_its_block(url: str, svc: FencingService, ttl: float) -> Any:
    """A writer process SIGKILLed inside its lock block, after its first write."""
    p = _start(url, svc, steps=3, ttl=ttl, pause=120)
    wait_until(lambda: svc.wrote(p.run_id, 0), "the holder's first write", 60)
    _kill(p)
    return p


def _recover(url: str, svc: FencingService) -> list[list[Any]]:
    p = python("-c", RECOVER, url, env={"AGENTLOG_TEST_FENCING": svc.url}, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return list(json.loads(p.stdout.strip().splitlines()[-1]))


def _lock_events(url: str, run_id: str) -> list[tuple[str, int]]:
    eng = Engine.open(url)
    try:
        return [(e.type, e.data["fence"]) for e in eng.events(run_id) if e.type.startswith("lock")]
    finally:
        eng.close()


def _held(url: str) -> list[tuple[str, str, int]]:
    eng = Engine.open(url)
    try:
        return [(r.name, r.holder, r.fence) for r in eng.store.locks.held()]
    finally:
        eng.close()


@STORES
def test_two_processes_contending_write_in_turn(store_url: str, svc: FencingService) -> None:
    a = _start(store_url, svc, steps=6, ttl=2.0, pause=0.05)
    b = _start(store_url, svc, steps=6, ttl=2.0, pause=0.05)
    ra, rb = _result(a), _result(b)
    assert sorted([ra["output"]["fence"], rb["output"]["fence"]]) == [1, 2]
    assert ra["output"]["accepted"] == rb["output"]["accepted"] == [True] * 6
    assert svc.rejected == [] and len(svc.accepted) == 12
    svc.check_one_holder_at_a_time()
    assert _held(store_url) == []


@STORES
def test_a_killed_holder_loses_the_lock_at_expiry_and_its_stale_fence_is_rejected(
    store_url: str, svc: FencingService
) -> None:
    killed = _killed_in_its_block(store_url, svc, ttl=1.5)

    other = _start(store_url, svc, steps=3, ttl=30, pause=0)  # waits out the dead hold
    r = _result(other)
    assert r["output"] == {"fence": 2, "accepted": [True, True, True]}

    assert _recover(store_url, svc) == [
        [killed.run_id, "completed", {"fence": 1, "accepted": [True, False, False]}]
    ]
    assert [(e[2], e[3]) for e in svc.rejected] == [(killed.run_id, 1), (killed.run_id, 2)]
    svc.check_one_holder_at_a_time()
    assert [e[1] for e in svc.accepted] == [1, 2, 2, 2]
    assert _lock_events(store_url, killed.run_id) == [("lock_acquired", 1), ("lock_released", 1)]
    assert _held(store_url) == []


@STORES
def test_a_killed_holder_recovered_in_time_retakes_its_fence(
    store_url: str, svc: FencingService
) -> None:
    killed = _killed_in_its_block(store_url, svc, ttl=60)
    waiting = _start(store_url, svc, steps=3, ttl=30, pause=0)  # waits: the hold is unexpired

    assert _recover(store_url, svc) == [
        [killed.run_id, "completed", {"fence": 1, "accepted": [True, True, True]}]
    ]
    r = _result(waiting)
    assert r["output"] == {"fence": 2, "accepted": [True, True, True]}
    assert svc.rejected == []
    svc.check_one_holder_at_a_time()
    assert [(e[1], e[2] == killed.run_id) for e in svc.accepted] == [
        (1, True),
        (1, True),
        (1, True),
        (2, False),
        (2, False),
        (2, False),
    ]
    assert _lock_events(store_url, killed.run_id) == [("lock_acquired", 1), ("lock_released", 1)]
    assert _held(store_url) == []
