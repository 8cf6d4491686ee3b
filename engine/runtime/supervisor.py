"""A supervised parent's restarts of its failed children. (Placeholder of the session's
first phase: without it, a child's failure is raised as ChildFailed.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ChildFailed

if TYPE_CHECKING:
    from .context import RunContext


def restart(ctx: RunContext, call: int, child_run_id: str, error: str | None) -> str:
    """The supervised parent ``ctx`` (``ctx.agent.supervise``) saw the child of spawn
    ``call`` fail with ``error``: restart by its strategy (recording ``child_restarted``)
    and return the run id that now does the child's work; past the restart intensity,
    record ``supervisor_escalated`` and raise ChildFailed."""
    raise ChildFailed(child_run_id, error)
