"""Recovery point objectives: how much recorded work a recovery may fold past the newest
snapshot (``@engine.agent(rpo=20)``: calls; ``rpo="30s"``: seconds of work), and the
measure of what it would fold now (:func:`replay_tail`).

Seed 000: RPO <= the checkpoint interval. A writer given an ``Rpo`` snapshots at the
commit that brings the calls begun since its last snapshot to ``calls``, or the first
commit ``seconds`` or more after it, so the tail a rebuild folds (``rebuild``: the newest
snapshot plus the events after it) never holds more than that much work.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from collections.abc import Callable

import msgspec

from ..errors import UsageError
from ..events import Replayed
from ..store import Store
from .snapshots import snapshot_at_or_before
from .state import RunState

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smh])")  # ASCII digits only
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0}
# What ``rpo=`` is declared with: calls (an int), a duration ("30s"), or none.
RpoSpec = int | str | dt.timedelta | None
MAX_CALLS = 2**63 - 1  # what every start records (agent_started.rpo_calls) must encode


class Rpo(msgspec.Struct, frozen=True, omit_defaults=True):
    """A recovery point objective: at most ``calls`` calls, or ``seconds`` of recorded
    work, after the newest snapshot (exactly one of the two is set)."""

    calls: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.calls} calls" if self.calls is not None else f"{self.seconds:g}s"


def parse_rpo(value: object, owner: str = "rpo") -> Rpo | None:
    """``rpo=`` as declared: an int counts calls (``20``), a duration string (``"30s"``,
    ``"5m"``, ``"1.5h"``) or a ``timedelta`` is seconds of work, None is no objective.
    Anything else (0, a negative, a bool, a float, ``"abc"``, ``"30x"``) is refused with
    ``UsageError`` (naming ``owner``): a float would read as calls to some, seconds to
    others."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str | dt.timedelta):
        raise _refused(owner, value, "an int of calls, a duration such as '30s', or a timedelta")
    if isinstance(value, int):
        if not 1 <= value <= MAX_CALLS:
            raise _refused(owner, value, f"from 1 to {MAX_CALLS} calls")
        return Rpo(calls=value)
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else _seconds(value, owner)
    if not (math.isfinite(seconds) and seconds > 0):
        raise _refused(owner, value, "a finite duration above zero")
    return Rpo(seconds=seconds)


def _seconds(text: str, owner: str) -> float:
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        wanted = "a number then s, m or h ('30s', '5m', '1h'), or calls as an int"
        raise _refused(owner, text, wanted)
    return float(found.group(1)) * _UNIT[found.group(2)]


def _refused(owner: str, value: object, wanted: str) -> UsageError:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    return UsageError(f"{owner}: rpo= takes {wanted}, not {shown}")


def tail_of(head: RunState, base: RunState | None) -> Replayed:
    """The tail (``events.Replayed``) from ``base``, the newest snapshot at or before
    ``head`` (None: there is none)."""
    since = base.updated_at if base is not None else head.started_at
    return Replayed(
        events=head.position - (base.position if base is not None else 0),
        calls=head.calls - (base.calls if base is not None else 0),
        seconds=round(max(0.0, (head.updated_at or 0.0) - (since or head.updated_at or 0.0)), 6),
    )


def replay_tail(store: Store, stream: uuid.UUID, head: RunState) -> Replayed:
    """The tail a recovery of the run at ``head`` (its folded state) would fold now."""
    return tail_of(head, snapshot_at_or_before(store, stream, head.position))


class Cadence:
    """When an ``Rpo`` has a writer snapshot: at the commit that brings the calls begun
    since its last snapshot to ``rpo.calls``, or the first commit ``rpo.seconds`` or more
    (by ``clock``) after it. A writer of a state it did not write (``fresh`` False) knows
    no snapshot of it, so its first commit past the objective snapshots."""

    def __init__(self, rpo: Rpo, clock: Callable[[], float], fresh: bool) -> None:
        self.rpo = rpo
        self.clock = clock
        self.calls = 0  # the run's calls at the last snapshot
        self.at = clock() if fresh else -math.inf  # when it was taken

    def due(self, state: RunState) -> bool:
        rpo = self.rpo
        if rpo.calls is not None:
            return state.calls - self.calls >= rpo.calls
        return rpo.seconds is not None and self.clock() - self.at >= rpo.seconds

    def taken(self, state: RunState) -> None:
        self.calls = state.calls
        self.at = self.clock()
