"""Loading a run (``runtime.repository``): what only the log decides is decided before any
agent code is imported, so a finished run whose agent no longer imports still answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import Engine
from engine import events as ev
from engine.errors import UsageError
from engine.log.history import RunWriter
from engine.log.state import RunState

GONE = "agentlog_no_such_module_anywhere"


@pytest.fixture
def eng(tmp_path: object) -> Iterator[Engine]:
    e = Engine.open(f"sqlite:///{tmp_path}/agentlog.db")
    yield e
    e.close()


def _finished_run_of_a_vanished_agent(eng: Engine, run_id: str) -> None:
    writer = RunWriter(eng.store, RunState(run_id=run_id))
    writer.append(ev.AgentStarted(at=ev.now(), agent=f"{GONE}:agent", import_path=GONE))
    writer.append(ev.AgentFinished(at=ev.now(), output={"done": True}))


def test_a_completed_run_resumes_to_its_result_and_refuses_abandon_without_its_agent(
    eng: Engine,
) -> None:
    _finished_run_of_a_vanished_agent(eng, "gone1")
    r = eng.resume("gone1")
    assert (r.status, r.output) == ("completed", {"done": True})
    with pytest.raises(UsageError, match="has completed; there is nothing to abandon"):
        eng.abandon("gone1")
    with pytest.raises(UsageError, match="is not waiting for an answer"):
        eng.answer("gone1", "yes")


def test_an_act_that_executes_the_run_names_the_agent_that_no_longer_imports(
    eng: Engine,
) -> None:
    _finished_run_of_a_vanished_agent(eng, "gone2")
    with pytest.raises(UsageError, match=f"cannot import agent {GONE}:agent"):
        eng.verify("gone2")
