"""Versions, on SQLite files and PostgreSQL: ``@engine.agent(version="2")`` is recorded
on each run's ``agent_started`` (None when undeclared), listed by ``agentlog runs`` (its
--json "version", its --version filter, quick path and Typer alike), and a worker started
with a version takes only the runs of that version: old runs drain on old code (queued
ones, and sleeping ones once due) while new runs start on new code."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import backends, write_raw_row

from engine import Engine, EngineConfig
from engine.errors import UsageError
from engine.log.history import started
from engine.runtime.workers.worker import Worker
from replay.cli import full, quick
from replay.cli.entry import hoist, run_cli
from tests.runtime.host.test_engine_time import FakeWall

STORES = backends("sqlite", "postgres")
WALL = FakeWall()  # the engines' wall clock: a sleep is due when the test moves it


def _deploy(e: Engine, version: str | None) -> Any:
    """The support agent as the code of ``version`` has it: its output names the code."""

    def support(run: Any, order: str, nap: float = 0.0) -> str:
        if nap:
            run.sleep(nap)
        return f"{order} by v{version}"

    return e.agent(support, name="support", version=version)


@pytest.fixture
def pair(store_url: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one store: the old code's (version 1) and the new code's (2)."""
    config = EngineConfig(inline_wait=0.0, lease_ttl=5.0, wall=WALL)
    old, new = Engine(store_url, config=config), Engine(store_url, config=config)
    yield old, new
    old.close()
    new.close()


def _serving(e: Engine, version: str, until: Callable[[Worker], bool]) -> None:
    """Run a worker of ``version`` until ``until(worker)`` holds."""
    w = e.worker(concurrency=2, grace=1, version=version)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        while not until(w):
            e.signals.wait(e.signals.version, 0.05)
    finally:
        w.stop()
        t.join()


@STORES
def test_a_worker_of_one_version_takes_only_that_versions_runs(
    pair: tuple[Engine, Engine],
) -> None:
    """A version-2 worker runs the version-2 run and leaves the version-1 runs (queued,
    and one sleeping past its wake time) alone for passes on end; a version-1 worker then
    drains them on the old code."""
    old, new = pair
    v1, v2 = _deploy(old, "1"), _deploy(new, "2")
    queued = [old.enqueue(v1, order=f"o{i}") for i in range(2)]
    sleeper = old.run(v1, order="nap", nap=600)
    assert sleeper.status == "waiting"
    WALL.now += 601  # due now
    fresh = new.enqueue(v2, order="n")
    # Three passes after the first: each looked at the version-1 runs and left them.
    _serving(new, "2", lambda w: fresh.status() == "completed" and w.passes > 3)
    assert fresh.result(timeout=5) == "n by v2"
    assert [h.status() for h in queued] == ["queued", "queued"]
    # Passed over in line, never claimed (no start counted against the queue's rate).
    assert [new.store.queues.queued(h.run_id).claimed_at for h in queued] == [None, None]
    assert new.state(sleeper.run_id).status == "waiting"  # due, but not version 2's
    runs = [sleeper.run_id, *(h.run_id for h in queued)]
    _serving(old, "1", lambda _: all(old.state(r).status == "completed" for r in runs))
    assert [h.result(timeout=5) for h in queued] == ["o0 by v1", "o1 by v1"]
    assert old.state(sleeper.run_id).output == "nap by v1"


