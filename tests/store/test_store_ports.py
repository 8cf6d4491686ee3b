"""Contract tests of the store's ports, run against each backend's own implementation.

One abstract case per port (:class:`LeaseStore`, :class:`RunRecorder` with its
:class:`RunIndex`, :class:`ViewStore`), subclassed per backend in a few lines. The ports
are exercised directly, below the :class:`Store` facade (whose own contract is
test_store_contract.py).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
from conftest import backends
from eventsourcing.persistence import IntegrityError, StoredEvent

from engine.store import LeaseStore, RunIndex, RunRecorder, RunRow, Store, open_store
from engine.store.memory import MemoryAggregateRecorder
from engine.store.ports import Applied, Column, ViewBatch, ViewQuery, ViewRow, ViewStore, ViewTable

T0 = 1_700_000_000.0


class _Backend:
    """Opens one fresh store of a backend per test; subclasses name the backend."""

    @pytest.fixture
    def opened(self, store_url: str) -> Iterator[Store]:
        s = open_store(store_url)
        yield s
        s.close()


class LeaseStoreContract(_Backend):
    """What every backend's lease store does."""

    @pytest.fixture
    def leases(self, opened: Store) -> LeaseStore:
        port = opened._leases
        assert isinstance(port, LeaseStore) and not isinstance(port, Store)
        return port

    def test_a_free_run_is_taken_and_its_lease_reads_back(self, leases: LeaseStore) -> None:
        assert leases.lease("r") is None
        assert leases.take_lease("r", "a", T0 + 30, T0) == "a"
        assert leases.lease("r") == ("a", T0 + 30)

    def test_an_unexpired_lease_of_another_owner_is_kept(self, leases: LeaseStore) -> None:
        leases.take_lease("r", "a", T0 + 30, T0)
        assert leases.take_lease("r", "b", T0 + 40, T0 + 10) == "a"
        assert leases.lease("r") == ("a", T0 + 30)

    def test_an_expired_or_dead_holder_is_taken_over(self, leases: LeaseStore) -> None:
        leases.take_lease("r", "a", T0 + 30, T0)
        assert leases.take_lease("r", "b", T0 + 70, T0 + 31) == "b"
        assert leases.take_lease("r", "c", T0 + 80, T0 + 32, dead="b") == "c"
        assert leases.lease("r") == ("c", T0 + 80)

    def test_the_holder_renews_its_own_lease(self, leases: LeaseStore) -> None:
        leases.take_lease("r", "a", T0 + 30, T0)
        assert leases.take_lease("r", "a", T0 + 60, T0 + 20) == "a"
        assert leases.lease("r") == ("a", T0 + 60)

    def test_only_the_holder_drops_a_lease(self, leases: LeaseStore) -> None:
        leases.take_lease("r", "a", T0 + 30, T0)
        leases.drop_lease("r", "b")
        assert leases.lease("r") == ("a", T0 + 30)
        leases.drop_lease("r", "a")
        assert leases.lease("r") is None
        leases.drop_lease("r", "a")  # dropping a lease nobody holds is harmless

    def test_leases_of_runs_are_independent(self, leases: LeaseStore) -> None:
        leases.take_lease("r1", "a", T0 + 30, T0)
        assert leases.take_lease("r2", "b", T0 + 30, T0) == "b"
        assert leases.lease("r1") == ("a", T0 + 30)


