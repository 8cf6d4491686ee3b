"""The events of graded recovery (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from typing import Any

from ..kinds import FailureKind, RecoveryAction
from .base import Event

# --- graded recovery ---------------------------------------------------------------------


class RecoveryDecided(Event, frozen=True, tag="recovery_decided"):
    """Graded recovery's choice for a failed step: the failure's ``kind``, the ``action``
    taken, ``from_position`` (where the run goes on from: the failed step, the last
    decision, the last checkpoint), the ``attempt`` (1 for the run's first recovery) and
    the ``reason``. ``from_call``: a re-plan or roll back forgets the calls from it on
    (the re-execution makes them again); ``evidence``: what the failure showed (a broken
    invariant's name, step and values)."""

    kind: FailureKind
    action: RecoveryAction
    from_position: int
    attempt: int = 1
    reason: str = ""
    call: int | None = None  # the failed call, if a call failed
    from_call: int | None = None
    evidence: dict[str, Any] = {}


AnyRecoveryEvent = RecoveryDecided

__all__ = ["AnyRecoveryEvent", "RecoveryDecided"]
