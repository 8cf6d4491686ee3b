"""Answer the question a paused run waits on, then continue the run."""

from __future__ import annotations

from .. import events as ev
from ..errors import UsageError
from ..kinds import RunStatus
from .calls import check_uncertain_answer
from .defs import normalize
from .driver import Driver, resume
from .repository import RunRepository
from .results import RunResult


def answer(runs: RunRepository, driver: Driver, run_id: str, value: object) -> RunResult:
    """Record ``value`` as the answer to the run's pending question, then resume the run.

    Refuses a run that is not waiting, an unclear answer to "did the effect happen?", and
    code that no longer replays the run's log; in each case nothing is recorded."""
    rid = runs.resolve(run_id)
    with runs.held(rid):
        run = runs.load(rid, "be answered")
        state = run.state
        if state.status != RunStatus.PAUSED or state.waiting is None:
            raise UsageError(f"run {rid} is not waiting for an answer (it is {state.status})")
        asked = [r.event for r in run.recorded if isinstance(r.event, ev.HumanInputRequested)]
        value = normalize(value, "the answer")
        if asked[-1].reason == "uncertain":
            check_uncertain_answer(value)  # nothing is recorded for an unclear answer
        # Changed code would fail at the answer's call: record nothing then.
        driver.replays(runs.store, run.agent, rid, [r.event for r in run.recorded])
        run.writer.append(ev.HumanInputProvided(at=ev.now(), call=asked[-1].call, value=value))
        return resume(runs, driver, rid)
