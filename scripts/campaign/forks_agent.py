"""The forks workload's agents: a sender, a receiver and lock holders, each later
rewound (default reuse) to a checkpoint before its message or inside its lock block.

    receiver  ``listening``, receives one message on ``note``, books it (``got:<order>``)
    sender    ``ready``, sends the receiver its message, books it (``sent:<order>``)
    holder    takes the order's lock; inside it ``locked``, then a write the ledger
              checks by its fencing token (again, in a new block, while the ledger
              refuses a stale token); books its work after the block

A fork of the sender must take its parent's send over (the receiver's inbox gets one
message), a fork of the receiver must receive what its parent consumed (not wait on an
empty inbox), a fork of a holder must take the lock afresh (a new token) and take its
parent's write over (its arguments compared without the token). Every effect goes to
the ledger (campaign/ledger.py) with a verifier. Outputs hold nothing a crash may
change.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine import Engine

from .ledger import call
from .saga_agent import _found

engine = Engine.open()
SNAPSHOT_EVERY = 5
LOCK_TTL = float(os.environ.get("AGENTLOG_CAMPAIGN_LOCK_TTL", "3"))
PATIENCE = 600.0  # a recv's timeout: a message that never comes fails the round


@engine.tool(side_effect=True, key=lambda op: op, verify=_found)
def book(op: str, *, idempotency_key: str) -> dict[str, Any]:
    return {"receipt": call("/do", op=op, key=idempotency_key)["receipt"]}


def _written(key: str) -> dict[str, Any] | None:
    found = _found(key)
    return None if found is None else {"ok": True, **found}


@engine.tool(
    side_effect=True,
    key=lambda lock, fence, op, attempt: f"{op}#{attempt}",
    verify=_written,
)
def fenced_write(lock: str, fence: int, op: str, attempt: int, *, idempotency_key: str) -> Any:
    return call("/fenced", lock=lock, fence=fence, op=op, key=idempotency_key)


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def receiver(run: Any, order: str) -> dict[str, Any]:
    run.checkpoint("listening")
    message = run.recv("note", timeout=PATIENCE)
    book(f"got:{order}")
    return {"got": message}


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def sender(run: Any, order: str, to: str) -> dict[str, Any]:
    run.checkpoint("ready")
    run.send(to, "note", f"hello {order}")
    book(f"sent:{order}")
    return {"sent": order}


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def holder(run: Any, order: str, name: str) -> dict[str, Any]:
    lock, op = f"{order}:lock", f"fenced:{order}:{name}"
    tries = 0
    while True:
        tries += 1
        with run.lock(lock, ttl=LOCK_TTL) as fence:
            run.checkpoint(f"locked-{tries}")
            out = fenced_write(lock, fence, op, tries)
            time.sleep(0.05)  # work done holding the lock
        if out["ok"]:
            break
    book(f"held:{order}:{name}")
    return {"holder": name}
