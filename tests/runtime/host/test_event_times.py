"""Every event an engine writes is dated by its wall clock (``EngineConfig.wall``), on
SQLite files and PostgreSQL: with a fake wall, each ``at`` of a run tree's logs, of its
business key's ledger stream and of ``timeline --json`` is a reading that clock gave."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import engine
from engine import Engine, EngineConfig, RetryPolicy
from engine import events as ev
from engine.log.history import read_events
from engine.runtime.call import ledger
from engine.showing import utc
from replay.timeline import events, json_rows
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
EPOCH = 1_500_000_000.0  # 2017: far from any real clock reading of today


class SteppingWall:
    """A wall clock that moves a millisecond at each reading (and by ``jump``): it
    remembers every time it gave."""

    def __init__(self) -> None:
        self._ticks = itertools.count()
        self._lock = threading.Lock()
        self.offset = 0.0
        self.given: set[float] = set()

    def __call__(self) -> float:
        with self._lock:
            now = EPOCH + self.offset + next(self._ticks) / 1000
            self.given.add(now)
            return now

    def jump(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds


@pytest.fixture
def wall() -> SteppingWall:
    return SteppingWall()


@pytest.fixture
def eng(store_url: str, wall: SteppingWall) -> Iterator[Engine]:
    config = EngineConfig(wall=wall, inline_wait=0.0, sleep=lambda _s: None)
    e = Engine(store_url, config=config)
    yield e
    e.close()


def _tree(eng: Engine) -> Any:
    """A parent that books under a key, retries a flaky read, plans a step, asks a person,
    sleeps an hour, locks, messages itself and calls a child that calls a tool."""
    flaky = [True]

    @eng.tool(side_effect=True, key=lambda what: f"book:{what}")
    def book(what: str) -> str:
        return f"booked {what}"

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=0.0, jitter=False))
    def look(what: str) -> str:
        if flaky[0]:
            flaky[0] = False
            raise ConnectionError("flaky")
        return f"saw {what}"

    @eng.agent
    def helper(run: Any, what: str) -> str:
        return look(what) + "!"

    @eng.agent
    def parent(run: Any) -> list[Any]:
        booked = book("room")
        with run.step("check"):
            seen = look("room")
        run.checkpoint("booked")
        yes = run.ask("go on?")
        run.sleep(3600)
        with run.lock("room", ttl=60):
            run.send(run.run_id, "note", "hi")
            note = run.recv("note", timeout=60)
        return [booked, seen, yes, note, run.call(helper, what="hall")]

    return parent


def _stamps(eng: Engine, run_id: str) -> list[tuple[str, float]]:
    """``(where, at)`` of every event of the run and its children's logs."""
    out = []
    for r in read_events(eng.store, run_id):
        e = r.event
        out.append((f"{run_id[:8]} {r.position} {e.__struct_config__.tag}", e.at))
        if isinstance(e, ev.ChildSpawned):
            out += _stamps(eng, e.child_run_id)
    return out


@STORES
def test_every_event_of_a_run_tree_is_dated_by_the_engine_wall_clock(
    eng: Engine, wall: SteppingWall
) -> None:
    r = eng.run(_tree(eng))
    assert r.status == "paused", r.error
    assert eng.answer(r.run_id, "yes").status == "waiting"
    wall.jump(3601)
    [done] = eng.recover()
    assert done.status == "completed", done.error
    assert done.output == ["booked room", "saw room", "yes", "hi", "saw hall!"]
    stamps = _stamps(eng, r.run_id)
    key = [
        (f"ledger {r.position}", r.event.at) for r in eng.store.read(ledger.stream_of("book:room"))
    ]
    kinds = {where.split()[-1] for where, _ in stamps}
    must = {"agent_started", "tool_invoked", "tool_failed", "retry_scheduled", "timer_set"}
    must |= {"human_input_requested", "agent_resumed", "child_spawned", "child_finished"}
    must |= {"lock_acquired", "message_sent", "message_received", "step_completed"}
    assert must <= kinds, must - kinds
    assert key, "the keyed call claimed its key"
    foreign = [(where, at) for where, at in stamps + key if at not in wall.given]
    assert foreign == [], f"events not dated by EngineConfig.wall: {foreign}"
    rows = list(json_rows(events(eng, r.run_id)))
    logged = read_events(eng.store, r.run_id)
    assert [row["at"] for row in rows] == [utc(x.event.at) for x in logged]
    assert all(row["at"].year == 2017 for row in rows)


def test_no_engine_module_dates_an_event_by_the_process_clock() -> None:
    """The paths the run above does not take (an abandon's undo records, an adoption, a
    breaker's transitions...) read the engine's wall too: nothing in ``engine/`` calls
    ``engine.events.now()`` (time.time), kept for tools outside an engine."""
    root = Path(engine.__file__).parent
    calls = re.compile(r"\b(?:ev|events|base)\.now\(\)")
    found = [
        f"{path.relative_to(root.parent)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if calls.search(line)
    ]
    assert found == []
