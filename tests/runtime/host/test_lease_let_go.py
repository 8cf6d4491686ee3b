"""A lease let go under a run still executing (a worker's drain past its grace) stays
free: the run's heartbeat, finding the lease gone, stops renewing it and does not keep
the lease it took back, so another worker continues the run at once, not a lease later."""

from __future__ import annotations

import threading
import time

from structlog.testing import capture_logs

from engine.polling import poll_until
from engine.runtime.host.leases import Leases
from engine.runtime.host.lockkeeper import Keeper
from engine.store import open_store


def test_a_dropped_lease_is_not_taken_back_by_the_runs_heartbeat(tmp_path: object) -> None:
    store = open_store(f"sqlite:///{tmp_path}/agentlog.db")
    keeper = Keeper()
    leases = Leases("owner-a", keeper, ttl=0.3)  # a beat every 0.1 s
    entered, release = threading.Event(), threading.Event()

    def execute() -> None:
        with leases.hold(store, "r1"):
            entered.set()
            release.wait(60)

    thread = threading.Thread(target=execute)
    try:
        with capture_logs() as logs:
            thread.start()
            assert entered.wait(60)
            leases.stop("r1", by="owner-a (drained)")  # as Worker._drain does
            store.drop_lease("r1", "owner-a")
            poll_until(lambda: any(e["event"] == "lease_lost" for e in logs) or None, 60)
        held = store.lease("r1")
        assert held is None or held[0] != "owner-a" or held[1] < time.time()
    finally:
        release.set()
        thread.join(60)
        keeper.close()
        store.close()
