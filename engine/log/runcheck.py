"""The check of a run's log as it is read: positions follow one another from 1, only the
first event is ``agent_started``, and nothing but an undo or import record follows the
run's end; a record that breaks it is ``CorruptData`` naming the run and the position."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from .. import events as ev
from ..errors import CorruptData
from ..events import Positioned
from ..kinds import FINAL
from .state import RunState

# A run ends with one of these; nothing of its own life may follow.
ENDS = (ev.AgentFinished, ev.AgentAbandoned, ev.DryRunEnded)
# What an ended run's stream may still receive: the record of undoing one of its effects,
# made by a later act on it (a rewind that compensates the parent's effects), and the
# record of its import and of its adoption.
AFTER_END = (ev.CompensationStarted, ev.Compensated, ev.RunImported, ev.RunAdopted)


_P = TypeVar("_P", bound=Positioned)


class RunCheck:
    """Checks, as a run's records are read in order, that they continue its log: each
    position follows the one before, position 1 (and only it) is ``agent_started``, and
    nothing but an undo record follows the run's end. Raises ``CorruptData``."""

    __slots__ = ("ended", "position", "run_id")

    def __init__(self, run_id: str, after: int = 0, ended: bool = False) -> None:
        self.run_id = run_id
        self.position = after  # the last position checked
        self.ended = ended

    @classmethod
    def after(cls, state: RunState) -> RunCheck:
        """A check for the records that continue ``state`` (a snapshot, or a fresh run)."""
        return cls(state.run_id, state.position, state.status in FINAL)

    def __call__(self, records: Sequence[_P]) -> Sequence[_P]:
        """``records`` once checked (they must follow those checked before)."""
        position, ended = self.position, self.ended
        for r in records:
            position += 1
            e = r.event
            if r.position != position:
                raise self.corrupt(position, _gap(position, r.position))
            if isinstance(e, ev.AgentStarted) != (position == 1):
                raise self.corrupt(position, _start(e, position))
            if ended and not isinstance(e, AFTER_END):
                raise self.corrupt(position, f"{_tag(e)} after the run ended")
            ended = ended or isinstance(e, ENDS)
        self.position, self.ended = position, ended
        return records

    def corrupt(self, position: int, why: str) -> CorruptData:
        return CorruptData(f"run {self.run_id}: its log is damaged at position {position}: {why}")


def _tag(e: ev.Event) -> str:
    return str(e.__struct_config__.tag)


def _gap(expected: int, found: int) -> str:
    if found > expected:
        return f"it is missing (the next event is at {found})"
    return f"an event is out of order (found position {found})"


def _start(e: ev.Event, position: int) -> str:
    if position == 1:
        return f"the log begins with {_tag(e)}, not agent_started"
    return "agent_started appears again"
