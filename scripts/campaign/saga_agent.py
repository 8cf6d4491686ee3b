"""The saga workload's agents: a supervised team whose siblings have effects.

    clerk    books a note for the order (business key ``note:<order>``, refundable)
    payer    charges the order (business key ``charge:<order>``, refundable)
    breaker  counts its attempts at the ledger and fails its first ``fails`` ones, once
             the charge stands: each failure makes the team's supervisor restart it
             with its siblings (one_for_all: all three; rest_for_one: it and the payer,
             spawned after it)
    team_all / team_rest  the team under one_for_all / rest_for_one: ``staffed`` (a
             checkpoint a compensating rewind goes back to), the three spawned, the
             breaker waited for first (so its siblings are unsettled when it fails),
             the clerk's handle noted after the restart (its run id: a replay must give
             what the run gave)

Every effect goes to the ledger (campaign/ledger.py) with a verifier (the booking under
the request's key) and a compensation (a refund). Outputs hold nothing a crash may
change.
"""

from __future__ import annotations

from typing import Any

from engine import Engine, Supervisor

from .ledger import call

engine = Engine.open()
SNAPSHOT_EVERY = 5
WAIT_CHARGE = 3.0  # seconds a breaker waits for the charge before it fails anyway


def _found(key: str) -> dict[str, Any] | None:
    receipt = call("/find", key=key)["receipt"]
    return None if receipt is None else {"receipt": receipt}


def _refund(result: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
    return call("/undo", receipt=result["receipt"])


@engine.tool(side_effect=True, key=lambda order: f"note:{order}", verify=_found, compensate=_refund)
def note(order: str, *, idempotency_key: str) -> dict[str, Any]:
    return {"receipt": call("/do", op=f"note:{order}", key=idempotency_key)["receipt"]}


@engine.tool(
    side_effect=True,
    key=lambda order, cents: f"charge:{order}",
    verify=_found,
    compensate=_refund,
)
def charge(order: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
    return {"receipt": call("/do", op=f"charge:{order}", key=idempotency_key)["receipt"]}


def _tick_found(key: str) -> int | None:
    n = call("/ticked", key=key)["n"]
    return None if n is None else int(n)


def _untick(result: int, idempotency_key: str | None = None) -> None:
    """Nothing to undo: an abandoned breaker's attempt stays counted."""


@engine.tool(side_effect=True, verify=_tick_found, compensate=_untick)
def attempt(name: str, *, idempotency_key: str) -> int:
    """The breaker run's attempt number: counted once per run (its key), so a breaker
    killed and resumed is the same attempt, and a restarted one (its abandoned
    predecessor's attempt compensated: not taken over) the next."""
    return int(call("/tick", name=name, key=idempotency_key)["n"])


@engine.tool
def charged(order: str) -> bool:
    return bool(call("/charged", op=f"charge:{order}", wait=WAIT_CHARGE)["charged"])


@engine.tool
def noted(run_id: str) -> str:
    return run_id


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def clerk(run: Any, order: str) -> str:
    note(order)
    return f"noted {order}"


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def payer(run: Any, order: str, cents: int) -> str:
    charge(order, cents)
    return f"charged {order} {cents}"


@engine.agent(snapshot_every=SNAPSHOT_EVERY)
def breaker(run: Any, order: str, fails: int) -> str:
    n = attempt(f"breaker:{order}")
    if n <= fails:
        charged(order)  # its siblings' effects stand when it fails
        raise RuntimeError(f"breaker of {order} broke (attempt {n})")
    return "fixed"


def _team(run: Any, order: str, cents: int, fails: int, rest: bool) -> dict[str, Any]:
    run.checkpoint("staffed")
    c = run.spawn(clerk, order=order)
    if rest:  # rest_for_one: the payer after the breaker, so its restarts cover it
        b = run.spawn(breaker, order=order, fails=fails)
        p = run.spawn(payer, order=order, cents=cents)
    else:
        p = run.spawn(payer, order=order, cents=cents)
        b = run.spawn(breaker, order=order, fails=fails)
    fixed = b.result()
    noted(c.run_id)  # the clerk's handle after a restart: a replay gives the same id
    return {"breaker": fixed, "clerk": c.result(), "payer": p.result()}


RESTARTS = Supervisor("one_for_all", max_restarts=6, within=3600.0)


@engine.agent(supervise=RESTARTS, snapshot_every=SNAPSHOT_EVERY)
def team_all(run: Any, order: str, cents: int, fails: int) -> dict[str, Any]:
    return _team(run, order, cents, fails, rest=False)


@engine.agent(
    supervise=Supervisor("rest_for_one", max_restarts=6, within=3600.0),
    snapshot_every=SNAPSHOT_EVERY,
)
def team_rest(run: Any, order: str, cents: int, fails: int) -> dict[str, Any]:
    return _team(run, order, cents, fails, rest=True)


def expected(order: str, cents: int) -> dict[str, Any]:
    """A team's output."""
    return {"breaker": "fixed", "clerk": f"noted {order}", "payer": f"charged {order} {cents}"}
