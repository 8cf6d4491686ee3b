"""Test views and their oracle for the projection runner's tests, and the processes those
tests start (``python tests/projection_kit.py write|project URL ...``).

``Count`` is a pure fold that counts events per stream and in all (one row every event
touches, so a batch always writes it); ``expected`` counts the same from one read of the
whole log, without the fold: the two agree only if every event was applied exactly once.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from engine import events as ev
from engine.errors import ConcurrencyError
from engine.store import Append, Store, open_store
from engine.store.ports import Column, ViewQuery
from projections import Envelope, Projection, Runner

ALL = "all"


class Tally(msgspec.Struct, frozen=True):
    key: str
    events: int = 0
    positions: int = 0  # sum of the events' stream positions
    globals: int = 0  # sum of the events' global positions
    last: int = 0  # the last global position applied
    disorder: int = 0  # events that arrived at or below ``last``
    copied: int = 0
    run_id: str | None = None
    agent: str | None = None


class Count(Projection[Tally]):
    """Events per stream (key: the stream's hex) and in all (key ``all``)."""

    name = "t_count"
    version = "1"
    row = Tally
    columns = (Column("events", "int"), Column("run_id"))

    def keys(self, env: Envelope) -> Sequence[str]:
        return (env.stream.hex, ALL)

    def apply(self, rows: Mapping[str, Tally | None], env: Envelope) -> Mapping[str, Tally]:
        return {k: self._add(rows[k] or Tally(k), env) for k in self.keys(env)}

    @staticmethod
    def _add(t: Tally, env: Envelope) -> Tally:
        run = env.run if t.key != ALL else None
        return Tally(
            t.key,
            t.events + 1,
            t.positions + env.position,
            t.globals + env.global_position,
            max(t.last, env.global_position),
            t.disorder + (env.global_position <= t.last),
            t.copied + env.copied,
            run.run_id if run else t.run_id,
            run.agent if run else t.agent,
        )


class Steps(Projection[Tally]):
    """Step events per step name (rows deleted at ten): another shape of fold."""

    name = "t_steps"
    version = "1"
    row = Tally

    def keys(self, env: Envelope) -> Sequence[str]:
        return (env.event.name,) if isinstance(env.event, ev.StepStarted) else ()

    def apply(self, rows: Mapping[str, Tally | None], env: Envelope) -> Mapping[str, Tally | None]:
        assert isinstance(env.event, ev.StepStarted)
        old = rows[env.event.name] or Tally(env.event.name)
        if old.events == 9:
            return {old.key: None}
        return {old.key: Tally(old.key, old.events + 1, old.positions + env.position)}


def test_views() -> list[Projection[Any]]:
    return [Count(), Steps()]


test_views.__test__ = False  # type: ignore[attr-defined]  # not a test: a list for them


def rows(store: Store, view: Projection[Any]) -> list[Any]:
    """The view's rows as stored, in key order."""
    decoder = msgspec.msgpack.Decoder(view.row)
    return [decoder.decode(b) for b in store.views.query(view.table(), ViewQuery())]


def tallies(store: Store, view: Projection[Tally] | None = None) -> dict[str, Tally]:
    """The rows of a test view (Count by default), by key."""
    return {t.key: t for t in rows(store, view or Count())}


def expected(store: Store) -> dict[str, tuple[int, int, int]]:
    """(events, sum of positions, sum of global positions) per stream and in all, from one
    read of the whole log."""
    out: dict[str, tuple[int, int, int]] = {}
    for r in store.read_all(after=0, limit=10**9):
        assert r.global_position is not None
        for key in (r.stream.hex, ALL):
            n, p, g = out.get(key, (0, 0, 0))
            out[key] = (n + 1, p + r.position, g + r.global_position)
    return out


def counted(store: Store) -> dict[str, tuple[int, int, int]]:
    """What the Count view holds, in the shape of :func:`expected` (disorder must be 0)."""
    found = tallies(store)
    assert all(t.disorder == 0 for t in found.values())
    return {k: (t.events, t.positions, t.globals) for k, t in found.items()}


def step(i: int) -> ev.StepStarted:
    return ev.StepStarted(at=1_760_000_000.0 + i, call=i, name=f"s{i % 13}")


def append_steps(store: Store, streams: Sequence[uuid.UUID], per_stream: int) -> None:
    """``per_stream`` more events on each of ``streams``, a few streams per commit."""
    for i in range(per_stream):
        for j in range(0, len(streams), 3):
            batch = []
            for s in streams[j : j + 3]:
                batch.append(Append(s, store.last_position(s) + 1, step(i)))
            store.append(batch)


def write(url: str, seed: int, commits: int, per: int = 1) -> None:
    """One writer process: ``commits`` commits of ``per`` events on streams of its own;
    every fifth also tries a position already taken (the whole transaction rolls back, a
    gap in the global positions on PostgreSQL)."""
    store = open_store(url)
    streams = [uuid.uuid5(uuid.NAMESPACE_OID, f"w{seed}.{k}") for k in range(3)]
    for i in range(1, commits + 1):
        a, b = streams[i % 3], streams[(i + 1) % 3]
        last = store.last_position(a)
        batch = [Append(a, last + k, step(i)) for k in range(1, per + 1)]
        if i % 5 == 0:
            taken = store.last_position(b)
            try:  # b's first event goes in only if it is new; a taken one fails the lot
                store.append([*batch, Append(b, max(taken, 1), step(i))])
                continue
            except ConcurrencyError:
                pass
        store.append(batch)
    store.close()


def project(url: str, batch: int) -> None:
    """One projection process: catch the Count view up in batches of ``batch``."""
    store = open_store(url)
    Runner(store, [Count()], batch=batch).catch_up()
    store.close()


if __name__ == "__main__":
    what, url, *rest = sys.argv[1:]
    if what == "write":
        write(url, *map(int, rest))
    else:
        project(url, int(rest[0]))
