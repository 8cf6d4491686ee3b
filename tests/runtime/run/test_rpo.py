"""``@engine.agent(rpo=...)``: snapshots taken by calls or by time so that a recovery
folds at most that much work past the newest snapshot; the target recorded at the start,
the measure recorded by the resume, and both reported by ``engine.stats()``."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime
from agents.kit import engine_call, python
from conftest import backends, engine_with

from engine import Engine
from engine.errors import UsageError
from engine.log.history import iter_run, rebuild, run_stream
from engine.log.rpo import Rpo, parse_rpo, replay_tail
from engine.store import Store, open_store

MODULE = "tests.agents.rpo_agents"
AGENT = f"{MODULE}:by_calls"


def _snapshots(store: Store, run_id: str) -> list[int]:
    return sorted(s.position for s in store.snapshots(run_stream(run_id), None))


def _calls_after(store: Store, run_id: str, position: int) -> set[int]:
    """The calls with an event after ``position``: what a fold from there replays."""
    return {
        r.event.call  # type: ignore[attr-defined]
        for r in iter_run(store, run_id)
        if r.position > position and hasattr(r.event, "call")
    }


def _killed_after_23(url: str, agent: str) -> str:
    run_id = f"rpo-{agent}-{uuid.uuid4().hex[:8]}"
    env = {"AGENTLOG_TEST_KILL_AT": "23"}
    p = python("-m", MODULE, url, run_id, "30", agent, env=env)
    assert p.returncode == -9, (p.returncode, p.stderr[-2000:])
    return run_id


@backends("sqlite", "postgres")
def test_a_run_killed_after_23_calls_replays_at_most_5_calls_past_its_snapshot(
    store_url: str,
) -> None:
    """rpo=5, SIGKILL right after call 23: the newest snapshot leaves at most 5 calls'
    events to fold, the resume records that tail, and stats report it against 5."""
    run_id = _killed_after_23(store_url, "by_calls")
    store = open_store(store_url)
    try:
        head = rebuild(store, run_id)
        assert head.calls == 23
        snap = _snapshots(store, run_id)[-1]
        tail = replay_tail(store, run_stream(run_id), head)
        assert tail.events == head.position - snap
        assert 1 <= len(_calls_after(store, run_id, snap)) <= 5
        assert 0 < tail.calls <= 5
    finally:
        store.close()
    done = engine_call(store_url, "resume", run_id)
    assert (done["status"], done["output"]) == ("completed", sum(2 * i for i in range(1, 31)))
    eng = Engine.open(store_url)
    try:
        marker = next(e for e in eng.events(run_id) if e.type == "agent_resumed")
        # The resumed writer counts calls from none it knows of: its first commit (the
        # marker, call 24's intent and outcome) snapshots, 24 calls being past 5.
        first = range(marker.position, marker.position + 3)
        assert any(p in first for p in _snapshots(eng.store, run_id))
        replayed = marker.data["replayed"]
        assert (replayed["events"], replayed["calls"]) == (tail.events, tail.calls)
        assert marker.data["recovery_s"] >= 0
        (figures,) = eng.stats().objectives
    finally:
        eng.close()
    assert (figures.agent, figures.rpo_target, figures.rpo_target_calls) == (
        "tests.agents.rpo_agents:by_calls",
        "5 calls",
        5,
    )
    assert (figures.rpo_samples, figures.rpo_calls_max, figures.rpo_met) == (1, tail.calls, True)
    assert figures.rpo_events_max == tail.events
    assert figures.rto_samples == 1 and figures.rto_s_median == marker.data["recovery_s"]
    assert figures.down_s_median is not None
    _the_cli_shows(store_url, figures.rpo_calls_max)


def _the_cli_shows(url: str, calls: int | None) -> None:
    """``agentlog stats`` (the table and ``--json``) show the target and the measure."""
    table = python("-m", "replay.cli", "--url", url, "stats")
    assert table.returncode == 0, table.stderr[-2000:]
    (row,) = [ln.split() for ln in table.stdout.splitlines() if " 5 calls " in ln]
    assert row[1:5] == ["5", "calls", "yes", "1"] and row[5:8] == [str(calls), "/", str(calls)]
    assert "by_calls" in table.stdout.replace("\n", "").replace(" ", "")
    out = python("-m", "replay.cli", "--url", url, "--json", "stats")
    (entry,) = json.loads(out.stdout)["objectives"]
    assert (entry["rpo_target"], entry["rpo_calls_max"]) == ("5 calls", calls)
    assert entry["rpo_met"] is True
    scrape = python("-m", "replay.cli", "--url", url, "stats", "--prometheus").stdout
    assert 'agentlog_rpo_target_calls{agent="tests.agents.rpo_agents:by_calls"} 5.0' in scrape
    assert f'agentlog_rpo_replayed_calls{{agent="{AGENT}",quantile="1"}} {calls}.0' in scrape


def test_without_rpo_the_whole_run_is_replayed_and_no_target_is_reported(tmp_path: Any) -> None:
    """The default (no rpo) keeps the cadence of 100 events: killed after 23 calls, a
    recovery folds the whole log; stats show the crash but no target."""
    url = f"sqlite:///{tmp_path}/agentlog.db"
    run_id = _killed_after_23(url, "unbounded")
    eng = Engine.open(url)
    try:
        assert _snapshots(eng.store, run_id) == []
        assert eng.events(run_id)[0].data["rpo_calls"] is None
        engine_call(url, "resume", run_id)
        (figures,) = eng.stats().objectives
    finally:
        eng.close()
    assert (figures.rpo_target, figures.rpo_met, figures.rpo_calls_max) == (None, None, 23)


class Clocked:
    def __init__(self) -> None:
        self.clock = FakeTime()


@pytest.fixture
def clocked() -> Clocked:
    return Clocked()


@pytest.fixture
def eng(store_url: str, clocked: Clocked) -> Iterator[Engine]:
    yield from engine_with(store_url, clock=clocked.clock)


@backends("memory", "sqlite")
def test_rpo_in_seconds_snapshots_at_the_first_commit_past_the_interval(
    eng: Engine, clocked: Clocked
) -> None:
    """rpo="1s" on the engine's clock: no snapshot while less than a second has passed,
    one at the first commit a second or more after the run's start, then again."""
    fake = clocked.clock

    @eng.tool
    def tick(i: int, advance: float) -> int:
        fake.now += advance
        return i

    @eng.agent(rpo="1s")
    def timed(run: Any, advances: list[float]) -> int:
        return sum(tick(i, a) for i, a in enumerate(advances))

    r = eng.run(timed, advances=[0.3, 0.3, 0.3, 0.2, 0.1, 0.9, 0.0])
    # start (1), then each call commits its intent and outcome: positions 3, 5, 7, ...
    # At 0.3, 0.6 and 0.9 seconds none is due; call 4 ends at 1.1 s (position 9), and
    # call 6 at 1.1 + 0.1 + 0.9 = 2.1 s, a second after (position 13).
    assert _snapshots(eng.store, r.run_id) == [9, 13]
    started = eng.events(r.run_id)[0].data
    assert (started["rpo_s"], started.get("rpo_calls")) == (1.0, None)


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (20, Rpo(calls=20)),
        ("30s", Rpo(seconds=30.0)),
        (" 5m ", Rpo(seconds=300.0)),
        ("1.5h", Rpo(seconds=5400.0)),
        (dt.timedelta(seconds=2), Rpo(seconds=2.0)),
        (None, None),
    ],
)
def test_rpo_values_accepted(value: Any, wanted: Rpo | None) -> None:
    assert parse_rpo(value) == wanted


