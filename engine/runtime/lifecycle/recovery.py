"""Graded recovery of a failed step: :func:`choose` is the pure plan, :func:`recover` the
executor the driver calls when a run of an agent with ``recovery=Recovery(...)`` fails.

In order: retry the step, re-plan from the last decision point (its ``run.decide`` made
again with the failure in its input), roll back to the last checkpoint (its effects
since compensated, last first), give up to a person (a question; any answer re-attempts
the failed step). Chosen by the failure's kind and by cost: the recoveries so far, the
budget left, and the recorded paid model calls a re-plan or a roll back would redo.
Every choice is a ``recovery_decided`` event, written before it is carried out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ... import events as ev
from ...kinds import NOW, Asked, FailureKind, RecoveryAction, RunStatus
from ...log.effects import Effect, effects
from ...log.history import RunWriter, read_events
from ...policy import budget
from ...policy.recovery import Recovery
from ...store import Recorded
from ..defs import registry
from ..defs.definitions import AgentDef
from ..journal.recorded import Journal
from ..run.results import RunResult
from ..undo.saga import CannotUndo, Saga

Action = RecoveryAction
Point = tuple[int, int]  # (call, position) of a decision or a checkpoint


@dataclass(frozen=True)
class Failure:
    """What the log shows of a run's failure, for the plan."""

    kind: FailureKind
    error: str
    position: int  # of its agent_failed
    call: int | None = None  # the failed call, if a call failed
    attempts: int = 0  # recoveries already decided in the run
    retries: int = 0  # retries already decided for this call
    decision: Point | None = None  # the last decision point before the failure
    checkpoint: Point | None = None  # the last checkpoint before the failure
    replan_paid: int = 0  # paid model calls a re-plan would redo (from the decision on)
    rollback_paid: int = 0  # paid model calls a roll back would redo (since the checkpoint)
    effects: int = 0  # side effects committed since the checkpoint
    undoable: bool = True  # each of them has a compensation
    affordable: bool = True  # the budget left covers re-running the tail
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def invariant(self) -> bool:
        return "invariant" in self.evidence


@dataclass(frozen=True)
class Choice:
    """The plan's answer: the ``action``, where the run goes on ``from_position`` (and
    the call the re-execution makes again from, for a re-plan or a roll back), why."""

    action: RecoveryAction
    from_position: int
    reason: str
    from_call: int | None = None


def choose(policy: Recovery, f: Failure) -> Choice:
    """The recovery of failure ``f`` under ``policy`` (pure)."""
    if f.attempts >= policy.max_attempts:
        return _person(policy, f, f"{f.attempts} recoveries already tried")
    if f.kind == FailureKind.TRANSIENT:
        if policy.retry and f.retries < policy.max_retries:
            why = f"a transient failure: retry {f.retries + 1} of {policy.max_retries}"
            return Choice(Action.RETRY, f.position, why)
        rolled = _rollback(policy, f, "the retries are spent")
        if rolled is None and policy.retry and _too_dear(policy, f):
            why = f"a roll back would redo {f.rollback_paid} paid model calls: retry again"
            return Choice(Action.RETRY, f.position, why)
        return rolled or _person(policy, f, "a transient failure whose retries are spent")
    if f.kind == FailureKind.LOGICAL:
        if f.invariant and f.effects:  # the effects after the checkpoint broke the state
            rolled = _rollback(policy, f, f"invariant {f.evidence['invariant']} broken")
            if rolled is not None:
                return rolled
        cheap = f.affordable and f.replan_paid <= policy.max_rollback_calls
        if policy.replan and f.decision is not None and cheap:
            why = "a logical failure: the last decision is made again with it"
            return Choice(Action.REPLAN, f.decision[1], why, from_call=f.decision[0])
        rolled = _rollback(policy, f, "a logical failure with no decision to re-plan")
        return rolled or _person(policy, f, "a logical failure nothing automatic mends")
    return _person(policy, f, f"a {f.kind} failure: retrying cannot mend it")


