"""``@engine.tool(refresh_after=SECONDS)``: a read whose recorded result is older than
SECONDS by the engine's wall clock (``EngineConfig.wall``, injected here) when the run
continues after a pause is executed again; the code after it sees the fresh value, the
log records it as refreshed (the timeline says so) and later replays return it (verify
passes). Under the threshold the recorded value stands. A fresh value that would change a
call the log recorded before the pause is dropped: the run goes on with the recorded one
and its log stays replayable. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import backends

from engine import Engine, EngineConfig
from engine.errors import UsageError
from engine.log.history import read_events
from replay.timeline import story

STORES = backends("sqlite", "postgres")
HOUR = 3600.0


class Wall:
    """The engine's wall clock: real time moved on by ``offset`` seconds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class Market:
    """The price a read sees, and how many times it was read."""

    def __init__(self) -> None:
        self.price = 100
        self.reads = 0


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def market() -> Market:
    return Market()


@pytest.fixture
def engine(store_url: str, wall: Wall, market: Market) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(wall=wall, inline_wait=0.0))

    @e.tool(refresh_after=HOUR)
    def price(symbol: str) -> int:
        market.reads += 1
        return market.price

    @e.tool
    def order(symbol: str, at: int) -> str:
        return f"bought {symbol} at {at}"

    @e.agent(name="refresh:trader")
    def trader(run: Any, symbol: str) -> dict[str, Any]:
        seen = price(symbol)  # read at 10 am
        run.sleep(60)  # the run waits (holding no thread) until recover wakes it
        return {"seen": seen, "order": order(symbol, seen)}  # decided at 3 pm

    @e.agent(name="refresh:noted")
    def noted(run: Any, symbol: str) -> dict[str, Any]:
        seen = price(symbol)
        order(symbol, seen)  # a decision on the 10 am price, recorded before the pause
        run.sleep(60)
        return {"seen": seen}

    e.trader, e.noted = trader, noted  # type: ignore[attr-defined]
    yield e
    e.close()


def _timeline(e: Engine, run_id: str) -> str:
    lines = story(read_events(e.store, run_id))
    return "\n".join("".join(p if isinstance(p, str) else p[0] for p in line) for line in lines)


def _sources(e: Engine, run_id: str) -> list[str]:
    return [
        v.data.get("source", "executed") for v in e.events(run_id) if v.type == "tool_succeeded"
    ]


@STORES
def test_a_read_older_than_its_limit_is_read_again_when_the_run_continues(
    engine: Engine, wall: Wall, market: Market
) -> None:
    r = engine.run(engine.trader, run_id="late", symbol="ACME")  # type: ignore[attr-defined]
    assert r.status == "waiting"
    market.price, wall.offset = 140, 5 * HOUR  # five hours later, the price moved
    [done] = engine.recover()
    assert (done.status, done.output) == ("completed", {"seen": 140, "order": "bought ACME at 140"})
    assert market.reads == 2
    assert _sources(engine, "late") == ["executed", "refreshed", "executed"]
    assert "refreshed: read again after the pause" in _timeline(engine, "late")
    market.price = 999  # a later replay returns the refreshed value, not a new read
    assert engine.verify("late").status == "completed"
    assert market.reads == 2


@STORES
def test_a_read_within_its_limit_keeps_its_recorded_value(
    engine: Engine, wall: Wall, market: Market
) -> None:
    engine.run(engine.trader, run_id="soon", symbol="ACME")  # type: ignore[attr-defined]
    market.price, wall.offset = 140, 120.0  # the timer is due, the read is two minutes old
    [done] = engine.recover()
    assert done.output == {"seen": 100, "order": "bought ACME at 100"}
    assert market.reads == 1
    assert _sources(engine, "soon") == ["executed", "executed"]
    assert "refreshed" not in _timeline(engine, "soon")


@STORES
def test_a_fresh_value_a_recorded_decision_contradicts_is_dropped(
    engine: Engine, wall: Wall, market: Market
) -> None:
    engine.run(engine.noted, run_id="noted", symbol="ACME")  # type: ignore[attr-defined]
    market.price, wall.offset = 140, 5 * HOUR
    [done] = engine.recover()
    assert (done.status, done.output) == ("completed", {"seen": 100})
    assert market.reads == 2  # read again, then dropped: the order was placed at 100
    assert "refreshed" not in _sources(engine, "noted")
    assert engine.verify("noted").status == "completed"


def test_refresh_after_takes_seconds_and_only_for_a_read() -> None:
    e = Engine("memory://")
    for bad in (0, -1, float("nan"), "1h", True):
        with pytest.raises(UsageError, match="refresh_after takes seconds"):
            e.tool(refresh_after=bad)(lambda: 1)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a side effect is never re-sent"):
        e.tool(side_effect=True, refresh_after=60)(lambda: 1)
