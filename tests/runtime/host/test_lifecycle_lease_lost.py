"""An owner whose lease was taken over stops at once and writes nothing more."""

from __future__ import annotations

import threading
import time
from typing import Any

from conftest import all_backends
from structlog.testing import capture_logs

from engine import Engine, EngineConfig
from engine import observe as engine_log
from engine.polling import poll_until


@all_backends
def test_an_owner_that_lost_its_lease_stops_without_writing(store_url: str) -> None:
    """Run A's owner is presumed dead while its tool is still running (its lease was taken
    over). When the tool returns, A records nothing more and stops: status 'running', the
    error naming the new owner; the tool after it never runs in A."""
    engine = Engine(store_url, config=EngineConfig(lease_ttl=0.3))  # beats every 0.1 s
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    @engine.tool(name="lease_lost_slow")
    def slow() -> str:
        entered.set()
        release.wait(10)
        ran.append("slow")
        return "done"

    @engine.tool(name="lease_lost_next")
    def after() -> str:
        ran.append("next")
        return "next"

    @engine.agent(name="tests:lease_lost_agent")
    def agent(run: Any) -> str:
        return slow() + after()

    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(r=engine.run(agent, run_id="lost-1")))
    engine_log.get()  # a first use may configure structlog, which would undo capture_logs
    with capture_logs() as logs:
        t.start()
        assert entered.wait(10)
        before = len(engine.events("lost-1"))
        other = engine.store.take_lease(
            "lost-1", "elsewhere:1:x", time.time() + 60, time.time(), dead=engine.owner
        )
        assert other == "elsewhere:1:x"
        noticed = poll_until(lambda: any(e["event"] == "lease_lost" for e in logs), 30)
        assert noticed, "no heartbeat noticed the lease was taken"
    release.set()
    t.join(10)
    r = result["r"]
    assert r.status == "running" and "elsewhere:1:x" in str(r.error)
    assert ran == ["slow"]
    assert len(engine.events("lost-1")) == before
    assert engine.store.lease("lost-1")[0] == "elsewhere:1:x"  # not dropped by the loser