def _rollback(policy: Recovery, f: Failure, why: str) -> Choice | None:
    """A roll back to the last checkpoint, if allowed, possible and worth its cost."""
    if not policy.rollback or f.checkpoint is None or not f.undoable or not f.affordable:
        return None
    if _too_dear(policy, f):
        return None  # redoing that many paid model calls costs more than it mends
    call, position = f.checkpoint
    undo = f"{f.effects} effect(s) compensated" if f.effects else "no effect to undo"
    reason = f"{why}: back to the checkpoint at {position} ({undo})"
    return Choice(Action.ROLLBACK, position, reason, from_call=call + 1)


def _too_dear(policy: Recovery, f: Failure) -> bool:
    """A roll back possible but for its cost: it would redo too many paid model calls."""
    possible = policy.rollback and f.checkpoint is not None and f.undoable
    return possible and f.rollback_paid > policy.max_rollback_calls


def _person(policy: Recovery, f: Failure, why: str) -> Choice:
    action = Action.ASK if policy.ask else Action.GIVE_UP
    return Choice(action, f.position, why + ("; a person decides" if policy.ask else ""))


# --- what the log shows ----------------------------------------------------------------


def failure_of(agent: AgentDef, recorded: Sequence[Recorded]) -> Failure:
    """The facts of the run's latest failure, from its log (and, for effects, whether
    the agent's tools can undo them)."""
    decisions: dict[int, Point] = {}
    checkpoints: dict[int, Point] = {}
    paid: dict[int, budget.Usage] = {}
    attempts, spent = 0, budget.NONE
    retries: dict[int, int] = {}
    failed: tuple[ev.AgentFailed, int] | None = None
    for r in recorded:
        e = r.event
        if isinstance(e, ev.RecoveryDecided):
            attempts += 1
            if e.action == Action.RETRY and e.call is not None:
                retries[e.call] = retries.get(e.call, 0) + 1
            if e.from_call is not None:
                for seen in (decisions, checkpoints, paid):
                    for n in [n for n in seen if n >= e.from_call]:
                        del seen[n]
        elif isinstance(e, ev.LlmDecided) and e.name != NOW:
            decisions[e.call] = (e.call, r.position)
        elif isinstance(e, ev.Checkpoint):
            checkpoints[e.call] = (e.call, r.position)
        elif isinstance(e, ev.AgentFailed):
            failed = (e, r.position)
        if isinstance(e, ev.LlmDecided | ev.UsageRecorded):
            used = budget.Usage(e.tokens_in, e.tokens_out, e.cost)
            spent += used
            if used:
                paid[e.call] = used
    assert failed is not None, "recovery of a run that did not fail"
    event, position = failed
    before = _before(event.call)
    decision = _last(decisions, before)
    checkpoint = _last(checkpoints, before)
    standing = _standing(recorded, checkpoint[1]) if checkpoint else []
    tail = sum((u for n, u in paid.items() if checkpoint and n > checkpoint[0]), budget.NONE)
    return Failure(
        kind=FailureKind(event.kind),
        error=event.error,
        position=position,
        call=event.call,
        attempts=attempts,
        retries=retries.get(event.call, 0) if event.call is not None else 0,
        decision=decision,
        checkpoint=checkpoint,
        replan_paid=sum(1 for n in paid if decision and n >= decision[0]),
        rollback_paid=sum(1 for n in paid if checkpoint and n > checkpoint[0]),
        effects=len(standing),
        undoable=all(_undo_of(agent, x) is not None for x in standing),
        affordable=agent.budget is None or agent.budget.over(spent + tail) is None,
        evidence=dict(event.evidence),
    )


def _before(call: int | None) -> int:
    return call if call is not None else 1 << 62


def _last(points: dict[int, Point], before: int) -> Point | None:
    earlier = [p for n, p in points.items() if n < before]
    return max(earlier) if earlier else None


def _standing(recorded: Sequence[Recorded], after: int) -> list[Effect]:
    """The run's own committed effects after position ``after`` not undone yet."""
    return [x for x in effects(recorded, after=after) if x.own and not x.undone]


