"""The recovery context: what an LLM needs to pick up an interrupted run, as prompt text.

Built from the log alone: the goal (agent and input), plan and progress, completed
steps with their key results, pending work (uncertain side effects, a waiting
question, remaining plan steps, the failure that stopped the run) and the last
observation. Bounded: results are summarised and only the latest steps are listed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine import RunState
from engine import events as ev
from engine.kinds import FINAL, RunStatus, Source
from engine.log.effects import Effect, Outcome, uncertain
from engine.log.state import ChildOf, ForkOf
from engine.secrets import redact

from .output import brief, clock, plural

MAX_ITEMS = 40
RESULT_CHARS = 160
MAX_CHARS = 12_000


@dataclass
class _Reading:
    """What the reader keeps while walking a run's events once."""

    done: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_ITEMS))
    count: int = 0  # completed items seen (``done`` keeps the latest)
    intents: dict[int, ev.ToolInvoked] = field(default_factory=dict)
    failures: dict[int, list[str]] = field(default_factory=dict)
    questions: dict[int, str] = field(default_factory=dict)
    calls: list[ev.Positioned] = field(default_factory=list)  # for the uncertain calls
    last_type: str = ""
    given: dict[str, Any] = field(default_factory=dict)  # the input, once in agent_started
    children: dict[int, str] = field(default_factory=dict)  # spawn call -> child, unfinished
    locks: dict[str, int] = field(default_factory=dict)  # lock name -> fence, held

    def read(self, r: ev.Positioned) -> None:
        e = r.event
        self.last_type = str(e.__struct_config__.tag)
        if isinstance(e, (ev.ToolInvoked, ev.ToolSucceeded, ev.ToolFailed)):
            self.calls.append(r)
        item = self._item(e)
        if item is not None:
            self.count += 1
            self.done.append(item)

    def _item(self, e: ev.Event) -> str | None:
        """The completed-work line ``e`` adds, if any (noting intents, failed attempts
        and questions for the lines that follow)."""
        match e:
            case ev.AgentStarted():
                self.given = e.input or {}
            case ev.ToolInvoked():
                self.intents[e.call] = e
            case ev.ToolFailed():
                self.failures.setdefault(e.call, []).append(e.kind)
            case ev.ToolSucceeded():
                return _tool_line(e, self.intents.get(e.call), self.failures.pop(e.call, []))
            case ev.LlmDecided():
                return f"decided {e.name!r} -> {brief(e.value, RESULT_CHARS)}"
            case ev.StepCompleted():
                error = f" with error {e.error}" if e.error else ""
                return f"step {e.name!r} completed{error}"
            case ev.Checkpoint():
                return f"checkpoint {e.name!r} reached"
            case ev.HumanInputRequested():
                self.questions[e.call] = e.question
            case ev.HumanInputProvided():
                asked = self.questions.get(e.call, "a question")
                return f"a person answered {brief(asked, 80)} with {brief(e.value, 80)}"
            case ev.Compensated():
                return f"compensated {e.tool} (call {e.call})"
        return self._agents(e)

    def _agents(self, e: ev.Event) -> str | None:
        """The completed-work line of an event of many agents, if any (noting the
        children not finished and the locks held)."""
        match e:
            case ev.ChildSpawned() | ev.ChildRestarted():
                self.children[e.call] = e.child_run_id
                if isinstance(e, ev.ChildRestarted):
                    return f"child run {e.previous_run_id} restarted ({e.strategy}): {e.reason}"
            case ev.ChildFinished():
                self.children.pop(e.call, None)
                if e.status == RunStatus.COMPLETED:
                    return (
                        f"child run {e.child_run_id} completed -> {brief(e.output, RESULT_CHARS)}"
                    )
                return f"child run {e.child_run_id} {e.status}: {e.error or 'no reason recorded'}"
            case ev.SupervisorEscalated():
                return f"the supervisor gave up on child run {e.child_run_id}: {e.reason}"
            case ev.LockAcquired():
                self.locks[e.name] = e.fence
            case ev.LockReleased():
                self.locks.pop(e.name, None)
                return f"held lock {e.name!r} (fence {e.fence}) and released it"
            case ev.MessageSent():
                return f"sent message {e.topic!r} to run {e.to_run_id}"
            case ev.MessageReceived():
                if e.message_id is None:
                    return f"waited for message {e.topic!r}: none came before the timeout"
                return f"received message {e.topic!r} -> {brief(e.value, RESULT_CHARS)}"
        return None


