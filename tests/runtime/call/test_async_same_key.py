"""Two calls of one business key at once in an async agent: the second finds the first's
claim, and waits; the first's outcome and its key's commit are deferred, so the wait
writes its own run's deferred commit of the key as it looks: the second takes the
ledger's outcome, the effect is executed once (it waited its whole timeout, then sent
the effect again under the key, before)."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import backends

from engine import Engine


@backends("sqlite", "postgres")
def test_a_concurrent_call_of_the_same_key_takes_the_first_ones_deferred_outcome(
    eng: Engine,
) -> None:
    sent: list[str] = []

    @eng.tool(side_effect=True, key=lambda what: f"gather:{what}", timeout=30.0)
    async def book(what: str, *, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        await asyncio.sleep(0.05)
        return what

    @eng.agent
    async def both(run: Any) -> list[str]:
        return list(await asyncio.gather(book("1"), book("2"), book("1")))

    r = eng.run(both)
    assert (r.status, r.output) == ("completed", ["1", "2", "1"]), r.error
    assert sorted(sent) == ["gather:1", "gather:2"]  # once each: nothing sent twice
    sources = {
        e.data["call"]: e.data["source"] for e in eng.events(r.run_id) if e.type == "tool_succeeded"
    }
    assert sorted(sources.values()) == ["executed", "executed", "ledger"], sources
