"""Uncertain outcomes on every store: an intent in the log with no outcome (what a process
killed mid-call leaves; crafted here with RunWriter, and by real SIGKILLs in
test_runtime_failpoints.py) is resolved on resume by the verifier, a re-send with the
same key, or a person, and never under a fresh key."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from agents.kit import Crash, craft_uncertain, log_of
from conftest import all_backends

from engine import Engine, Given, RetryPolicy


class Service:
    """An outside service that dedupes by idempotency key, and counts every request."""

    def __init__(self) -> None:
        self.effects: dict[str, str] = {}
        self.requests: list[str | None] = []

    def perform(self, what: str, key: str | None) -> str:
        self.requests.append(key)
        if key is not None and key in self.effects:
            return self.effects[key]
        receipt = f"receipt-{what}-{len(self.requests)}"
        self.effects[key or f"nokey-{len(self.requests)}"] = receipt
        return receipt


def _intent_keys(eng: Engine, run_id: str, call: int = 1) -> set[str]:
    log = log_of(eng, run_id)
    return {d["key"] for _, t, d in log if t == "tool_invoked" and d["call"] == call}


def _sources(eng: Engine, run_id: str) -> list[str]:
    return [d["source"] for _, t, d in log_of(eng, run_id) if t == "tool_succeeded"]


@all_backends
def test_verifier_finding_the_effect_records_it_as_succeeded_without_executing(
    eng: Engine,
) -> None:
    """verify(key) returns the effect: the call succeeds with that result (source
    'verified'), the tool does not run."""
    svc = Service()
    verified: list[str] = []

    def find(key: str) -> str | None:
        verified.append(key)
        return svc.effects.get(key)

    @eng.tool(side_effect=True, verify=find)
    def transfer(cents: int, *, idempotency_key: str) -> str:
        return svc.perform("transfer", idempotency_key)

    @eng.agent
    def payer(run: Any) -> str:
        return str(transfer(300))

    key = craft_uncertain(eng, payer, "unsure-found", {}, transfer, (300,))
    svc.effects[key] = "receipt-landed"  # the request landed before the process died
    r = eng.resume("unsure-found")
    assert (r.status, r.output) == ("completed", "receipt-landed")
    assert verified == [key] and svc.requests == []
    assert _sources(eng, "unsure-found") == ["verified"]
    assert _intent_keys(eng, "unsure-found") == {key}


@all_backends
def test_verifier_returning_none_executes_the_call_with_the_same_key(eng: Engine) -> None:
    """verify(key) is None (the effect did not happen): the tool runs, with the intent's key
    for both a default key and a business key."""
    svc = Service()

    @eng.tool(side_effect=True, verify=lambda key: svc.effects.get(key))
    def transfer(cents: int, *, idempotency_key: str) -> str:
        return svc.perform("transfer", idempotency_key)

    @eng.tool(
        side_effect=True,
        key=lambda order: f"notify:{order}",
        verify=lambda key: svc.effects.get(key),
    )
    def notify(order: str) -> str:  # sends no key: the verifier looks the key up
        receipt = svc.perform("notify", None)
        svc.effects[f"notify:{order}"] = receipt
        return receipt

    @eng.agent
    def payer(run: Any) -> str:
        return str(transfer(300))

    @eng.agent
    def notifier(run: Any, order: str) -> str:
        return str(notify(order))

    key = craft_uncertain(eng, payer, "unsure-missing", {}, transfer, (300,))
    r = eng.resume("unsure-missing")
    assert r.status == "completed" and svc.requests == [key]
    assert _sources(eng, "unsure-missing") == ["executed"]
    assert _intent_keys(eng, "unsure-missing") == {key}

    bkey = craft_uncertain(eng, notifier, "unsure-notify", {"order": "o5"}, notify, ("o5",))
    assert bkey == "notify:o5"
    r2 = eng.resume("unsure-notify")
    assert r2.status == "completed" and svc.requests == [key, None]
    assert _intent_keys(eng, "unsure-notify") == {bkey}


@all_backends
def test_no_verifier_but_an_idempotency_key_resends_with_the_same_key(eng: Engine) -> None:
    """Without a verifier, a tool that takes ``idempotency_key`` is re-sent with the same
    key; the service's dedup makes the effect happen once."""
    svc = Service()

    @eng.tool(side_effect=True)
    def ship(order: str, *, idempotency_key: str) -> str:
        return svc.perform("ship", idempotency_key)

    @eng.agent
    def shipper(run: Any, order: str) -> str:
        return str(ship(order))

    key = craft_uncertain(eng, shipper, "unsure-resend", {"order": "o1"}, ship, ("o1",))
    svc.perform("ship", key)  # it had landed
    r = eng.resume("unsure-resend")
    assert r.status == "completed" and r.output == svc.effects[key]
    assert svc.requests == [key, key] and len(svc.effects) == 1
    assert _intent_keys(eng, "unsure-resend") == {key}


