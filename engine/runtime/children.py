"""Child runs: spawn, wait for, pause with, and wake their parents. (Placeholder of the
session's first phase: the interface the rest of the runtime is written against.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..history import RunWriter, run_stream
from ..state import RunState, evolve
from ..store import Append

if TYPE_CHECKING:
    from ..store import Store
    from .context import RunContext
    from .defs import AgentDef
    from .host import Host
    from .results import RunResult


class Child:
    """A child run as its parent holds it: ``run_id``, ``status()``, ``result()``, and
    ``await child`` in an async agent."""

    def __init__(self, ctx: RunContext, call: int, run_id: str) -> None:
        self.ctx, self.call, self.run_id = ctx, call, run_id

    def status(self) -> str:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError


def open_child(
    ctx: RunContext, record: ev.ChildSpawned | ev.ChildRestarted, started: ev.AgentStarted
) -> None:
    """Commit ``record`` in the parent with the child's ``agent_started`` (and its index
    row) in one commit, then start the child executing in a thread of its own. A crash
    leaves both or neither: never a child its parent does not know of."""
    child_id = record.child_run_id
    first = evolve(RunState(run_id=child_id), started, 1)
    head = Append(run_stream(child_id), 1, started)
    ctx.record(record, extra=[head], rows=[RunWriter.index_row(first)])
    ctx.host.start(child_id)


def spawn(ctx: RunContext, agent: AgentDef[..., Any] | Any, input: dict[str, Any]) -> Child:
    raise NotImplementedError


def gather(ctx: RunContext, children: tuple[Child, ...]) -> list[Any]:
    raise NotImplementedError


def after_run(host: Host, store: Store, result: RunResult) -> None:
    """A run's execution ended (``result``): wake its parent if it waits on it."""


def child_due(store: Store, state: RunState) -> bool:
    """Whether ``state``, a run paused or waiting on a child, has news of that child."""
    return False
