"""A run this engine stops itself (the abandon of its parent, a supervisor replacing it)
stops at its next durable call; an outcome it holds deferred (a business-keyed effect
whose tool takes the key: its key's commit rides with the next commit) is written first,
fenced: the effect stands committed, in its log and its key's ledger, not left of unknown
outcome for whoever takes the key next to wait on. A stale owner's stays refused."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from conftest import backends
from test_supervision_kit import Books, spawn

from engine import Engine, EngineConfig
from engine.kinds import RunStatus
from engine.polling import poll_until
from engine.runtime.call import ledger


@backends("sqlite", "postgres")
def test_an_abandon_stopping_a_child_keeps_its_deferred_keyed_outcome(eng: Engine) -> None:
    books, gate, sent = Books(), threading.Event(), threading.Event()

    @eng.tool(side_effect=True, key=lambda what: f"book:{what}")
    def book(what: str, *, idempotency_key: str) -> str:
        return books.add("do", what, idempotency_key)

    @eng.agent
    def child(run: Any) -> None:
        book("C.1")  # deferred, its key's commit with it: one commit a call
        sent.set()
        gate.wait(60)  # the parent's abandon marks it stopped meanwhile
        run.decide("next", books.add, "do", "C.2")  # its next durable call: it stops

    @eng.agent
    def parent(run: Any) -> None:
        spawn(run, child)
        run.ask("holds")

    result = eng.run(parent)
    kid = next(e.data["child_run_id"] for e in eng.events(result.run_id)[1:])
    assert sent.wait(60)
    done: list[Any] = []
    abandon = threading.Thread(target=lambda: done.append(eng.abandon(result.run_id)))
    abandon.start()
    try:
        assert poll_until(lambda: kid in eng.leases._lost, 60)
    finally:
        gate.set()
        abandon.join(120)
    assert done and done[0].status == RunStatus.ABANDONED, done
    assert eng.state(kid).status == RunStatus.ABANDONED
    assert books.log == [("do", "C.1")]
    done_at = [e.data for e in eng.events(kid) if e.type == "tool_succeeded"]
    assert [(d["call"], d["source"]) for d in done_at] == [(1, "executed")]
    held = ledger.read(eng.store, "book:C.1")
    assert held.committed is not None and held.committed.run_id == kid


@backends("sqlite", "postgres")
def test_a_stale_owner_writes_none_of_its_deferred_keyed_outcome(store_url: str) -> None:
    """The lease passes to another owner between a deferred keyed outcome and the run's
    next commit (its heartbeat not due for minutes): that commit is refused, and so is
    the try to write what was deferred; neither the outcome nor its key's commit is in
    the log, and the call after it never runs."""
    eng = Engine(store_url, config=EngineConfig(lease_ttl=600))
    gate, sent, ran = threading.Event(), threading.Event(), []

    @eng.tool(side_effect=True, key=lambda what: f"stale:{what}")
    def book(what: str, *, idempotency_key: str) -> str:
        return what

    @eng.tool(side_effect=True)
    def after() -> str:
        ran.append("next")
        return "next"

    @eng.agent(name="tests:stale_deferred")
    def agent(run: Any) -> str:
        got = book("S.1")
        sent.set()
        gate.wait(60)
        return got + after()

    rid = f"stale-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(r=eng.run(agent, run_id=rid)))
    t.start()
    try:
        assert sent.wait(60)
        before = len(eng.events(rid))
        now = time.time()
        assert eng.store.take_lease(rid, "elsewhere:1:x", now + 60, now, dead=eng.owner)
    finally:
        gate.set()
        t.join(60)
    try:
        assert result["r"].status == RunStatus.RUNNING, result["r"]
        assert ran == [] and len(eng.events(rid)) == before
        held = ledger.read(eng.store, "stale:S.1")
        assert held.claim is not None and held.committed is None
    finally:
        eng.close()
