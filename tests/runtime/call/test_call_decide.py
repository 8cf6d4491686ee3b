"""The pure core of a durable call (engine/runtime/journal/callstate.py): ``decide`` says what
happens after each observation, ``evolve`` folds a call's events, ``settle`` says how a
success is written. No store, no engine: tools are plain definitions."""

from __future__ import annotations

from typing import Any

from engine import events as ev
from engine.kinds import Source
from engine.policy.failure import RetryPolicy
from engine.runtime.defs.definitions import ToolDef
from engine.runtime.journal.callstate import (
    AGAIN,
    ATTEMPT,
    FALLBACK,
    RESEND,
    Ask,
    CallState,
    CircuitOpen,
    Done,
    Fail,
    Failed,
    Held,
    NoBudget,
    Pause,
    Retry,
    Settlement,
    Unsure,
    Verify,
    decide,
    evolve,
    releases,
    settle,
)

LOST = "TimeoutError: no reply"


def send(order: str) -> str:
    return order


def send_keyed(order: str, *, idempotency_key: str) -> str:
    return order


def tool(fn: Any = send, **options: Any) -> ToolDef:
    options.setdefault("retry", RetryPolicy(max_attempts=3))
    return ToolDef(fn, "send", side_effect=True, **options)


def state(**fields: Any) -> CallState:
    return CallState("tool", "send", key="k", **fields)


def lost(attempts: int = 1, elapsed: float = 0.0) -> tuple[CallState, Failed]:
    return state(attempts=attempts), Failed("indeterminate", LOST, elapsed)


def test_an_unsure_send_without_verifier_or_key_asks_a_person_and_is_never_resent() -> None:
    for attempts in (1, 3):
        s, f = lost(attempts)
        d = decide(tool(), s, f)
        assert isinstance(d, Ask), d
        assert d.reason.startswith(LOST)
    assert decide(tool(), *lost(3)) == Ask(LOST + " (attempts exhausted)")


def test_an_unsure_send_with_a_key_is_resent_under_it_after_a_backoff() -> None:
    d = decide(tool(send_keyed), *lost(1))
    assert d == Retry(ATTEMPT)  # a backoff first, then a new series under the same key
    assert d.then.again is False


def test_an_unsure_send_with_a_verifier_verifies_before_resending() -> None:
    d = decide(tool(verify=lambda key: None), *lost(1))
    assert d == Retry(Verify(ATTEMPT))


def test_exhausted_attempts_verify_once_more_then_fail() -> None:
    d = decide(tool(send_keyed, verify=lambda key: None), *lost(3))
    assert d == Verify(Fail("indeterminate", LOST + " (attempts exhausted)"))
    assert decide(tool(send_keyed), *lost(3)) == Fail(
        "indeterminate", LOST + " (attempts exhausted)"
    )


def test_a_refused_retry_budget_verifies_an_unsure_send_or_fails_a_transient_one() -> None:
    d = decide(
        tool(verify=lambda key: None), state(attempts=1), NoBudget("indeterminate", "m", "b")
    )
    assert d == Verify(Fail("indeterminate", "m; b"))
    d = decide(tool(), state(attempts=1), NoBudget("transient", "m", "b"))
    assert d == Fail("transient", "m; b", chained=False)


def test_a_transient_failure_is_retried_in_the_same_series_until_attempts_or_time_run_out() -> None:
    t = tool(retry=RetryPolicy(max_attempts=3, max_elapsed=5.0))
    assert decide(t, state(attempts=2), Failed("transient", "m", 4.9)) == Retry(AGAIN)
    assert decide(t, state(attempts=3), Failed("transient", "m", 0.0)) == Fail("transient", "m")
    assert decide(t, state(attempts=1), Failed("transient", "m", 5.0)) == Fail("transient", "m")
    assert decide(t, state(attempts=1), Failed("permanent", "m", 0.0)) == Fail("permanent", "m")


def test_an_open_circuit_takes_the_fallback_or_fails_fast() -> None:
    assert decide(tool(fallback=lambda order: "queued"), state(), CircuitOpen()) == FALLBACK
    d = decide(tool(), state(), CircuitOpen())
    assert d == Fail("transient", "circuit open for tool send; failing fast", chained=False)


def test_an_unsure_call_a_person_was_asked_about_waits_then_follows_the_answer() -> None:
    asked = state(asked=True)
    assert isinstance(decide(tool(), asked, Unsure("r")), Pause)
    done = state(asked=True, completed=True, answer="Done")
    assert decide(tool(), done, Unsure("r")) == Done("Done", Source.HUMAN)
    no = state(asked=True, completed=True, answer="not done")
    assert decide(tool(), no, Unsure("r")) == RESEND
    assert decide(tool(), state(), Unsure("r")) == Ask("r")
    assert decide(tool(send_keyed), state(), Unsure("r")) == ATTEMPT


def test_a_key_held_by_another_run_is_resent_only_under_that_key() -> None:
    assert decide(tool(verify=lambda key: None), state(), Held("r")) == Verify(Ask("r"))
    assert decide(tool(send_keyed), state(), Held("r")) == ATTEMPT
    assert decide(tool(), state(), Held("r")) == Ask("r")


def test_a_fallback_releases_the_key_unless_an_attempt_may_have_landed() -> None:
    t = tool(send_keyed)
    assert settle(t, state(claim=3), Source.FALLBACK, defer=True) is Settlement.RELEASE
    landed = state(claim=3, maybe_landed=True)
    assert settle(t, landed, Source.FALLBACK, defer=True) is Settlement.RECORD


