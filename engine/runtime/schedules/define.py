"""A schedule, checked: its name, agent, cadence, queue and input, as ``engine.schedule``
takes them and as a row of ``agentlog_schedules`` gives them back.

Every field is checked before a row is written (one ``UsageError``), and again when a
row is read (a damaged or forged row is ``CorruptData``, never a run of something else).
The input is checked as ``engine.run`` checks it: it fits the agent, it is JSON data, and
secret-named fields are refused unless the store encrypts what it stores.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import CorruptData, UsageError
from ...secrets import refuse_secret_input
from ...store.queueing import check_queue
from ...store.schedules import ScheduleRow
from ..defs.definitions import AgentDef, normalize
from .cadence import Cadence, cadence, next_tick, tick_id

if TYPE_CHECKING:
    from ...store import Store

# A run id is at most 128 characters; a tick's ``@2026-12-03T02:00:00Z`` takes 21.
MAX_NAME = 100
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")  # MAX_NAME in all
MAX_INPUT = 64 * 1024  # bytes of JSON: a schedule's input is a few arguments, not data
MAX_AGENT = 300  # an agent's recorded name: module:qualname, or the name= it was given

__all__ = ["Schedule", "check_name", "decode", "define"]


class Schedule(msgspec.Struct, frozen=True):
    """One schedule as the engine and the CLI show it."""

    name: str
    agent: str  # module:qualname
    import_path: str
    cadence: Cadence
    input: dict[str, Any]
    queue: str
    catch_up: bool
    created_at: float
    last_tick: float | None = None

    def next_tick(self, now: float) -> float | None:
        """The first tick after ``now``."""
        return next_tick(self.cadence, now)

    @property
    def last_run(self) -> str | None:
        """The run id of the latest tick a worker enqueued, if any."""
        return None if self.last_tick is None else tick_id(self.name, self.last_tick)

    @property
    def since(self) -> float:
        """The time after which its ticks count: its last handled tick, else its creation."""
        return self.created_at if self.last_tick is None else self.last_tick


def check_name(name: object, what: str = "schedule name") -> str:
    """``name`` if it names a schedule: 1 to 100 letters, digits, ``.``,
    ``_``, ``:`` or ``-``, starting with a letter or digit. No ``@``: the run id of a
    tick is ``NAME@<tick>``."""
    if isinstance(name, str) and NAME.fullmatch(name) is not None:
        return name
    shown = repr(str(name)[:40])
    raise UsageError(
        f"not a {what}: {shown} (1 to {MAX_NAME} letters, digits, '.', '_', ':' or '-', "
        "starting with a letter or digit)"
    )


def _input_json(agent: AgentDef, input: dict[str, Any], encrypted: bool) -> bytes:
    data = normalize(input, "the schedule's input")
    agent.check_input(data)
    refuse_secret_input(data, encrypted=encrypted)
    try:
        encoded = msgspec.json.encode(data)
        same = msgspec.json.decode(encoded) == data
    except (TypeError, msgspec.EncodeError):
        same = False
    if not same:
        raise UsageError("a schedule's input is JSON data (no bytes, no non-string keys)")
    if len(encoded) > MAX_INPUT:
        raise UsageError(f"a schedule's input is at most {MAX_INPUT} bytes of JSON")
    return encoded


def define(
    name: str,
    agent: AgentDef,
    *,
    cron: object,
    every: object,
    queue: object,
    catch_up: object,
    input: dict[str, Any],
    encrypted: bool,
    now: float,
) -> ScheduleRow:
    """The row of a schedule defined with these arguments, each checked."""
    check_name(name)
    c = cadence(cron, every)
    queue = check_queue(queue)
    if not isinstance(catch_up, bool):
        raise UsageError(f"catch_up is True or False, not {catch_up!r}")
    return ScheduleRow(
        name=name,
        agent=agent.name,
        import_path=agent.import_path,
        cron=c.cron,
        every=c.every,
        input=_input_json(agent, input, encrypted),
        queue=queue,
        catch_up=catch_up,
        created_at=now,
    )


def listed(store: Store) -> list[Schedule]:
    """Every schedule in ``store``, by name (``engine.schedules()``, ``agentlog schedules``)."""
    return [decode(r) for r in store.schedules.all()]


def decode(row: ScheduleRow) -> Schedule:
    """The schedule a stored row holds, each field checked again."""
    try:
        check_name(row.name)
        check_queue(row.queue)
        if not (0 < len(row.agent) <= MAX_AGENT and row.agent.isprintable()):
            raise UsageError(f"not an agent's name: {row.agent[:60]!r}")
        c = cadence(row.cron, row.every)
        data = msgspec.json.decode(row.input, type=dict[str, Any])
    except (UsageError, msgspec.DecodeError) as e:
        raise CorruptData(f"schedule {row.name[:60]!r} is damaged: {e}") from None
    return Schedule(
        name=row.name,
        agent=row.agent,
        import_path=row.import_path,
        cadence=c,
        input=data,
        queue=row.queue,
        catch_up=row.catch_up,
        created_at=row.created_at,
        last_tick=row.last_tick,
    )
