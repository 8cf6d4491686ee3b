"""The agents of the golden store (``make_store.py``): one of each kind of durable call.

Their histories were recorded once, into ``store_v1.sqlite``, by the code of the day;
``tests/test_golden_store.py`` replays them against today's code. Change an agent here and
the recorded histories no longer match it: that is the point. Add a new agent instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine import Engine, Supervisor

engine = Engine.open("memory://")


@engine.tool
def lookup(order: str) -> dict[str, Any]:
    return {"order": order, "amount": 4900}


@engine.tool(side_effect=True, key=lambda ledger, order: f"charge:{order}")
def charge(ledger: str, order: str) -> str:
    """A side effect on a file: one line a charge."""
    with Path(ledger).open("a") as f:
        f.write(f"charge {order}\n")
    return f"ch_{order}"


@engine.tool(side_effect=True)
def fenced(ledger: str, fence: int) -> int:
    with Path(ledger).open("a") as f:
        f.write(f"fenced {fence}\n")
    return fence


@engine.model
def choose(options: list[str]) -> str:
    return sorted(options)[0]


@engine.agent
def clerk(run: Any, order: str) -> dict[str, Any]:
    return lookup(order)


@engine.agent
def inbox(run: Any) -> Any:
    return run.recv("note")


@engine.agent
def shop(run: Any, ledger: str, order: str, to: str) -> dict[str, Any]:
    """A checkpoint, a decision, a child, a sleep, a message, a lock, a charge, a question."""
    run.checkpoint("started")
    pick = choose(["b", "a"])
    details = run.call(clerk, order=order)
    run.sleep(0.01)
    run.send(to, "note", {"order": order})
    with run.lock(f"order:{order}", ttl=30.0) as fence:
        fenced(ledger, fence)
    run.checkpoint("before-charge")
    receipt = charge(ledger, order)
    ok = run.ask("Ship it?", returns=bool)
    return {"pick": pick, "amount": details["amount"], "receipt": receipt, "ship": ok}


@engine.tool  # not a side effect: a restarted child would reuse its result
def mark(marks: str) -> int:
    """One more line in ``marks``: the number of tries so far, this one included."""
    with Path(marks).open("a") as f:
        f.write("try\n")
    return len(Path(marks).read_text().splitlines())


@engine.agent
def breaker(run: Any, marks: str) -> str:
    """Fails its first try, then succeeds (the tries counted by a recorded tool)."""
    tries = mark(marks)
    if tries == 1:
        raise RuntimeError("the first try broke")
    return f"try {tries}"


@engine.agent(supervise=Supervisor("one_for_all", max_restarts=3, within=600.0))
def team(run: Any, order: str, marks: str) -> list[Any]:
    return list(run.gather(run.spawn(clerk, order=order), run.spawn(breaker, marks=marks)))


@engine.agent(snapshot_every=3)
def counter(run: Any, n: int) -> int:
    """Many small calls, snapshotted every three events."""
    return sum(lookup(str(i))["amount"] for i in range(n))


@engine.agent
def broken(run: Any, order: str) -> None:
    lookup(order)
    raise ValueError(f"no such order: {order}")
