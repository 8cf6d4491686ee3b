"""The store's schedules: ``agentlog_schedules``, one row per schedule name, beside the log.

A schedule is operational state, as leases and locks are: what to start (an agent by its
``module:qualname``, its input) and when (a cron expression or every N seconds), plus the
last tick a worker handled, which only moves forward. The runs a schedule starts are the
history; this table only says which ones are due. The input is sealed like every payload
when the store is encrypted. The runtime checks every field before a row is written
(:mod:`engine.runtime.schedules`); rows read back are checked again by it.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import msgspec

from ..errors import CorruptData
from .cipher import SEALED, ClearRows, Row

_NS = uuid.UUID("3c2b8a57-2f0e-4f5b-9d0c-5e8a4d7b6c21")

__all__ = ["MemorySchedules", "ScheduleRow", "ScheduleStore", "Schedules"]


class ScheduleRow(msgspec.Struct, frozen=True):
    """One schedule as stored: ``cron`` or ``every`` (seconds) is set, never both;
    ``input`` is the agent's keyword arguments as msgspec JSON (sealed in an encrypted
    store); ``last_tick`` the latest tick a worker enqueued (epoch seconds), or None."""

    name: str
    agent: str  # module:qualname
    import_path: str  # the module to import it from (as agent_started records it)
    cron: str | None
    every: int | None
    input: bytes
    queue: str
    catch_up: bool
    created_at: float
    last_tick: float | None = None

    def params(self) -> tuple[object, ...]:
        """The row's values in column order, for an insert."""
        return (
            self.name,
            self.agent,
            self.import_path,
            self.cron,
            self.every,
            self.input,
            self.queue,
            int(self.catch_up),
            self.created_at,
            self.last_tick,
        )


COLUMNS = "name, agent, import_path, cron, every, input, queue, catch_up, created_at, last_tick"


class ScheduleStore(ABC):
    """The schedules table of one backend."""

    @abstractmethod
    def upsert(self, row: ScheduleRow) -> None:
        """Insert ``row``, or replace the definition of the schedule of that name, keeping
        its ``created_at`` and ``last_tick`` (redefining a schedule does not re-run ticks)."""

    @abstractmethod
    def delete(self, name: str) -> bool:
        """Remove the schedule ``name``; whether there was one."""

    @abstractmethod
    def rows(self) -> list[ScheduleRow]:
        """Every schedule, by name (code-point order)."""

    @abstractmethod
    def advance(self, name: str, tick: float) -> bool:
        """Set the schedule's ``last_tick`` to ``tick`` if it is later than the one stored
        (atomic against every other worker); whether it moved."""


class Schedules:
    """The schedules of one store (its :class:`ScheduleStore`, sealed and translated)."""

    def __init__(
        self,
        name: str,
        port: ScheduleStore,
        rows: ClearRows,
        translated: Callable[[], AbstractContextManager[None]],
        writable: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.port = port
        self._writable = writable  # raises for a read-only store
        self._rows = rows
        self._translated = translated

    @staticmethod
    def _cipher_row(name: str) -> Row:
        return Row("schedules", uuid.uuid5(_NS, name), 0, "input")

    def put(self, row: ScheduleRow) -> None:
        """Store ``row`` (its input sealed when the store is encrypted)."""
        self._writable()
        sealed = msgspec.structs.replace(
            row, input=self._rows.seal(self._cipher_row(row.name), row.input)
        )
        with self._translated():
            self.port.upsert(sealed)

    def delete(self, name: str) -> bool:
        with self._translated():
            return self.port.delete(name)

    def all(self) -> list[ScheduleRow]:
        """Every schedule, by name, its input opened."""
        with self._translated():
            try:
                found = self.port.rows()
            except (msgspec.ValidationError, TypeError, ValueError) as e:
                raise CorruptData(
                    f"{self.name}: a row of agentlog_schedules is damaged: {e}"
                ) from None
        return [
            msgspec.structs.replace(
                r, input=self._rows.unseal(self.name, self._cipher_row(r.name), bytes(r.input))
            )
            for r in found
        ]

    def reseal(self) -> int:
        """Seal every schedule's input stored in clear (``agentlog reseal``, with the key);
        how many were. Each is one upsert: a stopped reseal leaves the rest as they were."""
        with self._translated():
            found = [r for r in self.port.rows() if bytes(r.input)[:2] != SEALED]
            for r in found:
                sealed = self._rows.seal(self._cipher_row(r.name), bytes(r.input))
                self.port.upsert(msgspec.structs.replace(r, input=sealed))
        return len(found)

    def get(self, name: str) -> ScheduleRow | None:
        return next((r for r in self.all() if r.name == name), None)

    def advance(self, name: str, tick: float) -> bool:
        """Record ``tick`` as the schedule's last handled tick, if it is the latest."""
        with self._translated():
            return self.port.advance(name, tick)


DDL = (
    "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, agent text NOT NULL, "
    "import_path text NOT NULL, cron text, every bigint, input {blob} NOT NULL, "
    "queue text NOT NULL, catch_up integer NOT NULL, created_at {real} NOT NULL, "
    "last_tick {real})"
)
# Redefining keeps created_at and last_tick: the ticks already handled stay handled.
UPSERT = (
    "INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT (name) DO UPDATE SET "
    "agent=excluded.agent, import_path=excluded.import_path, cron=excluded.cron, "
    "every=excluded.every, input=excluded.input, queue=excluded.queue, "
    "catch_up=excluded.catch_up"
)
ADVANCE = (
    "UPDATE {table} SET last_tick={mark} WHERE name={mark} "
    "AND (last_tick IS NULL OR last_tick < {mark}) RETURNING name"
)


def stored_row(values: Any) -> ScheduleRow:
    """A stored row as a ScheduleRow; a row whose values are not of their types (a
    damaged or forged table) raises msgspec's ValidationError, which the reader names."""
    fields = dict(zip([c.strip() for c in COLUMNS.split(",")], values, strict=True))
    fields["catch_up"] = bool(fields["catch_up"])
    fields["input"] = bytes(fields["input"])
    return msgspec.convert(fields, ScheduleRow)


class MemorySchedules(ScheduleStore):
    """Schedules in a dict under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, ScheduleRow] = {}

    def upsert(self, row: ScheduleRow) -> None:
        with self.lock:
            old = self.held.get(row.name)
            if old is not None:
                row = msgspec.structs.replace(
                    row, created_at=old.created_at, last_tick=old.last_tick
                )
            self.held[row.name] = row

    def delete(self, name: str) -> bool:
        with self.lock:
            return self.held.pop(name, None) is not None

    def rows(self) -> list[ScheduleRow]:
        with self.lock:
            return [self.held[n] for n in sorted(self.held)]

    def advance(self, name: str, tick: float) -> bool:
        with self.lock:
            row = self.held.get(name)
            if row is None or (row.last_tick is not None and row.last_tick >= tick):
                return False
            self.held[name] = msgspec.structs.replace(row, last_tick=tick)
            return True
