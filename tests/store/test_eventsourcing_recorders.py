"""eventsourcing's own recorder test cases, run against the recorders our stores configure.

Each class builds its recorder exactly as ``open_store`` does (same classes, table names,
SQLite pool with our pragmas, PostgreSQL schema) and inherits the upstream tests unchanged.
PostgreSQL classes get a schema of their own, emptied before each test and dropped after.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from typing import Any, ClassVar

import eventsourcing.tests.persistence as upstream
import pytest
from conftest import PG_URL, drop_schema
from eventsourcing.postgres import PostgresAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder

from engine.store import Store, open_store
from engine.store.memory import MemoryAggregateRecorder, MemoryEventRecorder
from engine.store.postgres import PostgresEventRecorder
from engine.store.sqlite import SQLiteEventRecorder
from engine.store.sqlite_pool import Pool


class _StoreBacked:
    """Opens one fresh store per test and hands out one of its recorders."""

    url: ClassVar[str]
    part: ClassVar[str]  # "_events", "_snapshots" or "_blobs"
    expected: ClassVar[type]
    stores: list[Store]

    def setUp(self) -> None:
        self.stores = []
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        super().tearDown()  # type: ignore[misc]
        # Upstream's concurrency tests stop their reader threads without joining them;
        # closing the store under a reader that is mid-query crashes sqlite3 (segfault).
        for t in threading.enumerate():
            if "read_continuously" in t.name:
                t.join(timeout=10)
        for s in self.stores:
            s.close()

    def fresh_url(self) -> str:
        return self.url

    def create_recorder(self) -> Any:
        store = open_store(self.fresh_url())
        self.stores.append(store)
        recorder = getattr(store, self.part)
        assert type(recorder) is self.expected, type(recorder)
        return recorder


class _Memory(_StoreBacked):
    url = "memory://"


class _SQLite(_StoreBacked):
    tmp: ClassVar[str]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.tmp = tempfile.mkdtemp(prefix="agentlog-es-")

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()  # type: ignore[misc]

    def fresh_url(self) -> str:
        return f"sqlite:///{self.tmp}/{uuid.uuid4().hex}.db"

    def create_recorder(self) -> Any:
        recorder = super().create_recorder()
        assert type(recorder.datastore.pool) is Pool
        return recorder


class _Postgres(_StoreBacked):
    pytestmark = [pytest.mark.postgres]  # inherited by every PostgreSQL case below
    schema: ClassVar[str]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.schema = f"es_{cls.__name__.lower()[:30]}_{uuid.uuid4().hex[:8]}"

    @classmethod
    def tearDownClass(cls) -> None:
        drop_schema(cls.schema)
        super().tearDownClass()  # type: ignore[misc]

    def setUp(self) -> None:
        drop_schema(self.schema)  # every test starts on empty tables and sequences
        super().setUp()

    def fresh_url(self) -> str:
        sep = "&" if "?" in PG_URL else "?"
        return f"{PG_URL}{sep}schema={self.schema}"


# --- memory ---------------------------------------------------------------------------


class TestMemoryEventRecorder(_Memory, upstream.ApplicationRecorderTestCase):
    """Upstream's application-recorder tests pass on the memory events recorder."""

    part, expected = "_events", MemoryEventRecorder

    def test_insert_subscribe(self) -> None:
        """Upstream's optional subscription test passes on the memory events recorder."""
        self.optional_test_insert_subscribe()


class TestMemorySnapshotRecorder(_Memory, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on the memory snapshots recorder."""

    part, expected = "_snapshots", MemoryAggregateRecorder


class TestMemoryBlobRecorder(_Memory, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on the memory blobs recorder."""

    part, expected = "_blobs", MemoryAggregateRecorder


class TestMemoryNonInterleaving(_Memory, upstream.NonInterleavingNotificationIDsBaseCase):
    """Two concurrent memory inserts never interleave their notification ids."""

    part, expected = "_events", MemoryEventRecorder


# --- SQLite ---------------------------------------------------------------------------


class TestSQLiteEventRecorder(_SQLite, upstream.ApplicationRecorderTestCase):
    """Upstream's application-recorder tests pass on our SQLite events recorder."""

    part, expected = "_events", SQLiteEventRecorder


class TestSQLiteSnapshotRecorder(_SQLite, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on our SQLite snapshots recorder."""

    part, expected = "_snapshots", SQLiteAggregateRecorder


class TestSQLiteBlobRecorder(_SQLite, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on our SQLite blobs recorder."""

    part, expected = "_blobs", SQLiteAggregateRecorder


class TestSQLiteNonInterleaving(_SQLite, upstream.NonInterleavingNotificationIDsBaseCase):
    """Two concurrent SQLite inserts never interleave their notification ids."""

    part, expected = "_events", SQLiteEventRecorder


# --- PostgreSQL -----------------------------------------------------------------------


class TestPostgresEventRecorder(_Postgres, upstream.ApplicationRecorderTestCase):
    """Upstream's application-recorder tests pass on our PostgreSQL events recorder."""

    part, expected = "_events", PostgresEventRecorder

    def test_insert_subscribe(self) -> None:
        """Upstream's optional LISTEN/NOTIFY subscription test passes on our events recorder."""
        self.optional_test_insert_subscribe()


class TestPostgresSnapshotRecorder(_Postgres, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on our PostgreSQL snapshots recorder."""

    part, expected = "_snapshots", PostgresAggregateRecorder


class TestPostgresBlobRecorder(_Postgres, upstream.AggregateRecorderTestCase):
    """Upstream's aggregate-recorder tests pass on our PostgreSQL blobs recorder."""

    part, expected = "_blobs", PostgresAggregateRecorder


class TestPostgresInterleaving(_Postgres, upstream.NonInterleavingNotificationIDsBaseCase):
    """The named deviation from upstream: PostgreSQL appends run in parallel (no table
    lock), so two concurrent inserts may interleave their notification ids. What holds
    instead: each insert's ids increase with its positions, and a reader after both sees
    all of them, once."""

    part, expected = "_events", PostgresEventRecorder

    def test(self) -> None:
        recorder = self.create_recorder()
        start = recorder.max_notification_id() or 0
        stacks = [self.create_stack(self.new_originator_id()) for _ in range(2)]
        go = threading.Barrier(2)

        def insert(stack: list[Any]) -> None:
            go.wait()
            recorder.insert_events(stack)

        threads = [threading.Thread(target=insert, args=(s,)) for s in stacks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        found = recorder.select_notifications(start, 3 * self.insert_num, inclusive_of_start=False)
        assert len({n.id for n in found}) == len(found) == 2 * self.insert_num
        for stack in stacks:
            mine = [n for n in found if n.originator_id == stack[0].originator_id]
            assert [n.originator_version for n in mine] == list(range(self.insert_num))
