"""The recovery view and its figures: a scripted scenario of real processes killed by
SIGKILL at failpoints, recovered from the test process, gives figures equal to a hand
count (SQLite and PostgreSQL); the fold's edge cases on written logs (every backend); the
save timings the run context's writer records without a commit of its own."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import engine_call, python
from conftest import all_backends, backends

from engine import Engine
from engine import events as ev
from engine.log.history import RunWriter, read_events
from engine.log.savetimes import FLUSH_AT
from engine.log.state import RunState
from projections.views import recovery

MODULE = "tests.agents.recovery_agents"
ORDERS = {"r-a": "a", "r-b": "b", "r-c": "c", "r-d": "d", "r-e": "e"}


def _start(url: str, run_id: str, failpoint: str | None, env: dict[str, str], **data: Any) -> int:
    more = {**env, "AGENTLOG_FAILPOINTS": failpoint} if failpoint else env
    p = python("-m", MODULE, url, run_id, json.dumps({"order": ORDERS[run_id], **data}), env=more)
    assert p.returncode in (0, -9), p.stderr[-3000:]
    return p.returncode


def _crashes_in_log(eng: Engine, run_id: str) -> list[float]:
    """The times to recover read back from the log: each agent_resumed that follows the
    run while running (not an answer, not a failure), minus its previous event's time."""
    events = [r.event for r in read_events(eng.store, run_id)]  # `at` as stored (float)
    found = []
    for before, e in itertools.pairwise(events):
        not_running = (ev.AgentFailed, ev.HumanInputProvided, ev.HumanInputRequested)
        if isinstance(e, ev.AgentResumed) and not isinstance(before, not_running):
            found.append(e.at - before.at)
    return found


