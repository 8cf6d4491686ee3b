"""Runs that wait for a person before automatic recovery resumes them (seed 003: the
recovery of high-risk operations).

An agent defined with ``resume="approve"`` (or a predicate of the run's ``RunState``,
true when the run must wait) is never resumed by automatic recovery after a *crash*: a
run found ``running`` with its owner dead (``Engine.recover``, ``recover --watch``, the
workers, and a parent reviving a child whose owner died). Recovery records ``run_held``
instead (status ``held``, waiting on an ``Approval``) and resumes nothing. A normal wake
is no crash: a waiting run whose timer fired, whose message came or whose child moved
continues as before, and so does a paused run once answered.

``approve`` records who let it go on (``run_approved``) and resumes it in the same lease;
a person's explicit ``resume`` of a held run is an approval too (recorded ``via`` it).
``abandon`` stops a held run as any other. An approval lets one execution go on: if
that crashes too (even before it wrote anything), recovery holds the run again.
"""

from __future__ import annotations

from typing import Protocol

from ... import events as ev
from ... import observe
from ...errors import UsageError
from ...kinds import FINAL, RunStatus
from ...log.state import RunState
from ...policy.failure import describe
from ..defs.definitions import AgentDef
from ..run.adoption import who
from ..run.repository import LoadedRun, RunRepository, result_of
from ..run.results import RunResult


class Driver(Protocol):
    """What executes a loaded run (``lifecycle.driver.Driver``, which imports this)."""

    def execute(self, run: LoadedRun, *, resumed: bool = ...) -> RunResult: ...


def needs_approval(agent: AgentDef, state: RunState) -> bool:
    """Whether the crashed run ``state`` of ``agent`` waits for a person's approval. A
    predicate that raises holds it (the careful side), and says why in the log."""
    mode = agent.resume
    if mode == "auto":
        return False
    if mode == "approve" or not callable(mode):
        return True
    try:
        return bool(mode(state))
    except Exception as e:
        observe.get(run_id=state.run_id).warning("resume_predicate_failed", error=describe(e))
        return True


def recover_crashed(runs: RunRepository, driver: Driver, run_id: str, owner: str) -> RunResult:
    """Resume the crashed run ``run_id`` (running; ``owner``, its holder, died), or hold
    it for approval when its agent asks for one: ``run_held`` is recorded, nothing runs."""
    with runs.held(run_id):
        run = runs.load(run_id, "be resumed")
        if run.state.status in FINAL or run.state.status == RunStatus.HELD:
            return result_of(run.state)  # ended, or held meanwhile (a parent revived it)
        if run.state.status == RunStatus.RUNNING and needs_approval(run.agent, run.state):
            return hold(run, owner)
        return driver.execute(run, resumed=True)


def hold(run: LoadedRun, owner: str) -> RunResult:
    """Record that the crashed ``run`` waits for approval; its result says so."""
    whose = f"its owner {owner}" if owner else "its owner"
    reason = f"{whose} died; agent {run.agent.name} resumes on approval"
    run.writer.append(ev.RunHeld(at=run.writer.wall(), reason=reason, owner=owner))
    observe.get(run_id=run.run_id, agent=run.agent.name).warning("run_held", owner=owner)
    state = run.writer.state
    return RunResult(
        run.run_id,
        RunStatus.HELD,
        waiting=state.waiting,
        not_resumed="held",
        parent_run_id=state.parent_run_id,
    )


def approve(runs: RunRepository, driver: Driver, run_id: str, via: str = "approve") -> RunResult:
    """Record a person's approval of the held run ``run_id`` (who, when, ``via`` which
    command) and continue it. A run that is not held is refused, naming its status."""
    rid = runs.resolve(run_id)
    with runs.held(rid):
        run = runs.load(rid, "be approved")
        status = run.state.status
        if status != RunStatus.HELD:
            raise UsageError(
                f"run {rid} is {status}, not held: approve lets a held run (a crashed run "
                "of an agent with resume='approve') continue"
            )
        run.writer.append(ev.RunApproved(at=run.writer.wall(), by=who(), via=via))
        observe.get(run_id=rid).info("run_approved", via=via)
        return driver.execute(run, resumed=True)


__all__ = ["approve", "hold", "needs_approval", "recover_crashed"]
