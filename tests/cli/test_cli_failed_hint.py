"""What ``next:`` says after a failed run: a resume re-attempts a transient call, but a
deterministic failure (a permanent tool error, the agent's own code) fails the same way
again, and the hint says so instead of promising a re-attempt. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_kit import Workdir

AGENTS = """
from engine import Engine, Permanent, RetryPolicy, Transient

engine = Engine.open()


@engine.tool
def forbidden():
    raise Permanent("no permission")


@engine.tool(retry=RetryPolicy(max_attempts=1))
def flaky():
    raise Transient("the service is busy")


@engine.agent
def denied(run):
    return forbidden()


@engine.agent
def buggy(run):
    return "x"["key"]


@engine.agent
def busy(run):
    return flaky()
"""

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@STORES
def test_next_promises_a_re_attempt_only_for_a_failure_that_may_pass(
    store_url: str, tmp_path: Path
) -> None:
    """permanent tool error and a TypeError in the agent: 'would fail the same way';
    a transient error whose attempts ran out: 're-attempts the call'."""
    (tmp_path / "agents.py").write_text(AGENTS)
    work = Workdir(tmp_path, store_url)
    denied = work.ok("run", "agents:denied", code=4).out
    assert "call 1 failed permanent, and would fail the same way" in denied, denied
    assert "re-attempts" not in denied
    buggy = work.ok("run", "agents:buggy", code=4).out
    assert "the agent's code failed" in buggy and "re-attempts" not in buggy, buggy
    busy = work.ok("run", "agents:busy", code=4).out
    assert "(re-attempts the call)" in busy, busy
