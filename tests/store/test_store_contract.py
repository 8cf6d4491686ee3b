"""The store contract, run unchanged against memory://, SQLite and PostgreSQL.

Every test here takes the ``store`` (or ``store_url``) fixture and is parametrised over all
three backends by ``all_backends``: the in-memory store is a product, not a mock.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest
from conftest import all_backends, backends, write_raw_row
from structlog.testing import capture_logs

from engine import events as ev
from engine.errors import ConcurrencyError, StoreError, UsageError
from engine.log.history import RunWriter, rebuild, run_stream, state_at
from engine.log.snapshots import SNAPSHOT_TOPIC, save_snapshot, snapshot_at_or_before
from engine.log.state import RunState, fold
from engine.store import Append, Recorded, RunRow, Store, open_store

T0 = 1_760_000_000.0


def one_of_each(t: float = T0) -> list[ev.Event]:
    """One event of every type in the vocabulary, each with non-default fields."""
    k = "refund:order-7"
    r = "0f" * 16
    return [
        ev.AgentStarted(
            at=t,
            agent="shop.agents:refund",
            import_path="shop.agents",
            input={"order": 7, "items": ["a", "b"], "note": None},
            parent_run_id="ab" * 16,
            fork_position=3,
            code_version="v1.2.3",
            version="2",
        ),
        ev.AgentResumed(at=t + 1, owner="worker-2", reason="crash"),
        ev.RunQueued(at=t + 1, queue="billing", priority=5, partition="customer:42"),
        ev.RunDequeued(at=t + 1, owner="worker-3"),
        ev.PlanCreated(at=t + 2, call=1, steps=["look up", "refund", "mail"]),
        ev.StepStarted(at=t + 3, call=2, name="look up"),
        ev.StepCompleted(at=t + 4, call=2, name="look up", duration=0.25, error="slow"),
        ev.LlmDecided(
            at=t + 5,
            call=3,
            name="choose",
            value={"tool": "refund"},
            args_hash="h1",
            attempt=2,
            tokens_in=120,
            tokens_out=30,
            cost=0.002,
        ),
        ev.UsageRecorded(at=t + 5.5, call=3, tokens_in=7, tokens_out=1, cost=None),
        ev.Checkpoint(at=t + 6, call=4, name="customer info collected"),
        ev.SavesTimed(at=t + 6.5, checkpoints=2, checkpoint_ms=3.5, snapshots=1, snapshot_ms=0.25),
        ev.TraceNoted(at=t + 6.6, trace="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ev.HumanInputRequested(at=t + 7, call=5, question="Refund 30 EUR?", reason="uncertain"),
        ev.HumanInputProvided(at=t + 8, call=5, value={"answer": "yes"}),
        ev.ToolInvoked(
            at=t + 9,
            call=6,
            tool="payments.refund",
            args={"order": 7, "amount": 30.5},
            args_hash="h2",
            key=k,
            side_effect=True,
        ),
        ev.ToolSucceeded(
            at=t + 10,
            call=6,
            tool="payments.refund",
            result={"id": "re_1", "raw": b"\x00\x01"},
            attempt=2,
            duration=1.5,
            source="verified",
        ),
        ev.ToolFailed(
            at=t + 11,
            call=7,
            tool="mail.send",
            kind="transient",
            message="timeout",
            error_type="TimeoutError",
            attempt=1,
            final=False,
            duration=3.0,
            evidence={"status": 504},
        ),
        ev.RetryScheduled(
            at=t + 12, call=7, tool="mail.send", attempt=2, delay=0.5, kind="transient"
        ),
        ev.ToolLateResult(at=t + 12.5, call=7, tool="mail.send", result="sent", error="e", after=9),
        ev.CompensationStarted(at=t + 13, call=6, tool="payments.refund", key=k),
        ev.Compensated(at=t + 14, call=6, tool="payments.refund", result=[1, 2], error="partial"),
        ev.CircuitOpened(at=t + 15, tool="mail.send", failures=5),
        ev.CircuitHalfOpened(at=t + 16, tool="mail.send"),
        ev.CircuitClosed(at=t + 17, tool="mail.send"),
        ev.EffectClaimed(at=t + 18, key=k, run_id=r, call=6, args_hash="h2"),
        ev.EffectCommitted(at=t + 19, key=k, run_id=r, call=6, result={"id": "re_1"}),
        ev.EffectReleased(at=t + 20, key=k, run_id=r, call=6, reason="compensated"),
        ev.KeyExpired(at=t + 20, key=k, ttl=604800.0, last_at=t + 19),
        ev.AgentFailed(at=t + 21, error="boom", kind="logical", call=7),
        ev.AgentAbandoned(at=t + 22, reason="operator"),
        ev.RunImported(at=t + 22.2, source="r.jsonl", events=22, chain="c" * 64, signed=True),
        ev.RunAdopted(at=t + 22.4, agent="shop:fix", import_path="shop", by="ann@h", owner="h:1"),
        ev.RunHeld(at=t + 22.42, reason="its owner h:1 died", owner="h:1"),
        ev.RunApproved(at=t + 22.44, by="ann@h", via="approve"),
        ev.ChildSpawned(at=t + 22.5, call=8, child_run_id="c1", agent="shop:pick", args_hash="h3"),
        ev.ChildFinished(at=t + 22.6, call=8, child_run_id="c1", status="failed", error="e"),
        ev.ChildPaused(at=t + 22.62, call=8, child_run_id="c1", asking_run_id="g1", question="?"),
        ev.ChildRestarted(
            at=t + 22.64,
            call=8,
            child_run_id="c2",
            previous_run_id="c1",
            strategy="one_for_all",
            reason="boom",
            restarts=2,
        ),
        ev.SupervisorEscalated(at=t + 22.66, call=8, child_run_id="c2", reason="x", restarts=4),
        ev.LockAcquired(at=t + 22.7, call=9, name="customer:42", fence=7, ttl=30.0),
        ev.LockReleased(at=t + 22.72, call=9, name="customer:42", fence=7),
        ev.MessageSent(at=t + 22.74, call=10, to_run_id="p2", topic="bid", message_id=r + ":10"),
        ev.MessagePosted(at=t + 22.76, message_id="m1", from_run_id="p2", topic="t", value=[1]),
        ev.MessageReceived(at=t + 22.78, call=11, topic="bid", message_id="m1", value={"v": 2}),
        ev.TimerSet(at=t + 22.8, call=12, until=t + 99, purpose="recv", topic="bid"),
        ev.RunWaiting(at=t + 22.82, call=12, reason="message", until=t + 99, topic="bid"),
        ev.PatchMarked(at=t + 22.9, name="send-receipt", after=12),
        ev.ForkEdited(
            at=t + 22.91,
            edits=[
                ev.Edit(
                    kind="decision", name="plan", call=3, position=7, old_hash="a", new_hash="b"
                )
            ],
            by="ops@host",
        ),
        ev.DryRunStarted(at=t + 22.92),
        ev.WouldSend(
            at=t + 22.93, call=13, tool="charge", args={"amount": 5}, key="k", stopped=True
        ),
        ev.DryRunEnded(at=t + 22.94, stopped_at=13, error="stopped at a would-be effect"),
        ev.GraphCheckpointed(
            at=t + 22.84,
            ns="",
            checkpoint_id="c1",
            kind="msgpack",
            checkpoint=b"\x80\x00",
            metadata_kind="json",
            metadata=b"{}",
            values=[ev.GraphValue(channel="m", version="1.5", kind="msgpack", data=b"\x91\x01")],
            run="lr1",
            step=0,
            source="loop",
        ),
        ev.GraphWritten(
            at=t + 22.86,
            ns="",
            checkpoint_id="c1",
            task_id="t1",
            writes=[ev.GraphWrite(channel="m", idx=0, kind="msgpack", data=b"\x01")],
        ),
        ev.GraphForgotten(
            at=t + 22.88, pruned=True, keep=[ev.GraphKept(ns="", checkpoint_id="c1")]
        ),
        ev.RecoveryDecided(
            at=t + 22.9,
            kind="logical",
            action="rollback",
            from_position=3,
            attempt=2,
            reason="invariant broken",
            call=4,
            from_call=2,
            evidence={"invariant": "paid"},
        ),
        ev.AgentFinished(at=t + 23, output={"refunded": 30.5}),
    ]


def started(t: float = T0, agent: str = "a:b") -> ev.AgentStarted:
    return ev.AgentStarted(at=t, agent=agent, import_path="a")


def step(call: int, t: float = T0) -> ev.StepStarted:
    return ev.StepStarted(at=t + call, call=call, name=f"s{call}")


def fill(store: Store, stream: uuid.UUID, n: int, first: int = 1) -> list[ev.Event]:
    events: list[ev.Event] = [step(i) for i in range(first, first + n)]
    store.append([Append(stream, first + i, e) for i, e in enumerate(events)])
    return events


def row(run_id: str, status: str, t: float, position: int = 1) -> RunRow:
    return RunRow(run_id, "a:b", status, started_at=t, updated_at=t, position=position)


def test_one_of_each_covers_the_whole_vocabulary() -> None:
    """The round-trip fixture holds exactly one event of every type in engine.events."""
    tags = [type(e).__struct_config__.tag for e in one_of_each()]
    assert sorted(tags) == sorted(ev.EVENT_TYPES)


# --- append and read ------------------------------------------------------------------


@all_backends
def test_every_event_type_round_trips_exactly(store: Store) -> None:
    """Each event type appended is read back equal, with its type and every field intact."""
    stream = uuid.uuid4()
    events = one_of_each()
    store.append([Append(stream, i, e) for i, e in enumerate(events, 1)])
    got = store.read(stream)
    assert [r.event for r in got] == events
    assert [type(r.event) for r in got] == [type(e) for e in events]
    assert all(r.stream == stream for r in got)
    assert [r.event for r in store.read_all()] == events


@all_backends
def test_every_event_type_round_trips_one_commit_each(store: Store) -> None:
    """Appending one event per commit reads back the same events as one batch does."""
    stream = uuid.uuid4()
    events = one_of_each()
    for i, e in enumerate(events, 1):
        store.append([Append(stream, i, e)])
    assert [r.event for r in store.read(stream)] == events


@all_backends
def test_positions_are_one_based_and_read_honours_after_and_upto(store: Store) -> None:
    """Positions run 1..n; read(after, upto) returns exactly after < position <= upto."""
    stream = uuid.uuid4()
    events = fill(store, stream, 6)
    assert [r.position for r in store.read(stream)] == [1, 2, 3, 4, 5, 6]
    assert [r.position for r in store.read(stream, after=2)] == [3, 4, 5, 6]
    assert [r.position for r in store.read(stream, upto=2)] == [1, 2]
    got = store.read(stream, after=2, upto=4)
    assert [(r.position, r.event) for r in got] == [(3, events[2]), (4, events[3])]
    assert store.read(stream, after=6) == []
    assert store.read(stream, after=3, upto=3) == []
    assert store.read(stream, upto=0) == []


@all_backends
def test_last_position_is_the_highest_position_or_zero(store: Store) -> None:
    """last_position is 0 for an unknown stream and the highest position otherwise."""
    stream = uuid.uuid4()
    assert store.last_position(stream) == 0
    assert store.read(stream) == []
    fill(store, stream, 3)
    assert store.last_position(stream) == 3
    fill(store, stream, 2, first=4)
    assert store.last_position(stream) == 5


@all_backends
def test_streams_are_independent(store: Store) -> None:
    """Events of one stream never show up when reading another."""
    a, b = uuid.uuid4(), uuid.uuid4()
    ea = fill(store, a, 3)
    eb = fill(store, b, 2)
    assert [r.event for r in store.read(a)] == ea
    assert [r.event for r in store.read(b)] == eb


@all_backends
def test_one_append_writes_several_streams_in_one_commit(store: Store) -> None:
    """A list of Appends over several streams commits together with consecutive positions."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fill(store, a, 1)
    items = [
        Append(a, 2, step(2)),
        Append(b, 1, step(1)),
        Append(c, 1, step(1)),
        Append(b, 2, step(2)),
    ]
    ids = store.append(items)
    assert ids == [2, 3, 4, 5]
    assert [r.position for r in store.read(a)] == [1, 2]
    assert [r.position for r in store.read(b)] == [1, 2]
    assert [r.position for r in store.read(c)] == [1]
    tail = store.read_all(after=1)
    assert [(r.stream, r.position, r.global_position) for r in tail] == [
        (a, 2, 2),
        (b, 1, 3),
        (c, 1, 4),
        (b, 2, 5),
    ]


