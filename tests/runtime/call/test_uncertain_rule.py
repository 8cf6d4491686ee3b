"""One rule for "is this side-effecting call uncertain": its intent went out and the log
does not say how it ended - no outcome, or a final failure while an attempt may have
landed (``engine.log.effects.is_uncertain``, fed by ``may_have_landed``). The run-level
effects reader (abandon, rewind, the CLI), the runtime's call state (resume) and the
tools view (abandoned in doubt) all read it, so for every shape of a call's log they
answer alike."""

from __future__ import annotations

import uuid

import pytest

from engine import events as ev
from engine.log.effects import doubt_after, effects, is_uncertain, may_have_landed
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.runtime.journal.callstate import CallState, evolve
from engine.store import Recorded, open_store
from projections.views.tools import summarize

AT = 1_760_000_000.0
INTENT = ev.ToolInvoked(at=AT, call=1, tool="pay", side_effect=True, key="k")


def _failed(kind: str, final: bool = True) -> ev.ToolFailed:
    return ev.ToolFailed(at=AT, call=1, tool="pay", kind=kind, message="m", final=final)


LANDED = ev.ToolFailed(at=AT, call=1, tool="pay", kind="permanent", message="m", landed=True)

# A call's log after its intent, and whether the call is uncertain after it.
SHAPES = [
    pytest.param([], True, id="no-outcome"),
    pytest.param([ev.ToolSucceeded(at=AT, call=1, tool="pay")], False, id="succeeded"),
    pytest.param([_failed("permanent")], False, id="failed-for-sure"),
    pytest.param([_failed("indeterminate")], True, id="failed-indeterminate"),
    pytest.param(
        [_failed("indeterminate", final=False), _failed("permanent")],
        True,
        id="indeterminate-then-permanent",
    ),
    pytest.param(
        [_failed("transient", final=False), _failed("permanent")], False, id="transient-then-final"
    ),
    pytest.param(
        [_failed("indeterminate", final=False), ev.ToolSucceeded(at=AT, call=1, tool="pay")],
        False,
        id="indeterminate-then-succeeded",
    ),
    # The effect happened but its result could not be recorded (``landed``): the final
    # failure settles the call (its key stays held), whatever attempts came before.
    pytest.param([LANDED], False, id="landed-result-unrecordable"),
    pytest.param(
        [_failed("indeterminate", final=False), LANDED], False, id="indeterminate-then-landed"
    ),
]


def test_the_rule_itself() -> None:
    assert is_uncertain(answered=False, failed=False, maybe_landed=False)
    assert is_uncertain(answered=True, failed=True, maybe_landed=True)
    assert not is_uncertain(answered=True, failed=True, maybe_landed=False)
    assert not is_uncertain(answered=True, failed=False, maybe_landed=True)  # a success
    assert may_have_landed(False, "indeterminate") and may_have_landed(True, "permanent")
    assert not may_have_landed(False, "transient")
    assert not doubt_after(True, LANDED) and doubt_after(True, _failed("permanent"))


@pytest.mark.parametrize(("after", "uncertain"), SHAPES)
def test_the_effects_reader_the_call_state_and_the_tools_view_agree(
    after: list[ev.Event], uncertain: bool
) -> None:
    log = [INTENT, *after]
    recorded = [Recorded(uuid.UUID(int=0), p, e) for p, e in enumerate(log, start=2)]
    (effect,) = effects(recorded)
    assert effect.uncertain is uncertain

    state: CallState | None = None
    for r in recorded:
        state = evolve(state, r.event, r.position)
    assert state is not None and state.unresolved is uncertain

    store = open_store("memory://")
    writer = RunWriter(store, RunState(run_id="r"))
    writer.append(ev.AgentStarted(at=AT, agent="a", import_path="m"), *log)
    writer.append(ev.AgentAbandoned(at=AT + 1))
    (pay,) = summarize(store, None, None)
    assert pay.uncertain.get("abandoned", 0) == (1 if uncertain else 0)  # left in doubt
