"""A store whose rows are partly in clear and partly encrypted, named as such.

A store written before the seal existed, or by a keyless writer of an older agentlog,
may hold both kinds of rows. A reader that meets a row of the kind its settings do not
expect counts the event rows of each kind (a scan, on that error path only): when both
are there it raises one :class:`~engine.errors.MixedRows` naming the counts, the runs
with rows in clear and the repair (:mod:`engine.store.reseal`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping

import msgspec

from ..errors import CipherError, MixedRows
from .cipher import CIPHER_ENV, SEALED
from .rawrows import RawRow, RawRows

BATCH = 500
REPAIR = f"`agentlog reseal` with {CIPHER_ENV} set encrypts the rows in clear and seals it"


class Census(msgspec.Struct, frozen=True):
    """How many event rows of a store are in clear and how many encrypted, and the runs
    with rows in clear (by id)."""

    clear: int
    sealed: int
    runs: tuple[str, ...] = ()


def rows_of(raw: RawRows, table: str) -> Iterator[RawRow]:
    """Every row of ``table``, read a batch at a time."""
    after = None
    while rows := raw.scan(table, after, BATCH):
        yield from rows
        after = (rows[-1].stream, rows[-1].position)


def census(raw: RawRows, runs: Mapping[uuid.UUID, str]) -> Census:
    """Count the event rows of each kind; ``runs`` maps run streams to run ids."""
    counts = [0, 0]
    clear: set[str] = set()
    for r in rows_of(raw, "events"):
        sealed = r.state[:2] == SEALED
        counts[sealed] += 1
        if not sealed and r.stream in runs:
            clear.add(runs[r.stream])
    return Census(counts[0], counts[1], tuple(sorted(clear)))


def mixed_or(
    name: str, raw: RawRows, runs: Mapping[uuid.UUID, str], error: CipherError
) -> CipherError:
    """``error`` (a row of the kind the store's settings do not expect), or
    :class:`MixedRows` when the store holds both kinds."""
    found = census(raw, runs)
    if not (found.clear and found.sealed):
        return error
    shown = ", ".join(found.runs[:5]) + (", ..." if len(found.runs) > 5 else "")
    which = f"; runs with rows in clear: {shown}" if shown else ""
    return MixedRows(
        f"{name}: this store holds both plaintext and encrypted rows ({found.clear} "
        f"events in clear, {found.sealed} encrypted{which}): {REPAIR}"
    )
