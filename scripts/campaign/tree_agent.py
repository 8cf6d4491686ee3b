"""The tree campaign's agents: a root spawns branches, each branch spawns leaves.

    root     spawns ``width`` branches, sends each the list of its siblings ("peers"),
             gathers them, makes its own effect
    branch   passes two tokens to the next sibling by message and receives two from the
             previous; spawns ``leaves`` leaves; takes the order's shared lock and makes
             a fenced write with its token (again under a new token if the service
             refused a stale one); gathers its leaves
    leaf     effects, a durable sleep, one more effect; one leaf of an ``ask`` round
             asks a person (its branch and the root pause with it)

Every effect goes to the outside service (campaign/fenced.py) under a business key,
without deduplication by the service: a re-sent effect is a duplicate there. Outputs
hold nothing a crash may change (no run ids, no tokens), so a crashed tree's output is
the uncrashed one's.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from engine import Engine, failpoints

from . import fenced

engine = Engine.open()
QUESTION = "ship the order?"
LOCK_TTL = float(os.environ.get("AGENTLOG_CAMPAIGN_LOCK_TTL", "3"))
HOLD = 0.1  # seconds a branch holds the lock after its write
SNAPSHOT_EVERY = 5  # small: snapshots happen (the in_snapshot failpoint)
PATIENCE = 600.0  # a recv's timeout: a message that never comes fails the round


def _done(key: str) -> dict[str, str] | None:
    op = key.split(":", 1)[1]
    return {"receipt": f"done:{op}"} if fenced.done(op) else None


@engine.tool(side_effect=True, key=lambda op: f"tree:{op}", verify=_done)
def effect(op: str) -> dict[str, str]:
    return {"receipt": fenced.perform(op)}


def _written(key: str) -> dict[str, Any] | None:
    op = key.split(":", 1)[1].rsplit("#", 1)[0]
    return {"ok": True, "receipt": f"done:{op}"} if fenced.done(op) else None


@engine.tool(
    side_effect=True,
    key=lambda lock, fence, holder, op, attempt: f"fenced:{op}#{attempt}",
    verify=_written,
)
def fenced_write(lock: str, fence: int, holder: str, op: str, attempt: int) -> dict[str, Any]:
    failpoints.hit("campaign_in_lock")  # holding the lock, the write not sent
    return fenced.write(lock, fence, holder, op)


_sleeps = {"reached": 0}


def _armed(name: str) -> int | None:
    """The n-th time ``name`` kills, when ``$AGENTLOG_FAILPOINTS`` arms it."""
    for part in os.environ.get("AGENTLOG_FAILPOINTS", "").split(","):
        point, _, nth = part.strip().partition(":")
        if point == name:
            return int(nth) if nth.isdigit() else 1
    return None


def _sleep(run: Any, seconds: float) -> None:
    """``run.sleep``, SIGKILLed halfway through when the campaign arms
    ``campaign_in_sleep`` for this sleep (counted per process); a sleep that returns
    first (replayed) or suspends the run (a durable wait, no thread) is not killed."""
    nth = _armed("campaign_in_sleep")
    timer = None
    if nth is not None:
        _sleeps["reached"] += 1
        if _sleeps["reached"] == nth:
            timer = threading.Timer(seconds / 2, os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()
    try:
        run.sleep(seconds)
    finally:
        if timer is not None:
            timer.cancel()


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def leaf(run: Any, order: str, path: str, ops: int, nap: float, ask: bool) -> dict[str, Any]:
    done = [effect(f"{order}.{path}.{i}")["receipt"] for i in range(ops)]
    _sleep(run, nap)
    done.append(effect(f"{order}.{path}.woke")["receipt"])
    answer = run.ask(QUESTION) if ask else None
    return {"leaf": path, "effects": len(done), "answer": answer}


def _ledger(run: Any, order: str, path: str) -> int:
    """The fenced write, under the order's lock; again (a new block, so a new token)
    while the service refuses a stale token. Returns the attempts it took."""
    attempt = 0
    while True:
        attempt += 1
        with run.lock(f"{order}:ledger", ttl=LOCK_TTL) as fence:
            out = fenced_write(
                f"{order}:ledger", fence, run.run_id, f"{order}.{path}.ledger", attempt
            )
            time.sleep(HOLD)  # work done holding the lock: the siblings wait for it
        if out["ok"]:
            return attempt


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def branch(
    run: Any,
    order: str,
    index: int,
    width: int,
    leaves: int,
    ops: int,
    naps: list[float],
    ask: bool,
) -> dict[str, Any]:
    path = f"b{index}"
    peers = run.recv("peers", timeout=PATIENCE)
    for n in (1, 2):  # two on one topic: each must be consumed once, in order
        run.send(peers[(index + 1) % width], "token", f"{order}:{index}->{(index + 1) % width}#{n}")
    kids = [
        run.spawn(
            leaf,
            order=order,
            path=f"{path}.l{j}",
            ops=ops,
            nap=naps[j % len(naps)],
            ask=ask and index == 0 and j == 0,
        )
        for j in range(leaves)
    ]
    _ledger(run, order, path)
    tokens = [run.recv("token", timeout=PATIENCE) for _ in (1, 2)]
    outs = run.gather(*kids)
    effect(f"{order}.{path}.done")
    return {"branch": path, "tokens": tokens, "leaves": outs}


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def root(
    run: Any, order: str, width: int, leaves: int, ops: int, naps: list[float], ask: bool
) -> dict[str, Any]:
    kids = [
        run.spawn(
            branch, order=order, index=i, width=width, leaves=leaves, ops=ops, naps=naps, ask=ask
        )
        for i in range(width)
    ]
    ids = [k.run_id for k in kids]
    for k in kids:
        run.send(k.run_id, "peers", ids)
    outs = run.gather(*kids)
    effect(f"{order}.root.done")
    return {"order": order, "branches": outs}