class RunRecorderContract(_Backend):
    """What every backend's events recorder does with the run index it keeps."""

    @pytest.fixture
    def recorder(self, opened: Store) -> RunRecorder:
        port = opened._events
        assert isinstance(port, RunRecorder) and isinstance(port, RunIndex)
        return port

    @staticmethod
    def row(run_id: str, position: int, status: str = "running") -> RunRow:
        return RunRow(run_id, "agent", status, T0, T0 + position, position=position)

    @staticmethod
    def event(stream: uuid.UUID, position: int) -> StoredEvent:
        return StoredEvent(stream, position, "t:1", b"x")

    def test_run_rows_commit_with_the_events(self, recorder: RunRecorder) -> None:
        stream = uuid.uuid4()
        ids = recorder.insert_events([self.event(stream, 1)], runs=[self.row("r", 1)])
        assert ids is not None and len(ids) == 1
        assert recorder.indexed_position("r") == 1
        recorder.insert_events([self.event(stream, 2)], runs=[self.row("r", 2, "completed")])
        assert recorder.runs() == [self.row("r", 2, "completed")]
        assert recorder.runs("running") == []
        assert recorder.run_ids("r") == ["r"]

    def test_a_conflicting_insert_writes_neither_events_nor_rows(
        self, recorder: RunRecorder
    ) -> None:
        stream, other = uuid.uuid4(), uuid.uuid4()
        recorder.insert_events([self.event(stream, 1)], runs=[self.row("r", 1)])
        with pytest.raises(IntegrityError):
            recorder.insert_events(
                [self.event(other, 1), self.event(stream, 1)],
                runs=[self.row("r", 9), self.row("s", 1)],
            )
        assert recorder.select_events(other) == []
        assert recorder.indexed_position("r") == 1
        assert recorder.indexed_position("s") is None

    def test_rows_alone_commit_without_events(self, recorder: RunRecorder) -> None:
        recorder.insert_events([], runs=[self.row("r", 0, "paused")])
        assert recorder.runs("paused") == [self.row("r", 0, "paused")]
        assert recorder.max_notification_id() in (None, 0)


class ViewStoreContract(_Backend):
    """What every backend's view store does: tables reset empty, rows and the tracking row
    commit together only from the expected position, queries filter, order and page."""

    TABLE = ViewTable("contract", (Column("agent"), Column("n", "int"), Column("t", "real")))

    @pytest.fixture
    def views(self, opened: Store) -> ViewStore:
        port = opened.views.port
        assert isinstance(port, ViewStore) and not isinstance(port, Store)
        port.reset_view(self.TABLE, "v1")
        return port

    @staticmethod
    def row(key: str, agent: str | None, n: int, t: float) -> ViewRow:
        return ViewRow(key, (agent, n, t), f"body {key}".encode())

    def batch(
        self, expected: int, position: int, *rows: ViewRow, deletes: tuple[str, ...] = ()
    ) -> ViewBatch:
        return ViewBatch(self.TABLE, expected, position, rows, deletes)

    def test_a_reset_view_is_empty_and_tracked_at_zero(self, views: ViewStore) -> None:
        tracked = views.tracking("contract")
        assert tracked is not None and (tracked.position, tracked.version) == (0, "v1")
        assert views.view_rows(self.TABLE, ["a"]) == {}
        assert views.tracking("never-built") is None

    def test_rows_and_position_commit_only_from_the_expected_position(
        self, views: ViewStore
    ) -> None:
        assert views.commit_views([self.batch(0, 5, self.row("a", "x", 1, 1.5))]) == [True]
        stale = self.batch(0, 9, self.row("a", "y", 2, 2.5), self.row("b", "y", 2, 2.5))
        assert views.commit_views([stale]) == [False]  # another runner moved it first
        assert views.view_rows(self.TABLE, ["a", "b"]) == {"a": b"body a"}
        tracked = views.tracking("contract")
        assert tracked is not None and tracked.position == 5

    def test_the_tracking_row_keeps_the_last_applied_event(self, views: ViewStore) -> None:
        last = Applied(uuid.uuid4().hex, 7)
        batch = ViewBatch(self.TABLE, 0, 5, [self.row("a", "x", 1, 1.0)], last=last)
        assert views.commit_views([batch]) == [True]
        tracked = views.tracking("contract")
        assert tracked is not None and (tracked.position, tracked.last) == (5, last)

    def test_upserts_replace_and_deletes_remove(self, views: ViewStore) -> None:
        views.commit_views(
            [self.batch(0, 1, self.row("a", "x", 1, 1.0), self.row("b", "x", 2, 2.0))]
        )
        changed = ViewRow("a", ("x", 3, 3.0), b"new a")
        assert views.commit_views([self.batch(1, 2, changed, deletes=("b",))]) == [True]
        assert views.view_rows(self.TABLE, ["a", "b"]) == {"a": b"new a"}

    def test_a_query_filters_orders_and_pages(self, views: ViewStore) -> None:
        rows = [
            self.row(k, agent, n, float(n))
            for k, agent, n in [
                ("a", "x", 1),
                ("b", "y", 2),
                ("c", "x", 3),
                ("d", None, 4),
                ("e", "x", 5),
            ]
        ]
        views.commit_views([self.batch(0, 1, *rows)])

        def keys(q: ViewQuery) -> list[str]:
            return [k for k, _ in views.query_view(self.TABLE, q)]

        assert keys(ViewQuery(equal={"agent": "x"}, order_by="n")) == ["e", "c", "a"]
        assert keys(ViewQuery(equal={"agent": None}, order_by="n")) == ["d"]
        assert keys(
            ViewQuery(at_least={"t": 2.0}, below={"t": 5.0}, order_by="n", descending=False)
        ) == ["b", "c", "d"]
        assert keys(ViewQuery(order_by="n", limit=2, offset=1)) == ["d", "c"]

    def test_a_reset_keeps_a_current_view_only_when_asked(self, views: ViewStore) -> None:
        views.commit_views([self.batch(0, 3, self.row("a", "x", 1, 1.0))])
        views.reset_view(self.TABLE, "v1", keep_current=True)
        assert views.view_rows(self.TABLE, ["a"]) == {"a": b"body a"}
        views.reset_view(self.TABLE, "v2", keep_current=True)  # another version: rebuilt
        assert views.view_rows(self.TABLE, ["a"]) == {}
        tracked = views.tracking("contract")
        assert tracked is not None and (tracked.position, tracked.version) == (0, "v2")


