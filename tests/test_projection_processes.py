"""The projection runner against other processes: a follower sees what another process
appends (LISTEN/NOTIFY on PostgreSQL, polling on SQLite), sixteen writer processes with
rolled-back transactions race followers on PostgreSQL, and a projection process killed
with SIGKILL in the middle of a batch resumes without loss or duplication."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import backends
from projection_kit import ALL, Count, Steps, append_steps, counted, expected, rows, test_views

from engine.polling import poll_until
from engine.store import Store, open_store
from projections import Runner

KIT = str(Path(__file__).with_name("projection_kit.py"))
PATIENCE = 300.0  # seconds: generous, for a busy machine; never a speed assertion


def _kit(*args: object, failpoints: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "AGENTLOG_FAILPOINTS": failpoints}
    return subprocess.Popen([sys.executable, KIT, *map(str, args)], env=env)


def _until(condition: Callable[[], bool]) -> None:
    assert poll_until(condition, PATIENCE, first=0.01, most=0.05), "condition not met in time"


def _caught_up(store: Store, name: str) -> Callable[[], bool]:
    def check() -> bool:
        tracked = store.views.tracking(name)
        return tracked is not None and tracked.position == store.max_global_position()

    return check


@backends("sqlite", "postgres")
def test_a_waiting_follower_wakes_for_another_process_append(store: Store, store_url: str) -> None:
    """wait_for_events returns True once another process appends, long before its
    ten-minute timeout (PostgreSQL: the append's NOTIFY; SQLite: polling)."""
    head = store.max_global_position()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(store.views.wait_for_events(head, 600)))
    waiter.start()
    assert _kit("write", store_url, 1, 3).wait() == 0
    waiter.join(PATIENCE)
    assert woke == [True]
    assert not store.views.wait_for_events(store.max_global_position(), 0.2)


@backends("sqlite", "postgres")
def test_a_following_runner_sees_every_event_another_process_appends(
    store: Store, store_url: str
) -> None:
    stop = threading.Event()
    follower = threading.Thread(target=Runner(store, test_views(), batch=17).follow, args=(stop,))
    follower.start()
    try:
        assert _kit("write", store_url, 2, 40).wait() == 0
        _until(_caught_up(store, "t_count"))
        _until(_caught_up(store, "t_steps"))
        assert counted(store) == expected(store) and counted(store)[ALL][0] >= 40
    finally:
        stop.set()
        follower.join(PATIENCE)
    assert not follower.is_alive()


def _tail(store: Store, seen: list[int], writers_done: threading.Event) -> None:
    """Read the global order as a follower does, from a cursor, until a look that began
    after every writer ended finds nothing more; every position read goes to ``seen``."""
    cursor = 0
    while True:
        finished = writers_done.is_set()
        batch = store.read_all(after=cursor, limit=500)
        seen.extend(r.global_position or 0 for r in batch)
        if batch:
            cursor = seen[-1]
        elif finished:
            return
        else:
            store.views.wait_for_events(cursor, 0.5)


WRITERS = 16
SIZES = [  # (commits per writer, events per commit, the runner's batch)
    pytest.param(60, 5, 50, id="ci"),  # 4,800 events
    pytest.param(700, 10, 500, id="full", marks=pytest.mark.slow),  # 112,000 events
]


@pytest.mark.postgres
@pytest.mark.parametrize(("commits", "per", "batch"), SIZES)
def test_sixteen_writer_processes_and_followers_on_postgres(
    pg_url: str, commits: int, per: int, batch: int
) -> None:
    """Sixteen processes append at once, one in five of their transactions rolling back
    (gaps in the global positions), while a runner and a raw reader follow: the reader
    saw every position once, in strictly increasing order (none skipped and found later),
    the view equals the fold of the whole log read in one pass, and its rebuild too."""
    store, tail_store = open_store(pg_url), open_store(pg_url)
    stop, writers_done = threading.Event(), threading.Event()
    seen: list[int] = []
    follower = threading.Thread(
        target=Runner(store, test_views(), batch=batch).follow, args=(stop,)
    )
    tail = threading.Thread(target=_tail, args=(tail_store, seen, writers_done))
    follower.start()
    tail.start()
    try:
        writers = [_kit("write", pg_url, n, commits, per) for n in range(WRITERS)]
        assert [w.wait() for w in writers] == [0] * WRITERS
        writers_done.set()
        tail.join(PATIENCE)
        _until(_caught_up(store, "t_count"))
        _until(_caught_up(store, "t_steps"))
    finally:
        writers_done.set()
        stop.set()
        follower.join(PATIENCE)
        tail.join(PATIENCE)
    assert not follower.is_alive() and not tail.is_alive()
    everything = [r.global_position for r in store.read_all(after=0, limit=10**9)]
    assert len(everything) == WRITERS * commits * per
    assert all(a < b for a, b in itertools.pairwise(seen))  # once each, in order
    assert seen == everything  # none missed
    want = expected(store)
    assert counted(store) == want
    assert want[ALL][0] < store.max_global_position()  # rolled back: gaps were skipped
    steps = rows(store, Steps())
    Runner(store, test_views()).rebuild("t_steps")
    assert rows(store, Steps()) == steps
    tail_store.close()
    store.close()


@backends("sqlite", "postgres")
@pytest.mark.parametrize("point", ["in_view_commit:4", "in_view_batch:4"])
def test_a_projection_killed_mid_batch_resumes_without_loss_or_duplication(
    store: Store, store_url: str, point: str
) -> None:
    """Killed inside its fourth batch (folded but not committed, or inside the commit's
    transaction), the view holds exactly the three batches before; resumed, it equals
    the fold of the whole log."""
    append_steps(store, [uuid.uuid4() for _ in range(9)], 30)
    Runner(store, [Count()]).position("t_count")
    proc = _kit("project", store_url, 40, failpoints=point)
    assert proc.wait() == -signal.SIGKILL
    assert counted(store)[ALL][0] == 3 * 40
    tracked = store.views.tracking("t_count")
    assert tracked is not None
    assert tracked.position == store.read_all(after=0, limit=120)[-1].global_position
    Runner(store, [Count()], batch=40).catch_up()
    assert counted(store) == expected(store)
