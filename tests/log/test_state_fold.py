"""The pure fold: snapshot ⊕ tail equals the full fold, in memory and through real stores.

Hypothesis draws event sequences over the whole vocabulary (sensible fields: small call
numbers so intents meet outcomes, a few repeated checkpoint names) and snapshot positions.
"""

from __future__ import annotations

import tempfile
import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import events as ev
from engine.log.history import CHECKPOINT_GAP, RunWriter, rebuild, run_stream, state_at
from engine.log.runcheck import AFTER_END, ENDS
from engine.log.snapshots import save_snapshot, snapshot_at_or_before
from engine.log.state import OBSERVATION_LIMIT, RECENT_LIMIT, RunState, evolve, fold, observe
from engine.store import Store, open_store

# --- strategies -----------------------------------------------------------------------

ats = st.floats(1.6e9, 1.9e9, allow_nan=False)
calls = st.integers(1, 8)
tools = st.sampled_from(["search", "payments.refund", "mail.send"])
names = st.sampled_from(["collected", "refunded", "done"])
short = st.text(max_size=8)
maybe_short = st.none() | short
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | short
    | st.binary(max_size=8)
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short, inner, max_size=3),
    max_leaves=6,
)
dicts = st.dictionaries(short, values, max_size=3)
kinds = st.sampled_from(["transient", "permanent", "indeterminate", "logical"])
keys = st.none() | st.sampled_from(["refund:1", "mail:2"])
run_ids = st.sampled_from(["ab" * 16, "cd" * 16])