def test_a_claimed_key_is_committed_and_a_selfresolving_outcome_deferred() -> None:
    t, intent = tool(send_keyed), ev.ToolInvoked(at=0.0, call=1, tool="send")
    assert settle(t, state(claim=3), Source.EXECUTED, defer=True) is Settlement.COMMIT
    assert settle(t, state(claim=3), Source.LEDGER, defer=True) is Settlement.RECORD
    assert settle(t, state(intent=intent), Source.EXECUTED, defer=True) is Settlement.DEFER
    assert settle(t, state(intent=intent), Source.EXECUTED, defer=False) is Settlement.RECORD
    assert settle(tool(), state(intent=intent), Source.EXECUTED, defer=True) is Settlement.RECORD


def test_every_selfresolving_outcome_is_deferred_with_its_keys_commit() -> None:
    """A business-keyed effect a crash leaves resolvable (the tool takes the key or
    verifies) rides with the next commit, its key's commit too; so does one the verifier
    found or the ledger gave; a person's word, a fallback and an unverifiable send do not."""
    intent = ev.ToolInvoked(at=0.0, call=1, tool="send")
    claimed = state(claim=3, intent=intent)
    verified = tool(verify=lambda key: None)
    for t in (tool(send_keyed), verified):
        assert settle(t, claimed, Source.EXECUTED, defer=True) is Settlement.DEFER_COMMIT
        assert settle(t, claimed, Source.EXECUTED, defer=False) is Settlement.COMMIT
    assert settle(tool(), claimed, Source.EXECUTED, defer=True) is Settlement.COMMIT
    assert settle(verified, claimed, Source.VERIFIED, defer=True) is Settlement.DEFER_COMMIT
    assert settle(verified, state(intent=intent), Source.VERIFIED, defer=True) is Settlement.DEFER
    assert settle(tool(), claimed, Source.LEDGER, defer=True) is Settlement.DEFER
    assert settle(tool(), state(claim=3), Source.LEDGER, defer=True) is Settlement.RECORD
    assert settle(verified, claimed, Source.HUMAN, defer=True) is Settlement.COMMIT
    assert settle(verified, claimed, Source.FALLBACK, defer=True) is Settlement.RELEASE
    read_only = ToolDef(send, "read", side_effect=False)
    assert settle(read_only, state(intent=intent), Source.EXECUTED, defer=True) is (
        Settlement.RECORD
    )


def test_an_outcome_only_a_person_could_settle_for_an_undo_is_not_deferred() -> None:
    """A compensation and no verifier: lost with a crash, the effect's resume would settle
    it (a re-send, the ledger) but an abandon or a rewind's compensate could not without
    a person, so it is written at once; with a verifier, the undo asks it: deferred."""
    intent = ev.ToolInvoked(at=0.0, call=1, tool="send")
    claimed = state(claim=3, intent=intent)
    undo = lambda result: None  # noqa: E731
    undone = tool(send_keyed, compensate=undo)
    assert settle(undone, claimed, Source.EXECUTED, defer=True) is Settlement.COMMIT
    assert settle(undone, state(intent=intent), Source.EXECUTED, defer=True) is Settlement.RECORD
    assert settle(undone, claimed, Source.LEDGER, defer=True) is Settlement.RECORD
    checked = tool(send_keyed, compensate=undo, verify=lambda key: None)
    assert settle(checked, claimed, Source.EXECUTED, defer=True) is Settlement.DEFER_COMMIT
    assert settle(checked, claimed, Source.LEDGER, defer=True) is Settlement.DEFER


def test_a_final_failure_frees_the_key_only_if_the_effect_cannot_have_happened() -> None:
    assert releases(state(claim=2), "transient")
    assert not releases(state(claim=2), "indeterminate")
    assert not releases(state(claim=2, maybe_landed=True), "permanent")
    assert not releases(state(), "permanent")


def test_evolve_folds_a_calls_events_and_a_new_intent_starts_it_afresh() -> None:
    intent = ev.ToolInvoked(at=1.0, call=1, tool="send", args_hash="h", key="k")
    s = evolve(None, intent)
    assert s is not None and (s.key, s.attempts, s.started_at) == ("k", 0, 1.0)
    s = evolve(s, ev.EffectClaimed(at=0.0, key="k", run_id="r", call=1), 7)
    failed = ev.ToolFailed(
        at=0.0, call=1, tool="send", kind="indeterminate", message=LOST, attempt=2, final=False
    )
    s = evolve(s, failed)
    assert (s.claim, s.attempts, s.maybe_landed, s.outcome) == (7, 2, True, None)
    s = evolve(s, ev.HumanInputRequested(at=0.0, call=1, question="q", reason="uncertain"))
    s = evolve(s, ev.HumanInputProvided(at=0.0, call=1, value="not done"))
    assert (s.asked, s.completed, s.answer) == (True, True, "not done")
    again = evolve(s, intent)
    assert (again.asked, again.completed, again.answer) == (False, False, None)
    assert (again.attempts, again.claim, again.maybe_landed) == (2, 7, True)
    question = ev.HumanInputRequested(at=0.0, call=2, question="q", reason="uncertain")
    assert evolve(None, question) == CallState("ask", "q", outcome=question)
    assert evolve(None, ev.StepCompleted(at=0.0, call=3, name="s")) is None
