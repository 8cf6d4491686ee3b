"""What each opening of a keyed durable call writes, on every store: the run's events and
the key's ledger stream, in order, for a fresh claim, a key another run committed, and a
recorded intent resolved against its own claim, a freed key, a committed key and a key
another run still holds (a second intent, then a person is asked)."""

from __future__ import annotations

from typing import Any

from agents.kit import craft_uncertain, tool_def
from conftest import all_backends

from engine import Engine, RetryPolicy
from engine.runtime.call import ledger
from engine.store import stream_id

AT = 1_800_000_000.0  # when the planted ledger events say they happened

KEY = "ship:o1"


def tools(eng: Engine) -> tuple[Any, Any, Any, Any]:
    """A keyed tool that takes the key (a re-send under it is safe), one that does not
    (only a person resolves its doubt), and an agent calling each."""
    retry = RetryPolicy(max_attempts=1)

    @eng.tool(side_effect=True, key=lambda order: f"ship:{order}", retry=retry)
    def ship(order: str, *, idempotency_key: str) -> str:
        return f"shipped {order}"

    @eng.tool(side_effect=True, key=lambda order: f"ship:{order}", retry=retry, timeout=0.05)
    def mail(order: str) -> str:
        return f"mailed {order}"

    @eng.agent
    def shipper(run: Any, order: str) -> str:
        return str(ship(order))

    @eng.agent
    def mailer(run: Any, order: str) -> str:
        return str(mail(order))

    return ship, mail, shipper, mailer


def run_log(eng: Engine, run_id: str) -> list[str]:
    shown = []
    for e in eng.events(run_id):
        source = e.data.get("source") if e.type == "tool_succeeded" else None
        shown.append(f"{e.type}:{source}" if source else e.type)
    return shown


def key_log(eng: Engine) -> list[str]:
    return [type(r.event).__name__ for r in eng.store.read(stream_id("effect:" + KEY))]


def other_claims(eng: Engine, *, commit: bool = False) -> None:
    """Run ``other`` claims the key (its intent's arguments the same), and commits it."""
    held = ledger.read(eng.store, KEY)
    if held.claim is not None:
        eng.store.append([ledger.release_event(KEY, held.version, "r", 1, "test", at=AT)])
        held = ledger.read(eng.store, KEY)
    ahash = held.claim.args_hash if held.claim else ""
    eng.store.append([ledger.claim_event(KEY, held.version, "other", 1, ahash, at=AT)])
    if commit:
        eng.store.append([ledger.commit_event(KEY, held.version + 1, "other", 1, "theirs", at=AT)])


START, DONE, RESUMED = "agent_started", "agent_finished", "agent_resumed"


@all_backends
def test_a_fresh_claim_and_a_key_another_run_committed(eng: Engine) -> None:
    ship, _, shipper, _ = tools(eng)
    first = eng.run(shipper, run_id="first", order="o1")
    assert run_log(eng, first.run_id) == [START, "tool_invoked", "tool_succeeded:executed", DONE]
    assert key_log(eng) == ["EffectClaimed", "EffectCommitted"]
    second = eng.run(shipper, run_id="second", order="o1")
    assert run_log(eng, second.run_id) == [START, "tool_invoked", "tool_succeeded:ledger", DONE]
    assert key_log(eng) == ["EffectClaimed", "EffectCommitted"]
    assert tool_def(ship).key("o1") == KEY


@all_backends
def test_a_recorded_intent_resolved_under_its_own_claim_or_a_freed_key(eng: Engine) -> None:
    ship, _, shipper, _ = tools(eng)
    craft_uncertain(eng, shipper, "own", {"order": "o1"}, ship, ("o1",))
    assert eng.resume("own").output == "shipped o1"  # re-sent under the key it holds
    assert run_log(eng, "own") == [START, "tool_invoked", RESUMED, "tool_succeeded:executed", DONE]
    assert key_log(eng) == ["EffectClaimed", "EffectCommitted"]

    eng.store.append([ledger.release_event(KEY, 2, "own", 1, "test", at=AT)])
    craft_uncertain(eng, shipper, "freed", {"order": "o1"}, ship, ("o1",))
    eng.store.append([ledger.release_event(KEY, 4, "freed", 1, "test", at=AT)])
    assert eng.resume("freed").output == "shipped o1"  # the key claimed again, alone
    assert run_log(eng, "freed") == [
        START,
        "tool_invoked",
        RESUMED,
        "tool_succeeded:executed",
        DONE,
    ]
    own = ["EffectClaimed", "EffectCommitted", "EffectReleased"]  # "own", then freed
    assert key_log(eng) == [*own, "EffectClaimed", "EffectReleased", "EffectClaimed", own[1]]


@all_backends
def test_a_recorded_intent_whose_key_another_run_committed_or_still_holds(eng: Engine) -> None:
    _, mail, _, mailer = tools(eng)
    craft_uncertain(eng, mailer, "theirs", {"order": "o1"}, mail, ("o1",))
    other_claims(eng, commit=True)
    assert eng.resume("theirs").output == "theirs"  # the ledger's result, no second intent
    assert run_log(eng, "theirs") == [START, "tool_invoked", RESUMED, "tool_succeeded:ledger", DONE]

    eng.store.append(
        [ledger.release_event(KEY, ledger.read(eng.store, KEY).version, "o", 1, "", at=AT)]
    )
    craft_uncertain(eng, mailer, "held", {"order": "o1"}, mail, ("o1",))
    other_claims(eng)
    paused = eng.resume("held")  # waited for the holder: a second intent, then a person
    assert paused.status == "paused" and "other" in (paused.waiting or "")
    assert run_log(eng, "held") == [
        START,
        "tool_invoked",
        RESUMED,
        "tool_invoked",
        "human_input_requested",
    ]
