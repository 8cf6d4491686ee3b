"""The worker's turn at the schedules (``Ticker.fire``), on every backend with a wall
clock the test moves: each due tick becomes one queued run ``NAME@<tick>`` however many
workers fire it; a late turn enqueues every tick it slept through; a worker starting
after an outage starts only the latest missed tick, or all with ``catch_up``; a schedule
it cannot import, or a damaged one, is left alone and stops no other; the turn says how
long to sleep until the next tick."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from conftest import all_backends, backends, raw_sql
from structlog.testing import capture_logs

from engine import Engine, EngineConfig
from engine.runtime.schedules.firing import Ticker
from engine.store.schedules import ScheduleRow
from tests.agents.schedule_agents import report, tick

T0 = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC).timestamp()  # an even second


class Wall:
    """A wall clock the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall(T0 + 0.5)


@pytest.fixture
def eng(store_url: str, wall: Wall) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(wall=wall))
    yield e
    e.close()


def at(seconds: float) -> str:
    """The run id of tick ``T0 + seconds`` of the schedule ``s``."""
    return "s@" + dt.datetime.fromtimestamp(T0 + seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def runs(e: Engine, prefix: str = "s@") -> list[str]:
    return sorted(r.run_id for r in e.runs() if r.run_id.startswith(prefix))


@all_backends
def test_each_due_tick_is_one_queued_run_and_the_turn_says_when_the_next_is(
    eng: Engine, wall: Wall
) -> None:
    eng.schedule("s", tick, every=2, note="n")
    ticker = Ticker(eng, wall)
    assert ticker.fire() == pytest.approx(1.5)  # made at T0 + 0.5: nothing due before T0 + 2
    assert runs(eng) == []
    wall.now = T0 + 2.25
    assert ticker.fire() == pytest.approx(1.75)
    assert runs(eng) == [at(2)]
    assert eng.handle(at(2)).status() == "queued"
    assert eng.state(at(2)).agent == "tests.agents.schedule_agents:tick"
    assert eng.schedules()[0].last_run == at(2)
    assert ticker.fire() == pytest.approx(1.75) and runs(eng) == [at(2)]  # no tick twice


@backends("sqlite", "postgres")
def test_two_workers_firing_the_same_ticks_start_one_run_each(
    store_url: str, eng: Engine, wall: Wall
) -> None:
    other = Engine(store_url, config=EngineConfig(wall=wall))
    try:
        eng.schedule("s", tick, every=2)
        mine, theirs = Ticker(eng, wall), Ticker(other, wall)
        for k in range(1, 6):
            wall.now = T0 + 2 * k + 0.1
            mine.fire()
            theirs.fire()
        assert runs(eng) == [at(2 * k) for k in range(1, 6)]
    finally:
        other.close()


@all_backends
def test_a_late_turn_enqueues_every_tick_it_slept_through(eng: Engine, wall: Wall) -> None:
    eng.schedule("s", tick, every=2)
    ticker = Ticker(eng, wall)
    ticker.fire()
    wall.now = T0 + 7.5
    ticker.fire()
    assert runs(eng) == [at(2), at(4), at(6)]


@all_backends
def test_after_an_outage_only_the_latest_missed_tick_starts_unless_catch_up(
    eng: Engine, wall: Wall
) -> None:
    eng.schedule("s", tick, every=2)
    eng.schedule("c", tick, every=2, catch_up=True)
    wall.now = T0 + 9
    Ticker(eng, wall).fire()  # a worker starts: none watched since the schedules were made
    assert runs(eng) == [at(8)]
    assert runs(eng, "c@") == [at(k).replace("s@", "c@") for k in (2, 4, 6, 8)]
    wall.now = T0 + 30.1  # every worker was gone again; a new one comes
    Ticker(eng, wall).fire()
    assert runs(eng) == [at(8), at(30)]


@all_backends
def test_a_schedule_it_cannot_import_or_a_damaged_one_stops_no_other(
    eng: Engine, wall: Wall
) -> None:
    eng.schedule("s", tick, every=2)
    lost = ScheduleRow(
        "gone", "nowhere.agents:x", "nowhere.agents", None, 2, b"{}", "default", False, T0
    )
    eng.store.schedules.put(lost)
    wall.now = T0 + 2.1
    ticker = Ticker(eng, wall)
    with capture_logs() as logs:  # however another test configured the log's output
        ticker.fire()
        wall.now = T0 + 4.1
        ticker.fire()  # within LOOK_AGAIN: "gone" is not tried (nor warned about) again
    assert runs(eng) == [at(2), at(4)] and runs(eng, "gone@") == []
    assert [s.last_tick for s in eng.schedules()] == [None, T0 + 4]
    assert sum(e["event"] == "schedule_not_fired" for e in logs) == 1


@backends("sqlite")
def test_a_forged_row_is_skipped(eng: Engine, wall: Wall, store_url: str) -> None:
    eng.schedule("a", report, every=2)
    eng.schedule("s", tick, every=2)
    raw_sql(store_url, "UPDATE {s}agentlog_schedules SET cron = 'x', every = NULL WHERE name='a'")
    wall.now = T0 + 2.1
    assert Ticker(eng, wall).fire() == pytest.approx(1.9)
    assert runs(eng) == [at(2)] and runs(eng, "a@") == []


@all_backends
def test_no_schedule_no_wait_and_an_unscheduled_one_fires_no_more(eng: Engine, wall: Wall) -> None:
    ticker = Ticker(eng, wall)
    assert ticker.fire() is None
    eng.schedule("s", tick, every=2)
    wall.now = T0 + 2.1
    ticker.fire()
    eng.unschedule("s")
    wall.now = T0 + 4.1
    assert ticker.fire() is None
    assert runs(eng) == [at(2)]


@backends("sqlite")
def test_a_schedule_whose_module_raises_on_import_stops_no_other(
    eng: Engine, wall: Wall, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module that raises (not ImportError) as it is imported is one warning, left
    alone like one that is missing: the turn, and the worker's pass, go on."""
    (tmp_path / "boom_on_import.py").write_text("raise RuntimeError('broken deploy')\n")  # type: ignore[operator]
    monkeypatch.syspath_prepend(str(tmp_path))
    eng.schedule("s", tick, every=2)
    broken = ScheduleRow(
        "boom", "boom_on_import:x", "boom_on_import", None, 2, b"{}", "default", False, T0
    )
    eng.store.schedules.put(broken)
    wall.now = T0 + 2.1
    with capture_logs() as logs:
        Ticker(eng, wall).fire()
    assert runs(eng) == [at(2)] and runs(eng, "boom@") == []
    warned = [e for e in logs if e["event"] == "schedule_not_fired"]
    assert len(warned) == 1 and "broken deploy" in warned[0]["error"]
