"""Group commit on SQLite (engine/store/sqlite_group.py), on real files with real threads: the
appends waiting at one moment commit in one transaction, each caller gets its own result or
error, a failed COMMIT fails the whole batch, and a SIGKILL leaves every append whole or absent."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError
from eventsourcing.sqlite import SQLiteDatastore

from engine import events as ev
from engine.errors import ConcurrencyError, LeaseTaken
from engine.polling import poll_until
from engine.store import Append, Fence, RunRow, Store, open_store, stream_id
from engine.store.sqlite_group import GroupCommit

T0 = 1_700_000_000.0


def _event(name: str, call: int = 1) -> ev.Checkpoint:
    return ev.Checkpoint(at=T0, call=call, name=name)


def _group(store: Store) -> GroupCommit:
    return store._events.group  # type: ignore[attr-defined, no-any-return]


@contextlib.contextmanager
def _write_locked(path: Path) -> Iterator[None]:
    """Hold the file's write lock from another connection, as another process would."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("COMMIT")
    finally:
        db.close()


def _gathered(group: GroupCommit, path: Path, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads while the write lock is held elsewhere, release it once all
    of them are queued in ``group`` (so they meet in one batch); each one's result or error."""
    out: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    with _write_locked(path):
        for t in threads:
            t.start()
        poll_until(lambda: group.waiting == len(calls) or not all(map(_alive, threads)), None)
        assert group.waiting == len(calls)
    for t in threads:
        t.join()
    return out


def _alive(t: threading.Thread) -> bool:  # a thread that ended early stops the wait
    return t.is_alive()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agentlog.db"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{path}")
    yield s
    s.close()


def test_threads_appending_to_their_own_streams_all_land_in_order(store: Store) -> None:
    """8 threads x 40 appends of two events each: every event is there, positions per stream
    1..40, global positions unique and increasing with each stream's positions."""
    threads, per = 8, 40

    def writer(t: int) -> None:
        a, b = stream_id(f"run-{t}"), stream_id(f"side-{t}")
        for i in range(1, per + 1):
            store.append([Append(a, i, _event(f"{t}.{i}", i)), Append(b, i, _event("s", i))])

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    everything = store.read_all(limit=10_000)
    assert len(everything) == threads * per * 2
    globals_ = [r.global_position for r in everything]
    assert globals_ == sorted(set(globals_))
    for t in range(threads):
        for name in (f"run-{t}", f"side-{t}"):
            mine = [r.position for r in everything if r.stream == stream_id(name)]
            assert mine == list(range(1, per + 1))
    assert [e.name for e in (r.event for r in store.read(stream_id("run-3")))][:2] == ["3.1", "3.2"]
    assert _group(store).appends == threads * per


def test_appends_waiting_together_commit_in_one_transaction(store: Store, path: Path) -> None:
    """Six appends queued while the write lock is busy commit in one batch: one COMMIT for all
    (without group commit each would be a transaction of its own)."""
    group = _group(store)
    before = group.commits
    calls = [
        (lambda i=i: store.append([Append(stream_id(f"g-{i}"), 1, _event(f"g{i}"))]))
        for i in range(6)
    ]
    results = _gathered(group, path, calls)
    assert all(isinstance(r, list) and len(r) == 1 for r in results), results
    assert group.commits - before == 1
    assert all(store.last_position(stream_id(f"g-{i}")) == 1 for i in range(6))


