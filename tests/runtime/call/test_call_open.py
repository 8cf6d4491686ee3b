"""The pure opening of a durable call (engine/runtime/call/entry.py): ``open_call`` answers
what the journal, a fork's parent and the ledger said with the next step and the state to
take it with. No store, no engine: tools are plain definitions, observations are values."""

from __future__ import annotations

from typing import Any

from test_call_decide import send, send_keyed, tool

from engine import events as ev
from engine.kinds import Source
from engine.log.effects import Effect, Outcome
from engine.runtime.call.entry import (
    LEDGER_WAIT_DEFAULT,
    UNKNOWN,
    Begin,
    ClaimedByUs,
    ClaimedElsewhere,
    Inherit,
    Intend,
    KeyFree,
    LedgerCommitted,
    Live,
    LostRace,
    NoParent,
    Parent,
    ReadKey,
    Reclaim,
    Recorded,
    Released,
    Replay,
    Reraise,
    Seen,
    Send,
    Step,
    Wait,
    open_call,
)
from engine.runtime.defs.definitions import ToolDef
from engine.runtime.journal.callstate import ATTEMPT, Ask, CallState, Done, Verify, evolve

READ, RESOLVE = ReadKey(), ReadKey(resolving=True)
CLAIM = ev.EffectClaimed(at=0.0, key="k", run_id="r1", call=1)
INTENT = ev.ToolInvoked(at=0.0, call=1, tool="send", args_hash="h", key="k")
HELD = "key 'k' is held by run r2, whose outcome is unknown"


PLAIN = tool()  # side effect, no business key: intent alone, only a person resolves doubt
KEYED = tool(send_keyed, key=lambda order: order)  # business key, takes it: re-sends
VERIFIED = tool(key=lambda order: order, verify=lambda key: None)
READ_ONLY = ToolDef(send, "send", side_effect=False)


def state(**fields: Any) -> CallState:
    return CallState("tool", "send", "h", key="k", **fields)


def entry(*events: ev.Event) -> CallState:
    """The journal's entry for call 1 after ``events``."""
    s = state()
    for e in events:
        s = evolve(s, e)
    return s


def failed(*, landed: bool = False) -> ev.ToolFailed:
    return ev.ToolFailed(
        at=0.0, call=1, tool="send", kind="permanent", message="no", final=True, landed=landed
    )


def succeeded() -> ev.ToolSucceeded:
    return ev.ToolSucceeded(at=0.0, call=1, tool="send", result="ok", attempt=1)


def parent(outcome: Outcome, key: str | None = "pk") -> Parent:
    fx = Effect(call=4, tool="send", key=key, result="was", outcome=outcome, sent_key="pk#v2")
    return Parent("old-run", fx)


def step(t: ToolDef, seen: Seen) -> Step:
    return open_call(t, state(), seen)[1]


def test_the_journal_replays_an_outcome_resolves_an_intent_or_starts_the_call() -> None:
    assert step(READ_ONLY, Recorded(None)) == Live(Begin(ATTEMPT))
    assert step(PLAIN, Recorded(None)) == Live(Inherit())  # a parent's effect first
    assert step(KEYED, Recorded(entry(INTENT, succeeded()))) == Replay("ok")
    assert step(KEYED, Recorded(entry(INTENT, failed()))) == Reraise("permanent", "send: no")
    # The failure that ended the run is attempted again, unless its effect landed.
    assert step(KEYED, Recorded(entry(INTENT, failed()), ended_run=True)) == Live(Inherit())
    landed = Recorded(entry(INTENT, failed(landed=True)), ended_run=True)
    assert step(KEYED, landed) == Reraise("permanent", "send: no")
    # An intent without outcome: the ledger first, or what decide says of the doubt.
    assert step(KEYED, Recorded(entry(INTENT))) == Live(RESOLVE, resolving=True)
    assert step(PLAIN, Recorded(entry(INTENT))) == Live(Begin(Ask(UNKNOWN)), resolving=True)


def test_a_parents_effect_is_taken_over_and_an_uncertain_one_resolved_under_its_key() -> None:
    assert step(PLAIN, NoParent()) == Send()  # the intent alone, then an attempt
    assert step(KEYED, NoParent()) == READ
    committed = Begin(Done("was", Source.PARENT, with_intent=True))
    assert step(KEYED, parent(Outcome.COMMITTED)) == committed
    assert step(KEYED, parent(Outcome.UNKNOWN)) == Intend(RESOLVE)
    assert step(PLAIN, parent(Outcome.UNKNOWN, key=None)) == Intend(Begin(Ask(UNKNOWN)))


