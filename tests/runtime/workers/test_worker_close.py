"""Closing an engine stops the workers it made and waits for their loops: no worker thread
outlives the store's close to fail on it later (pytest's unhandled thread exception warning
is an error here, and in the modules that once left such a thread behind)."""

from __future__ import annotations

import threading

import pytest

from engine import Engine, EngineConfig
from engine.polling import poll_until
from tests.conftest import backends

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@backends("sqlite", "postgres")
def test_closing_the_engine_stops_its_serving_worker_and_waits_for_it(store_url: str) -> None:
    """A worker serving in a thread nobody joins (stopped, or not even that): once
    ``engine.close()`` returned, its loop has ended, before the store was closed."""
    eng = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0))
    w = eng.worker(concurrency=1, grace=5)
    t = threading.Thread(target=w.run, name="test-worker")
    t.start()
    assert poll_until(lambda: w.passes >= 1 or None, 120), "the worker never served"
    eng.close()
    assert w.join(0), "the worker still serves after its engine closed"
    t.join(120)
    assert not t.is_alive()


@backends("sqlite")
def test_a_worker_whose_engine_closed_before_it_ran_returns_at_once(store_url: str) -> None:
    """Its engine closed first: ``run()`` serves nothing (the store it would use is
    closed) and returns as a stopped worker's does."""
    eng = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0))
    w = eng.worker(concurrency=1, grace=5)
    eng.close()
    t = threading.Thread(target=w.run, name="test-worker")
    t.start()
    t.join(120)
    alive = t.is_alive()
    w.stop()  # a worker left serving by a broken close is not left behind
    t.join()
    assert not alive, "a worker made by a closed engine served on"


@backends("sqlite")
def test_an_engine_whose_idle_worker_was_closed_runs_agents_again(store_url: str) -> None:
    """Closing stops no run of the engine used again: a worker that never served leaves
    the engine's runs undrained."""
    eng = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0))

    @eng.tool(side_effect=True)
    def one() -> int:
        return 1

    @eng.agent
    def twice(run: object) -> int:
        return one() + one()

    idle = eng.worker(concurrency=1, grace=5)
    eng.close()
    r = eng.run(twice)
    eng.close()
    assert idle.join(0)
    assert (r.status, r.output) == ("completed", 2), r.error
