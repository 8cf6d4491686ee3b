"""A worker that cannot execute a run (its agent does not import here) leaves it queued
for a worker that can: never failed, never claimed for good."""

from __future__ import annotations

import threading

from engine import Engine, EngineConfig
from tests.conftest import backends


@backends("sqlite", "postgres")
def test_a_run_whose_agent_does_not_import_waits_for_a_worker_that_has_it(
    store_url: str,
) -> None:
    config = EngineConfig(inline_wait=0.0, lease_ttl=5.0)
    here, elsewhere = Engine(store_url, config=config), Engine(store_url, config=config)

    @here.agent(name="nowhere_to_import:greet")
    def greet(run: object, who: str) -> str:
        return f"hello {who}"

    greet.import_path = "nowhere_to_import"  # recorded so: no other process finds it
    h = here.enqueue(greet, who="ada")
    blind = elsewhere.worker(concurrency=2, grace=1)
    t = threading.Thread(target=blind.run)
    t.start()
    try:
        # Three passes later it is still queued, unleased, not failed.
        while blind.passes < 3:
            elsewhere.signals.wait(elsewhere.signals.version, 0.1)
        assert h.status() == "queued"
        assert elsewhere.store.lease(h.run_id) is None
    finally:
        blind.stop()
        t.join()
    able = here.worker(concurrency=1, grace=1)
    t = threading.Thread(target=able.run)
    t.start()
    try:
        assert h.result(timeout=60) == "hello ada"
    finally:
        able.stop()
        t.join()
        here.close()
        elsewhere.close()
