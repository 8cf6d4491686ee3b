"""The journal: a run's recorded calls by call identity, read from its stream.

Re-execution (resume, rewind, verify) consults it: a call with a recorded outcome
returns it without executing anything; an intent without an outcome is uncertain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import events as ev
from ..store import Recorded


@dataclass
class CallLog:
    """What the log says about one call identity."""

    kind: str  # tool, decide, plan, step, checkpoint, ask
    name: str
    args_hash: str = ""
    intent: ev.ToolInvoked | None = None
    intent_position: int = 0
    outcome: ev.Event | None = None  # ToolSucceeded, final ToolFailed, LlmDecided, ...
    attempts: int = 0  # attempts recorded so far (failed ones and the outcome's)
    started_at: float = 0.0
    completed: bool = False  # a step's step_completed, an ask's answer
    asked: bool = False  # an uncertain tool call waits for a person
    answer: Any = None

    def describe(self) -> str:
        return f"{self.kind} {self.name!r}"


@dataclass
class Journal:
    calls: dict[int, CallLog] = field(default_factory=dict)
    # The call whose failure ended the run (no later call was recorded): a resume
    # re-attempts it instead of replaying the failure.
    failed_call: int | None = None
    last_call: int = 0
    # Questions not answered yet, oldest first (the last one is what the run waits on).
    unanswered: dict[int, ev.HumanInputRequested] = field(default_factory=dict)

    @classmethod
    def from_events(cls, recorded: list[Recorded]) -> Journal:
        j = cls()
        for r in recorded:
            j.add(r.event, r.position)
        return j

    def add(self, e: ev.Event, position: int) -> None:
        calls = self.calls
        match e:
            case ev.ToolInvoked():
                # A re-attempt after a failure re-records the intent; attempts carry on.
                before = calls.get(e.call)
                calls[e.call] = CallLog(
                    "tool",
                    e.tool,
                    e.args_hash,
                    intent=e,
                    intent_position=position,
                    started_at=e.at,
                    attempts=before.attempts if before else 0,
                )
            case ev.ToolSucceeded():
                c = calls.setdefault(e.call, CallLog("tool", e.tool))
                c.outcome, c.attempts = e, max(c.attempts, e.attempt)
            case ev.ToolFailed():
                c = calls.setdefault(e.call, CallLog("tool", e.tool))
                c.attempts = max(c.attempts, e.attempt)
                if e.final:
                    c.outcome = e
            case ev.LlmDecided():
                calls[e.call] = CallLog("decide", e.name, e.args_hash, outcome=e)
            case ev.PlanCreated():
                calls[e.call] = CallLog("plan", ",".join(e.steps), outcome=e)
            case ev.StepStarted():
                calls[e.call] = CallLog("step", e.name, outcome=e, started_at=e.at)
            case ev.StepCompleted():
                if e.call in calls:
                    calls[e.call].completed = True
            case ev.Checkpoint():
                calls[e.call] = CallLog("checkpoint", e.name, outcome=e)
            case ev.HumanInputRequested():
                self.unanswered.pop(e.call, None)
                self.unanswered[e.call] = e
                if e.reason == "uncertain" and e.call in calls:
                    calls[e.call].asked = True  # a tool call paused for a person's word
                else:
                    calls[e.call] = CallLog("ask", e.question, outcome=e)
            case ev.HumanInputProvided():
                self.unanswered.pop(e.call, None)
                if e.call in calls:
                    calls[e.call].completed, calls[e.call].answer = True, e.value
            case ev.AgentFailed():
                self.failed_call = e.call
            case _:
                return
        call = getattr(e, "call", None)
        if isinstance(call, int) and call > self.last_call:
            self.last_call = call
            if self.failed_call is not None and call > self.failed_call:
                self.failed_call = None  # the code went on past that failure
