"""A decision meeting pydantic-ai's model errors retries or fails as the default table
says (tests/test_policy_table.py has their rows)."""

from __future__ import annotations

from typing import Any

from pydantic_ai import exceptions as x

from engine import Engine, RetryPolicy

T, L = "transient", "logical"


def test_a_decision_retries_a_rate_limit_and_stops_at_a_content_filter() -> None:
    eng = Engine("memory://")
    script: list[BaseException] = [x.ModelRateLimitError("m", "slow"), x.ContentFilterError("no")]

    def model() -> str:
        raise script.pop(0)

    @eng.agent
    def agent(run: Any) -> str:
        return str(run.decide("m", model, retry=RetryPolicy(max_attempts=5, initial=0.0)))

    r = eng.run(agent)
    kinds = [e.data["kind"] for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert r.status == "failed" and kinds == [T, L]  # a logical one: final at once
    assert not script