EVENT_STRATEGIES: dict[str, st.SearchStrategy[ev.Event]] = {
    "agent_started": st.builds(
        ev.AgentStarted,
        at=ats,
        agent=st.sampled_from(["shop:refund", "mail:send"]),
        import_path=short,
        input=dicts,
        parent_run_id=st.none() | run_ids,
        fork_position=st.none() | st.integers(1, 50),
        code_version=maybe_short,
        version=maybe_short,
    ),
    "agent_resumed": st.builds(ev.AgentResumed, at=ats, owner=short, reason=short),
    "run_queued": st.builds(
        ev.RunQueued, at=ats, queue=short, priority=st.integers(-5, 5), partition=short
    ),
    "run_dequeued": st.builds(ev.RunDequeued, at=ats, owner=short),
    "agent_finished": st.builds(ev.AgentFinished, at=ats, output=values),
    "agent_failed": st.builds(
        ev.AgentFailed, at=ats, error=short, kind=kinds, call=st.none() | calls
    ),
    "agent_abandoned": st.builds(ev.AgentAbandoned, at=ats, reason=short),
    "plan_created": st.builds(
        ev.PlanCreated, at=ats, call=calls, steps=st.lists(short, max_size=4)
    ),
    "step_started": st.builds(ev.StepStarted, at=ats, call=calls, name=names),
    "step_completed": st.builds(
        ev.StepCompleted,
        at=ats,
        call=calls,
        name=names,
        duration=st.floats(0, 100),
        error=maybe_short,
    ),
    "llm_decided": st.builds(
        ev.LlmDecided,
        at=ats,
        call=calls,
        name=names,
        value=values,
        args_hash=short,
        duration=st.floats(0, 100),
        attempt=st.integers(1, 9),
        tokens_in=st.integers(0, 10**6),
        tokens_out=st.integers(0, 10**6),
        cost=st.none() | st.floats(0, 100),
    ),
    "usage_recorded": st.builds(
        ev.UsageRecorded,
        at=ats,
        call=calls,
        tokens_in=st.integers(0, 10**6),
        tokens_out=st.integers(0, 10**6),
        cost=st.none() | st.floats(0, 100),
    ),
    "checkpoint": st.builds(ev.Checkpoint, at=ats, call=calls, name=names),
    "saves_timed": st.builds(
        ev.SavesTimed,
        at=ats,
        checkpoints=st.integers(0, 9),
        checkpoint_ms=st.floats(0, 100),
        snapshots=st.integers(0, 9),
        snapshot_ms=st.floats(0, 100),
    ),
    "trace_noted": st.builds(ev.TraceNoted, at=ats, trace=names, origin=st.booleans()),
    "human_input_requested": st.builds(
        ev.HumanInputRequested,
        at=ats,
        call=calls,
        question=short,
        reason=st.sampled_from(["question", "uncertain"]),
    ),
    "human_input_provided": st.builds(ev.HumanInputProvided, at=ats, call=calls, value=values),
    "tool_invoked": st.builds(
        ev.ToolInvoked,
        at=ats,
        call=calls,
        tool=tools,
        args=dicts,
        args_hash=short,
        key=keys,
        side_effect=st.booleans(),
    ),
    "tool_succeeded": st.builds(
        ev.ToolSucceeded,
        at=ats,
        call=calls,
        tool=tools,
        result=values,
        attempt=st.integers(1, 5),
        duration=st.floats(0, 100),
        source=st.sampled_from(["executed", "verified", "ledger", "fallback", "human"]),
    ),
    "tool_failed": st.builds(
        ev.ToolFailed,
        at=ats,
        call=calls,
        tool=tools,
        kind=kinds,
        message=short,
        error_type=short,
        attempt=st.integers(1, 5),
        final=st.booleans(),
        duration=st.floats(0, 100),
        evidence=dicts,
    ),
    "tool_late_result": st.builds(
        ev.ToolLateResult,
        at=ats,
        call=calls,
        tool=tools,
        result=values,
        error=maybe_short,
        after=st.floats(0, 100),
    ),
    "retry_scheduled": st.builds(
        ev.RetryScheduled,
        at=ats,
        call=calls,
        tool=tools,
        attempt=st.integers(2, 6),
        delay=st.floats(0, 60),
        kind=kinds,
    ),
    "compensation_started": st.builds(
        ev.CompensationStarted, at=ats, call=calls, tool=tools, key=keys
    ),
    "compensated": st.builds(
        ev.Compensated, at=ats, call=calls, tool=tools, result=values, error=maybe_short
    ),
    "run_imported": st.builds(
        ev.RunImported, at=ats, source=short, events=calls, chain=short, signed=st.booleans()
    ),
    "run_held": st.builds(ev.RunHeld, at=ats, reason=short, owner=short),
    "run_approved": st.builds(ev.RunApproved, at=ats, by=short, via=short),
    "run_adopted": st.builds(
        ev.RunAdopted, at=ats, agent=st.sampled_from(["shop:refund"]), import_path=short, by=short
    ),
    "circuit_opened": st.builds(ev.CircuitOpened, at=ats, tool=tools, failures=st.integers(0, 10)),
    "circuit_half_opened": st.builds(ev.CircuitHalfOpened, at=ats, tool=tools),
    "circuit_closed": st.builds(ev.CircuitClosed, at=ats, tool=tools),
    "effect_claimed": st.builds(
        ev.EffectClaimed, at=ats, key=short, run_id=run_ids, call=calls, args_hash=short
    ),
    "effect_committed": st.builds(
        ev.EffectCommitted, at=ats, key=short, run_id=run_ids, call=calls, result=values
    ),
    "effect_released": st.builds(
        ev.EffectReleased, at=ats, key=short, run_id=run_ids, call=calls, reason=short
    ),
    "key_expired": st.builds(
        ev.KeyExpired, at=ats, key=short, ttl=st.floats(1.0, 1e7), last_at=ats
    ),
    "child_spawned": st.builds(
        ev.ChildSpawned, at=ats, call=calls, child_run_id=run_ids, agent=short, args_hash=short
    ),
    "child_finished": st.builds(
        ev.ChildFinished,
        at=ats,
        call=calls,
        child_run_id=run_ids,
        status=st.sampled_from(["completed", "failed", "abandoned"]),
        output=values,
        error=st.none() | short,
    ),
    "child_paused": st.builds(
        ev.ChildPaused,
        at=ats,
        call=calls,
        child_run_id=run_ids,
        asking_run_id=run_ids,
        question=short,
    ),
    "child_restarted": st.builds(
        ev.ChildRestarted,
        at=ats,
        call=calls,
        child_run_id=run_ids,
        previous_run_id=run_ids,
        strategy=st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"]),
        reason=short,
        restarts=calls,
    ),
    "supervisor_escalated": st.builds(
        ev.SupervisorEscalated, at=ats, call=calls, child_run_id=run_ids, reason=short
    ),
    "lock_acquired": st.builds(ev.LockAcquired, at=ats, call=calls, name=short, fence=calls),
    "lock_released": st.builds(ev.LockReleased, at=ats, call=calls, name=short, fence=calls),
    "message_sent": st.builds(
        ev.MessageSent, at=ats, call=calls, to_run_id=run_ids, topic=short, message_id=short
    ),
    "message_posted": st.builds(
        ev.MessagePosted, at=ats, message_id=short, from_run_id=run_ids, topic=short, value=values
    ),
    "message_received": st.builds(
        ev.MessageReceived,
        at=ats,
        call=calls,
        topic=short,
        message_id=st.none() | short,
        value=values,
    ),
    "timer_set": st.builds(
        ev.TimerSet, at=ats, call=calls, until=ats, purpose=st.sampled_from(["sleep", "recv"])
    ),
    "run_waiting": st.builds(
        ev.RunWaiting,
        at=ats,
        call=calls,
        reason=st.sampled_from(["timer", "message", "child"]),
        until=st.none() | ats,
        topic=st.none() | short,
        child_run_id=st.none() | run_ids,
    ),
    "patch_marked": st.builds(ev.PatchMarked, at=ats, name=short, after=calls),
    "fork_edited": st.builds(
        ev.ForkEdited,
        at=ats,
        edits=st.lists(
            st.builds(
                ev.Edit,
                kind=st.sampled_from(["decision", "answer", "tool"]),
                name=short,
                call=calls,
                position=st.integers(1, 50),
                old_hash=short,
                new_hash=short,
            ),
            max_size=3,
        ),
        by=short,
    ),
    "dry_run_started": st.builds(ev.DryRunStarted, at=ats),
    "would_send": st.builds(
        ev.WouldSend,
        at=ats,
        call=calls,
        tool=tools,
        args=dicts,
        args_hash=short,
        key=keys,
        stopped=st.booleans(),
    ),
    "dry_run_ended": st.builds(
        ev.DryRunEnded,
        at=ats,
        output=values,
        stopped_at=st.none() | calls,
        error=maybe_short,
    ),
    "graph_checkpointed": st.builds(
        ev.GraphCheckpointed,
        at=ats,
        ns=short,
        checkpoint_id=short,
        kind=st.just("msgpack"),
        checkpoint=st.binary(max_size=16),
        metadata_kind=st.just("msgpack"),
        metadata=st.binary(max_size=16),
        values=st.lists(
            st.builds(ev.GraphValue, channel=short, version=calls, kind=short), max_size=3
        ),
    ),
    "graph_written": st.builds(
        ev.GraphWritten,
        at=ats,
        ns=short,
        checkpoint_id=short,
        task_id=short,
        writes=st.lists(
            st.builds(ev.GraphWrite, channel=short, idx=calls, kind=short, data=st.binary()),
            max_size=3,
        ),
    ),
    "graph_forgotten": st.builds(
        ev.GraphForgotten, at=ats, runs=st.lists(short, max_size=2), pruned=st.booleans()
    ),
    "recovery_decided": st.builds(
        ev.RecoveryDecided,
        at=ats,
        kind=st.sampled_from(["transient", "permanent", "logical"]),
        action=st.sampled_from(["retry", "replan", "rollback", "ask", "give_up"]),
        from_position=st.integers(1, 40),
        attempt=st.integers(1, 5),
        call=st.none() | calls,
        from_call=st.none() | calls,
    ),
}
any_event = st.one_of(*EVENT_STRATEGIES.values())
# Most runs begin with agent_started; some histories are arbitrary (the fold must not care).
histories = st.one_of(
    st.tuples(EVENT_STRATEGIES["agent_started"], st.lists(any_event, max_size=30)).map(
        lambda t: [t[0], *t[1]]
    ),
    st.lists(any_event, max_size=12),
)


