"""Durable timers (SQLite files and PostgreSQL): ``run.sleep`` records its wake-up time
once; a wait longer than ``inline_wait`` suspends the run (status waiting, no thread
held) and ``recover`` before the deadline writes nothing, after it completes the run. A
sleeper SIGKILLed midway sleeps only the remainder after recovery, and a receive's
deadline survives a crash: both read from the recorded times, not from a stopwatch."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from engine import Engine
from engine.log.waiting import Timer
from engine.runtime.host.config import EngineConfig
from tests.agents import mailbox_agents as agents
from tests.agents.kit import ROOT, python, wait_until
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
MODULE = "tests.agents.mailbox_agents"
RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps([[r.run_id, r.status, r.output] for r in e.recover()]))
"""


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(inline_wait=0.2))
    yield e
    e.close()


def _of(e: Engine, run_id: str, type_: str) -> list[Any]:
    return [x for x in e.events(run_id) if x.type == type_]


def _at(e: Engine, run_id: str, type_: str) -> float:
    """When the run's first ``type_`` event was recorded (epoch seconds)."""
    return float(_of(e, run_id, type_)[0].at.timestamp())


@STORES
def test_a_long_sleep_suspends_holding_no_thread_until_recover_finds_it_due(
    eng: Engine,
) -> None:
    eng.run(agents.sleeper, seconds=0)  # the store's connections (and their threads) open
    before = threading.active_count()
    others = [eng.run(agents.sleeper, seconds=600) for _ in range(3)]
    r = eng.run(agents.sleeper, seconds=1.5)
    assert r.status == "waiting" and (r.waiting or "").startswith("timer until")
    assert {o.status for o in others} == {"waiting"}
    assert threading.active_count() <= before  # each call returned; nothing waits on
    state = eng.state(r.run_id)
    [timer] = _of(eng, r.run_id, "timer_set")
    assert state.waits_on == Timer(timer.data["until"]) and state.wake_at == timer.data["until"]
    logged = len(eng.events(r.run_id))
    assert eng.recover() == []  # none due: each left alone
    assert eng.resume(r.run_id).status == "waiting"  # resumed early: it waits again...
    assert len(eng.events(r.run_id)) == logged  # ...writing nothing
    wait_until(lambda: time.time() > timer.data["until"], "the deadline", wait=30)
    [done] = eng.recover()
    assert (done.run_id, done.status, done.output) == (r.run_id, "completed", "woke")
    assert len(_of(eng, r.run_id, "timer_set")) == 1
    assert _at(eng, r.run_id, "agent_finished") >= timer.data["until"]


def test_a_short_sleep_waits_inline(eng: Engine) -> None:
    r = eng.run(agents.sleeper, seconds=0.05)
    assert (r.status, r.output) == ("completed", "woke")
    [timer] = _of(eng, r.run_id, "timer_set")
    assert _at(eng, r.run_id, "agent_finished") >= timer.data["until"]
    assert not _of(eng, r.run_id, "run_waiting")


def test_bad_sleeps_are_one_clear_error(eng: Engine) -> None:
    for bad in (-1, float("inf"), 1e300, "3", True):
        r = eng.run(agents.sleeper, seconds=bad)
        assert r.status == "failed" and "UsageError" in (r.error or ""), (bad, r.error)
        assert not _of(eng, r.run_id, "timer_set")


def test_an_async_agent_awaits_its_waits_and_suspends_the_same_way(eng: Engine) -> None:
    r = eng.run(agents.async_waiter, seconds=0.05, timeout=0.05)
    assert (r.status, r.output) == ("completed", ["slept", None])
    r = eng.run(agents.async_waiter, seconds=60, timeout=0.05)
    assert r.status == "waiting" and isinstance(eng.state(r.run_id).waits_on, Timer)


def _until_recorded(e: Engine, run_id: str, p: subprocess.Popen[str]) -> float:
    def timer() -> Any:
        assert p.poll() is None, p.communicate()
        try:
            return _of(e, run_id, "timer_set")
        except Exception:
            return None  # the run is not written yet

    [t] = wait_until(timer, "the timer to be recorded")
    return float(t.data["until"])


def _start(url: str, run_id: str, agent: str, data: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, url, run_id, agent, json.dumps(data)],
        cwd=str(ROOT),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@STORES
def test_a_sleeper_killed_midway_sleeps_only_what_remains(store_url: str, eng: Engine) -> None:
    """SIGKILL while sleeping inline (4 s), recover 2.5 s in: the resumed run keeps the
    recorded wake-up, so it finishes at that time, long before a fresh 4 s sleep would."""
    rid = uuid.uuid4().hex
    p = _start(store_url, rid, "sleeper", {"seconds": 4})
    until = _until_recorded(eng, rid, p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    wait_until(lambda: time.time() > until - 1.5, "2.5 s of the sleep", wait=30)
    out = python("-c", RECOVER, store_url)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [rid, "completed", "woke"] in json.loads(out.stdout)
    [timer] = _of(eng, rid, "timer_set")  # recorded once
    assert timer.data["until"] == until
    resumed = _at(eng, rid, "agent_resumed")
    finished = _at(eng, rid, "agent_finished")
    assert until <= finished < resumed + 4  # slept the remainder, not the whole again


@STORES
def test_a_receive_deadline_survives_a_crash(store_url: str, eng: Engine) -> None:
    """A receiver SIGKILLed while waiting (its deadline recorded), recovered after the
    deadline: the receive returns None at once, from the recorded deadline."""
    rid = uuid.uuid4().hex
    p = _start(store_url, rid, "receiver", {"timeout": 2})
    until = _until_recorded(eng, rid, p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    wait_until(lambda: time.time() > until, "the deadline", wait=30)
    out = python("-c", RECOVER, store_url)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [rid, "completed", [None]] in json.loads(out.stdout)
    [timer] = _of(eng, rid, "timer_set")
    assert (timer.data["until"], timer.data["purpose"]) == (until, "recv")
    [got] = _of(eng, rid, "message_received")
    assert got.data["message_id"] is None and got.at.timestamp() >= until
