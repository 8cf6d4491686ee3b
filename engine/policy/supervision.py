"""Supervision, as Erlang/OTP supervisors do it: which children a failure restarts, and
when to give up and let the failure escalate.

:class:`Supervisor` is the declaration (``@engine.agent(supervise=Supervisor(...))``);
the runtime records each restart and escalation as an event in the supervising run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from .. import events as ev
from ..errors import UsageError
from ..kinds import RunStatus

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


class Child(msgspec.Struct, frozen=True):
    """One child of a supervised parent, as its log tells: its spawn ``call``, the run
    that does its work now (``run_id``), its place in spawn ``order``, and whether the
    parent already took its result (``settled``: a completed child the parent's code may
    have used, which no restart may change under it)."""

    call: int
    run_id: str
    order: int
    settled: bool = False


class Restart(msgspec.Struct, frozen=True):
    """Restart the child of spawn ``call`` now done by ``run_id``: ``resume`` it from its
    log (one_for_one on a failed run), else abandon it and start a new run in its place."""

    call: int
    run_id: str
    resume: bool = False


class Decision(msgspec.Struct, frozen=True):
    """What a supervisor does about one failure: the ``restarts`` (in spawn order), or
    ``escalate``; ``count`` is the restarts within the window, this one included."""

    restarts: tuple[Restart, ...] = ()
    escalate: bool = False
    count: int = 0


def recent(sup: Supervisor, episodes: Iterable[float], at: float) -> int:
    """How many of the restart ``episodes`` (their times) fall within ``sup.within``
    seconds before ``at``."""
    return sum(1 for t in set(episodes) if at - sup.within < t <= at)


def decide(
    sup: Supervisor,
    episodes: Iterable[float],
    failed_at: float,
    failed: Child,
    children: Sequence[Child],
    abandoned: bool = False,
) -> Decision:
    """What ``sup`` does when ``failed`` (one of ``children``) failed (or was
    ``abandoned``) at ``failed_at``, given the times of its earlier restart ``episodes``.

    Past ``max_restarts`` restarts within ``within`` seconds it escalates (one restart
    per failure, however many children it restarts, as OTP counts). Else: one_for_one
    resumes the failed child (a new run if it was abandoned: an abandoned run cannot go
    on); one_for_all restarts every child the parent has not taken the result of, as new
    runs; rest_for_one those of them spawned after the failed one, and it. The failed
    child is restarted even if settled (its result is a failure)."""
    count = recent(sup, episodes, failed_at) + 1
    if count > sup.max_restarts:
        return Decision(escalate=True, count=count - 1)
    if sup.strategy == "one_for_one":
        return Decision((Restart(failed.call, failed.run_id, resume=not abandoned),), count=count)
    after = failed.order if sup.strategy == "rest_for_one" else -1
    chosen = sorted(
        (c for c in children if c.call == failed.call or (c.order > after and not c.settled)),
        key=lambda c: c.order,
    )
    return Decision(tuple(Restart(c.call, c.run_id) for c in chosen), count=count)


class Family(msgspec.Struct, frozen=True):
    """A supervised parent's children and restart history, read from its log."""

    children: tuple[Child, ...] = ()
    episodes: tuple[float, ...] = ()  # the times of its restart episodes, oldest first

    def child(self, call: int) -> Child | None:
        return next((c for c in self.children if c.call == call), None)


def family(events: Iterable[ev.Event]) -> Family:
    """The children (by spawn call, each re-pointed by its restarts) and the restart
    episodes a parent's ``events`` record. A restart episode's events share their time:
    one_for_all records one child_restarted per child, and counts as one restart."""
    kids: dict[int, Child] = {}
    episodes: list[float] = []
    for e in events:
        if isinstance(e, ev.ChildSpawned):
            kids[e.call] = Child(e.call, e.child_run_id, len(kids))
        elif isinstance(e, ev.ChildRestarted) and e.call in kids:
            kids[e.call] = msgspec.structs.replace(
                kids[e.call], run_id=e.child_run_id, settled=False
            )
            if e.at not in episodes:
                episodes.append(e.at)
        elif isinstance(e, ev.ChildFinished) and e.call in kids:
            kid = kids[e.call]
            if kid.run_id == e.child_run_id:
                kids[e.call] = msgspec.structs.replace(kid, settled=e.status == RunStatus.COMPLETED)
    return Family(tuple(kids.values()), tuple(episodes))


__all__ = ["STRATEGIES", "Child", "Decision", "Family", "Restart", "Supervisor", "decide", "family"]