def test_a_conflict_and_a_fenced_out_append_fail_alone_in_their_batch(
    store: Store, path: Path
) -> None:
    """In one batch: an append whose second event's position is taken (ConcurrencyError),
    a fenced append of a run taken over (LeaseTaken), and a good one. Only the good one is
    written, nothing of the other two (not even the first event of the conflicting one)."""
    taken, fresh, good, fenced = (stream_id(n) for n in ("taken", "fresh", "good", "fenced"))
    store.append([Append(taken, 1, _event("first"))])
    _, old = store.take_lease_fenced("c", "a", T0 + 30, T0)
    store.take_lease_fenced("c", "b", T0 + 100, T0 + 40)  # taken over: epoch old + 1
    group = _group(store)
    before = group.commits
    row = RunRow("c", "agent", "running", T0, T0, None, 1)
    results = _gathered(
        group,
        path,
        [
            lambda: store.append([Append(fresh, 1, _event("x")), Append(taken, 1, _event("y"))]),
            lambda: store.append([Append(fenced, 1, _event("z"))], [row], Fence("c", old)),
            lambda: store.append([Append(good, 1, _event("ok"))]),
        ],
    )
    assert isinstance(results[0], ConcurrencyError)
    assert isinstance(results[1], LeaseTaken)
    assert isinstance(results[2], list)
    assert group.commits - before == 1
    assert store.last_position(good) == 1
    assert store.last_position(fresh) == 0 and store.last_position(fenced) == 0
    assert [r.event.name for r in store.read(taken)] == ["first"]  # type: ignore[attr-defined]
    assert store.indexed_position("c") is None


def _datastore(path: Path, lock_timeout: int = 30) -> SQLiteDatastore:
    ds = SQLiteDatastore(db_name=str(path), lock_timeout=lock_timeout)
    with ds.transaction(commit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY)")
        c.execute(
            "CREATE TABLE IF NOT EXISTS child (id INTEGER PRIMARY KEY, parent INTEGER "
            "REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
        )
    return ds


def _insert(sql: str, *params: Any) -> Callable[[sqlite3.Cursor], int]:
    def work(c: sqlite3.Cursor) -> int:
        c.execute(sql, params)
        return int(c.lastrowid or 0)

    return work


