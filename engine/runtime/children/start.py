"""Starting a child run: the one commit that links it to its parent.

Kept apart from :mod:`.children` (spawn, wait, wake) so a module the wait calls (the
supervisor, which starts children again) can open children without an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ... import events as ev
from ...log.history import RunWriter, run_stream
from ...log.state import RunState, fold
from ...secrets import key_check, replay_key
from ...store import Append
from ..defs.definitions import AgentDef

if TYPE_CHECKING:
    from ..run.context import RunContext


def open_child(
    ctx: RunContext, record: ev.ChildSpawned | ev.ChildRestarted, started: ev.AgentStarted
) -> None:
    """Commit ``record`` in the parent with the child's ``agent_started`` (and its index
    row) in one commit, then start the child executing in a thread of its own. A crash
    leaves both or neither: never a child its parent does not know of."""
    child_id = record.child_run_id
    started = msgspec.structs.replace(started, run_id=child_id)  # a restart's copies its own
    trace = origin(ctx.watch.trace, started.at)  # traced under this execution, if traced
    head: list[ev.Event] = [started, *trace]
    if ctx.writer.state.dry_run:  # a dry run's child is a dry run too
        head.append(ev.DryRunStarted(at=started.at))
    first = fold(list(enumerate(head, 1)), RunState(run_id=child_id))
    appends = [Append(run_stream(child_id), i, e) for i, e in enumerate(head, 1)]
    ctx.record(record, extra=appends, rows=[RunWriter.index_row(first)])
    ctx.host.start(child_id)


def agent_started(
    agent: AgentDef[..., Any],
    input: dict[str, Any],
    at: float,
    parent_run_id: str | None = None,
    reuses: str | None = None,
    run_id: str | None = None,
) -> ev.AgentStarted:
    """The ``agent_started``, dated ``at``, of a new run of ``agent`` on ``input``
    (normalized), under this machine's replay key; a child's names its parent, and the run
    whose effects it takes over (``reuses``: the child a restarted run's same spawn started)."""
    return ev.AgentStarted(
        at=at,
        agent=agent.name,
        import_path=agent.import_path,
        input=input,
        parent_run_id=parent_run_id,
        code_version=agent.version,
        version=agent.release,
        key_check=key_check(replay_key()),
        reuses=reuses,
        run_id=run_id,
        rpo_calls=None if agent.rpo is None else agent.rpo.calls,
        rpo_s=None if agent.rpo is None else agent.rpo.seconds,
    )


def origin(trace: str | None, at: float) -> tuple[ev.TraceNoted, ...]:
    """What follows a new run's ``agent_started`` (dated ``at``) when it starts under the
    trace context ``trace`` (an observer's: engine.observe): nothing when untraced."""
    return () if trace is None else (ev.TraceNoted(at=at, trace=trace, origin=True),)
