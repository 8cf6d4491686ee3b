"""The crash campaign's agent: many side-effecting calls of every kind against the fake
outside service (tests/agents/service.py), which counts every execution per operation.

    tool     key          idempotency_key  verify  compensate   on an uncertain outcome
    pay      business     yes              yes     void         verify, else re-send
    reserve  default      yes              yes     void         verify, else re-send
    ship     default      yes              no      -            re-send, same key (deduped)
    notify   business     no               yes     -            verify, else send
    note     default      no               no      -            pause: a person answers
    fax      business     no               no      -            pause: a person answers
    fee      business, shared by two runs (the second gets it from the ledger)
    quote    read-only

Which tool an operation uses is a recorded decision; checkpoints every few operations
and a small ``snapshot_every`` make snapshots happen (the ``in_snapshot`` failpoint).
"""

from __future__ import annotations

import os
from typing import Any

from engine import Engine

from . import service

engine = Engine.open()
DELAY = float(os.environ.get("AGENTLOG_CAMPAIGN_DELAY", "0.004"))
COMMIT_QUESTION = "commit the batch?"
HUMAN_TOOLS = ("note", "fax")  # a person's "done" stands in for their result


def _receipt(found: str | None) -> dict[str, str] | None:
    return None if found is None else {"receipt": found}


def _by_key(key: str) -> dict[str, str] | None:
    return _receipt(service.by_key(key))


def _void(result: Any, idempotency_key: str | None = None) -> Any:
    # Declaring the key makes an interrupted undo safe to send again (the service voids a
    # receipt once); without it the engine stops and asks a person instead.
    return service.void(result["receipt"], idempotency_key)


@engine.tool
def quote(op: str) -> dict[str, Any]:
    service.read_only("quote", op)
    return {"op": op, "cents": 100 + sum(map(ord, op)) % 97}


@engine.tool(side_effect=True, key=lambda op: f"pay:{op}", verify=_by_key, compensate=_void)
def pay(op: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("pay", op, idempotency_key, delay=DELAY)}


@engine.tool(side_effect=True, verify=_by_key, compensate=_void)
def reserve(op: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("reserve", op, idempotency_key, delay=DELAY)}


@engine.tool(side_effect=True)
def ship(op: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("ship", op, idempotency_key, delay=DELAY)}


@engine.tool(
    side_effect=True,
    key=lambda op: f"notify:{op}",
    verify=lambda key: _receipt(service.by_op("notify", key.split(":", 1)[1])),
)
def notify(op: str) -> dict[str, str]:
    return {"receipt": service.perform("notify", op, delay=DELAY)}


@engine.tool(side_effect=True)
def note(op: str) -> dict[str, str]:
    return {"receipt": service.perform("note", op, delay=DELAY)}


@engine.tool(side_effect=True, key=lambda op: f"fax:{op}")
def fax(op: str) -> dict[str, str]:
    return {"receipt": service.perform("fax", op, delay=DELAY)}


@engine.tool(side_effect=True, key=lambda group: f"fee:{group}", verify=_by_key)
def fee(group: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("fee", group, idempotency_key, delay=DELAY)}


TOOLS = {"pay": pay, "reserve": reserve, "ship": ship, "notify": notify, "note": note, "fax": fax}
ORDER = tuple(TOOLS)


def route(op: str, cents: int, i: int) -> str:
    """The 'model' choosing a tool: deterministic, so an uncrashed run chooses the same."""
    return ORDER[(cents + i) % len(ORDER)]


@engine.agent(snapshot_every=7)
def campaign(run: Any, order: str, ops: int, group: str, confirm: bool) -> dict[str, Any]:
    receipts: dict[str, Any] = {"fee": fee(group)["receipt"]}
    for i in range(ops):
        op = f"{order}-{i}"
        q = quote(op)
        which = run.decide("route", route, op, q["cents"], i)
        result = TOOLS[which](op)
        receipts[op] = which if which in HUMAN_TOOLS else result["receipt"]
        if i % 4 == 3:
            run.checkpoint("batch")
    if confirm:
        receipts["confirmed"] = run.ask(COMMIT_QUESTION)
    return receipts
