"""What a stopped run waits on has one typed owner, ``RunState.waits_on``, built by the fold.

Snapshots written before it (``run_state:1``/``:2``) held the wait as strings
(``waiting_on`` "timer", "message:<topic>", "child:<id>", or None beside a question in
``waiting``; ``wake_at``): they upcast to the same typed value the fold of the events gives.
The old strings are written out literally here, as that code wrote them.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest
from conftest import all_backends, write_raw_row

from engine import events as ev
from engine.log.history import run_stream
from engine.log.snapshots import decode_snapshot, encode_snapshot, snapshot_at_or_before
from engine.log.state import RunState, fold
from engine.log.waiting import Child, Message, Person, Timer, WaitingOn
from engine.store import Snapshot, Store

T = 1760000000.0  # 2025-10-09T08:53:20Z
RID = "ab" * 16

# The event that stopped the run, the typed wait the fold makes of it, and what the
# snapshot of that state held before run_state:3.
CASES: list[tuple[ev.Event, WaitingOn, dict[str, Any]]] = [
    (
        ev.RunWaiting(at=T, call=1, reason="timer", until=T + 60),
        Timer(T + 60),
        {
            "waiting": "timer until 2025-10-09T08:54:20+00:00",
            "waiting_on": "timer",
            "wake_at": T + 60,
        },
    ),
    (
        ev.RunWaiting(at=T, call=1, reason="message", topic="go", until=T + 5),
        Message("go", T + 5),
        {
            "waiting": "message 'go' until 2025-10-09T08:53:25+00:00",
            "waiting_on": "message:go",
            "wake_at": T + 5,
        },
    ),
    (
        ev.RunWaiting(at=T, call=1, reason="message", topic="a:b"),
        Message("a:b"),
        {"waiting": "message 'a:b'", "waiting_on": "message:a:b"},
    ),
    (
        ev.RunWaiting(at=T, call=1, reason="child", child_run_id="kid"),
        Child("kid"),
        {"waiting": "child kid", "waiting_on": "child:kid"},
    ),
    (
        ev.ChildPaused(at=T, call=1, child_run_id="kid", asking_run_id="grand", question="ok: go?"),
        Child("kid", "grand", "ok: go?"),
        {"waiting": "child grand asks: ok: go?", "waiting_on": "child:kid"},
    ),
    (
        ev.HumanInputRequested(at=T, call=1, question="child x asks: y"),
        Person("child x asks: y"),
        {"waiting": "child x asks: y"},
    ),
]
IDS = ["timer", "message-until", "message", "child", "child-asks", "person"]


def _stopped_by(event: ev.Event) -> RunState:
    started = ev.AgentStarted(at=T, agent="m:f", import_path="m")
    return fold([(1, started), (2, event)], RunState(run_id=RID))


def _old_snapshot(state: RunState, old: dict[str, Any]) -> bytes:
    """``state`` as a run_state:2 snapshot held it: the wait as strings, no ``waits_on``."""
    data = {k: v for k, v in msgspec.to_builtins(state).items() if k != "waits_on"}
    return msgspec.msgpack.encode({**data, **old})


@pytest.mark.parametrize(("event", "typed", "old"), CASES, ids=IDS)
def test_the_fold_builds_the_typed_wait_and_shows_it_as_before(
    event: ev.Event, typed: WaitingOn, old: dict[str, Any]
) -> None:
    """Each stopping event folds to its typed wait; ``waiting`` and ``wake_at`` read the
    same text and deadline the old string fields held."""
    state = _stopped_by(event)
    assert state.waits_on == typed
    assert (state.waiting, state.wake_at) == (old["waiting"], old.get("wake_at"))


@pytest.mark.parametrize(("event", "typed", "old"), CASES, ids=IDS)
@pytest.mark.parametrize("topic", ["run_state:1", "run_state:2"])
def test_an_old_snapshot_of_a_waiting_run_upcasts_to_the_fold(
    event: ev.Event, typed: WaitingOn, old: dict[str, Any], topic: str
) -> None:
    """A snapshot holding the wait as strings decodes to the state the events fold to."""
    state = _stopped_by(event)
    assert decode_snapshot(Snapshot(2, topic, _old_snapshot(state, old))) == state


def test_a_snapshot_round_trips_the_typed_wait() -> None:
    """Today's snapshot keeps the tagged wait (``{"type": "child", ...}``) and reads it back."""
    state = _stopped_by(CASES[4][0])
    snapshot = encode_snapshot(state)
    assert msgspec.msgpack.decode(snapshot.payload)["waits_on"]["type"] == "child"
    assert decode_snapshot(snapshot) == state


@all_backends
def test_an_old_snapshot_planted_in_a_store_loads_typed(store_url: str, store: Store) -> None:
    """Through every store: a run_state:2 row of a parent paused by a grandchild's question
    is a snapshot of that typed wait, not a skipped one."""
    event, typed, old = CASES[4]
    state = _stopped_by(event)
    stream = run_stream(RID)
    write_raw_row(
        store_url, store, "snapshots", stream, 2, "run_state:2", _old_snapshot(state, old)
    )
    snap = snapshot_at_or_before(store, stream, None)
    assert snap is not None and snap.waits_on == typed and snap == state
    assert snapshot_at_or_before(store, uuid.uuid4(), None) is None