def _as_recorded(events: list[ev.Event]) -> list[ev.Event]:
    """``events`` as a run could have written them (what RunCheck lets a reader read):
    no second agent_started, and after the run's end only records of undoing."""
    out: list[ev.Event] = []
    ended = False
    for e in events:
        if isinstance(e, ev.AgentStarted) or (ended and not isinstance(e, AFTER_END)):
            continue
        out.append(e)
        ended = ended or isinstance(e, ENDS)
    return out


# What a store holds and rebuild reads back: one agent_started first, then a run's life.
stored_histories = st.tuples(
    EVENT_STRATEGIES["agent_started"], st.lists(any_event, max_size=30)
).map(lambda t: [t[0], *_as_recorded(t[1])])


def _snapshot_round_trip(state: RunState) -> RunState:
    """What a stored snapshot gives back: the state through msgpack."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=RunState)


def _positioned(events: list[ev.Event], first: int = 1) -> list[tuple[int, ev.Event]]:
    return list(enumerate(events, first))


def test_the_strategies_cover_every_event_type() -> None:
    """The property tests draw from every event type in the vocabulary."""
    assert set(EVENT_STRATEGIES) == set(ev.EVENT_TYPES)


# --- pure properties --------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(events=histories, data=st.data())
def test_snapshot_plus_tail_equals_the_full_fold(events: list[ev.Event], data: Any) -> None:
    """For any history and cut k: fold(tail) onto the (stored) state at k == fold(all)."""
    run_id = "ab" * 16
    full = fold(_positioned(events), RunState(run_id=run_id))
    k = data.draw(st.integers(0, len(events)), label="snapshot position")
    head = fold(_positioned(events[:k]), RunState(run_id=run_id))
    snap = _snapshot_round_trip(head)
    assert snap == head
    assert fold(_positioned(events[k:], k + 1), snap) == full
    assert full.position == len(events)


@settings(max_examples=100, deadline=None)
@given(state_events=histories, event=any_event)
def test_evolve_is_total_and_always_moves_position(
    state_events: list[ev.Event], event: ev.Event
) -> None:
    """evolve never raises, sets position and updated_at, and leaves its input unchanged."""
    state = fold(_positioned(state_events), RunState(run_id="cd" * 16))
    before = _snapshot_round_trip(state)
    after = evolve(state, event, state.position + 1)
    assert (after.position, after.updated_at) == (state.position + 1, event.at)
    assert after.run_id == state.run_id
    assert state == before


# --- through real stores ----------------------------------------------------------------


def _expected_snapshots(batches: list[list[ev.Event]], every: int, extra: list[bool]) -> set[int]:
    """Where RunWriter (every N events, and at a checkpoint unless its newest snapshot is
    fewer than CHECKPOINT_GAP events back) and the test's own saves put snapshots."""
    positions: set[int] = set()
    pos = last = 0  # ``last``: the writer's own newest snapshot (it never sees the test's)
    for batch, save in zip(batches, extra, strict=True):
        before = pos
        for e in batch:
            pos += 1
            if isinstance(e, ev.Checkpoint) and pos - last >= CHECKPOINT_GAP:
                positions.add(pos)
                last = pos
        if pos // every > before // every:
            positions.add(pos)
            last = pos
        if save:
            positions.add(pos)
    return positions