@backends("memory")
class TestMemoryLeases(LeaseStoreContract):
    """The memory lease store keeps the lease contract."""


@backends("sqlite")
class TestSQLiteLeases(LeaseStoreContract):
    """The SQLite lease store keeps the lease contract."""


@backends("postgres")
class TestPostgresLeases(LeaseStoreContract):
    """The PostgreSQL lease store keeps the lease contract."""


@backends("memory")
class TestMemoryRunRecorder(RunRecorderContract):
    """The memory events recorder keeps its run index atomic with the events."""


@backends("sqlite")
class TestSQLiteRunRecorder(RunRecorderContract):
    """The SQLite events recorder keeps its run index atomic with the events."""


@backends("postgres")
class TestPostgresRunRecorder(RunRecorderContract):
    """The PostgreSQL events recorder keeps its run index atomic with the events."""


@backends("memory")
class TestMemoryViews(ViewStoreContract):
    """The memory view store keeps the view contract."""


@backends("sqlite")
class TestSQLiteViews(ViewStoreContract):
    """The SQLite view store keeps the view contract."""


@backends("postgres")
class TestPostgresViews(ViewStoreContract):
    """The PostgreSQL view store keeps the view contract."""


def test_memory_reads_match_a_plain_filter_whatever_the_insert_order() -> None:
    """The memory recorder's bisected select_events returns exactly the rows a plain
    filter over the sorted positions would, for random gt/lte/desc/limit."""
    rng = random.Random(11)
    recorder = MemoryAggregateRecorder()
    stream = uuid.uuid4()
    positions = list(range(1, 60))
    rng.shuffle(positions)
    for i in range(0, len(positions), 7):
        recorder.insert_events(
            [StoredEvent(stream, p, "t", b"%d" % p) for p in positions[i : i + 7]]
        )
    for _ in range(500):
        gt, lte = rng.choice([None, rng.randint(0, 62)]), rng.choice([None, rng.randint(0, 62)])
        desc, limit = rng.random() < 0.5, rng.choice([None, rng.randint(1, 10)])
        want = [p for p in range(1, 60) if (gt is None or p > gt) and (lte is None or p <= lte)]
        want = (want[::-1] if desc else want)[:limit]
        got = recorder.select_events(stream, gt=gt, lte=lte, desc=desc, limit=limit)
        assert [(r.originator_version, r.state) for r in got] == [(p, b"%d" % p) for p in want]