def _undo_of(agent: AgentDef, effect: Effect) -> Any:
    tool = registry.tool_for(agent, effect.tool)
    return None if tool is None else tool.compensate


# --- the executor ----------------------------------------------------------------------


def recover(agent: AgentDef, writer: RunWriter, failed: RunResult) -> Journal | RunResult:
    """Choose and record the recovery of the run ``writer`` writes, which just failed
    (``failed``), and carry out what comes before its re-execution: the journal to
    execute the agent again with, or the result the run ends this execution with (a
    question for a person, or its failure)."""
    assert agent.recovery is not None
    recorded = read_events(writer.store, writer.state.run_id)
    f = failure_of(agent, recorded)
    choice = choose(agent.recovery, f)
    writer.append(
        ev.RecoveryDecided(
            at=writer.wall(),
            kind=f.kind,
            action=choice.action,
            from_position=choice.from_position,
            attempt=f.attempts + 1,
            reason=choice.reason,
            call=f.call,
            from_call=choice.from_call,
            evidence={"error": f.error, **f.evidence},
        )
    )
    if choice.action == Action.GIVE_UP:
        return failed
    if choice.action == Action.ASK:
        return _ask(writer, f, choice)
    if choice.action == Action.ROLLBACK and not _compensated(agent, writer, recorded, choice):
        return failed
    return Journal.from_events(read_events(writer.store, writer.state.run_id))


def finish(agent: AgentDef, writer: RunWriter) -> RunResult | None:
    """Before a failed run is resumed: a roll back it decided whose execution stopped
    midway (a crash among its compensations) is finished first, so the calls it forgot
    are never made again over effects still standing. None: nothing left, or finished;
    else the result of a roll back that could not finish (the run stays failed)."""
    recorded = read_events(writer.store, writer.state.run_id)
    last = next(
        (r.event for r in reversed(recorded) if isinstance(r.event, ev.RecoveryDecided)), None
    )
    if last is None or last.action != Action.ROLLBACK or _resumed_since(recorded):
        return None
    choice = Choice(last.action, last.from_position, last.reason, last.from_call)
    if _compensated(agent, writer, recorded, choice):
        return None
    s = writer.state
    return RunResult(s.run_id, RunStatus.FAILED, error=s.error)


def _resumed_since(recorded: Sequence[Recorded]) -> bool:
    """Whether the run was executed again after its latest recovery decision."""
    for r in reversed(recorded):
        if isinstance(r.event, ev.RecoveryDecided):
            return False
        if isinstance(r.event, ev.AgentResumed):
            return True
    return False


def _ask(writer: RunWriter, f: Failure, choice: Choice) -> RunResult:
    """Pause the run with a question; answered (anything), the failed step is tried again."""
    named = f.evidence.get("step")
    step = f"step {named!r}" if named else f"call {f.call}" if f.call is not None else "a step"
    question = f"{step} failed ({f.kind}: {f.error}); {choice.reason}: answer to try it again"
    writer.append(
        ev.HumanInputRequested(
            at=writer.wall(), call=f.call or 0, question=question, reason=Asked.RECOVERY
        )
    )
    return RunResult(writer.state.run_id, RunStatus.PAUSED, error=f.error, waiting=question)


def _compensated(
    agent: AgentDef, writer: RunWriter, recorded: Sequence[Recorded], choice: Choice
) -> bool:
    """Undo the run's effects after the checkpoint, last first (each recorded); False
    when one cannot be undone (the run stays failed, the log shows what was undone)."""
    saga = Saga(writer)
    for effect in reversed(_standing(recorded, choice.from_position)):
        tool = registry.tool_for(agent, effect.tool)
        assert tool is not None
        try:
            saga.undo(effect, tool)
        except CannotUndo as stop:
            stopped = f"roll back stopped: {stop.message}"
            writer.append(ev.AgentFailed(at=writer.wall(), error=stopped))
            return False
    return True


__all__ = ["Choice", "Failure", "choose", "failure_of", "finish", "recover"]