def _count(path: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_failed_commit_fails_every_append_of_its_batch(path: Path) -> None:
    """A deferred foreign key makes the COMMIT itself fail: all three appends of the batch
    get the same error, none of their rows is there, and the next append commits."""
    ds = _datastore(path)
    conn = ds.pool.get_connection(is_writer=True)  # the pool's one connection: keys checked
    conn.cursor().execute("PRAGMA foreign_keys=ON")
    ds.pool.put_connection(conn)
    group = GroupCommit(ds)
    works = [
        _insert("INSERT INTO parent VALUES (1)"),
        _insert("INSERT INTO child VALUES (1, 99)"),  # no parent 99: refused at COMMIT
        _insert("INSERT INTO parent VALUES (2)"),
    ]
    results = _gathered(group, path, [lambda w=w: group.run(w) for w in works])
    assert all(isinstance(r, OperationalError) for r in results), results
    assert len({str(r) for r in results}) == 1
    assert "group commit of 3 append(s) failed, none of them was written" in str(results[0])
    assert "FOREIGN KEY" in str(results[0])
    assert _count(path, "parent") == 0 and _count(path, "child") == 0
    assert group.commits == 0
    assert group.run(_insert("INSERT INTO parent VALUES (3)")) == 3
    assert _count(path, "parent") == 1
    ds.close()


def test_a_write_lock_held_past_the_busy_timeout_fails_the_waiting_appends(path: Path) -> None:
    """Another connection holds the write lock past the busy timeout (1 s here): every append
    waiting for it fails with the store's error and none is written; then appends work again."""
    ds = _datastore(path, lock_timeout=1)
    group = GroupCommit(ds)
    done: list[Exception | int] = []
    with _write_locked(path):
        threads = [
            threading.Thread(
                target=lambda i=i: done.append(_caught(group, f"INSERT INTO parent VALUES ({i})"))
            )
            for i in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(done) == 3 and all(isinstance(r, OperationalError) for r in done), done
    assert all("locked" in str(r) for r in done)
    assert _count(path, "parent") == 0
    assert group.run(_insert("INSERT INTO parent VALUES (7)")) == 7
    ds.close()


def _caught(group: GroupCommit, sql: str) -> Exception | int:
    try:
        return int(group.run(_insert(sql)))
    except Exception as e:
        return e


def test_a_follower_interrupted_while_waiting_leaves_the_queue_and_the_group_works(
    path: Path,
) -> None:
    """Ctrl-C reaches the main thread while its append waits behind a leader that waits for
    the write lock: the append leaves the queue unwritten, the leader's commits, and the
    group serves the next append (no queue left without a leader)."""
    ds = _datastore(path)
    group = GroupCommit(ds)
    leader = threading.Thread(target=group.run, args=(_insert("INSERT INTO parent VALUES (1)"),))

    def interrupt() -> None:
        poll_until(lambda: group.waiting == 2, None)
        os.kill(os.getpid(), signal.SIGINT)

    with _write_locked(path):
        leader.start()
        poll_until(lambda: group.waiting == 1, None)
        threading.Thread(target=interrupt).start()
        with pytest.raises(KeyboardInterrupt):
            group.run(_insert("INSERT INTO parent VALUES (2)"))
        assert group.waiting == 1  # the leader's own, still waiting for the lock
    leader.join()
    assert group.run(_insert("INSERT INTO parent VALUES (3)")) == 3
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert [r[0] for r in db.execute("SELECT id FROM parent ORDER BY id")] == [1, 3]
    ds.close()


def test_leases_and_locks_keep_working_beside_group_commits(store: Store) -> None:
    """The store's other writers share the file's one write lock with the batches."""
    stop = threading.Event()

    def appender(t: int) -> None:
        i = 0
        while not stop.is_set() or i < 20:
            i += 1
            store.append([Append(stream_id(f"busy-{t}"), i, _event("b", i))])

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(4)]
    for w in workers:
        w.start()
    try:
        for n in range(30):
            assert store.take_lease_fenced(f"r{n}", "me", T0 + 30, T0) == ("me", 1)
            fence = store.locks.acquire(f"lock{n}", "me", ttl=30)
            assert fence == 1 and store.locks.release(f"lock{n}", "me", fence)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert all(store.stream_length(stream_id(f"busy-{t}")) >= 20 for t in range(4))


CHILD = """
import os, sys, threading
from engine import events as ev
from engine.store import Append, RunRow, open_store, stream_id
url, threads, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = open_store(url)
out = threading.Lock()
def writer(t):
    a, b = stream_id(f"run-{t}"), stream_id(f"side-{t}")
    for i in range(1, per + 1):
        e = ev.Checkpoint(at=1.0, call=i, name=f"{t}.{i}")
        row = RunRow(f"run-{t}", "kill", "running", 1.0, 1.0, None, i)
        store.append([Append(a, i, e), Append(b, i, e)], [row])
        with out:
            os.write(1, f"{t} {i}\\n".encode())  # one write: a kill never splits a line
ws = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
[w.start() for w in ws]
[w.join() for w in ws]
os.write(1, b"done\\n")
"""


@pytest.mark.parametrize("kill", ["failpoint", "signal"])
def test_a_sigkill_amid_group_commits_leaves_each_append_whole_or_absent(
    path: Path, kill: str
) -> None:
    """A process of 8 appending threads is SIGKILLed in the middle (its 15th batch about to
    COMMIT, or killed from outside after 60 acknowledged appends): every append is wholly
    there or wholly absent (two streams and the run's index row), and every one a thread was
    told had committed is there."""
    threads, per = 8, 200
    url = f"sqlite:///{path}"
    open_store(url).close()
    env = {**os.environ, "AGENTLOG_FAILPOINTS": "in_group_commit:15" if kill == "failpoint" else ""}
    args = [sys.executable, "-c", CHILD, url, str(threads), str(per)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    acked: list[tuple[int, int]] = []
    for line in proc.stdout:
        if line.strip() == "done":
            break
        assert line.endswith("\n"), repr(line)
        t, i = map(int, line.split())
        acked.append((t, i))
        if kill == "signal" and len(acked) == 60:
            os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    store = open_store(url)
    try:
        for t in range(threads):
            n = store.last_position(stream_id(f"run-{t}"))
            assert store.stream_length(stream_id(f"run-{t}")) == n  # no gap
            assert store.last_position(stream_id(f"side-{t}")) == n  # the append whole
            assert (store.indexed_position(f"run-{t}") or 0) == n
            assert all(i <= n for tt, i in acked if tt == t)  # nothing told committed lost
        assert sum(store.last_position(stream_id(f"run-{t}")) for t in range(threads)) < (
            threads * per
        )
    finally:
        store.close()
