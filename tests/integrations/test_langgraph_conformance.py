"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``)
against AgentlogSaver on memory, SQLite and PostgreSQL: every capability the installed
suite tests, base and extended, is detected and passes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from conftest import all_backends
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from engine import Engine
from engine.integrations.langgraph import AgentlogSaver


@all_backends
def test_every_capability_of_the_conformance_suite_passes(eng: Engine) -> None:
    """put, put_writes, get_tuple, list, delete_thread, delete_for_runs, copy_thread and
    prune: each detected, each test of it passed, none failed."""

    @checkpointer_test(name="AgentlogSaver")
    async def saver() -> AsyncIterator[AgentlogSaver]:
        yield AgentlogSaver(eng)

    report = asyncio.run(validate(saver))
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert all(r.tests_passed > 0 for r in report.results.values())
