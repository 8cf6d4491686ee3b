"""What the engine hands back to callers: run results, event views, run summaries."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from ...events import event_data
from ...kinds import LineageKind, RunStatus
from ...log.effects import Effect
from ...showing import shown, utc

if TYPE_CHECKING:
    from ...store import Recorded
    from ...store.base import RunRow


class RunResult(msgspec.Struct, frozen=True):
    """The outcome of run/resume/answer/abandon/rewind. ``error`` is one line or None."""

    run_id: str
    status: RunStatus  # equal to its string ("completed", ...), as stored
    output: Any = None
    error: str | None = None
    waiting: str | None = None  # the question a paused run waits on
    # For a rewind: the side effects after the fork position of the parent and of the
    # descendants it started after it that still stand in the world (committed, not
    # reused by the fork, not compensated); for an abandon, those of the run's subtree
    # left standing (no compensation, or left as they are). Deepest first.
    standing: tuple[Effect, ...] = ()
    # The effects undone, deepest first: by a rewind with effects "compensate" (of the
    # parent's subtree after the fork position), or by an abandon (of the run's subtree).
    compensated: tuple[Effect, ...] = ()
    # For a rewind: the parent's side effects after the fork position that the fork took
    # over instead of sending again (same call reused, or found by the ledger's key).
    reused: tuple[Effect, ...] = ()
    # Set only by recover() for a run it could not resume: "refused" (an AgentlogError:
    # a damaged log, changed code, an agent that no longer imports), "unexpected", or
    # "held" (crashed, its agent resumes on approval: ``agentlog approve`` continues it).
    not_resumed: str | None = None
    # The run that spawned this one (a child run), or that it was rewound from (a fork).
    parent_run_id: str | None = None


class EventView(msgspec.Struct, frozen=True):
    """One recorded event as users see it: 1-based ``position``, ``type``, ``at``, ``data``."""

    position: int
    type: str
    at: datetime
    data: dict[str, Any]

    @classmethod
    def of(cls, r: Recorded) -> EventView:
        """How users see the recorded event ``r`` (an input's secret-named fields, stored
        only when the store encrypts, shown redacted)."""
        event = shown(r).event
        return cls(r.position, str(event.__struct_config__.tag), utc(event.at), event_data(event))


class RunSummary(msgspec.Struct, frozen=True):
    """A row of the run index. ``unreadable`` says why a row the store holds cannot be
    shown as it is (a value planted behind the store's back); its times are then None.
    ``lineage``: root, child or fork (None: not known, a row an older agentlog wrote
    whose run's start could not be read)."""

    run_id: str
    agent: str
    status: str
    started_at: datetime | None
    updated_at: datetime | None
    parent_run_id: str | None = None
    position: int = 0
    unreadable: str | None = None
    lineage: LineageKind | None = None

    @classmethod
    def of(cls, row: RunRow) -> RunSummary:
        """The summary of an index row; a row with values out of range or of the wrong
        type becomes an unreadable summary instead of an error (the rest still list)."""
        try:
            return cls(
                _text(row.run_id),
                _text(row.agent),
                _text(row.status),
                utc(row.started_at),
                utc(row.updated_at),
                None if row.parent_run_id is None else _text(row.parent_run_id),
                _count(row.position),
                lineage=None if row.lineage is None else LineageKind(row.lineage),
            )
        except (TypeError, ValueError, OverflowError, OSError) as e:
            return cls(
                str(row.run_id)[:128],
                str(row.agent)[:200],
                str(row.status)[:20],
                None,
                None,
                unreadable=f"unreadable index row ({type(e).__name__}: {str(e)[:80]})",
            )


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not text: {value!r}"[:80])
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"not a position: {value!r}"[:80])
    return value