def _script(url: str, tmp_path: Path) -> dict[str, str]:
    """The scenario, in real processes: A and B crash once mid-call, C twice (the second
    time in the process that resumed it), D fails for good (after one retry), E pauses
    and is abandoned: its first abandon stops at a refused undo, the second finishes."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    assert _start(url, "r-a", "after_intent:1", env) == -9  # charge a-0 not sent yet
    assert _start(url, "r-b", "after_tool:2", env) == -9  # charge b-0 sent, unrecorded
    assert _start(url, "r-c", "after_intent:2", env) == -9  # charge c-1's intent committed
    # The resumer's first commit (agent_resumed, c-1's outcome, the checkpoint) is in;
    # it dies before the checkpoint's snapshot: a second crash, nothing in flight.
    again = {**env, "AGENTLOG_FAILPOINTS": "in_snapshot:1"}
    p = python("-c", _RESUME, url, "r-c", env=again)
    assert p.returncode == -9, p.stderr[-3000:]
    assert _start(url, "r-d", None, env, retry=True, refuse=True) == 0
    assert _start(url, "r-e", None, env, confirm=True) == 0
    refused = {**env, "AGENTLOG_TEST_UNDO_FAILS": "charge:e-0"}
    first = engine_call(url, "abandon", "r-e", env=refused)
    assert first["status"] == "failed", first  # e-1 undone, e-0's undo refused
    return env


_RESUME = "import sys; from engine import Engine; Engine.open(sys.argv[1]).resume(sys.argv[2])"


@backends("sqlite", "postgres")
def test_a_scripted_scenario_of_real_crashes_gives_figures_equal_to_a_hand_count(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five runs: A and B crash once with one call in flight each, C twice (one call in
    flight the first time, none the second), all three recovered by ``engine.recover()``
    here and completed; D fails for good after a retry; E is abandoned, one of its undos
    refused once and done the second time. Hand count: 4 crashes of 3 runs, 3 recovered
    (rate 1.0), 3 calls lost (C's second crash lost none) and all 3 run again, 5 ended
    runs of which 1 failed (0.2), 3 compensations of which 1 failed, 4 checkpoints timed
    (C's timing died with it); RTO as the log's event times say."""
    env = _script(store_url, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    eng = Engine.open(store_url)
    try:
        recovered = eng.recover()
        assert sorted((r.run_id, r.status) for r in recovered) == [
            ("r-a", "completed"),
            ("r-b", "completed"),
            ("r-c", "completed"),
        ]
        assert eng.abandon("r-e").status == "abandoned"
        assert eng.state("r-d").status == "failed"
        assert service.effects(env["AGENTLOG_TEST_SERVICE"])[("charge", "c-1")] == 1  # same key

        got = recovery.summarize(eng.store, None, None)
        assert (got.crashes, got.crashed_runs, got.recovered) == (4, 3, 3)
        assert got.recovery_success_rate == 1.0
        assert (got.lost_calls, got.calls_reexecuted, got.mean_lost_calls_per_crash) == (3, 3, 0.75)
        assert (got.ended_runs, got.failed_runs, got.failure_rate) == (5, 1, 0.2)
        assert (got.compensations, got.compensations_failed) == (3, 1)

        rto = [s for rid in ORDERS for s in _crashes_in_log(eng, rid)]
        assert len(rto) == 4
        assert got.mean_time_to_recover_s == pytest.approx(sum(rto) / 4, rel=1e-9, abs=1e-9)

        timed = [e.data for rid in ORDERS for e in eng.events(rid) if e.type == "saves_timed"]
        # Each run's "charged" timed once, with its snapshot, except C's: its execution
        # died before the snapshot and the record of its timing.
        assert sum(t["checkpoints"] for t in timed) == 4
        assert sum(t["snapshots"] for t in timed) == 4
        total = sum(t["checkpoint_ms"] for t in timed)
        assert got.mean_checkpoint_save_ms == pytest.approx(total / 4)
        assert got.mean_snapshot_save_ms == pytest.approx(sum(t["snapshot_ms"] for t in timed) / 4)
        assert got.mean_checkpoint_save_ms is not None and got.mean_checkpoint_save_ms > 0

        only_d = recovery.summarize(eng.store, eng.state("r-d").started_at, None)
        assert only_d.crashes == 0 and only_d.ended_runs == 2  # D and E started at/after D
        assert recovery.summarize(eng.store, None, "nobody").ended_runs == 0
        mine = recovery.summarize(eng.store, None, "recovery:flow")
        assert (mine.crashes, mine.ended_runs) == (4, 5)
    finally:
        eng.close()


# --- the fold's edge cases, on logs written through the run writer ----------------------


def _write(eng: Engine, run_id: str, *batches: list[ev.Event]) -> None:
    w = RunWriter(eng.store, RunState(run_id=run_id))
    w.append(ev.AgentStarted(at=100.0, agent="edge:a", import_path="edge"))
    for batch in batches:
        w.append(*batch)


def _call(n: int, at: float) -> ev.ToolInvoked:
    return ev.ToolInvoked(at=at, call=n, tool="charge", side_effect=True)


def _done(n: int, at: float) -> ev.ToolSucceeded:
    return ev.ToolSucceeded(at=at, call=n, tool="charge")


def _failed(n: int, at: float) -> ev.ToolFailed:
    return ev.ToolFailed(at=at, call=n, tool="charge", kind="permanent", message="no")


def _verified(n: int, at: float) -> ev.ToolSucceeded:
    return ev.ToolSucceeded(at=at, call=n, tool="charge", source="verified")


@all_backends
def test_only_a_resume_of_a_running_run_is_a_crash(eng: Engine) -> None:
    """A resume after an answer or an adoption, after a failure, or of a paused run is no
    crash; a resume
    of a running run is, with its calls in flight lost and its RTO from the log's times."""
    _write(  # answered: the resume follows human_input_provided
        eng,
        "answered",
        [ev.HumanInputRequested(at=101.0, call=1, question="ok?")],
        [ev.HumanInputProvided(at=102.0, call=1, value=True)],
        [ev.AgentResumed(at=103.0), ev.AgentFinished(at=104.0)],
    )
    _write(  # failed, then resumed and completed
        eng,
        "failed",
        [
            _call(1, 101.0),
            ev.ToolFailed(at=102.0, call=1, tool="charge", kind="permanent", message="x"),
        ],
        [ev.AgentFailed(at=103.0, error="x")],
        [ev.AgentResumed(at=110.0), ev.AgentFinished(at=111.0)],
    )
    _write(  # crashed with calls 2 and 3 in flight (1 answered), resumed 7.5 s later
        eng,
        "crashed",
        [_call(1, 101.0), _done(1, 101.5), _call(2, 102.0)],
        [_call(3, 102.5)],
        [ev.AgentResumed(at=110.0), _call(3, 110.1), _done(3, 110.2), _verified(2, 110.3)],
        [ev.AgentFinished(at=111.0)],
    )
    _write(  # crashed with call 1 in flight (sent twice under its key), resumed 3 s
        eng,  # after its last event; it fails for good
        "crashed-failed",
        [_call(1, 101.0)],
        [_call(1, 102.0)],
        [ev.AgentResumed(at=105.0), _failed(1, 105.5), ev.AgentFailed(at=106.0, error="x")],
    )
    _write(  # imported while running, adopted, then resumed: taken on, no owner died
        eng,
        "adopted",
        [
            _call(1, 101.0),
            ev.RunImported(at=150.0),
            ev.RunAdopted(at=151.0, agent="edge:a", import_path="edge"),
        ],
        [ev.AgentResumed(at=152.0), _done(1, 152.5), ev.AgentFinished(at=153.0)],
    )
    _write(eng, "running", [_call(1, 101.0)])  # not ended: in no rate's denominator
    got = recovery.summarize(eng.store, None, None)
    assert (got.crashes, got.crashed_runs, got.recovered) == (2, 2, 1)
    assert got.recovery_success_rate == 0.5
    assert got.mean_time_to_recover_s == pytest.approx((7.5 + 3.0) / 2)
    assert (got.lost_calls, got.calls_reexecuted) == (3, 2)  # 2 verified, not run again
    assert (got.ended_runs, got.failed_runs, got.failure_rate) == (5, 1, 0.2)
    assert got.mean_checkpoint_save_ms is None and got.mean_snapshot_save_ms is None


@all_backends
def test_a_forks_copies_of_its_parents_crash_are_not_counted_again(eng: Engine) -> None:
    """A fork's copied events (its parent's crash among them) are history: the view
    counts the crash once, in the parent; the fork's own events count as its own."""
    _write(
        eng,
        "parent",
        [_call(1, 101.0)],
        [ev.AgentResumed(at=104.0), _done(1, 104.5)],
        [ev.AgentFinished(at=105.0)],
    )
    copied = [_call(1, 101.0), ev.AgentResumed(at=104.0), _done(1, 104.5)]
    w = RunWriter(eng.store, RunState(run_id="fork"))
    head = ev.AgentStarted(
        at=200.0, agent="edge:a", import_path="edge", parent_run_id="parent", inherited=3
    )
    w.append(head, *copied)
    w.append(ev.AgentFinished(at=201.0))
    got = recovery.summarize(eng.store, None, None)
    assert (got.crashes, got.lost_calls, got.ended_runs) == (1, 1, 2)
    assert got.mean_time_to_recover_s == pytest.approx(3.0)


@all_backends
def test_rebuilt_view_equals_the_incremental_one(eng: Engine) -> None:
    """Caught up in two steps or rebuilt from scratch, the rows are the same."""
    from projections.runner import Runner

    _write(eng, "one", [_call(1, 101.0)], [ev.AgentResumed(at=102.0), _done(1, 103.0)])
    runner = Runner(eng.store, [recovery.View()])
    runner.catch_up()
    _write(eng, "two", [ev.Compensated(at=101.0, call=1, tool="t", error="no")])
    runner.catch_up()
    incremental = recovery.rows(eng.store)
    runner.rebuild("recovery")
    assert recovery.rows(eng.store) == incremental and len(incremental) == 2


# --- the save timings ------------------------------------------------------------------


@all_backends
def test_checkpoint_and_snapshot_save_times_ride_the_runs_last_commit(eng: Engine) -> None:
    """Three checkpoints and their snapshots are timed; one saves_timed record rides in
    front of agent_finished (no commit of its own), and the fold ignores it."""

    def marks(run: Any) -> int:
        for name in ("a", "b", "c"):  # checkpoints at 5, 9, 13: each snapshots (gap 4)
            run.decide(f"d-{name}", lambda: 1)
            run.decide(f"e-{name}", lambda: 2)
            run.decide(f"f-{name}", lambda: 3)
            run.checkpoint(name)
        return 3

    r = eng.run(eng.agent(marks, name="edge:marks"))
    events = eng.events(r.run_id)
    types = [e.type for e in events]
    assert types[-2:] == ["saves_timed", "agent_finished"]
    assert types.count("saves_timed") == 1
    timed = events[-2].data
    assert (timed["checkpoints"], timed["snapshots"]) == (3, 3)
    assert timed["checkpoint_ms"] >= timed["snapshot_ms"] > 0
    state = eng.state(r.run_id)
    assert state.calls == 12 and state.status == "completed"
    assert eng.resume(r.run_id).output == 3  # nothing re-executes past it
    got = recovery.summarize(eng.store, None, None)
    assert got.mean_checkpoint_save_ms == pytest.approx(timed["checkpoint_ms"] / 3)
    assert got.mean_snapshot_save_ms == pytest.approx(timed["snapshot_ms"] / 3)


@all_backends
def test_save_times_held_long_ride_the_next_commit_and_never_follow_the_end(
    eng: Engine,
) -> None:
    """150 checkpoints (and their snapshots) make 100 measurements before the run ends:
    those ride the next commit, the rest the last; each checkpoint counted once. Cadence
    snapshots are timed too. An append after the run's end (an undo record) carries
    none: the log stays readable."""

    def many(run: Any) -> int:
        for i in range(150):
            run.checkpoint(f"c{i}")
        return 150

    r = eng.run(eng.agent(many, name="edge:many"))
    events = eng.events(r.run_id)
    timed = [e for e in events if e.type == "saves_timed"]
    assert len(timed) == 2 and timed[0].position < len(events) - 2
    assert timed[0].data["checkpoints"] + timed[0].data["snapshots"] >= FLUSH_AT
    assert sum(t.data["checkpoints"] for t in timed) == 150

    def plain(run: Any) -> int:  # 12 decisions, a snapshot every 5 events: 2, no checkpoint
        return sum(run.decide(f"d{i}", lambda: 1) for i in range(12))

    p = eng.run(eng.agent(plain, name="edge:plain", snapshot_every=5))
    timed = [e.data for e in eng.events(p.run_id) if e.type == "saves_timed"]
    assert [(t["checkpoints"], t["snapshots"]) for t in timed] == [(0, 2)]

    w = RunWriter(eng.store, eng.state(r.run_id))
    w.timings.add(FLUSH_AT, 2.0, [1.0], 1)  # due to ride, but the run has ended
    w.append(ev.Compensated(at=300.0, call=1, tool="t"), measure=True)
    assert [e.type for e in eng.events(r.run_id)][-2:] == ["agent_finished", "compensated"]


@backends("sqlite")
def test_the_resume_marker_has_the_time_the_resume_began_not_its_first_write(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed while a read was running (its outcome not committed) redoes the read
    on resume before it writes anything: the agent_resumed it then writes carries the time
    the resume began, before the redone read started, so the crash's time to recover
    does not include the work redone."""
    service.reset(str(tmp_path / "service.db"))
    env = {"AGENTLOG_TEST_SERVICE": str(tmp_path / "service.db")}
    assert _start(store_url, "r-a", "after_tool:1", env) == -9  # look ran, not recorded
    monkeypatch.setenv("AGENTLOG_TEST_SERVICE", env["AGENTLOG_TEST_SERVICE"])
    monkeypatch.setenv("AGENTLOG_TEST_LOOK_DELAY", "0.2")
    eng = Engine.open(store_url)
    try:
        assert eng.resume("r-a").status == "completed"
        events = [r.event for r in read_events(eng.store, "r-a")]
    finally:
        eng.close()
    resumed = next(e for e in events if isinstance(e, ev.AgentResumed))
    look = next(e for e in events if isinstance(e, ev.ToolSucceeded) and e.tool.endswith("look"))
    assert look.duration >= 0.2
    assert resumed.at <= look.at - look.duration, (resumed.at, look.at, look.duration)
