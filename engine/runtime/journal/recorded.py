"""The journal: a run's recorded calls by call identity, read from its stream.

Re-execution (resume, rewind, verify) consults it: a call with a recorded outcome
returns it without executing anything; an intent without an outcome is uncertain. Each
entry is the call's ``CallState``, folded by ``callstate.evolve``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import events as ev
from ...errors import NonDeterminismError
from ...kinds import Asked, RecoveryAction
from ...policy import budget
from ...store import Recorded
from . import agentfold
from .callstate import CALL_EVENTS, CallState, evolve


@dataclass
class Journal:
    calls: dict[int, CallState] = field(default_factory=dict)
    # The call whose failure ended the run (no later call was recorded): a resume
    # re-attempts it instead of replaying the failure.
    failed_call: int | None = None
    last_call: int = 0
    # Questions not answered yet, oldest first (the last one is what the run waits on).
    unanswered: dict[int, ev.HumanInputRequested] = field(default_factory=dict)
    # The usage recorded up to and including each decision (or run.usage) that reported
    # some, in log order: what the live run had spent when it recorded that call.
    spent_at: dict[int, budget.Usage] = field(default_factory=dict)
    spent: budget.Usage = budget.NONE
    # The patches the run took (``run.patched``): name -> the calls made before its marker.
    patches: dict[str, int] = field(default_factory=dict)
    # Questions graded recovery asked (by call): not calls of the code, answered to go on.
    recovery_asks: set[int] = field(default_factory=set)
    # The failure a re-plan recovers from, by the decision's call it makes again.
    replans: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_events(cls, recorded: list[Recorded]) -> Journal:
        j = cls()
        for r in recorded:
            j.add(r.event, r.position)
        return j

    def mismatch(
        self, run_id: str, call: int, kind: str, name: str, ahash: str = ""
    ) -> NonDeterminismError | None:
        """Why the log's entry at ``call`` is not what the code makes now (``kind``
        ``name`` with arguments hashed to ``ahash``), or None if it is (or there is none)."""
        entry = self.calls.get(call)
        if entry is None:
            return None
        if entry.kind == kind and entry.name == name and (not ahash or entry.args_hash == ahash):
            return None
        now = f"{kind} {name!r}" + (" (different arguments)" if entry.name == name else "")
        return NonDeterminismError(
            f"run {run_id} call {call}: the log recorded {entry.describe()} but the code now "
            f"makes {now}; code changed on purpose keeps the runs recorded before the change "
            'on their old path under `if run.patched("a-name"):` (see docs/guides/deploys.md)'
        )

    def add(self, e: ev.Event, position: int) -> None:
        if isinstance(e, ev.PatchMarked):
            self.patches.setdefault(e.name, e.after)
            return
        if self._recovery(e):
            return
        if type(e) in CALL_EVENTS:
            call: int = e.call  # type: ignore[attr-defined]
            if isinstance(e, ev.LlmDecided | ev.UsageRecorded) and (
                e.tokens_in or e.tokens_out or e.cost
            ):
                self.spent += budget.Usage(e.tokens_in, e.tokens_out, e.cost)
                self.spent_at[call] = self.spent
            entry = evolve(self.calls.get(call), e, position)
            if entry is not None:
                self.calls[call] = entry
            if isinstance(e, ev.HumanInputRequested | ev.HumanInputProvided):
                self.unanswered.pop(call, None)
                if isinstance(e, ev.HumanInputRequested):
                    self.unanswered[call] = e
        elif type(e) in agentfold.FOLDS:
            call = e.call  # type: ignore[attr-defined]
            entry = agentfold.evolve(self.calls.get(call), e)
            if entry is not None:
                self.calls[call] = entry
        elif isinstance(e, ev.AgentFailed):
            self.failed_call = e.call
            if e.call is None:
                return
            call = e.call
        else:
            return
        if call > self.last_call:
            self.last_call = call
            if self.failed_call is not None and call > self.failed_call:
                self.failed_call = None  # the code went on past that failure

    def _recovery(self, e: ev.Event) -> bool:
        """Fold what graded recovery recorded (True: ``e`` is done with). A re-plan or a
        roll back forgets the calls from its ``from_call`` on, which the re-execution
        makes again; a recovery question is no call of the code: answered, the failed
        call is re-attempted."""
        if isinstance(e, ev.RecoveryDecided):
            if e.from_call is not None:
                cut = e.from_call
                self.calls = {n: c for n, c in self.calls.items() if n < cut}
                self.unanswered = {n: q for n, q in self.unanswered.items() if n < cut}
                self.spent_at = {n: u for n, u in self.spent_at.items() if n < cut}
                self.last_call, self.failed_call = min(self.last_call, cut - 1), None
                if e.action == RecoveryAction.REPLAN:
                    self.replans[cut] = {"kind": str(e.kind), "reason": e.reason, **e.evidence}
            return True
        if isinstance(e, ev.HumanInputRequested) and e.reason == Asked.RECOVERY:
            self.recovery_asks.add(e.call)
            return True
        if isinstance(e, ev.HumanInputProvided) and e.call in self.recovery_asks:
            self.recovery_asks.discard(e.call)
            return True
        return False
