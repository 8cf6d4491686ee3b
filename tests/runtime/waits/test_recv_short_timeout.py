"""A receive whose timeout is shorter than the engine's ``inline_wait`` returns None at its
deadline: it does not wait inline the whole ``inline_wait``, which a receive without a
timeout does (the baseline, measured in the same test) before suspending the run. On
SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import backends, engine_with

from engine import Engine
from engine.kinds import RunStatus

INLINE = 1.0  # seconds a receive may wait holding its thread
TIMEOUT = 0.05  # far shorter


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    yield from engine_with(store_url, inline_wait=INLINE)


def _timed(eng: Engine, agent: Any) -> tuple[Any, float]:
    began = time.monotonic()
    r = eng.run(agent)
    return r, time.monotonic() - began


@backends("sqlite", "postgres")
def test_a_receive_times_out_at_its_deadline_not_at_the_inline_wait(eng: Engine) -> None:
    @eng.agent
    def patient(run: Any) -> Any:
        return run.recv("news")  # no deadline: waits the whole inline wait, then suspends

    @eng.agent
    def hasty(run: Any) -> Any:
        return run.recv("news", timeout=TIMEOUT)

    waited, baseline = _timed(eng, patient)
    assert waited.status == RunStatus.WAITING
    timed_out, took = _timed(eng, hasty)
    assert (timed_out.status, timed_out.output) == (RunStatus.COMPLETED, None)
    received = [e.data for e in eng.events(timed_out.run_id) if e.type == "message_received"]
    assert received == [{"call": 1, "topic": "news", "message_id": None, "value": None}]
    # Against the baseline, not a wall-clock limit: a receive that waited out the inline
    # wait would take about as long as the one that had no deadline.
    assert took < baseline / 2, (took, baseline)