def test_before_the_intent_the_ledger_gives_its_result_a_wait_or_the_claim() -> None:
    done = Begin(Done("r", Source.LEDGER, with_intent=True))
    assert step(KEYED, LedgerCommitted("r")) == done
    assert step(KEYED, KeyFree(3, "k#v2")) == Send(3)  # claim and intent in one commit
    assert step(KEYED, ClaimedByUs(CLAIM, 3)) == Send(3)
    assert step(KEYED, ClaimedElsewhere("r2")) == Wait(LEDGER_WAIT_DEFAULT)
    assert step(tool(send_keyed, key=str, timeout=2.5), ClaimedElsewhere("r2")) == Wait(2.5)
    assert step(KEYED, Released()) == READ  # freed while waited for: look again
    assert step(KEYED, LostRace()) == READ


def test_a_key_still_held_after_the_wait_is_resent_only_under_that_key() -> None:
    held = ClaimedElsewhere("r2", waited=True)
    assert step(KEYED, held) == Intend(Begin(ATTEMPT))
    assert step(tool(key=str), held) == Intend(Begin(Ask(HELD)))
    assert step(VERIFIED, held) == Intend(Begin(Verify(Ask(HELD))))


def test_for_a_recorded_intent_the_ledger_gives_its_result_or_the_claim_alone() -> None:
    assert step(KEYED, LedgerCommitted("r", resolving=True)) == Begin(Done("r", Source.LEDGER))
    assert step(KEYED, KeyFree(3, resolving=True)) == Reclaim(3, Begin(ATTEMPT))
    assert step(VERIFIED, KeyFree(3, resolving=True)) == Reclaim(3, Begin(Verify(ATTEMPT)))
    assert step(KEYED, ClaimedByUs(CLAIM, 3, resolving=True)) == Begin(ATTEMPT)
    assert step(KEYED, ClaimedElsewhere("r2")) == Wait(LEDGER_WAIT_DEFAULT)


def test_the_opening_takes_each_step_with_the_state_it_names() -> None:
    """A recorded intent keeps its key and may have landed; a re-attempt starts a fresh
    intent with its attempts; a parent's effect is taken under the parent's key; a new
    claim goes out under the key the ledger names; our own claim is adopted."""
    recorded = entry(ev.ToolInvoked(at=0.0, call=1, tool="send", args_hash="h", key="old"))
    s, _ = open_call(KEYED, state(), Recorded(recorded))
    assert (s.key, s.maybe_landed, s.intent) == ("old", True, recorded.intent)
    ended = entry(INTENT, failed())
    s, _ = open_call(KEYED, state(attempts=0), Recorded(ended, ended_run=True))
    assert (s.intent, s.outcome, s.attempts, s.key) == (None, None, ended.attempts, "k")
    for outcome, doubt in ((Outcome.COMMITTED, False), (Outcome.UNKNOWN, True)):
        s, _ = open_call(KEYED, state(), parent(outcome))
        assert (s.key, s.sent_key, s.parent_call, s.parent_run) == ("pk", "pk#v2", 4, "old-run")
        assert s.maybe_landed is doubt
    assert open_call(KEYED, state(), parent(Outcome.COMMITTED, key=None))[0].key == "k"
    assert open_call(KEYED, state(), KeyFree(3, "k#v2"))[0].sent_key == "k#v2"
    assert open_call(KEYED, state(), ClaimedByUs(CLAIM, 3, "k#v3"))[0].sent_key == "k#v3"
    assert open_call(KEYED, state(), ClaimedByUs(CLAIM, 5, resolving=True))[0].claim == 5
    unchanged = state(sent_key="k#v9")
    for seen in (KeyFree(3, "k#v2", resolving=True), LedgerCommitted("r"), LostRace()):
        assert open_call(KEYED, unchanged, seen)[0] == unchanged


def test_a_committed_effect_is_never_attempted_again() -> None:
    """Whatever the tool, an effect the ledger or a parent holds as committed is the
    outcome: nothing is sent, claimed or waited for."""
    for t in (PLAIN, KEYED, VERIFIED, tool(send_keyed, key=str, fallback=send)):
        for seen in (
            LedgerCommitted("r"),
            LedgerCommitted("r", resolving=True),
            parent(Outcome.COMMITTED),
        ):
            step = open_call(t, state(), seen)[1]
            assert isinstance(step, Begin) and isinstance(step.decision, Done), (t, seen, step)
