"""The heartbeat of a lock a block holds renews the hold a third of the ttl after the
last renewal, while two thirds of it are left: never at the end of the ttl, when the lock
has lapsed or is about to (another run, or a host whose clock runs a little ahead, could
take it then). Every renewal the store receives finds the lock still held by the run
with more than a third of its ttl to go; the ttl is the yardstick, so a heartbeat thread
delayed by less than a third of it still passes. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from typing import Any

from conftest import backends

from engine import Engine

TTL = 3.0  # seconds: a renewal due at a third of it has two seconds left
RENEWALS = 2  # the first renewal, and one scheduled by a renewal


@backends("sqlite", "postgres")
def test_every_renewal_of_a_held_lock_comes_before_it_expires(eng: Engine) -> None:
    locks = eng.store.locks
    real = locks.renew
    left: list[float] = []  # at each renewal, the seconds the hold had to go
    renewed, leave = threading.Event(), threading.Event()

    def renew(name: str, holder: str, fence: int, ttl: float) -> bool:
        rows = [r for r in locks.held() if (r.name, r.holder, r.fence) == (name, holder, fence)]
        left.append(rows[0].expires_at - time.time() if rows else 0.0)  # lapsed: none left
        kept = real(name, holder, fence, ttl)
        if len(left) >= RENEWALS:
            renewed.set()
        return kept

    locks.renew = renew  # type: ignore[method-assign]

    @eng.agent
    def holder(run: Any) -> int:
        with run.lock("shared", ttl=TTL) as fence:
            leave.wait(60)
        return int(fence)

    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(eng.run(holder)))
    t.start()
    try:
        assert renewed.wait(60), "the heartbeat never renewed the lock"
    finally:
        leave.set()
        t.join(60)
    assert all(s > TTL / 3 for s in left[:RENEWALS]), left  # about 2 s each
    assert (results[0].status, results[0].output) == ("completed", 1)
    assert eng.store.locks.held() == []
