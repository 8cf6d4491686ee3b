"""How long a run's checkpoints and snapshots take to save: measured by its writer
(I/O code, so a clock is fine here) and recorded in its log as ``saves_timed`` without a
commit of its own. The measurements ride at the front of the execution's last commit (the
one that finishes, fails or pauses the run), or of the next commit once ``FLUSH_AT`` are
held; a crash loses those not recorded yet, never a commit."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .. import events as ev

FLUSH_AT = 100  # checkpoints and snapshots measured before they ride the next commit
# A batch ending with one of these is the last its execution commits (the run context
# records each alone, after any deferred outcomes): the timings held ride in it.
LAST_WRITE = (ev.AgentFinished, ev.AgentFailed, ev.HumanInputRequested, ev.DryRunEnded)


class SaveTimes:
    """The measurements a writer holds until a commit records them."""

    __slots__ = ("checkpoint_ms", "checkpoints", "held", "snapshot_ms", "snapshots")

    def __init__(self) -> None:
        self.checkpoints, self.checkpoint_ms = 0, 0.0
        self.snapshots, self.snapshot_ms = 0, 0.0
        self.held = 0  # measurements held: checkpoints and snapshots

    def add(
        self, checkpoints: int, commit_ms: float, snaps: list[float | None], marked: int
    ) -> None:
        """One measured commit: it held ``checkpoints`` and took ``commit_ms``; ``snaps``,
        how long each snapshot after it took (None: not stored), the first ``marked`` of
        them the checkpoints'."""
        stored = [ms for ms in snaps if ms is not None]
        self.checkpoints += checkpoints
        self.checkpoint_ms += checkpoints * commit_ms + sum(ms for ms in snaps[:marked] if ms)
        self.snapshots += len(stored)
        self.snapshot_ms += sum(stored)
        self.held = self.checkpoints + self.snapshots

    def riding(self, events: Sequence[ev.Event], at: float) -> tuple[ev.Event, ...]:
        """``events`` with the record of what is held in front, dated ``at``. (A resumed
        execution's writer is new and holds nothing, so its ``agent_resumed`` comes first.)"""
        record = ev.SavesTimed(
            at=at,
            checkpoints=self.checkpoints,
            checkpoint_ms=round(self.checkpoint_ms, 6),
            snapshots=self.snapshots,
            snapshot_ms=round(self.snapshot_ms, 6),
        )
        return (record, *events)


def ms_since(began: float) -> float:
    return (time.perf_counter() - began) * 1000
