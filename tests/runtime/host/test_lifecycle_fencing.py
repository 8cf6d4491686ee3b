"""Fencing end to end: an owner presumed dead (paused past its lease: a GC pause, SIGSTOP,
a partition) that comes back after another owner took its run writes nothing more and
sends no effect: the store refuses its append because the run's lease is at a newer
epoch, whether or not its heartbeat noticed first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agents.kit import ROOT, python
from conftest import all_backends, backends

from engine import Engine, EngineConfig
from engine.polling import poll_until
from engine.runtime.host.leases import LeaseLost

REFUSED = "its lease was taken by another owner"  # the store's refusal, as the run reports it


@all_backends
def test_the_store_refuses_a_stale_owner_its_heartbeat_has_not_warned(store_url: str) -> None:
    """The lease passes to another owner while a tool runs, and this engine's heartbeat
    is not due for minutes: the tool's outcome is refused by the store itself, the run
    stops ('running', naming the refusal), and the tool after it never runs."""
    engine = Engine(store_url, config=EngineConfig(lease_ttl=600))
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    @engine.tool(name="fence_slow")
    def slow() -> str:
        entered.set()
        release.wait(30)
        return "done"

    @engine.tool(name="fence_next", side_effect=True)
    def after() -> str:
        ran.append("next")
        return "next"

    @engine.agent(name="tests:fence_agent")
    def agent(run: Any) -> str:
        return slow() + after()

    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(r=engine.run(agent, run_id="fenced")))
    t.start()
    try:
        assert entered.wait(30)
        before = len(engine.events("fenced"))
        now = time.time()
        taken = engine.store.take_lease("fenced", "elsewhere:1:x", now + 60, now, dead=engine.owner)
        assert taken == "elsewhere:1:x"
    finally:
        release.set()
        t.join(30)
    r = result["r"]
    assert r.status == "running" and REFUSED in str(r.error), r.error
    assert "was taken over; this owner stops" in str(r.error)  # LeaseLost, not a store error
    assert ran == [] and len(engine.events("fenced")) == before
    assert engine.store.lease("fenced")[0] == "elsewhere:1:x"  # type: ignore[index]
    engine.close()


def _lost(engine: Engine, run_id: str) -> bool:
    try:
        engine.leases.check(run_id)
    except LeaseLost:
        return True
    return False


def test_a_heartbeat_that_renews_a_lease_back_from_other_hands_reports_it_lost(
    tmp_path: Path,
) -> None:
    """Another owner took the lease and dropped it again while this engine's tool ran:
    the next beat takes it back at a newer epoch, and that is a loss (the run stops at
    its next durable call, before the store is even asked)."""
    engine = Engine(f"sqlite:///{tmp_path}/fence.db", config=EngineConfig(lease_ttl=0.3))
    entered, release = threading.Event(), threading.Event()

    @engine.tool(name="fence_beat_slow")
    def slow() -> str:
        entered.set()
        release.wait(30)
        return "done"

    @engine.agent(name="tests:fence_beat_agent")
    def agent(run: Any) -> str:
        return slow()

    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(r=engine.run(agent, run_id="back")))
    t.start()
    try:
        assert entered.wait(30)
        now = time.time()
        engine.store.take_lease("back", "elsewhere:1:x", now + 60, now, dead=engine.owner)
        engine.store.drop_lease("back", "elsewhere:1:x")
        assert poll_until(lambda: _lost(engine, "back"), 30)
        # The lease the beat took back is let go again: nobody waits a lease for it.
        assert (engine.store.lease("back") or ("",))[0] != engine.owner
    finally:
        release.set()
        t.join(30)
    r = result["r"]
    # (A beat between the take and the drop names that owner: a loss all the same.)
    assert r.status == "running" and "taken over by" in str(r.error), r.error
    assert REFUSED not in str(r.error)  # the heartbeat stopped it, not the store
    engine.close()


PAUSED = """
import json, os, sys, time, urllib.request
from engine import Engine, EngineConfig

engine = Engine.open()
HERE = os.path.dirname(os.path.abspath(__file__))


@engine.tool
def slow_step(order: str) -> str:
    open(os.path.join(HERE, "entered"), "w").close()
    while not os.path.exists(os.path.join(HERE, "gate.open")):
        time.sleep(0.01)
    return "slow " + order