@pytest.mark.parametrize(
    "bad", [0, -3, "abc", "30x", "0s", "-5s", "", "20", True, False, 1.5, 20.0, [5], 2**64]
)
def test_a_bad_rpo_is_refused_once_at_declaration(bad: Any) -> None:
    """Refused when the agent is declared, naming the agent and the value."""
    eng = Engine.open("memory://")
    try:
        with pytest.raises(UsageError, match=r"^agent bad_rpo: rpo= takes .*, not "):

            @eng.agent(rpo=bad, name="bad_rpo")
            def bad_rpo(run: Any) -> None: ...

        assert eng.registry.agent("bad_rpo") is None
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_the_largest_rpo_accepted_starts_runs_and_is_reported(eng: Engine) -> None:
    """An rpo= accepted at declaration is one every run of the agent can record: its
    start (agent_started.rpo_calls) and stats keep it (2**64 calls was accepted, then
    every start failed encoding it, with no error of ours)."""

    @eng.agent(rpo=2**63 - 1, name="huge_rpo")
    def huge(run: Any) -> int:
        return 1

    assert eng.run(huge).status == "completed"
    (figures,) = eng.stats().objectives
    assert figures.rpo_target_calls == 2**63 - 1


@backends("sqlite")
def test_an_unsettled_run_is_measured_at_its_head(eng: Engine) -> None:
    """A run of an agent with a target that waits for a person is a sample too: the tail
    a recovery would fold now (12 calls and the question, snapshots at calls 5 and 10)."""

    @eng.tool
    def look(i: int) -> int:
        return i

    @eng.agent(rpo=5, name="asking")
    def asking(run: Any) -> str:
        for i in range(12):
            look(i)
        return str(run.ask("go on?"))

    r = eng.run(asking)
    assert r.status == "paused"
    (figures,) = eng.stats().objectives
    assert (figures.agent, figures.rpo_samples, figures.rpo_calls_max) == ("asking", 1, 3)
    assert (figures.rpo_met, figures.rto_samples) == (True, 0)
    eng.answer(r.run_id, "yes")
    (settled,) = eng.stats().objectives
    assert (settled.rpo_samples, settled.rpo_met) == (0, None)
