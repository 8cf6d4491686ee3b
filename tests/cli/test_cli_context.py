"""The recovery context (``agentlog context``) read from a log: the goal, plan progress,
completed steps with their key results, the uncertain side effect a crash left behind,
and a bounded size however long the run and however large its results."""

from __future__ import annotations

import time
import uuid

from conftest import backends

from engine import Engine
from engine import events as ev
from engine.log.history import RunWriter
from engine.log.state import RunState
from replay.context import MAX_CHARS, recovery_context
from replay.output import Out
from replay.timeline import story, views

pytestmark = backends("memory")


def _record(eng: Engine, *events: ev.Event) -> str:
    rid = uuid.uuid4().hex
    RunWriter(eng.store, RunState(run_id=rid)).append(*events)
    return rid


def test_a_crash_mid_payment_reads_as_pending_uncertain_work(eng: Engine) -> None:
    t = time.time()
    rid = _record(
        eng,
        ev.AgentStarted(at=t, agent="shop:refund", import_path="shop", input={"order": "o1"}),
        ev.PlanCreated(at=t, call=1, steps=["look up", "refund", "reply"]),
        ev.StepStarted(at=t, call=2, name="look up"),
        ev.ToolInvoked(at=t, call=3, tool="lookup", args={"order": "o1"}),
        ev.ToolFailed(at=t, call=3, tool="lookup", kind="transient", message="504", final=False),
        ev.RetryScheduled(at=t, call=3, tool="lookup", attempt=2, delay=0.1),
        ev.ToolSucceeded(at=t, call=3, tool="lookup", result={"cents": 500}, attempt=2),
        ev.StepCompleted(at=t, call=2, name="look up"),
        ev.ToolInvoked(at=t, call=4, tool="refund", key="refund:o1", side_effect=True),
    )
    text = recovery_context(eng.state(rid), views(eng, rid))
    assert "Agent shop:refund" in text and '"o1"' in text
    assert "(1 of 3 done)" in text and "[x] look up" in text and "[ ] refund  <- next" in text
    assert 'lookup(order="o1") -> {"cents":500} (after 1 failed attempt: transient)' in text
    assert "refund (call 4, key refund:o1)" in text and "never with a new key" in text
    assert "remaining plan steps: refund, reply" in text

    plain = Out(color=False)
    timeline = [plain.text(*row) for row in story(views(eng, rid))]
    assert "refund()  call 4  side effect, key refund:o1: intent recorded" in timeline[-2]
    assert "retry lookup: attempt 2" in timeline[5] and "plan 1/3" in timeline[7]


def test_the_context_stays_bounded(eng: Engine) -> None:
    t = time.time()
    big = {"blob": "x" * 100_000}
    calls: list[ev.Event] = []
    for n in range(1, 500):
        calls.append(ev.ToolInvoked(at=t, call=n, tool="fetch", args={"page": n}))
        calls.append(ev.ToolSucceeded(at=t, call=n, tool="fetch", result=big))
    rid = _record(
        eng,
        ev.AgentStarted(at=t, agent="m:crawl", import_path="m", input={"site": "x" * 5000}),
        *calls,
    )
    text = recovery_context(eng.state(rid), views(eng, rid))
    assert len(text) <= MAX_CHARS
    assert "earlier items omitted" in text and "fetch(page=499)" in text
