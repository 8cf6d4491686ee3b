"""Answer the question a paused run waits on, then continue the run.

A parent paused by a child's question is answered through the run that asked (its
deepest paused descendant); that run continues, and each parent waiting on it in turn
(``children.after_run``), so the answer returns the parent's result.
"""

from __future__ import annotations

import msgspec

from ... import events as ev
from ...errors import UsageError
from ...kinds import Asked, RunStatus
from ...log.history import rebuild
from ...log.waiting import Person
from ...secrets import Seen, redact
from ..children import spawn as children
from ..children.wake import asking_run
from ..defs.definitions import normalize
from ..run.adoption import refuse_imported
from ..run.asked import Given, offering, uncertain_answer
from ..run.repository import RunRepository, result_of
from ..run.results import RunResult
from .driver import Driver, resume


def answer(runs: RunRepository, driver: Driver, run_id: str, value: object) -> RunResult:
    """Record ``value`` as the answer to the run's pending question, then resume the run.
    For a run paused by a child's question, the descendant that asked is answered and
    the runs up to ``run_id`` continue; the result is ``run_id``'s.

    ``value`` may be any value the codec records (a dataclass, a pydantic model, a
    datetime, ...). Refuses a run that is not waiting, an unclear answer to "did the
    effect happen?", an answer that does not fit the type the question declares, and
    code that no longer replays the run's log; in each case nothing is recorded."""
    rid = runs.resolve(run_id)
    refuse_imported(rebuild(runs.store, rid), "be answered")  # before following any child
    target = asking_run(runs.store, rid)
    result = _answer(runs, driver, target, value)
    if target == rid:
        return result
    driver.host.signals.notify()
    children.after_run(driver.host, runs.store, result)  # up the tree to ``rid``
    return result_of(rebuild(runs.store, rid))


def _answer(runs: RunRepository, driver: Driver, rid: str, value: object) -> RunResult:
    with runs.held(rid):
        run = runs.load(rid, "be answered")
        state = run.state
        if state.status != RunStatus.PAUSED or state.waiting is None:
            doing = f"{state.status}: {state.waiting}" if state.waiting else state.status
            raise UsageError(f"run {rid} is not waiting for an answer (it is {doing})")
        if not isinstance(state.waits_on, Person):  # the child's question moved on meanwhile
            raise UsageError(f"run {rid} waits on {state.waiting}: answer the run that asks")
        asked = [r.event for r in run.recorded if isinstance(r.event, ev.HumanInputRequested)]
        given = isinstance(value, Given)
        value = normalize(value.value if isinstance(value, Given) else value, "the answer")
        call, at = asked[-1].call, runs.wall()
        if asked[-1].reason == Asked.UNCERTAIN:  # nothing is recorded for an unclear answer
            answered = uncertain_answer(call, value, given=given, at=at)
        else:
            answered = ev.HumanInputProvided(at=at, call=call, value=value)
        # Changed code would fail at the answer's call, and an answer that does not fit
        # the type the question declares (run.ask(..., returns=T), an uncertain tool's
        # return type) is refused: record nothing then.
        with offering(rid, answered):
            driver.replays(runs.store, run.agent, rid, [r.event for r in run.recorded])
        # A secret-named field of the answer is redacted (and masked where quoted).
        shown = redact(answered.value, seen=Seen())
        run.writer.append(msgspec.structs.replace(answered, value=shown))
        return resume(runs, driver, rid)
