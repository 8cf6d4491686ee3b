"""Messages that say what to do: answering a run that waits on something else, a yes/no
word to a question that wants a bool, a checkpoint name the run does not have."""

from __future__ import annotations

from typing import Any

import pytest
from agents.kit import log_of
from conftest import all_backends

from engine import Engine
from engine.errors import UsageError


@all_backends
def test_answering_a_run_waiting_on_a_timer_says_what_it_waits_on(eng: Engine) -> None:
    """A run sleeping durably is 'waiting': answer refuses it naming the timer, not just
    'it is waiting', and records nothing."""

    def napper(run: Any) -> None:
        run.sleep(3600)

    r = eng.run(eng.agent(napper))
    before = log_of(eng, r.run_id)
    assert r.status == "waiting"
    with pytest.raises(UsageError, match=r"not waiting for an answer \(it is waiting: .*until"):
        eng.answer(r.run_id, "yes")
    assert log_of(eng, r.run_id) == before


@all_backends
def test_a_yes_word_to_a_bool_question_suggests_true(eng: Engine) -> None:
    """``run.ask(q, returns=bool)`` answered 'yes': refused, suggesting ``true`` with
    --json-value; nothing recorded; True then completes the run."""

    @eng.agent
    def approver(run: Any) -> str:
        return "approved" if run.ask("approve?", returns=bool) else "refused"

    r = eng.run(approver)
    before = log_of(eng, r.run_id)
    with pytest.raises(UsageError, match="answer true with --json-value"):
        eng.answer(r.run_id, "yes")
    with pytest.raises(UsageError, match="answer false with --json-value"):
        eng.answer(r.run_id, "no")
    assert log_of(eng, r.run_id) == before
    assert eng.answer(r.run_id, True).output == "approved"


@all_backends
def test_an_unknown_checkpoint_name_lists_the_run_s_checkpoints(eng: Engine) -> None:
    """rewind (and state) to a checkpoint name the run lacks: the message lists the
    names it has, each once, in the order they were reached."""

    @eng.agent
    def marked(run: Any) -> str:
        run.checkpoint("planned")
        run.checkpoint("reviewed")
        run.checkpoint("planned")
        return "ok"

    r = eng.run(marked)
    with pytest.raises(UsageError, match=r"no checkpoint named 'shipped'.*'planned', 'reviewed'\)"):
        eng.rewind(r.run_id, to="shipped")
    with pytest.raises(UsageError, match=r"it has: 'planned', 'reviewed'"):
        eng.state(r.run_id, at="shipped")


@all_backends
def test_an_agent_without_its_run_parameter_is_told_the_first_one_receives_the_run(
    eng: Engine,
) -> None:
    """``def support(ticket)``: running it with ticket=... says the first parameter
    receives the run (not Python's 'multiple values for argument'); nothing is written."""

    def support(ticket: dict[str, str]) -> str:
        return ticket["order"]

    with pytest.raises(UsageError, match=r"first parameter receives the run.*def support\(run"):
        eng.run(eng.agent(support), ticket={"order": "o1"})

    def nothing() -> str:
        return "?"

    with pytest.raises(UsageError, match="takes no parameter: its first receives the run"):
        eng.run(eng.agent(nothing))
    assert eng.runs() == []
