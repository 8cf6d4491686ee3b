"""The workers workload's agents (campaign/workers.py), executed by worker processes only.

    job      books ``pay:<n>`` at the ledger, sleeps durably (longer than the inline
             wait: the run suspends and a worker wakes it at its time), receives two
             messages the campaign sends from outside (``engine.send``) on topic ``go``,
             books ``got:<n>`` with what it received, calls a child run, books
             ``done:<n>``
    shipper  the child: books ``ship:<n>``

Every effect goes to the ledger (campaign/ledger.py) under its business key, with a
verifier (the booking under the request's key), after a short pause (so that kills
land inside calls too). Outputs hold nothing a crash may change.
"""

from __future__ import annotations

import time
from typing import Any

from engine import Engine

from .ledger import call

engine = Engine.open()
TOOL_PAUSE = 0.15  # seconds a tool works before its request (a kill may land here)
NAP = 0.8  # the durable sleep (the campaign's inline wait is shorter: it suspends)
PATIENCE = 3600.0  # a receive waits this long at most (the campaign always sends)


def _found(key: str) -> dict[str, Any] | None:
    receipt = call("/find", key=key)["receipt"]
    return None if receipt is None else {"receipt": receipt}


@engine.tool(side_effect=True, key=lambda op, note="": op, verify=_found)
def book(op: str, note: str = "", *, idempotency_key: str) -> dict[str, Any]:
    """Book the effect ``op`` (once per business key, whoever calls and however often)."""
    time.sleep(TOOL_PAUSE)
    return {"receipt": call("/do", op=op, key=idempotency_key)["receipt"]}


@engine.agent
def shipper(run: Any, n: int) -> str:
    book(f"ship:{n}")
    return f"shipped {n}"


@engine.agent
def job(run: Any, n: int) -> dict[str, Any]:
    book(f"pay:{n}")
    run.sleep(NAP)
    got = [run.recv("go", timeout=PATIENCE) for _ in (1, 2)]
    book(f"got:{n}", note=",".join(map(str, got)))
    shipped = run.call(shipper, n=n)
    book(f"done:{n}")
    return {"n": n, "got": got, "child": shipped}


def expected(n: int, sent: list[str]) -> dict[str, Any]:
    """The output of ``job(n)`` that received ``sent``."""
    return {"n": n, "got": sent, "child": f"shipped {n}"}


def effects(n: int) -> list[str]:
    """The ops a completed ``job(n)`` booked, once each."""
    return [f"pay:{n}", f"got:{n}", f"ship:{n}", f"done:{n}"]