def _pausing_setup(eng: Engine) -> tuple[Any, Any, Counter[str]]:
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def fax(number: str) -> str:  # no verifier, no idempotency key: only a person knows
        count["fax"] += 1
        return f"faxed {number}"

    @eng.agent
    def faxer(run: Any, number: str) -> str:
        return str(fax(number))

    return faxer, fax, count


@all_backends
def test_no_verifier_and_no_key_pauses_and_a_done_answer_completes_without_executing(
    eng: Engine,
) -> None:
    """Neither verifier nor key: the run pauses (status paused, the reason names the tool
    and key); resuming unanswered stays paused writing nothing; answer 'done' records the
    effect as succeeded (source 'human') without running the tool."""
    faxer, fax, count = _pausing_setup(eng)
    key = craft_uncertain(eng, faxer, "unsure-ask", {"number": "555"}, fax, ("555",))
    r = eng.resume("unsure-ask")
    assert r.status == "paused"
    assert "fax" in (r.waiting or "") and key in (r.waiting or "")
    state = eng.state("unsure-ask")
    assert state.status == "paused" and state.waiting == r.waiting
    asked = [d for _, t, d in log_of(eng, "unsure-ask") if t == "human_input_requested"]
    assert asked[0]["reason"] == "uncertain" and asked[0]["call"] == 1

    before = log_of(eng, "unsure-ask")
    assert eng.resume("unsure-ask").status == "paused"
    assert log_of(eng, "unsure-ask") == before

    done = eng.answer("unsure-ask", Given("faxed 555"))
    assert done.status == "completed" and count == {}
    assert _sources(eng, "unsure-ask") == ["human"]
    assert _intent_keys(eng, "unsure-ask") == {key}


@all_backends
def test_no_verifier_and_no_key_answer_not_done_resends_once_under_the_same_key(
    eng: Engine,
) -> None:
    """answer 'not done': the tool runs once more, its new intent carrying the same key."""
    faxer, fax, count = _pausing_setup(eng)
    key = craft_uncertain(eng, faxer, "unsure-no", {"number": "555"}, fax, ("555",))
    assert eng.resume("unsure-no").status == "paused"
    done = eng.answer("unsure-no", "not done")
    assert (done.status, done.output) == ("completed", "faxed 555")
    assert count == {"fax": 1}
    assert _sources(eng, "unsure-no") == ["executed"]
    assert _intent_keys(eng, "unsure-no") == {key}


@all_backends
def test_a_crash_during_a_not_done_resend_asks_again_instead_of_sending_blind(
    eng: Engine,
) -> None:
    """After 'not done', the re-send is a new intent: if the process dies during it, the
    call is uncertain again and the run asks again (a blind re-send could duplicate)."""
    count: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool(side_effect=True)
    def fax(number: str) -> str:
        count["fax"] += 1
        if crash["on"]:
            raise Crash  # the fax went out, then the process died
        return f"faxed {number}"

    @eng.agent
    def faxer(run: Any, number: str) -> str:
        return str(fax(number))

    key = craft_uncertain(eng, faxer, "unsure-twice", {"number": "1"}, fax, ("1",))
    assert eng.resume("unsure-twice").status == "paused"
    with pytest.raises(Crash):
        eng.answer("unsure-twice", "not done")
    crash["on"] = False
    again = eng.resume("unsure-twice")
    assert again.status == "paused" and count == {"fax": 1}  # asked again, not re-sent
    assert eng.answer("unsure-twice", Given("faxed 1")).status == "completed"
    assert count == {"fax": 1}
    assert _intent_keys(eng, "unsure-twice") == {key}