@STORES
def test_the_version_is_recorded_per_run_and_listed(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agent_started.version`` holds the declared version (None undeclared); ``runs
    --json`` shows it and ``--version V`` keeps that version's runs, on both paths."""
    e = Engine.open(store_url)
    try:
        a = e.run(_deploy(e, "1"), run_id="a", order="a").run_id
        b = e.run(_deploy(e, "2"), run_id="b", order="b").run_id
        c = e.run(_deploy(e, None), run_id="c", order="c").run_id
        assert [started(e.store, r).version for r in (a, b, c)] == ["1", "2", None]
        with pytest.raises(UsageError, match="version="):
            _deploy(e, "")
    finally:
        e.close()
    capsys.readouterr()
    assert run_cli(["runs", "--json", "--url", store_url]) == 0
    listed = {d["run_id"]: d["version"] for d in json.loads(capsys.readouterr().out)}
    assert listed == {"a": "1", "b": "2", "c": None}
    argv = ["runs", "--version", "2", "--json", "--url", store_url]
    assert quick.plan(hoist(argv)) is not None  # the quick path takes it
    assert run_cli(argv) == 0
    assert [d["run_id"] for d in json.loads(capsys.readouterr().out)] == ["b"]
    assert full.invoke(hoist(argv), store_url) == 0  # and the Typer app reads it alike
    assert [d["run_id"] for d in json.loads(capsys.readouterr().out)] == ["b"]


@STORES
def test_a_run_of_another_version_claimed_in_a_race_is_left_in_line(
    pair: tuple[Engine, Engine],
) -> None:
    """A version-1 run the version-2 worker's claim finds before its pass looked at the
    line (enqueued in between) is let go at once: still queued, leased by nobody, and
    passed over from then on."""
    old, new = pair
    h = old.enqueue(_deploy(old, "1"), order="late")
    _deploy(new, "2")  # the new engine can execute the agent: only the version stops it
    w = new.worker(version="2")
    now = new.config.wall()
    assert w._claim_next(now) is None
    assert h.status() == "queued" and new.store.lease(h.run_id) in (None, ("", 0.0))
    assert w._claim_next(now) is None  # skipped now: not claimed again


def test_a_fork_records_the_version_of_the_code_that_runs_it(eng: Engine) -> None:
    """A run of version 1 rewound after the deploy of version 2: the fork is version 2's
    (a worker of version 1 would run it on the wrong code)."""

    def support(run: Any) -> str:
        run.checkpoint("start")
        return "done"

    first = eng.run(eng.agent(support, name="support", version="1"))
    eng.agent(support, name="support", version="2")
    fork = eng.rewind(first.run_id, to="start")
    assert started(eng.store, first.run_id).version == "1"
    assert started(eng.store, fork.run_id).version == "2"


def test_a_queued_run_whose_log_cannot_be_read_does_not_stop_a_versioned_worker(
    store_url: str, pair: tuple[Engine, Engine]
) -> None:
    """A queued run whose ``agent_started`` is damaged is not the version-2 worker's to
    run: it passes over it and still claims the run of its version."""
    from engine.log.history import run_stream

    old, new = pair
    bad = old.enqueue(_deploy(old, "1"), order="bad")
    write_raw_row(store_url, old.store, "events", run_stream(bad.run_id), 1, "agent_started", b"x")
    good = new.enqueue(_deploy(new, "2"), order="good")
    w = new.worker(version="2")
    assert w._claim_next(new.config.wall()) == good.run_id
    assert w._ours(bad.run_id) is False


def test_runs_json_lists_each_version_past_a_damaged_log(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged event stops the runs view; ``runs --json`` (the index's listing) still
    lists every run, each version read from its own ``agent_started``."""
    from engine.log.history import run_stream

    e = Engine.open(store_url)
    try:

        def stepper(run: Any) -> str:
            run.checkpoint("one")
            return "done"

        hurt = e.run(e.agent(stepper, name="stepper", version="3")).run_id
        e.run(e.agent(stepper, name="stepper", version="4"), run_id="fine")
        write_raw_row(store_url, e.store, "events", run_stream(hurt), 2, "checkpoint", b"x")
    finally:
        e.close()
    capsys.readouterr()
    assert run_cli(["runs", "--json", "--url", store_url]) == 0
    listed = {d["run_id"]: d["version"] for d in json.loads(capsys.readouterr().out)}
    assert listed == {hurt: "3", "fine": "4"}
