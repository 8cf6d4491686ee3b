"""Two runs of one process call one business key: the first's outcome and its key's commit
are deferred into its next commit, and that run then waits (no commit for as long as it
likes). The sibling looking at the key has the first run commit its deferred key first: it
takes the ledger's outcome at once (it waited its whole tool timeout for the holder's next
commit, before) and the effect happened once."""

from __future__ import annotations

import threading
from typing import Any

from conftest import backends

from engine import Engine
from engine.polling import poll_until

PATIENCE = 60.0  # seconds: generous, for a busy machine; far below the tool's timeout


@backends("sqlite", "postgres")
def test_a_sibling_run_takes_the_outcome_another_run_of_the_process_deferred(
    eng: Engine,
) -> None:
    sent: list[str] = []
    gate = threading.Event()  # holds the first run after its keyed call: no commit meanwhile
    at_gate = threading.Event()

    @eng.tool(side_effect=True, key=lambda order: f"pay:{order}", timeout=600.0)
    def pay(order: str, *, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return f"paid {order}"

    @eng.agent
    def first(run: Any) -> str:
        paid = pay("o1")
        at_gate.set()
        assert gate.wait(PATIENCE * 4)
        return str(paid)

    @eng.agent
    def sibling(run: Any) -> str:
        return str(pay("o1"))

    out: dict[str, Any] = {}
    a = threading.Thread(target=lambda: out.setdefault("first", eng.run(first)))
    a.start()
    try:
        assert at_gate.wait(PATIENCE), "the first run never made its call"
        b = threading.Thread(target=lambda: out.setdefault("sibling", eng.run(sibling)))
        b.start()
        done = poll_until(lambda: "sibling" in out or None, PATIENCE)
        assert done, "the sibling waited for the first run's next commit"
    finally:
        gate.set()
        a.join(PATIENCE)
    b.join(PATIENCE)
    r = out["sibling"]
    assert (r.status, r.output) == ("completed", "paid o1"), r.error
    assert out["first"].output == "paid o1"
    assert sent == ["pay:o1"]  # once: the sibling took the ledger's outcome
    sources = [e.data["source"] for e in eng.events(r.run_id) if e.type == "tool_succeeded"]
    assert sources == ["ledger"]
