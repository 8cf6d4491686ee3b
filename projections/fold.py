"""What a projection is: a typed, pure fold of the global log into rows of one table.

A view names the rows an event touches (``keys``), then folds the event into them
(``apply``) and returns the changes; it never does I/O. The runner loads the rows,
calls the fold, and writes the changes with the view's new position in one transaction.
Every event reaches the fold in an :class:`Envelope`, with the facts about its run the
runner knows from the run index (the event itself does not name its run).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

import msgspec

from engine.events import Event
from engine.kinds import RunStatus
from engine.log.state import STATUS_AFTER
from engine.store.ports import Column, ColumnValue, ViewTable
from engine.store.views import damaged_view

R = TypeVar("R", bound=msgspec.Struct)
T = TypeVar("T")


class RunFacts(msgspec.Struct, frozen=True):
    """The run of a run stream: its id, agent, parent, and for a fork or child the
    number of its parent's events it copied (at positions 2..inherited+1)."""

    run_id: str
    agent: str
    parent_run_id: str | None = None
    inherited: int = 0


class Envelope(msgspec.Struct, frozen=True):
    """One event of the log in global order: where it is, and whose run it belongs to
    (None: a ledger, tool or other non-run stream)."""

    global_position: int
    stream: uuid.UUID
    position: int
    event: Event
    run: RunFacts | None = None

    @property
    def copied(self) -> bool:
        """Whether this is a fork's copy of its parent's event (history, not new work)."""
        return self.run is not None and 2 <= self.position <= self.run.inherited + 1


class RowDecoder(Generic[T]):
    """Decodes the bodies of one view's rows: a body that does not decode is the
    :class:`~engine.errors.CorruptData` naming the view and the rebuild that repairs it."""

    def __init__(self, view: str, row: type[T]) -> None:
        self.view = view
        self._decode = msgspec.msgpack.Decoder(row).decode

    def __call__(self, body: bytes, key: str | None = None) -> T:
        try:
            return self._decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            where = "a row" if key is None else f"row {key!r}"
            raise damaged_view(self.view, f"{where} does not decode ({e})") from None


class Projection(ABC, Generic[R]):
    """A view: ``name`` (its table is ``agentlog_view_<name>``), ``version`` (a new one
    rebuilds the table), the ``row`` type and the ``columns`` readers filter by (each a
    field of the row). Subclasses implement ``keys`` and ``apply`` as pure functions."""

    name: ClassVar[str]
    version: ClassVar[str]
    row: ClassVar[type[msgspec.Struct]]
    columns: ClassVar[tuple[Column, ...]] = ()

    @classmethod
    def table(cls) -> ViewTable:
        return ViewTable(cls.name, cls.columns)

    @classmethod
    def values(cls, row: R) -> tuple[ColumnValue, ...]:
        return tuple(getattr(row, c.name) for c in cls.columns)

    @abstractmethod
    def keys(self, env: Envelope) -> Sequence[str]:
        """The keys of the rows ``env`` changes (empty: none)."""

    @abstractmethod
    def apply(self, rows: Mapping[str, R | None], env: Envelope) -> Mapping[str, R | None]:
        """The changed rows (None: delete the row), given the rows ``keys`` named (None:
        no such row yet)."""


def moved_status(event: Event) -> RunStatus | None:
    """The status ``event`` moves a run to (None: it leaves the status as it is), by the
    engine's one transition table."""
    return STATUS_AFTER.get(type(event))
