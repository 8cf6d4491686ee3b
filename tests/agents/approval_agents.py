"""Agents whose crashed runs wait for a person (``resume="approve"``, or a predicate),
run in real processes killed at failpoints. Effects go to the fake service named by
``$AGENTLOG_TEST_SERVICE``.

``python -m tests.agents.approval_agents URL RUN_ID AGENT JSON_INPUT`` starts a run
(AGENT: transfer, auto, careful or parent).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from engine import Engine, RunState, observe

from . import service

engine = Engine.open()


@engine.tool
def quote(order: str) -> dict[str, int]:
    service.read_only("quote", order)
    return {"cents": 100 * len(order)}


@engine.tool(side_effect=True)
def wire(op: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("wire", op, idempotency_key)}


def _body(run: Any, order: str, n: int) -> dict[str, Any]:
    q = quote(order)
    receipts = [wire(f"{order}-{i}")["receipt"] for i in range(n)]
    return {"quote": q["cents"], "receipts": receipts}


@engine.agent(name="approval:transfer", resume="approve")
def transfer(run: Any, order: str, n: int = 2) -> dict[str, Any]:
    """Moves money: after a crash a person approves before anything resumes it."""
    return _body(run, order, n)


@engine.agent(name="approval:auto")
def auto(run: Any, order: str, n: int = 2) -> dict[str, Any]:
    """The same work, resumed by recovery on its own (the default)."""
    return _body(run, order, n)


def effect_in_doubt(state: RunState) -> bool:
    """Hold the run only when its crash left a side effect in flight."""
    return any(p.side_effect for p in state.pending)


@engine.agent(name="approval:careful", resume=effect_in_doubt)
def careful(run: Any, order: str, n: int = 2) -> dict[str, Any]:
    return _body(run, order, n)


@engine.agent(name="approval:parent")
def parent(run: Any, order: str, n: int = 2) -> dict[str, Any]:
    """Waits on a child that moves money (held, after a crash, until approved)."""
    done: dict[str, Any] = run.call(transfer, order=order, n=n)
    return done


AGENTS = {"transfer": transfer, "auto": auto, "careful": careful, "parent": parent}


def main(argv: list[str]) -> None:
    url, run_id, name = argv[:3]
    data = json.loads(argv[3]) if len(argv) > 3 else {}
    r = Engine.open(url).run(AGENTS[name], run_id=run_id, **data)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))


if __name__ == "__main__":
    observe.configure()
    main(sys.argv[1:])
