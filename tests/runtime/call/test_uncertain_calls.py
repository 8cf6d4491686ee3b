"""The one reader of "which calls are uncertain" (engine.log.effects.uncertain; each case the
smallest log that makes a call uncertain or settles it), statuses as enums in snapshots
written with bare strings, and the writer's snapshot cadence as an import replays it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from engine import events as ev
from engine.kinds import RunStatus
from engine.log.effects import Outcome, answered, uncertain
from engine.log.history import RunWriter, run_stream, snapshots_along
from engine.log.snapshots import snapshot_at_or_before
from engine.log.state import RunState
from engine.store import Append, open_store, stream_id

AT = 1.7e9
STREAM = stream_id("run:test")


def _log(*events: ev.Event) -> list[Append]:
    started = ev.AgentStarted(at=AT, agent="m:f", import_path="m")
    return [Append(STREAM, n, e) for n, e in enumerate([started, *events], start=1)]


def _intent(call: int = 1, side_effect: bool = True) -> ev.ToolInvoked:
    return ev.ToolInvoked(at=AT, call=call, tool="charge", key="k", side_effect=side_effect)


def _failed(kind: str, final: bool = True, call: int = 1) -> ev.ToolFailed:
    return ev.ToolFailed(at=AT, call=call, tool="charge", kind=kind, message="x", final=final)


def _ok(call: int = 1) -> ev.ToolSucceeded:
    return ev.ToolSucceeded(at=AT, call=call, tool="charge", result={"id": call})


def _calls(*events: ev.Event) -> list[int]:
    return [fx.call for fx in uncertain(_log(*events))]


def test_a_side_effect_intent_with_no_outcome_is_uncertain() -> None:
    found = uncertain(_log(_intent()))
    assert [(fx.call, fx.outcome, fx.position) for fx in found] == [(1, Outcome.UNKNOWN, 2)]


def test_an_intent_with_only_a_retryable_failure_is_still_uncertain() -> None:
    assert _calls(_intent(), _failed("transient", final=False)) == [1]


def test_a_recorded_success_settles_the_call() -> None:
    assert _calls(_intent(), _ok()) == []


def test_a_final_failure_whose_attempts_all_answered_settles_the_call() -> None:
    assert _calls(_intent(), _failed("transient", final=False), _failed("permanent")) == []


def test_a_final_indeterminate_failure_may_have_landed() -> None:
    found = uncertain(_log(_intent(), _failed("indeterminate")))
    assert [(fx.call, fx.outcome, fx.maybe_landed) for fx in found] == [(1, Outcome.FAILED, True)]


def test_an_indeterminate_attempt_before_a_final_failure_may_have_landed() -> None:
    assert _calls(_intent(), _failed("indeterminate", final=False), _failed("permanent")) == [1]


def test_a_read_only_call_is_never_uncertain() -> None:
    assert _calls(_intent(side_effect=False)) == []


def test_a_fresh_intent_that_succeeds_settles_an_earlier_failure() -> None:
    assert _calls(_intent(), _failed("permanent"), _intent(), _ok()) == []


def test_uncertain_calls_come_in_call_order_and_skip_settled_ones() -> None:
    events = [_intent(3), _intent(2), _ok(2), _intent(1)]
    assert _calls(*events) == [1, 3]


@pytest.mark.parametrize(
    ("event", "call"),
    [
        (_ok(4), 4),
        (_failed("permanent", call=5), 5),
        (_failed("transient", final=False, call=6), None),
        (_intent(7), None),
    ],
)
def test_answered_names_the_call_a_success_or_final_failure_ends(
    event: ev.Event, call: int | None
) -> None:
    assert answered(event) == call


# --- snapshots written with bare strings still decode to the enums ---------------------


class _OldState(msgspec.Struct, omit_defaults=True):
    """RunState's encoded shape as written before statuses were an enum."""

    run_id: str = ""
    status: str = "new"
    position: int = 0


@pytest.mark.parametrize("status", [s.value for s in RunStatus])
def test_a_snapshot_with_a_plain_status_string_decodes_to_its_run_status(status: str) -> None:
    payload = msgspec.msgpack.encode(_OldState("r", status, 3))
    state = msgspec.msgpack.decode(payload, type=RunState)
    assert state.status is RunStatus(status)
    again: dict[str, Any] = msgspec.msgpack.decode(msgspec.msgpack.encode(state))
    assert again.get("status", "new") == status  # and it is stored as the same string


# --- an import snapshots where the run's writer would have ------------------------------


def _snapshot_positions(store: Any, stream: Any, top: int) -> list[int]:
    found, upto = [], top
    while (snap := snapshot_at_or_before(store, stream, upto)) is not None:
        found.append(snap.position)
        upto = snap.position - 1
    return sorted(found)


@pytest.mark.parametrize("every", [1, 3, 5, 100])
def test_snapshots_along_takes_the_writers_snapshots_of_one_event_commits(every: int) -> None:
    events: list[ev.Event] = [ev.AgentStarted(at=AT, agent="m:f", import_path="m")]
    for n in range(1, 24):
        name = f"c{n}" if n % 2 else "again"
        events.append(ev.Checkpoint(at=AT, call=n, name=name) if n % 3 else _intent(n))
    run_id = "ab" * 16
    store = open_store("memory://")
    try:
        writer = RunWriter(store, RunState(run_id=run_id), snapshot_every=every)
        for e in events:
            writer.append(e)
        expected = _snapshot_positions(store, run_stream(run_id), len(events))
    finally:
        store.close()
    state, due = snapshots_along(RunState(run_id=run_id), events, every)
    assert [s.position for s in due] == expected
    assert state == writer.state
