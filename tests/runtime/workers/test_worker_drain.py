"""SIGTERM drains a worker process: during a long side-effecting call the worker stops
claiming, lets the call finish and record its outcome, stops the run before its next
call and exits 0; another worker continues the run from its log and completes it. The
long effect happened once (made by the drained worker), the next by the other.

The long call lasts until the test opens its gate at the service, once the worker said
it drains: the SIGTERM lands inside the call however slow the machine is."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Engine
from engine.polling import poll_until
from tests.conftest import backends
from tests.runtime.workers.worker_kit import limits_agent, serving, started

pytestmark = pytest.mark.processes  # worker processes, killed and drained


@backends("sqlite", "postgres")
def test_sigterm_mid_call_finishes_the_call_and_another_worker_completes(
    store_url: str, tmp_path: Path
) -> None:
    engine = Engine.open(store_url)
    with serving(store_url, tmp_path, grace=120.0) as (service, fleet):
        gate = service.hold("long:1")
        procs = [started(fleet, 0), started(fleet, 1)]
        rid = engine.enqueue(limits_agent.drained, n=1, seconds=0.0).run_id
        calls = poll_until(lambda: service.open_calls("long:") or None, 120)
        assert calls, "the long call never began"
        first = next(p for p in procs if p.pid == calls[0].pid)
        second = next(p for p in procs if p is not first)
        fleet.term(first.slot)
        assert poll_until(lambda: first.said("draining") or None, 120), first.stderr_tail()
        gate.set()  # the call ends now, its worker draining
        assert fleet.drain(first.slot) == 0, first.stderr_tail()
        assert first.lines[-1] == {"stopped": first.id, "clean": True}
        result = engine.wait(rid, timeout=300)
        events = engine.events(rid)
    engine.close()
    assert (result.status, result.output) == ("completed", "drained 1")
    assert service.booked["long:1"].pids == [first.pid]  # finished by the drained one, once
    assert service.booked["after:1"].pids == [second.pid]  # the run went on elsewhere
    outcomes = [e.data["call"] for e in events if e.type == "tool_succeeded"]
    assert outcomes == [1, 2]