@st.composite
def batched(draw: Any) -> tuple[list[list[ev.Event]], list[bool]]:
    events = draw(stored_histories)
    batches: list[list[ev.Event]] = []
    i = 0
    while i < len(events):
        n = draw(st.integers(1, 4))
        batches.append(events[i : i + n])
        i += n
    extra = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return batches, extra


def _check_store(store: Store, data: Any, batches: list[list[ev.Event]], extra: list[bool]) -> None:
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    every = data.draw(st.integers(1, 12), label="snapshot_every")
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=every)
    for batch, save in zip(batches, extra, strict=True):
        w.append(*batch)
        if save:
            save_snapshot(store, stream, w.state)
    events = [e for b in batches for e in b]
    full = fold(_positioned(events), RunState(run_id=run_id))
    assert w.state == full
    assert rebuild(store, run_id) == full == state_at(store, run_id)
    snaps = _expected_snapshots(batches, every, extra)
    newest = snapshot_at_or_before(store, stream, None)
    assert (newest.position if newest else None) == max(snaps, default=None)
    upto = data.draw(st.integers(1, len(events)), label="upto")
    expected = fold(_positioned(events[:upto]), RunState(run_id=run_id))
    assert rebuild(store, run_id, upto) == expected
    snap = snapshot_at_or_before(store, stream, upto)
    assert (snap.position if snap else None) == max((p for p in snaps if p <= upto), default=None)
    if snap is not None:
        assert snap == fold(_positioned(events[: snap.position]), RunState(run_id=run_id))


