"""Supervision, as Erlang/OTP supervisors do it: which children a failure restarts, and
when to give up and let the failure escalate.

:class:`Supervisor` is the declaration (``@engine.agent(supervise=Supervisor(...))``);
the runtime records each restart and escalation as an event in the supervising run.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from .errors import UsageError

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
STRATEGIES: tuple[str, ...] = ("one_for_one", "one_for_all", "rest_for_one")


class Supervisor(msgspec.Struct, frozen=True):
    """How a parent treats a child that fails.

    ``one_for_one`` resumes the failed child from its log; ``one_for_all`` abandons
    (compensates) its siblings and starts all of them again; ``rest_for_one`` does so for
    the failed child and those spawned after it. More than ``max_restarts`` restarts
    within ``within`` seconds and the supervisor gives up: the failure escalates to its
    own parent."""

    strategy: Strategy = "one_for_one"
    max_restarts: int = 3
    within: float = 60.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise UsageError(
                f"unknown supervision strategy {self.strategy!r}: use {', '.join(STRATEGIES)}"
            )
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int):
            raise UsageError(f"max_restarts must be an int, not {self.max_restarts!r}")
        if self.max_restarts < 0:
            raise UsageError(f"max_restarts must be 0 or more, not {self.max_restarts}")
        within = self.within
        if isinstance(within, bool) or not isinstance(within, int | float):
            raise UsageError(f"within must be a number of seconds, not {within!r}")
        if not (math.isfinite(within) and within > 0):
            raise UsageError(f"within must be a positive number of seconds, not {within}")


__all__ = ["STRATEGIES", "Supervisor"]