@all_backends
def test_business_key_uncertain_effect_verified_on_resume_is_committed_to_the_ledger(
    eng: Engine,
) -> None:
    """A crashed holder of a business key resolves its intent by the verifier and commits
    the outcome to the ledger: a later run with the key gets it without executing."""
    svc = Service()

    @eng.tool(
        side_effect=True,
        key=lambda order: f"refund:{order}",
        verify=lambda key: svc.effects.get(key),
    )
    def refund(order: str, *, idempotency_key: str) -> str:
        return svc.perform("refund", idempotency_key)

    @eng.agent
    def refunder(run: Any, order: str) -> str:
        return str(refund(order))

    key = craft_uncertain(eng, refunder, "unsure-ledger", {"order": "o1"}, refund, ("o1",))
    svc.perform("refund", key)
    r = eng.resume("unsure-ledger")
    assert r.status == "completed" and _sources(eng, "unsure-ledger") == ["verified"]
    later = eng.run(refunder, order="o1")
    assert later.output == r.output and _sources(eng, later.run_id) == ["ledger"]
    assert svc.requests == [key]


@all_backends
def test_an_always_indeterminate_effect_fails_after_its_attempts_instead_of_looping(
    eng: Engine,
) -> None:
    """A side effect that always times out (indeterminate) with an idempotency key is
    re-sent up to its attempts, then fails for good; resume re-attempts it, same key."""
    keys: list[str] = []
    down = {"on": True}

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=3, initial=0.0))
    def send(op: str, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if down["on"]:
            raise TimeoutError("gateway timeout")
        return "sent"

    @eng.agent
    def sender(run: Any) -> str:
        return str(send("x"))

    r = eng.run(sender)
    assert r.status == "failed" and "attempts exhausted" in (r.error or "")
    assert len(keys) == 3
    down["on"] = False
    done = eng.resume(r.run_id)
    assert done.status == "completed" and set(keys) == {f"{r.run_id}:1"} and len(keys) == 4


@all_backends
def test_an_unclear_answer_to_an_uncertain_effect_is_refused_recording_nothing(
    eng: Engine,
) -> None:
    """Only a plain 'done'/'not done' (yes/no, true/false) settles an uncertain effect: an
    unclear answer would be read as 'not done' and re-send an effect that may be done,
    so it is refused (UsageError) and nothing is recorded."""
    from engine.errors import UsageError

    faxer, fax, count = _pausing_setup(eng)
    craft_uncertain(eng, faxer, "unsure-unclear", {"number": "7"}, fax, ("7",))
    assert eng.resume("unsure-unclear").status == "paused"
    before = log_of(eng, "unsure-unclear")
    with pytest.raises(UsageError, match="done"):
        eng.answer("unsure-unclear", "I think it went out")
    assert log_of(eng, "unsure-unclear") == before and count == {}
    assert eng.answer("unsure-unclear", "No").status == "completed"
    assert count == {"fax": 1}


@all_backends
def test_an_uncertain_effect_is_resolved_under_the_key_it_was_sent_with(eng: Engine) -> None:
    """A crash left a side effect's outcome unknown; the code deployed since derives its
    business key differently. Resolving that effect verifies (and would re-send) under the
    key recorded with the intent, the one the service saw, never under a new one."""
    asked: list[str] = []
    sent: list[str] = []
    crash = {"now": True}

    def found(key: str) -> dict[str, str] | None:
        asked.append(key)
        return {"receipt": key} if key in sent else None

    def pay_body(order: str) -> dict[str, str]:
        sent.append(f"pay:{order}")
        if crash["now"]:
            raise Crash("killed after the request was sent")
        return {"receipt": order}

    impl: dict[str, Any] = {
        "pay": eng.tool(
            name="uncertain:pay", side_effect=True, key=lambda o: f"pay:{o}", verify=found
        )(pay_body)
    }

    @eng.agent
    def paying(run: Any) -> Any:
        return impl["pay"]("o1")

    with pytest.raises(Crash):
        eng.run(paying, run_id="uncertain-key-changed")
    crash["now"] = False
    impl["pay"] = eng.tool(
        name="uncertain:pay", side_effect=True, key=lambda o: f"payment/{o}", verify=found
    )(pay_body)
    r = eng.resume("uncertain-key-changed")
    assert r.status == "completed", r.error
    assert asked == ["pay:o1"]
    assert sent == ["pay:o1"]
    assert r.output == {"receipt": "pay:o1"}