@settings(max_examples=60, deadline=None)
@given(plan=batched(), data=st.data())
def test_memory_store_rebuild_from_snapshots_equals_the_full_fold(
    plan: tuple[list[list[ev.Event]], list[bool]], data: Any
) -> None:
    """RunWriter with random snapshot_every and extra snapshots; rebuild == fold (memory)."""
    store = open_store("memory://")
    _check_store(store, data, *plan)


@pytest.fixture(scope="module")
def sqlite_dir() -> Any:
    with tempfile.TemporaryDirectory(prefix="agentlog-fold-") as d:
        yield d


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=batched(), data=st.data())
def test_sqlite_store_rebuild_from_snapshots_equals_the_full_fold(
    sqlite_dir: str, plan: tuple[list[list[ev.Event]], list[bool]], data: Any
) -> None:
    """The same property on an SQLite file: stored snapshots ⊕ stored tail == full fold."""
    store = open_store(f"sqlite:///{sqlite_dir}/{uuid.uuid4().hex}.db?synchronous=OFF")
    try:
        _check_store(store, data, *plan)
    finally:
        store.close()


# --- fold rules worth pinning -----------------------------------------------------------


def test_intents_stay_pending_until_a_final_outcome() -> None:
    """An intent stays pending through a non-final failure; success or a final one clears it."""
    e = [
        ev.ToolInvoked(at=1.0, call=1, tool="pay", key="k", side_effect=True),
        ev.ToolInvoked(at=2.0, call=2, tool="mail"),
        ev.ToolFailed(at=3.0, call=1, tool="pay", kind="transient", message="x", final=False),
    ]
    s = fold(_positioned(e))
    assert [(p.call, p.key, p.side_effect, p.position) for p in s.pending] == [
        (1, "k", True, 1),
        (2, None, False, 2),
    ]
    s = evolve(s, ev.ToolSucceeded(at=4.0, call=1, tool="pay", result=1), 4)
    assert [p.call for p in s.pending] == [2]
    s = evolve(s, ev.ToolFailed(at=5.0, call=2, tool="mail", kind="permanent", message="y"), 5)
    assert s.pending == [] and s.failures == 2 and s.tool_calls == 2


def test_state_stays_bounded() -> None:
    """Recent steps keep the last RECENT_LIMIT names; observations are cut to the limit."""
    steps = [ev.StepCompleted(at=1.0, call=i, name=f"s{i}") for i in range(RECENT_LIMIT + 5)]
    s = fold(_positioned(steps))
    assert s.steps_done == [f"s{i}" for i in range(5, RECENT_LIMIT + 5)]
    big = observe("x" * (OBSERVATION_LIMIT * 3))
    assert len(big) == OBSERVATION_LIMIT and big.endswith("...")
    assert observe({"a": 1}) == '{"a":1}'
    assert observe(object()).startswith("<object")
