"""Bounded storage (issue 10 §6): a snapshot's size follows the run's working state, not its
history. Checkpoints are read from the log and the input from ``agent_started``, so after
hundreds of checkpoints (distinct names or one repeated) the snapshots stay within twice
the bytes of the events, on real SQLite and PostgreSQL stores."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import all_backends, backends, read_raw_rows

from engine import Engine
from engine import events as ev
from engine.log.history import CHECKPOINT_GAP, RunWriter, run_stream
from engine.log.snapshots import snapshot_at_or_before
from engine.log.state import RunState
from engine.store import Store
from engine.store.base import BLOB_SUFFIX, BlobRef

CHECKPOINTS = 500  # the bound is a ratio: 500 shows it as 2,000 does (scripts/bench_snapshots.py)


def _sizes(store: Store, table: str, run_id: str) -> list[int]:
    """The stored payload bytes of each row of the run's stream in ``table`` (a payload
    moved out of line counts at its full size)."""
    sizes = []
    for row in read_raw_rows(store, table, run_stream(run_id)):
        if row.topic.endswith(BLOB_SUFFIX):
            sizes.append(msgspec.msgpack.decode(row.state, type=BlobRef).size)
        else:
            sizes.append(len(row.state))
    return sizes


def _many(run: Any, n: int, repeat: bool) -> int:
    for i in range(n):
        run.checkpoint("again" if repeat else f"step-{i:05d}")
    return n


def _started(run_id: str) -> ev.AgentStarted:
    return ev.AgentStarted(at=1.0, agent=f"bounds:{run_id}", import_path="bounds")


def _mark(name: str) -> ev.Checkpoint:
    return ev.Checkpoint(at=1.0, call=0, name=name)


@backends("sqlite", "postgres")
@pytest.mark.parametrize("repeat", [False, True], ids=["distinct", "repeated"])
def test_snapshots_after_many_checkpoints_stay_within_twice_the_event_bytes(
    eng: Engine, repeat: bool
) -> None:
    """500 checkpoints with distinct names, or one name repeated: the run's snapshots
    take at most 2x the bytes of its events, and the last snapshot is no larger than the
    first (beyond the width of its counters): none holds the checkpoints seen so far."""
    r = eng.run(eng.agent(_many, name="bounds:many"), n=CHECKPOINTS, repeat=repeat)
    assert r.status == "completed"
    events = _sizes(eng.store, "events", r.run_id)
    snapshots = _sizes(eng.store, "snapshots", r.run_id)
    timed = sum(e.type == "saves_timed" for e in eng.events(r.run_id))  # save timings
    assert len(events) == CHECKPOINTS + 2 + timed
    assert len(snapshots) >= CHECKPOINTS // 100  # the cadence still snapshots
    assert sum(snapshots) <= 2 * sum(events), (sum(snapshots), sum(events))
    assert max(snapshots) <= snapshots[0] + 8, snapshots
    marks = eng.checkpoints(r.run_id)
    assert len(marks) == CHECKPOINTS  # every occurrence is still listed, read from the log
    latest = marks[-1] if repeat else marks[0]
    assert eng.state(r.run_id, at=latest.name).position == latest.position


@all_backends
def test_the_input_is_stored_once_and_rewind_reads_it_from_agent_started(eng: Engine) -> None:
    """A 20 kB input lives in agent_started alone: no snapshot carries it, and a rewind
    (which re-executes the agent) still receives it, read from the parent's log."""
    doc = "x" * 20_000

    def reader(run: Any, doc: str) -> int:
        for i in range(150):
            run.checkpoint(f"cp-{i}")
        return len(doc)

    agent = eng.agent(reader, name="bounds:reader")
    r = eng.run(agent, doc=doc)
    assert r.output == len(doc)
    snapshots = _sizes(eng.store, "snapshots", r.run_id)
    assert snapshots and max(snapshots) < 1000, snapshots
    assert _sizes(eng.store, "events", r.run_id)[0] > len(doc)  # agent_started holds it
    fork = eng.rewind(r.run_id, to="cp-10")
    assert (fork.status, fork.output) == ("completed", len(doc))
    assert eng.events(fork.run_id)[0].data["input"] == {"doc": doc}


def _snapshot_positions(store: Store, run_id: str) -> list[int]:
    return [row.originator_version for row in read_raw_rows(store, "snapshots", run_stream(run_id))]


@all_backends
def test_a_checkpoint_snapshots_unless_one_is_fewer_than_checkpoint_gap_events_back(
    eng: Engine,
) -> None:
    """Checkpoints at positions 2..13 with a cadence of 10: a checkpoint snapshots when the
    newest snapshot is CHECKPOINT_GAP (4) or more events back (4, 8), the cadence still
    snapshots (10) and counts as the newest, so 11..13 take none; state at any name folds
    from at most CHECKPOINT_GAP - 1 events past a snapshot."""
    assert CHECKPOINT_GAP == 4  # the positions below are worked out for a gap of 4
    agent = eng.agent(_many, name="bounds:short", snapshot_every=10)
    r = eng.run(agent, n=12, repeat=False)  # agent_started 1, checkpoints 2..13, finished 14
    assert _snapshot_positions(eng.store, r.run_id) == [4, 8, 10]
    at = eng.state(r.run_id, at="step-00003")
    assert (at.position, at.calls, at.status) == (5, 4, "running")
    assert [c.position for c in eng.checkpoints(r.run_id, upto=5)] == [2, 3, 4, 5]
    assert eng.checkpoints(r.run_id, upto=10**6) == eng.checkpoints(r.run_id)  # past the end
    for ref in eng.checkpoints(r.run_id):
        snap = snapshot_at_or_before(eng.store, run_stream(r.run_id), ref.position)
        assert ref.position - (snap.position if snap else 0) < CHECKPOINT_GAP, ref


@all_backends
def test_a_writer_resumed_from_a_loaded_state_snapshots_at_its_first_due_checkpoint(
    eng: Engine,
) -> None:
    """A writer built from a state it did not write cannot know where the newest snapshot
    is, so it counts from the run's start: its first checkpoint CHECKPOINT_GAP or more
    events in snapshots even one event after the first writer's snapshot, then the gap
    rule holds again."""
    rid = "bounds-resumed"
    w1 = RunWriter(eng.store, RunState(run_id=rid), snapshot_every=1000)
    w1.append(_started(rid), *(_mark(f"a{i}") for i in range(3)))  # 1..4: snapshot at 4
    w2 = RunWriter(eng.store, w1.state, snapshot_every=1000)
    for i in range(5):
        w2.append(_mark(f"b{i}"))  # 5..9: 5 (counted from 0), then 9
    assert _snapshot_positions(eng.store, rid) == [4, 5, 9]