@engine.tool(side_effect=True)
def notify(order: str) -> int:
    request = urllib.request.Request(os.environ["FENCE_EFFECTS"] + "/" + order, method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status


@engine.agent
def paused(run, order: str) -> str:
    return slow_step(order) + " sent " + str(notify(order))


if __name__ == "__main__":
    config = EngineConfig(lease_ttl=float(sys.argv[3]))
    r = Engine(sys.argv[1], config=config).run(paused, run_id=sys.argv[2], order="o1")
    print(json.dumps({"status": r.status, "error": r.error}))
"""

# A recoverer whose clock runs ``ahead`` seconds in front: it sees a lease as expired as
# it would be after a pause that long, whatever the paused owner's heartbeat period.
RECOVER = """
import json, sys, time
from engine import Engine, EngineConfig
ahead = float(sys.argv[2])
e = Engine(sys.argv[1], config=EngineConfig(wall=lambda: time.time() + ahead))
print(json.dumps([[r.run_id, r.status, r.output] for r in e.recover()]))
"""


class _Counting(BaseHTTPRequestHandler):
    seen: Counter[str] = Counter()

    def do_POST(self) -> None:
        type(self).seen[self.path] += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def effects() -> Iterator[tuple[str, Counter[str]]]:
    """A counting HTTP server on localhost: its URL and the POSTs it has seen, by path."""
    handler = type("Handler", (_Counting,), {"seen": Counter()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    server.shutdown()
    server.server_close()


# (child's lease ttl, the recoverer's clock ahead): a heartbeat not due when the child
# comes back (so only the store can stop it), and a short lease that really expires while
# the child is stopped (its heartbeat, overdue, races its write: either stops it).
MODES = {"heartbeat-not-due": (600.0, 1800.0), "lease-expired": (1.0, 0.0)}


@backends("sqlite", "postgres")
@pytest.mark.parametrize("mode", sorted(MODES))
def test_an_owner_stopped_past_its_lease_writes_and_sends_nothing_after_a_takeover(
    store_url: str, tmp_path: Path, effects: tuple[str, Counter[str]], mode: str
) -> None:
    """A child process runs an agent and is stopped (SIGSTOP) inside its slow first tool;
    once its lease has expired another process recovers the run and finishes it (the
    effect sent once); continued (SIGCONT), the child writes nothing more and sends
    nothing: its log is as the takeover left it and the server saw one POST."""
    ttl, ahead = MODES[mode]
    url, seen = effects
    script = tmp_path / "paused.py"
    script.write_text(PAUSED)
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    env.update(PYTHONPATH=str(ROOT), FENCE_EFFECTS=url)
    child = subprocess.Popen(
        [sys.executable, str(script), store_url, "stopped", str(ttl)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    e = Engine.open(store_url)
    try:
        assert poll_until(lambda: (tmp_path / "entered").exists() or child.poll() is not None, 60)
        assert child.poll() is None, child.communicate()
        os.kill(child.pid, signal.SIGSTOP)
        lease = e.store.lease("stopped")
        assert lease is not None and f":{child.pid}:" in lease[0]
        assert poll_until(lambda: lease[1] < time.time() + ahead, 60)  # expired, for the taker
        (tmp_path / "gate.open").touch()  # the taker's slow step returns at once
        p = python("-c", RECOVER, store_url, str(ahead), env={**env, "PYTHONPATH": str(ROOT)})
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout) == [["stopped", "completed", "slow o1 sent 200"]]
        after_takeover = e.events("stopped")
        assert seen == Counter({"/o1": 1})
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err[-2000:]
        told = json.loads(out)
        assert told["status"] == "running" and "taken over" in told["error"], told
        refused = int(REFUSED in told["error"])
        print(f"{mode}: the store refused {refused} write(s) of the stopped owner")
        if mode == "heartbeat-not-due":
            assert refused == 1  # its heartbeat could not have noticed: the store stopped it
        assert [(x.position, x.type) for x in e.events("stopped")] == [
            (x.position, x.type) for x in after_takeover
        ]
        assert seen == Counter({"/o1": 1})
        assert e.state("stopped").status == "completed"
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
        e.close()