def recovery_context(state: RunState, events: Iterable[ev.Positioned]) -> str:
    """The prompt-ready text for resuming ``state``'s run, built from its typed ``events``
    (``replay.timeline.views``: records with the input's secrets redacted)."""
    seen = _Reading()
    for r in events:
        seen.read(r)
    out = [
        "You are resuming an interrupted task. Everything below comes from the run's",
        "recorded log. Do not repeat completed work; side effects already done must not",
        "be sent again.",
        "",
        "## Goal",
        f"Agent {state.agent} was started with this input:",
        *(f"  {k}: {brief(v, 400)}" for k, v in redact(seen.given).items()),
        "",
        "## Status",
        f"Run {state.run_id} is {state.status} after {state.position} recorded events "
        f"(last: {seen.last_type or 'none'} at {clock(state.updated_at, date=True)} UTC).",
        f"Resumed {plural(state.resumes, 'time')}; {plural(state.retries, 'retry', 'retries')}, "
        f"{plural(state.failures, 'failed attempt')}.",
    ]
    match state.lineage:
        case ForkOf(parent_run_id=parent, fork_position=at):
            out.append(f"Forked from run {parent} at position {at}.")
        case ChildOf(parent_run_id=parent):
            out.append(f"A child run of run {parent}, which waits for its output.")
    out += ["", *_plan(state)]
    out += ["", "## Completed steps and key results", *_done(seen)]
    out += ["", "## Pending work", *_pending(state, uncertain(seen.calls)), *_held(state, seen)]
    out += ["", "## Last observation", f"  {state.last_observation or '(none)'}"]
    text = "\n".join(out) + "\n"
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 40] + "\n  ... (context cut to its size limit)\n"
    return text


def _done(seen: _Reading) -> list[str]:
    """The latest completed items, numbered from the run's start."""
    lines = []
    if seen.count > len(seen.done):
        lines.append(f"  ({seen.count - len(seen.done)} earlier items omitted)")
    first = seen.count - len(seen.done) + 1
    items = [f"  {first + i}. {item}" for i, item in enumerate(seen.done)]
    return lines + (items or ["  (none yet)"])


def _tool_line(e: ev.ToolSucceeded, intent: ev.ToolInvoked | None, failed: list[str]) -> str:
    given = intent.args if intent is not None else {}
    args = ", ".join(f"{k}={brief(v, 40)}" for k, v in (given or {}).items())
    line = f"{e.tool}({args}) -> {brief(e.result, RESULT_CHARS)}"
    if failed:
        line += f" (after {plural(len(failed), 'failed attempt')}: {', '.join(failed)})"
    if e.source != Source.EXECUTED:
        line += f" [outcome {e.source}]"
    return line


def _plan(state: RunState) -> list[str]:
    if not state.plan:
        return ["## Plan", "  (no plan recorded)"]
    done = set(state.steps_done)
    n = sum(1 for s in state.plan if s in done)
    lines = [f"## Plan and progress ({n} of {len(state.plan)} done)"]
    marked_next = False
    for step in state.plan:
        if step in done:
            lines.append(f"  [x] {step}")
        else:
            lines.append(f"  [ ] {step}" + ("  <- next" if not marked_next else ""))
            marked_next = True
    return lines


def _pending(state: RunState, unsure: list[Effect]) -> list[str]:
    # The uncertain side effects with no outcome and the read-only calls that were
    # running, in the order of their intents (a completed run has nothing left to resume).
    # An effect that failed after an attempt of unknown outcome is told by the failure
    # line below, as it always was.
    found = [
        (fx.position, _unsure_line(fx))
        for fx in unsure
        if fx.outcome == Outcome.UNKNOWN and state.status != RunStatus.COMPLETED
    ]
    found += [
        (p.position, f"  - {p.tool} (call {p.call}) was running; it will run again.")
        for p in state.pending
        if not p.side_effect
    ]
    lines = [line for _, line in sorted(found, key=lambda pair: pair[0])]
    if state.waiting and state.status == RunStatus.WAITING:
        lines.append(f"  - waiting, holding no thread, for {state.waiting}; it resumes then.")
    elif state.waiting:
        lines.append(f"  - waiting for a person to answer: {state.waiting}")
    if state.status == RunStatus.FAILED and state.error:
        lines.append(f"  - the run stopped on a failure: {state.error}")
    remaining = [s for s in state.plan if s not in set(state.steps_done)]
    if remaining and state.status != RunStatus.COMPLETED:
        lines.append(f"  - remaining plan steps: {', '.join(remaining)}")
    if state.status == RunStatus.COMPLETED:
        lines.append(f"  (none: the run completed with {brief(state.output, RESULT_CHARS)})")
    elif state.status == RunStatus.ABANDONED:
        lines.append("  (none: the run was abandoned and its effects compensated)")
    return lines or ["  (nothing recorded as pending; continue from the plan)"]


def _held(state: RunState, seen: _Reading) -> list[str]:
    """Child runs not finished and locks still held (none once the run ended)."""
    if state.status in FINAL:
        return []
    lines = [
        f"  - child run {child} (spawn call {call}) has not finished: wait for it; "
        "never spawn it again."
        for call, child in sorted(seen.children.items())
    ]
    lines += [f"  - holds lock {name!r} (fence {fence})." for name, fence in seen.locks.items()]
    return lines


def _unsure_line(fx: Effect) -> str:
    return (
        f"  - {fx.tool} (call {fx.call}, key {fx.key}): the request was recorded as "
        "intended but its outcome is unknown. Resolve it by verifying or re-sending "
        "with the same key; never with a new key."
    )
