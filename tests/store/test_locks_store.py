"""Contract tests of the :class:`LockStore` port (memory, SQLite, PostgreSQL) and of the
store's ``locks`` facade that checks names and ttls: fences strictly increase per name
across releases and expiries, only the holder with its fence renews or releases, and
concurrent acquirers never both win."""

from __future__ import annotations

import math
import sqlite3
import threading

import pytest
from conftest import all_backends, backends
from test_store_ports import _Backend

from engine.errors import UsageError
from engine.store import Store, open_store
from engine.store.ports import LockRow, LockStore

T0 = 1_700_000_000.0


class LockStoreContract(_Backend):
    """What every backend's lock store does."""

    @pytest.fixture
    def locks(self, opened: Store) -> LockStore:
        port = opened.locks._port
        assert isinstance(port, LockStore)
        return port

    def test_a_free_name_is_taken_with_fence_one(self, locks: LockStore) -> None:
        assert locks.held(T0) == []
        assert locks.acquire("a", "r1", T0 + 30, T0) == 1
        assert locks.held(T0) == [LockRow("a", "r1", 1, T0 + 30)]

    def test_a_held_lock_is_refused_to_another_until_it_expires(self, locks: LockStore) -> None:
        locks.acquire("a", "r1", T0 + 30, T0)
        assert locks.acquire("a", "r2", T0 + 40, T0 + 10) is None
        assert locks.held(T0 + 10) == [LockRow("a", "r1", 1, T0 + 30)]
        assert locks.acquire("a", "r2", T0 + 70, T0 + 31) == 2  # expired: taken over
        assert locks.held(T0 + 31) == [LockRow("a", "r2", 2, T0 + 70)]
        assert locks.held(T0 + 71) == []  # expired locks are not listed as held

    def test_fences_increase_strictly_across_releases(self, locks: LockStore) -> None:
        seen = []
        for i in range(5):
            holder = f"r{i % 2}"
            fence = locks.acquire("a", holder, T0 + 30, T0)
            assert fence is not None
            seen.append(fence)
            assert locks.release("a", holder, fence)
        assert seen == [1, 2, 3, 4, 5]
        assert locks.acquire("a", "r0", T0 + 30, T0) == 6  # the holder's own again: new fence
        assert locks.acquire("a", "r0", T0 + 30, T0) == 7

    def test_names_have_their_own_fences(self, locks: LockStore) -> None:
        assert locks.acquire("a", "r1", T0 + 30, T0) == 1
        assert locks.acquire("b", "r1", T0 + 30, T0) == 1
        assert locks.acquire("b", "r2", T0 + 30, T0) is None

    def test_only_the_holder_with_its_fence_renews_or_releases(self, locks: LockStore) -> None:
        locks.acquire("a", "r1", T0 + 30, T0)
        assert not locks.renew("a", "r2", 1, T0 + 60)
        assert not locks.renew("a", "r1", 2, T0 + 60)
        assert locks.renew("a", "r1", 1, T0 + 60)
        assert not locks.release("a", "r2", 1)
        assert not locks.release("a", "r1", 9)
        assert locks.held(T0) == [LockRow("a", "r1", 1, T0 + 60)]
        assert locks.release("a", "r1", 1)
        assert not locks.release("a", "r1", 1)  # twice: nothing more
        assert not locks.renew("a", "r1", 1, T0 + 90)  # a released hold is not renewed
        assert locks.held(T0) == []

    def test_a_hold_taken_over_after_expiry_is_not_renewed(self, locks: LockStore) -> None:
        locks.acquire("a", "r1", T0 + 30, T0)
        assert locks.acquire("a", "r2", T0 + 90, T0 + 40) == 2
        assert not locks.renew("a", "r1", 1, T0 + 100)
        assert not locks.release("a", "r1", 1)
        assert locks.held(T0 + 40) == [LockRow("a", "r2", 2, T0 + 90)]

    def test_keep_fence_retakes_only_if_nobody_took_it_since(self, locks: LockStore) -> None:
        locks.acquire("a", "r1", T0 + 30, T0)
        # Still held by r1 (a crashed execution of it), expired or not: kept.
        assert locks.acquire("a", "r1", T0 + 50, T0 + 20, keep_fence=1) == 1
        assert locks.acquire("a", "r1", T0 + 99, T0 + 60, keep_fence=1) == 1
        locks.release("a", "r1", 1)
        assert locks.acquire("a", "r1", T0 + 99, T0 + 60, keep_fence=1) == 1  # free, same fence
        assert locks.acquire("a", "r2", T0 + 200, T0 + 100) == 2  # expired: r2 takes it
        assert locks.acquire("a", "r1", T0 + 200, T0 + 100, keep_fence=1) is None
        assert locks.release("a", "r2", 2)
        assert locks.acquire("a", "r1", T0 + 200, T0 + 100, keep_fence=1) is None  # stale
        assert locks.acquire("a", "r1", T0 + 200, T0 + 100, keep_fence=5) is None
        assert locks.acquire("never", "r1", T0 + 200, T0 + 100, keep_fence=1) is None
        assert locks.held(T0 + 100) == []

    def test_keep_fence_never_gives_another_holders_fence(self, locks: LockStore) -> None:
        """A fence stays one holder's: another run keeping it (a fork that inherited the
        record) is refused while the lock is held, and after that hold expired."""
        locks.acquire("a", "r1", T0 + 30, T0)
        assert locks.acquire("a", "r2", T0 + 30, T0, keep_fence=1) is None
        assert locks.acquire("a", "r2", T0 + 99, T0 + 50, keep_fence=1) is None
        assert locks.held(T0) == [LockRow("a", "r1", 1, T0 + 30)]

    def test_release_all_frees_the_holders_locks_only(self, locks: LockStore) -> None:
        locks.acquire("b", "r1", T0 + 30, T0)
        locks.acquire("a", "r1", T0 + 30, T0)
        locks.acquire("c", "r2", T0 + 30, T0)
        assert locks.release_all("r1") == ["a", "b"]
        assert locks.release_all("r1") == []
        assert locks.held(T0) == [LockRow("c", "r2", 1, T0 + 30)]
        assert locks.acquire("a", "r3", T0 + 30, T0) == 2  # the fence goes on after release

    def test_concurrent_acquirers_get_distinct_fences_and_one_wins(
        self, opened: Store, locks: LockStore
    ) -> None:
        """Eight threads race for one free name, many rounds: exactly one wins a round,
        and no fence is ever handed out twice."""
        won: list[tuple[int, str]] = []
        guard = threading.Lock()
        for rnd in range(5):
            barrier = threading.Barrier(8)

            def take(i: int, rnd: int = rnd, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                fence = locks.acquire("hot", f"r{i}", T0 + 30, T0)
                if fence is not None:
                    with guard:
                        won.append((fence, f"r{i}"))

            threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(won) == rnd + 1
            fence, holder = won[-1]
            assert locks.release("hot", holder, fence)
        assert [f for f, _ in won] == [1, 2, 3, 4, 5]


@backends("memory")
class TestMemoryLocks(LockStoreContract):
    """The memory lock store keeps the lock contract."""


@backends("sqlite")
class TestSQLiteLocks(LockStoreContract):
    """The SQLite lock store keeps the lock contract."""


@backends("postgres")
class TestPostgresLocks(LockStoreContract):
    """The PostgreSQL lock store keeps the lock contract."""


@all_backends
@pytest.mark.parametrize(
    "name",
    ["", "x" * 201, "a\nb", "a\x00", "tab\there", "bidi\u202e", "\ud800", 42, None],
)
def test_a_bad_lock_name_is_one_usage_error(store: Store, name: object) -> None:
    with pytest.raises(UsageError, match="lock name"):
        store.locks.acquire(name, "r1", 30)  # type: ignore[arg-type]
    assert store.locks.held() == []


@all_backends
@pytest.mark.parametrize("ttl", [0, -1, math.inf, math.nan, 86400.5, "30", True, None])
def test_a_bad_ttl_is_one_usage_error(store: Store, ttl: object) -> None:
    with pytest.raises(UsageError, match="ttl"):
        store.locks.acquire("a", "r1", ttl)  # type: ignore[arg-type]
    assert store.locks.held() == []


@all_backends
def test_any_printable_name_round_trips(store: Store) -> None:
    """Names with spaces, quotes, SQL and non-ASCII letters, 200 characters long, are held
    and listed as they were given."""
    names = ["customer:42", "it's; DROP TABLE x --", "ñandú 名前", "y" * 200, "%_*?[]"]
    for n in names:
        assert store.locks.acquire(n, "r1", 30) == 1
    assert [r.name for r in store.locks.held()] == sorted(names)


def test_an_existing_sqlite_store_gains_the_locks_table(tmp_path: object) -> None:
    """A store made before locks existed (no agentlog_locks table) is upgraded on open."""
    path = f"{tmp_path}/old.db"
    s = open_store(f"sqlite:///{path}")
    s.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE agentlog_locks")
    s = open_store(f"sqlite:///{path}")
    try:
        assert s.locks.acquire("a", "r1", 30) == 1
    finally:
        s.close()
