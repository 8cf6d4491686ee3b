"""Imported runs are history, not code, until a person adopts them.

An export file may name any module or script as its agent; importing it records
``run_imported`` and nothing runs the run (nothing imports its code) until
:func:`adopt` records ``run_adopted``: who took it on, and which agent runs it. Every act
that would execute or change the run asks :func:`runs_as` first.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Sequence

from ... import events as ev
from ...errors import UsageError
from ...log.history import RunWriter, read_run, rebuild
from ...log.state import RunState
from ...store import Recorded, Store
from ..defs.definitions import AgentDef
from ..host.leases import Leases
from .catalog import Catalog
from .results import RunResult


def refuse_imported(state: RunState, act: str) -> None:
    """UsageError if ``state`` is an imported run nobody adopted (``act``: what was asked)."""
    if state.imported:
        rid = state.run_id
        raise UsageError(
            f"run {rid} was imported: it is history, not code, and cannot {act} until "
            f"someone adopts it (agentlog adopt {rid} [--agent MODULE:AGENT])"
        )


def imported(store: Store, run_id: str) -> bool:
    """Whether ``run_id`` is an imported run nobody adopted."""
    return rebuild(store, run_id).imported


def runs_as(state: RunState, recorded: Sequence[Recorded], act: str) -> tuple[str, str]:
    """``(agent, import path)`` that run the run: the adopter's choice, else the ones its
    start recorded. Refuses an imported run nobody adopted (see ``refuse_imported``)."""
    refuse_imported(state, act)
    for r in reversed(recorded):
        if isinstance(r.event, ev.RunAdopted):
            return r.event.agent, r.event.import_path
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)  # the checked reader made sure
    return started.agent, started.import_path


def adopt(
    catalog: Catalog, leases: Leases, run_id: str, agent: AgentDef | str | None = None
) -> RunResult:
    """Take an imported run of ``catalog`` on, holding its lease as ``leases``' owner:
    record who adopted it, when, and which agent runs it (``agent``: a definition or
    ``module:qualname``; None keeps the one the run names). From then on it is a run like
    any other. Nothing is imported or executed here."""
    rid = catalog.resolve(run_id)
    store = catalog.store
    with leases.hold(store, rid):
        history = read_run(store, rid)
        state = history.state
        if not state.imported:
            raise UsageError(f"run {rid} is not an imported run waiting to be adopted")
        name, path = _agent(agent, history.started)
        writer = RunWriter(store, state, fence=leases.fence(rid), wall=leases.wall)
        writer.append(
            ev.RunAdopted(
                at=writer.wall(), agent=name, import_path=path, by=who(), owner=leases.owner
            )
        )
        done = writer.state
    return RunResult(
        rid, done.status, done.output, done.error, done.waiting, parent_run_id=done.parent_run_id
    )


def _agent(agent: AgentDef | str | None, started: ev.AgentStarted) -> tuple[str, str]:
    if agent is None:
        return started.agent, started.import_path
    if isinstance(agent, AgentDef):
        return agent.name, agent.import_path
    module, sep, qualname = agent.partition(":")
    if not sep or not module or not qualname or module.endswith(".py"):
        raise UsageError(f"expected the agent as MODULE:AGENT, got {agent!r}")
    return agent, module


def who() -> str:
    """``user@host`` of this process, as far as the system can tell."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no USER variable (some containers)
        user = "?"
    return f"{user}@{socket.gethostname()}"
