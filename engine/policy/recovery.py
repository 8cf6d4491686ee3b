"""Recovery: how an agent's failed steps are recovered (``@engine.agent(recovery=...)``).

Each action can be turned off; the limits bound what recovery spends before it gives a
failure up to a person (``ask``) or leaves the run failed."""

from __future__ import annotations

import msgspec

from ..errors import UsageError


class Recovery(msgspec.Struct, frozen=True):
    """Graded recovery, tried in order: ``retry`` the failed step, ``replan`` (re-run the
    last ``run.decide`` with the failure in its input), ``rollback`` (compensate back to
    the last checkpoint), ``ask`` a person. ``max_attempts``: recoveries per run before it
    goes to a person; ``max_retries``: retries of one failed call; ``max_rollback_calls``:
    a rollback that would redo more paid model calls than this loses to a retry."""

    retry: bool = True
    replan: bool = True
    rollback: bool = True
    ask: bool = True
    max_attempts: int = 3
    max_retries: int = 2
    max_rollback_calls: int = 20

    def __post_init__(self) -> None:
        for name in ("max_attempts", "max_retries", "max_rollback_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"Recovery {name} must be an int >= 0, not {value!r}")


__all__ = ["Recovery"]
