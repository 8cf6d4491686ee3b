"""Waking parents: a run that stopped (paused or waiting) on a child continues once that
child has news, and a person's answer to a parent reaches the child that asked.

Everything here is decided from the stored states, never from who called: a parent is
continued when its state says it waits on the child and the child's state says that
wait is over (or changed), so two threads with the same news continue it once (the
other finds its lease taken, or nothing left to do), and a continued parent that is
still waiting on an unchanged child writes nothing and is not continued again.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ... import observe
from ...errors import RunBusy, UsageError
from ...kinds import LIVE, SUSPENDED, RunStatus
from ...log.history import read_events, rebuild
from ...log.state import ChildOf, RunState
from ...log.waiting import Child, Person, asks
from ...policy.failure import describe
from ...store import Store
from ..journal.recorded import Journal
from ..run.results import RunResult


@runtime_checkable
class Resumes(Protocol):
    """A host that can continue a run in the calling thread (an engine: its ``resume``
    goes on to that run's own parent when the run ends or stops)."""

    def resume(self, run_id: str) -> RunResult: ...


def waited_child(state: RunState) -> str | None:
    """The child a paused or waiting run waits on, if it waits on one."""
    on = state.waits_on
    return on.run_id if state.status in SUSPENDED and isinstance(on, Child) else None


def asker(store: Store, state: RunState) -> tuple[str, str] | None:
    """The run that waits for a person on behalf of ``state``'s run, and its question:
    the run itself if it asked, else the deepest paused descendant, followed through
    what each paused run waits on. None when a run on the way is no longer paused (an
    answer is moving up the tree; its parents are continued as it goes)."""
    seen: set[str] = set()
    s = state
    while s.status == RunStatus.PAUSED and s.run_id not in seen:
        if isinstance(s.waits_on, Person):
            return s.run_id, s.waits_on.question
        child = waited_child(s)
        if child is None:
            return None
        seen.add(s.run_id)
        found = own_child(store, s, child)
        if found is None:
            return None  # a log that claims someone else's run: no answer goes there
        s = found
    return None


def own_child(store: Store, parent: RunState, child_id: str) -> RunState | None:
    """The state of ``child_id`` if it is a child of ``parent``'s run, else None (a forged
    or imported log may name any run, a fork of it even, as the child it waits on)."""
    child = rebuild(store, child_id)
    return child if child.lineage == ChildOf(parent.run_id) else None


def asking_run(store: Store, run_id: str) -> str:
    """The run an answer to ``run_id`` is for: the run itself, or, when it is paused by a
    child's question, the descendant that asked. UsageError when it waits on a child
    that does not wait for an answer now."""
    state = rebuild(store, run_id)
    child = waited_child(state)
    if child is None or state.status != RunStatus.PAUSED:
        return run_id
    if own_child(store, state, child) is None:
        raise UsageError(
            f"run {run_id} says it waits on {child}, but {child} is not a child of run "
            f"{run_id} (its recorded parent differs): no answer is passed to it"
        )
    found = asker(store, state)
    if found is None:
        now = rebuild(store, child).status
        raise UsageError(
            f"run {run_id} waits on its child {child}, which does not wait for an answer "
            f"now (it is {now}): answer the run that asks, or resume {run_id}"
        )
    return found[0]


def child_due(store: Store, state: RunState) -> bool:
    """Whether ``state``, a run paused or waiting on a child, has news of that child: the
    child ended or failed, or it now waits on something else than the parent shows (a
    timer instead of a person, another question). A running child has none yet: its
    execution's end continues the parent."""
    child_id = waited_child(state)
    if child_id is None:
        return False
    child = own_child(store, state, child_id)
    if child is None:
        return False  # not its child: that run's news is not this run's
    if child.status in LIVE or child.status == RunStatus.HELD:  # held: news once approved
        return False
    if child.status == RunStatus.WAITING:
        return state.status == RunStatus.PAUSED
    if child.status == RunStatus.PAUSED:
        if state.status == RunStatus.WAITING:
            return True
        found = asker(store, child)
        return found is not None and asks(state.waits_on) != found
    return True  # completed, failed or abandoned


def after_run(host: object, store: Store, result: RunResult) -> None:
    """A run's execution ended (``result``): continue, in this thread, the run itself if
    it stopped on a child that has news already, else its parent if that waits on it
    (or failed at its spawn, and it has now completed). A parent that cannot be
    continued here is logged and left to ``resume``/``recover``."""
    if result.status == RunStatus.RUNNING or (
        result.status == RunStatus.COMPLETED and result.parent_run_id is None
    ):
        return  # still running (a lost lease), or a finished root: no news for anyone
    try:
        _after(host, store, result.run_id)
    except Exception as e:
        observe.get(run_id=result.run_id).error("parent_not_continued", error=describe(e))


def _after(host: object, store: Store, run_id: str) -> None:
    state = rebuild(store, run_id)
    if state.position == 0:
        return
    if child_due(store, state):  # its child moved while it was stopping: go on now
        _continue(host, run_id)
        return
    lineage = state.lineage
    if not isinstance(lineage, ChildOf):  # no parent, or a fork's
        return
    if parent_due(store, rebuild(store, lineage.parent_run_id), state):
        _continue(host, lineage.parent_run_id)


def parent_due(store: Store, parent: RunState, child: RunState) -> bool:
    """Whether ``parent`` has news in ``child``'s state: it stopped on the child, or
    failed at the child's spawn and the child has completed since."""
    if waited_child(parent) == child.run_id:
        return child_due(store, parent)
    if parent.status != RunStatus.FAILED or child.status != RunStatus.COMPLETED:
        return False
    return failed_at_child(store, parent.run_id, child.run_id)


def failed_at_child(store: Store, parent: str, child: str) -> bool:
    """Whether ``parent``'s failure is its wait on ``child``: the spawn call of ``child``
    is the call whose failure ended it (a resume waits on the child again)."""
    journal = Journal.from_events(read_events(store, parent))
    call = journal.failed_call
    entry = None if call is None else journal.calls.get(call)
    return entry is not None and entry.kind == "spawn" and entry.ref == child


def _continue(host: object, run_id: str) -> None:
    """Resume ``run_id`` in this thread; one already executing is left to its owner
    (whose execution, when it ends, reads the news itself)."""
    if not isinstance(host, Resumes):
        return
    try:
        host.resume(run_id)
    except RunBusy:
        return
