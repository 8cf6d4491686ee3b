"""``engine.schedule``, ``engine.unschedule`` and ``engine.schedules``: the Engine's part
of schedules (the workers fire them: :mod:`.firing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ..declare import wrappers as declare
from ..defs.definitions import AgentDef
from .define import Schedule, check_name, decode, define, listed

if TYPE_CHECKING:
    from ...store import Store
    from ..defs.registry import Registry
    from ..host.config import EngineConfig

__all__ = ["Scheduling"]


class Scheduling:
    """What an engine schedules with: its store's ``agentlog_schedules`` table."""

    registry: Registry
    config: EngineConfig

    if TYPE_CHECKING:

        @property
        def store(self) -> Store: ...

    def schedule(
        self,
        name: str,
        agent: AgentDef[..., Any] | Callable[..., Any],
        /,
        *,
        cron: str | None = None,
        every: int | None = None,
        queue: str = "default",
        catch_up: bool = False,
        **input: Any,
    ) -> Schedule:
        """Start ``agent`` with ``input`` on the workers of ``queue`` at every tick of
        ``cron`` (five fields, UTC) or ``every`` seconds: one run per tick across all
        workers and restarts, with the run id ``NAME@<tick>`` (``2026-12-03T02:00:00Z``).
        Ticks missed while no worker ran are skipped but for the latest, unless
        ``catch_up`` (then up to 100 of them are started). Defining ``name`` again
        replaces its definition; the ticks already handled stay handled."""
        a = agent if isinstance(agent, AgentDef) else declare.agent(self.registry, agent)
        row = define(
            name,
            a,
            cron=cron,
            every=every,
            queue=queue,
            catch_up=catch_up,
            input=input,
            encrypted=self.store.encrypted,
            now=self.config.wall(),
        )
        self.store.schedules.put(row)
        found = self.store.schedules.get(row.name)
        if found is None:
            raise UsageError(f"schedule {name!r} was unscheduled as it was being defined")
        return decode(found)

    def unschedule(self, name: str) -> None:
        """Remove the schedule ``name`` (its runs stay); UsageError if there is none."""
        if not self.store.schedules.delete(check_name(name)):
            raise UsageError(f"no schedule named {name!r}")

    def schedules(self) -> list[Schedule]:
        """Every schedule, by name."""
        return listed(self.store)
