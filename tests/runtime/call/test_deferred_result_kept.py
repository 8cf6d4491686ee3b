"""A deferred outcome records the result the tool returned, not what the agent made of
it before the run's next commit: the agent holds the same object, and a replay must give
back what the live call gave, a large result (not in the encoder's small cache) too."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import backends

from engine import Engine


@backends("sqlite", "postgres")
@pytest.mark.parametrize("size", [3, 20_000])
def test_a_deferred_result_the_agent_changes_is_recorded_as_returned(
    eng: Engine, size: int
) -> None:
    @eng.tool(side_effect=True, key=lambda order: f"rows:{order}")
    def rows(order: str, *, idempotency_key: str) -> dict[str, Any]:
        return {"rows": [f"r{i}" for i in range(size)]}

    @eng.agent
    def changer(run: Any) -> int:
        got = rows("o1")  # deferred: its key's commit rides with the next commit
        got["rows"].append("added by the agent")
        rows("o2")["rows"].clear()  # deferred too: rides with the agent's end
        return len(got["rows"])

    r = eng.run(changer)
    assert r.status == "completed", r.error
    recorded = [e.data["result"] for e in eng.events(r.run_id) if e.type == "tool_succeeded"]
    assert len(recorded) == 2
    assert all(len(x["rows"]) == size for x in recorded)