# --- optimistic concurrency -----------------------------------------------------------


@all_backends
def test_append_at_taken_position_raises_and_writes_nothing(store: Store) -> None:
    """A batch with one taken position raises ConcurrencyError; no stream and no run row change."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fill(store, a, 2)
    store.append([Append(c, 1, started())], runs=[row("run-c", "running", T0)])
    before_all = store.read_all()
    with pytest.raises(ConcurrencyError) as info:
        store.append(
            [Append(b, 1, step(1)), Append(b, 2, step(2)), Append(a, 2, step(9))],
            runs=[row("run-new", "running", T0 + 5), row("run-c", "completed", T0 + 5, 9)],
        )
    assert store.name in str(info.value)
    assert isinstance(info.value, StoreError)
    assert store.read(b) == []
    assert [r.event for r in store.read(a)] == [step(1), step(2)]
    assert store.read_all() == before_all
    assert store.max_global_position() == 3
    assert store.run_ids("run-new") == []
    assert store.runs() == [row("run-c", "running", T0)]


@all_backends
def test_duplicate_position_within_one_batch_is_a_conflict(store: Store) -> None:
    """Two events for the same stream position in one batch raise and write nothing."""
    a, b = uuid.uuid4(), uuid.uuid4()
    with pytest.raises(ConcurrencyError):
        store.append([Append(b, 1, step(1)), Append(a, 1, step(1)), Append(a, 1, step(2))])
    assert store.read(a) == [] and store.read(b) == []
    assert store.max_global_position() == 0


@all_backends
def test_conflicting_run_writer_keeps_its_state(store: Store) -> None:
    """A RunWriter whose next position was taken raises and neither its state nor the log moves."""
    run_id = uuid.uuid4().hex
    w1 = RunWriter(store, RunState(run_id=run_id))
    w1.append(started())
    w2 = RunWriter(store, w1.state)
    w1.append(step(1))
    before = w2.state
    with pytest.raises(ConcurrencyError):
        w2.append(step(7))
    assert w2.state == before
    assert [r.event for r in store.read(run_stream(run_id))] == [started(), step(1)]


# --- the global log -------------------------------------------------------------------


@all_backends
def test_read_all_returns_every_event_once_in_commit_order(store: Store) -> None:
    """read_all yields each event exactly once, in commit order, with increasing positions."""
    streams = [uuid.uuid4() for _ in range(3)]
    committed: list[tuple[uuid.UUID, int]] = []
    returned: list[int] = []
    for i in range(12):
        s = streams[i * 7 % 3]
        pos = store.last_position(s) + 1
        batch = [Append(s, pos, step(pos))]
        if i % 4 == 0:
            batch.append(Append(s, pos + 1, step(pos + 1)))
        returned += store.append(batch)
        committed += [(a.stream, a.position) for a in batch]
    everything = store.read_all()
    assert [(r.stream, r.position) for r in everything] == committed
    globals_ = [r.global_position for r in everything]
    assert globals_ == returned == list(range(1, len(committed) + 1))
    assert store.max_global_position() == len(committed)
    paged: list[Recorded] = []
    cursor = 0
    while page := store.read_all(after=cursor, limit=4):
        assert len(page) <= 4
        paged += page
        cursor = page[-1].global_position or 0
    assert paged == everything
    assert store.read_all(after=len(committed)) == []


@all_backends
def test_empty_store_has_no_global_position(store: Store) -> None:
    """A new store reads nothing and its max global position is 0."""
    assert store.read_all() == []
    assert store.max_global_position() == 0
    assert store.runs() == []


# --- the run index --------------------------------------------------------------------


@all_backends
def test_run_index_lists_newest_first_and_filters_by_status(store: Store) -> None:
    """runs() is newest first; runs(status) only that status; an upsert updates status."""
    ids = ["aa" + uuid.uuid4().hex[2:], "ab" + uuid.uuid4().hex[2:], "b" + uuid.uuid4().hex[1:]]
    for i, run_id in enumerate(ids):
        stream = run_stream(run_id)
        store.append([Append(stream, 1, started(T0 + i))], runs=[row(run_id, "running", T0 + i)])
    done = row(ids[0], "completed", T0, position=2)
    store.append([Append(run_stream(ids[0]), 2, ev.AgentFinished(at=T0 + 9))], runs=[done])
    assert [r.run_id for r in store.runs()] == [ids[2], ids[1], ids[0]]
    assert store.runs("completed") == [done]
    assert [r.run_id for r in store.runs("running")] == [ids[2], ids[1]]
    assert store.runs("failed") == []
    assert sorted(store.run_ids("a")) == sorted(ids[:2])
    assert store.run_ids(ids[1][:6]) == [ids[1]]
    assert store.run_ids("c") == []


@all_backends
def test_run_id_prefix_is_literal_not_a_pattern(store: Store) -> None:
    """run_ids treats LIKE's '%', '_', '\\' and GLOB's '*', '?', '[' in the prefix literally."""
    names = ["x_1", "xy1", "x%2", "xz2", "x\\3", "x*4", "x?5", "x[6]", "x]7"]
    store.append([], runs=[row(n, "running", T0 + i) for i, n in enumerate(names)])
    assert store.run_ids("x_") == ["x_1"]
    assert store.run_ids("x%") == ["x%2"]
    assert store.run_ids("x\\") == ["x\\3"]
    assert store.run_ids("x*") == ["x*4"]
    assert store.run_ids("x?") == ["x?5"]
    assert store.run_ids("x[6") == ["x[6]"]
    assert store.run_ids("x]") == ["x]7"]
    assert sorted(store.run_ids("x")) == sorted(names)


@all_backends
def test_run_id_prefix_is_case_sensitive_on_every_store(store: Store) -> None:
    """Ids that differ only in case are different runs: a prefix matches its own case only,
    and the ten ids a short prefix lists are the same, in the same order, on every store."""
    names = ["AbC1", "abc2", "ABC3", "abC4", "Z_1", "z_2"]
    store.append([], runs=[row(n, "running", T0 + i) for i, n in enumerate(names)])
    assert store.run_ids("abc") == ["abc2"]
    assert store.run_ids("Ab") == ["AbC1"]
    assert store.run_ids("ABC") == ["ABC3"]
    assert store.run_ids("aB") == []
    assert store.run_ids("z_") == ["z_2"]
    assert store.run_ids("AbC1") == ["AbC1"]
    many = [f"{c}{i}" for i in range(6) for c in "aA"]
    store.append([], runs=[row(n, "running", T0 + 10) for n in many])
    assert store.run_ids("") == sorted([*names, *many])[:10]


@all_backends
def test_run_ids_returns_at_most_ten(store: Store) -> None:
    """A short prefix matching many runs yields at most ten ids."""
    store.append([], runs=[row(f"r{i:02d}", "running", T0 + i) for i in range(14)])
    got = store.run_ids("r")
    assert len(got) == 10 and set(got) <= {f"r{i:02d}" for i in range(14)}


@all_backends
def test_run_writer_keeps_the_index_in_step_with_the_log(store: Store) -> None:
    """RunWriter writes the index row at start and on each status change, in the same commit."""
    run_id = uuid.uuid4().hex
    w = RunWriter(store, RunState(run_id=run_id))
    w.append(started(agent="shop:refund"))
    (r,) = store.runs()
    assert (r.run_id, r.agent, r.status, r.started_at, r.position) == (
        run_id,
        "shop:refund",
        "running",
        T0,
        1,
    )
    w.append(ev.HumanInputRequested(at=T0 + 1, call=1, question="ok?"))
    assert [x.status for x in store.runs()] == ["paused"]
    w.append(ev.HumanInputProvided(at=T0 + 2, call=1, value=True), ev.AgentFinished(at=T0 + 3))
    (r,) = store.runs("completed")
    assert (r.position, r.updated_at) == (4, T0 + 3)


# --- one URL opened twice -------------------------------------------------------------


@backends("sqlite", "postgres")
def test_opening_a_store_twice_is_harmless_and_shares_the_data(store_url: str) -> None:
    """A second open of the same URL creates nothing new and sees (and adds to) the same log."""
    first = open_store(store_url)
    try:
        run_id = uuid.uuid4().hex
        stream = run_stream(run_id)
        w = RunWriter(first, RunState(run_id=run_id), snapshot_every=2)
        w.append(started(), step(1))
        second = open_store(store_url)
        try:
            assert [r.event for r in second.read(stream)] == [started(), step(1)]
            assert [r.run_id for r in second.runs()] == [run_id]
            assert snapshot_at_or_before(second, stream, None) == w.state
            second.append([Append(stream, 3, step(2))])
            assert first.last_position(stream) == 3
            assert first.max_global_position() == second.max_global_position() == 3
        finally:
            second.close()
        third = open_store(store_url)
        third.close()
        assert first.last_position(stream) == 3
    finally:
        first.close()


# --- snapshots ------------------------------------------------------------------------


@all_backends
def test_snapshot_at_or_before_returns_the_newest_one_not_after_the_position(store: Store) -> None:
    """snapshot_at_or_before(p) is the newest saved state with position <= p (None: newest)."""
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    events = [started(), *(step(i) for i in range(1, 9))]
    states = {p: fold(list(enumerate(events[:p], 1)), RunState(run_id=run_id)) for p in (3, 6)}
    for s in states.values():
        save_snapshot(store, stream, s)
    save_snapshot(store, stream, states[6])  # saving twice is harmless
    assert snapshot_at_or_before(store, stream, 2) is None
    assert snapshot_at_or_before(store, stream, 3) == states[3]
    assert snapshot_at_or_before(store, stream, 5) == states[3]
    assert snapshot_at_or_before(store, stream, 6) == states[6]
    assert snapshot_at_or_before(store, stream, 100) == states[6]
    assert snapshot_at_or_before(store, stream, None) == states[6]
    assert snapshot_at_or_before(store, uuid.uuid4(), None) is None


@all_backends
def test_snapshot_order_of_saving_does_not_matter(store: Store) -> None:
    """Snapshots saved out of order: the newest position at or before p wins, not the last saved."""
    stream = uuid.uuid4()
    for p in (6, 2, 9, 4):
        save_snapshot(store, stream, RunState(run_id=stream.hex, position=p))
    got = {p: snapshot_at_or_before(store, stream, p) for p in (1, 3, 5, 8, None)}
    assert {p: s.position if s else None for p, s in got.items()} == {
        1: None,
        3: 2,
        5: 4,
        8: 6,
        None: 9,
    }


@all_backends
def test_run_writer_snapshots_every_n_events_and_not_at_checkpoints(store: Store) -> None:
    """snapshot_every=4: snapshots at 4, 8, and where a batch crosses 12; a checkpoint
    (position 7) takes none, so storage does not grow with checkpoints."""
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=4)
    w.append(started())
    for i in range(1, 6):
        w.append(step(i))  # positions 2..6
    w.append(ev.Checkpoint(at=T0 + 7, call=6, name="cp"))  # 7
    for i in range(7, 10):
        w.append(step(i))  # 8..10
    w.append(step(10), step(11), step(12), step(13))  # 11..14: crosses 12, snapshot at 14
    assert w.state.position == 14
    expected = {4, 8, 14}
    for p in range(1, 15):
        snap = snapshot_at_or_before(store, stream, p)
        newest = max((s for s in expected if s <= p), default=None)
        assert (snap.position if snap else None) == newest, p
    full = fold([(r.position, r.event) for r in store.read(stream)], RunState(run_id=run_id))
    assert snapshot_at_or_before(store, stream, None) == full == w.state


# --- history: state at a position, a checkpoint, or the latest -------------------------


def _checkpointed_run(store: Store) -> tuple[str, list[ev.Event]]:
    run_id = uuid.uuid4().hex
    events: list[ev.Event] = [
        started(),
        step(1),
        ev.Checkpoint(at=T0 + 2, call=2, name="collected"),
        ev.ToolInvoked(at=T0 + 3, call=3, tool="t", side_effect=True, key="k"),
        ev.ToolSucceeded(at=T0 + 4, call=3, tool="t", result={"n": 1}),
        ev.Checkpoint(at=T0 + 5, call=4, name="collected"),
        step(5),
        ev.Checkpoint(at=T0 + 7, call=6, name="other"),
        ev.ToolInvoked(at=T0 + 8, call=7, tool="u"),
    ]
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=3)
    for e in events:
        w.append(e)
    return run_id, events


def _fold_upto(run_id: str, events: list[ev.Event], p: int) -> RunState:
    return fold(list(enumerate(events[:p], 1)), RunState(run_id=run_id))


@all_backends
def test_state_at_a_position_equals_the_fold_of_the_prefix(store: Store) -> None:
    """state_at(run, p) (an int or an all-digit string) equals folding events 1..p."""
    run_id, events = _checkpointed_run(store)
    for p in range(1, len(events) + 1):
        assert state_at(store, run_id, p) == _fold_upto(run_id, events, p)
        assert state_at(store, run_id, str(p)) == _fold_upto(run_id, events, p)


@all_backends
def test_state_at_a_checkpoint_name_uses_its_latest_occurrence(store: Store) -> None:
    """A checkpoint name resolves to its last occurrence; None gives the latest state."""
    run_id, events = _checkpointed_run(store)
    assert state_at(store, run_id, "collected") == _fold_upto(run_id, events, 6)
    assert state_at(store, run_id, "collected").position == 6
    assert state_at(store, run_id, "other") == _fold_upto(run_id, events, 8)
    latest = state_at(store, run_id)
    assert latest == _fold_upto(run_id, events, len(events)) == rebuild(store, run_id)
    assert latest.pending == [latest.pending[0]] and latest.pending[0].call == 7


@all_backends
def test_state_at_rejects_unknown_names_positions_and_runs(store: Store) -> None:
    """Unknown checkpoint names, positions outside the run and empty runs raise UsageError."""
    run_id, events = _checkpointed_run(store)
    with pytest.raises(UsageError, match="no checkpoint named 'nope'"):
        state_at(store, run_id, "nope")
    for bad in (0, len(events) + 1, "99"):
        with pytest.raises(UsageError, match="outside the run"):
            state_at(store, run_id, bad)
    with pytest.raises(UsageError, match="has no events"):
        state_at(store, uuid.uuid4().hex)
    with pytest.raises(UsageError, match="not a run id"):
        state_at(store, "")


@all_backends
def test_a_checkpoint_named_with_non_ascii_digits_is_a_name(store: Store) -> None:
    """Only ASCII digits mean a position: a checkpoint named "²" resolves by name."""
    run_id = uuid.uuid4().hex
    w = RunWriter(store, RunState(run_id=run_id))
    w.append(started(), ev.Checkpoint(at=T0 + 1, call=1, name="²"), step(2))
    assert state_at(store, run_id, "²").position == 2
    with pytest.raises(UsageError, match="no checkpoint named '³'"):
        state_at(store, run_id, "³")


# --- corrupt snapshots ----------------------------------------------------------------

GARBAGE = [
    (SNAPSHOT_TOPIC, b"\xc1\xff garbage \x00"),  # not msgpack
    (SNAPSHOT_TOPIC, msgspec.msgpack.encode([1, 2, 3])),  # msgpack, not a RunState
    ("run_state:99", msgspec.msgpack.encode(RunState(position=7))),  # unknown topic
    (SNAPSHOT_TOPIC + "@blob", b"\x92\xa3abc\x05"),  # blob topic, garbage reference
    (SNAPSHOT_TOPIC + "@blob", msgspec.msgpack.encode({"sha256": "00" * 32, "size": 5})),
]


@all_backends
def test_corrupt_snapshots_are_skipped_with_a_warning(store_url: str, store: Store) -> None:
    """Garbage snapshot rows are skipped (one warning each) and the state is still exact."""
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    events: list[ev.Event] = [started(), *(step(i) for i in range(1, 14))]
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=5)
    for e in events:
        w.append(e)  # snapshots at 5 and 10
    # Overwrite the snapshot at 10, and plant newer bad rows at 11..14.
    bad = {10: GARBAGE[0], 11: GARBAGE[1], 12: GARBAGE[2], 13: GARBAGE[3], 14: GARBAGE[4]}
    # A snapshot whose position disagrees with its row.
    bad[6] = (SNAPSHOT_TOPIC, msgspec.msgpack.encode(_fold_upto(run_id, events, 5)))
    for pos in sorted(bad):
        write_raw_row(store_url, store, "snapshots", stream, pos, *bad[pos])
    with capture_logs() as logs:
        latest = rebuild(store, run_id)
        at_nine = rebuild(store, run_id, 9)
    assert latest == _fold_upto(run_id, events, 14) == w.state == state_at(store, run_id)
    assert at_nine == _fold_upto(run_id, events, 9) == state_at(store, run_id, 9)
    skipped = [e for e in logs if e["event"] == "snapshot_skipped"]
    assert all(e["log_level"] == "warning" and e["stream"] == str(stream) for e in skipped)
    # latest: 14, 13, 12, 11, 10 and 6 skipped, 5 used; at 9: 6 skipped, 5 used.
    assert [e["position"] for e in skipped] == [14, 13, 12, 11, 10, 6, 6]
    assert snapshot_at_or_before(store, stream, None) == _fold_upto(run_id, events, 5)


@all_backends
def test_more_corrupt_snapshots_than_a_page_are_all_skipped(store_url: str, store: Store) -> None:
    """Twelve consecutive corrupt snapshots (more than one read page) still find the good one."""
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    events: list[ev.Event] = [started(), *(step(i) for i in range(1, 13))]
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=1000)
    for e in events:
        w.append(e)
    save_snapshot(store, stream, _fold_upto(run_id, events, 1))
    for pos in range(2, 14):
        write_raw_row(store_url, store, "snapshots", stream, pos, *GARBAGE[pos % len(GARBAGE)])
    with capture_logs() as logs:
        snap = snapshot_at_or_before(store, stream, None)
        latest = rebuild(store, run_id)
    assert snap == _fold_upto(run_id, events, 1)
    assert latest == _fold_upto(run_id, events, 13) == w.state
    assert len([e for e in logs if e["event"] == "snapshot_skipped"]) == 2 * 12


@all_backends
def test_an_exact_run_id_is_found_among_many_runs_it_prefixes(store: Store) -> None:
    """run_ids lists in id order, so an exact id comes first among the ids it prefixes."""
    names = ["r1", *[f"r1{i:02d}" for i in range(20)]]
    store.append([], runs=[row(n, "running", T0 + i) for i, n in enumerate(reversed(names))])
    assert store.run_ids("r1")[0] == "r1"
