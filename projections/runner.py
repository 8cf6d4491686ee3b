"""The projection runner: every view processes every event of the global log exactly
once, in order, in batches; each batch's row changes and the view's new position commit
together (and only if no other runner moved the view meanwhile). It catches up from any
position, follows the log live, and rebuilds a view from scratch."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from engine import failpoints, observe
from engine.errors import ConcurrencyError, CorruptData
from engine.store import Recorded, Store
from engine.store.ports import Applied, Tracking, ViewBatch, ViewRow
from engine.store.views import damaged_view

from .directory import RunDirectory
from .fold import Envelope, Projection, RowDecoder

BATCH = 1000
Progress = Callable[[str, int, int], None]  # (view, position, head)


class ViewStatus(msgspec.Struct, frozen=True):
    """A view's place in the log: its position, the log's head and the lag between."""

    name: str
    position: int
    head: int
    lag: int
    version: str
    current: bool  # built by this code (False: the next catch-up rebuilds it)


def possible(tracked: Tracking, head: int) -> bool:
    """Whether a runner could have put the view where it is: not before the log's start,
    not beyond ``head`` (the log's head, read after the tracking row)."""
    return 0 <= tracked.position <= head


class Runner:
    """Runs ``views`` over ``store``'s log."""

    def __init__(self, store: Store, views: Sequence[Projection[Any]], batch: int = BATCH):
        self.store = store
        self.views = {v.name: v for v in views}
        self.batch = batch
        self.directory = RunDirectory(store)
        self._decoders = {v.name: RowDecoder(v.name, v.row) for v in views}
        self._encoder = msgspec.msgpack.Encoder()

    def version(self, view: Projection[Any]) -> str:
        """The code version a view's rows were built by (a change rebuilds it)."""
        return f"{view.version}/{'sealed' if self.store.encrypted else 'clear'}"

    # --- reading the views' places --------------------------------------------------

    def position(self, name: str) -> int:
        """Where the view is, after rebuilding it first if it is missing, outdated or
        at a position no runner could have put it (damage: it is rebuilt, with a
        warning)."""
        view = self.views[name]
        tracked = self.store.views.tracking(name)
        if tracked is None or tracked.version != self.version(view):
            # Another runner may have made it for this code meanwhile: keep that one.
            self.store.views.reset(view.table(), self.version(view), keep_current=True)
            tracked = self.store.views.tracking(name)
        elif not possible(tracked, self.store.max_global_position()):
            observe.get().warning(
                "view_damaged_rebuilt", view=name, position=tracked.position, reason="position"
            )
            self.store.views.reset(view.table(), self.version(view))
            tracked = self.store.views.tracking(name)
        else:
            self._check_applied(tracked)
        return tracked.position if tracked is not None else 0

    def _check_applied(self, tracked: Tracking) -> None:
        """Refuse a view whose tracking row does not name the event at its position (it
        was moved by hand: going on would apply events twice, or skip them). A row
        written before the event was kept has nothing to compare, and passes."""
        last, at = tracked.last, tracked.position
        if last is None:
            return
        found = self.store.read_all(after=at - 1, limit=1) if at > 0 else []
        there = [Applied(r.stream.hex, r.position) for r in found if r.global_position == at]
        if there != [last]:
            what = "another event is there" if there else "no event is there"
            raise damaged_view(
                tracked.view,
                f"its tracking row says it applied global position {at}, event "
                f"{last.position} of stream {last.stream}, but {what} (the row was moved)",
            )

    def status(self) -> list[ViewStatus]:
        tracked = {name: self.store.views.tracking(name) for name in self.views}
        head = self.store.max_global_position()  # after the positions: none is beyond it
        found = []
        for name, view in self.views.items():
            t = tracked[name]
            at = t.position if t else 0
            version = t.version if t else ""
            current = t is not None and version == self.version(view) and possible(t, head)
            found.append(ViewStatus(name, at, head, max(0, head - at), version, current))
        return found

    # --- catching up ------------------------------------------------------------------

    def catch_up(self, names: Sequence[str] | None = None, progress: Progress | None = None) -> int:
        """Process every event not yet in the named views (all by default) up to the
        log's head as it is now; the number of events read."""
        names = list(names or self.views)
        places = {n: self.position(n) for n in names}
        head = self.store.max_global_position()
        read = 0
        while places and min(places.values()) < head:
            records = self._read(min(places.values()), places)
            if not records:
                break
            self.directory.learn(records)
            places.update(self._apply(places, self._envelopes(records)))
            if progress is not None:
                for name, at in places.items():
                    progress(name, at, head)
            read += len(records)
        return read

    def rebuild(self, *names: str, progress: Progress | None = None) -> int:
        """Empty the named views (all if none is named) and fold the whole log into them
        again, in one pass over it."""
        chosen = list(names or self.views)
        head = self.store.max_global_position()
        for name in chosen:
            view = self.views[name]
            self.store.views.reset(view.table(), self.version(view))
            if progress is not None:
                progress(name, 0, head)
        return self.catch_up(chosen, progress)

    def follow(self, stop: threading.Event, poll: float = 1.0) -> None:
        """Catch up, then wait for new events (LISTEN/NOTIFY on PostgreSQL, polling on
        SQLite) and catch up again, until ``stop`` is set."""
        while not stop.is_set():
            self.catch_up()
            at = min(self.position(n) for n in self.views) if self.views else 0
            self.store.views.wait_for_events(at, poll)

    # --- one batch of the log, into every view ---------------------------------------

    def _read(self, after: int, names: Iterable[str]) -> list[Recorded]:
        """The next batch of the log; an event that does not decode stops every view
        before it, nothing of the batch applied, with one error naming views and place."""
        try:
            return self.store.read_all(after=after, limit=self.batch)
        except CorruptData as e:
            raise CorruptData(f"view {', '.join(names)} stops: {e}") from e

    def _envelopes(self, records: Sequence[Recorded]) -> list[Envelope]:
        facts = self.directory.runs.get  # every stream of the batch is met already
        return [
            Envelope(r.global_position or 0, r.stream, r.position, r.event, facts(r.stream))
            for r in records
        ]

    def _apply(self, places: dict[str, int], envelopes: Sequence[Envelope]) -> dict[str, int]:
        """Fold ``envelopes`` into each view from its place, and commit every view's rows
        and new position in one transaction; the views' places after (another runner's,
        for a view one moved meanwhile)."""
        tops = [e.global_position for e in envelopes]
        folded = []
        for name, at in places.items():
            fresh = envelopes[bisect.bisect_right(tops, at) :]
            if fresh:
                folded.append(self._fold(self.views[name], at, fresh))
        if not folded:
            return {}
        folded.sort(key=lambda b: b.table.name)  # every runner locks views in one order
        failpoints.hit("in_view_batch")  # a crash here loses only work not yet committed
        done = self.store.views.commit_many(folded)
        return {
            b.table.name: b.position if ok else self._moved(self.views[b.table.name])
            for b, ok in zip(folded, done, strict=True)
        }

    def _fold(self, view: Projection[Any], at: int, envelopes: Sequence[Envelope]) -> ViewBatch:
        """The view's changes from ``envelopes`` (it is at ``at``): pure, but for reading
        the rows they touch."""
        touched = [(env, view.keys(env)) for env in envelopes]
        rows = self._load(view, touched)
        changed: dict[str, Any] = {}
        for env, keys in touched:
            if keys:
                changes = view.apply({k: rows.get(k) for k in keys}, env)
                rows.update(changes)
                changed.update(changes)
        encode, values = self._encoder.encode, view.values
        upserts = [ViewRow(k, values(r), encode(r)) for k, r in changed.items() if r is not None]
        deletes = [k for k, r in changed.items() if r is None]
        end = envelopes[-1]
        last = Applied(end.stream.hex, end.position)
        return ViewBatch(view.table(), at, end.global_position, upserts, deletes, last)

    def _moved(self, view: Projection[Any]) -> int:
        """Another runner moved the view under this batch (which wrote nothing): go on
        from its place, unless it builds the view with other code."""
        tracked = self.store.views.tracking(view.name)
        if tracked is None or tracked.version != self.version(view):
            found = "nothing" if tracked is None else f"version {tracked.version}"
            raise ConcurrencyError(
                f"view {view.name}: another runner rebuilt it ({found}) while this one, "
                f"version {self.version(view)}, was building it; stop one of them"
            )
        return tracked.position

    def _load(
        self, view: Projection[Any], touched: Sequence[tuple[Envelope, Sequence[str]]]
    ) -> dict[str, Any]:
        keys = list(dict.fromkeys(k for _env, keys in touched for k in keys))
        found = self.store.views.rows(view.table(), keys) if keys else {}
        decode = self._decoders[view.name]
        return {k: decode(body, k) for k, body in found.items()}
