"""The side-effect ledger on every store: a business key names one effect, executed at most
once across runs and forks; a second claimer waits for a run still executing it, then
treats the effect as uncertain; reusing a key for other arguments is a permanent error;
compensating an effect releases its key."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from agents.kit import log_of, tool_def, wait_until
from conftest import all_backends

from engine import Engine, EngineConfig, Given, Permanent, RetryPolicy
from engine.store import stream_id


def engine_on(store_url: str, now: list[float]) -> Engine:
    """An engine whose clock reads ``now[0]`` (the test moves it) and whose backoff
    sleeps return at once."""
    return Engine(store_url, config=EngineConfig(clock=lambda: now[0], sleep=lambda _s: None))


def _outcome(eng: Engine, run_id: str, call: int) -> dict[str, Any]:
    found = [d for _, t, d in log_of(eng, run_id) if t == "tool_succeeded" and d["call"] == call]
    assert len(found) == 1, found
    return found[0]


@all_backends
def test_business_key_executes_once_across_runs(eng: Engine) -> None:
    """Two runs with the same business key: the second gets the first's outcome from the
    ledger (source 'ledger') and the tool runs once."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True, key=lambda order, cents: f"refund:{order}")
    def refund(order: str, cents: int) -> dict[str, Any]:
        count[order] += 1
        return {"receipt": f"R-{order}", "cents": cents}

    @eng.agent
    def refunder(run: Any, order: str) -> dict[str, Any]:
        return dict(refund(order, 500))

    one = eng.run(refunder, order="o1")
    two = eng.run(refunder, order="o1")
    other = eng.run(refunder, order="o2")
    assert one.output == two.output == {"receipt": "R-o1", "cents": 500}
    assert other.output == {"receipt": "R-o2", "cents": 500}
    assert count == {"o1": 1, "o2": 1}
    assert _outcome(eng, one.run_id, 1)["source"] == "executed"
    assert _outcome(eng, two.run_id, 1)["source"] == "ledger"
    second_intent = [d for _, t, d in log_of(eng, two.run_id) if t == "tool_invoked"]
    assert second_intent[0]["key"] == "refund:o1"


@all_backends
def test_a_keyed_business_effect_commits_once_and_its_key_is_settled_for_its_own_run(
    eng: Engine,
) -> None:
    """A business-keyed tool that takes the idempotency key: its outcome and the key's
    commit ride with the run's next commit; the same key called again in the same run
    reads it committed (the ledger's outcome, the tool not run again) instead of waiting
    on its own run's claim and re-sending."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True, key=lambda order: f"pay:{order}", timeout=30.0)
    def pay(order: str, *, idempotency_key: str) -> dict[str, str]:
        count[order] += 1
        return {"receipt": f"P-{order}", "key": idempotency_key}

    @eng.agent
    def payer(run: Any) -> list[Any]:
        first = pay("o1")
        again = pay("o1")  # the same business key: the ledger's committed outcome
        return [first, again, pay("o2")]

    r = eng.run(payer)
    assert r.status == "completed", r.error
    assert r.output == [{"receipt": "P-o1", "key": "pay:o1"}] * 2 + [
        {"receipt": "P-o2", "key": "pay:o2"}
    ]
    assert count == {"o1": 1, "o2": 1}
    assert [_outcome(eng, r.run_id, c)["source"] for c in (1, 2, 3)] == [
        "executed",
        "ledger",
        "executed",
    ]
    for order in ("o1", "o2"):  # every key's effect committed in the ledger
        events = eng.store.read(stream_id("effect:pay:" + order))
        assert [type(e.event).__name__ for e in events] == ["EffectClaimed", "EffectCommitted"]


@all_backends
def test_a_ledger_outcome_of_none_is_returned_without_running_the_tool(eng: Engine) -> None:
    """The ledger's outcome is the call's even when it is None (a tool with no result):
    the second run records it (source 'ledger') and never sends the effect again."""
    sent: list[str] = []

    @eng.tool(side_effect=True, key=lambda order: f"notify:{order}")
    def notify(order: str) -> None:
        sent.append(order)

    @eng.agent
    def notifier(run: Any, order: str) -> str:
        notify(order)
        return "ok"

    one, two = eng.run(notifier, order="o1"), eng.run(notifier, order="o1")
    assert (one.status, two.status) == ("completed", "completed")
    assert sent == ["o1"]
    assert _outcome(eng, two.run_id, 1)["source"] == "ledger"


@all_backends
def test_business_key_is_deduped_across_a_fork(eng: Engine) -> None:
    """A resend fork that re-executes a keyed effect gets the ledger's outcome; an unkeyed
    effect after the target is sent again under the fork's default key."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True, key=lambda order: f"pay:{order}")
    def pay(order: str) -> str:
        count["pay"] += 1
        return f"paid {order}"

    @eng.tool(side_effect=True)
    def email(order: str, *, idempotency_key: str) -> str:
        count["email"] += 1
        return idempotency_key

    @eng.agent
    def checkout(run: Any, order: str) -> list[str]:
        run.checkpoint("start")
        return [pay(order), email(order)]

    r = eng.run(checkout, order="o7")
    fork = eng.rewind(r.run_id, to="start", effects="resend")
    assert fork.status == "completed" and fork.run_id != r.run_id
    assert fork.output == ["paid o7", f"{fork.run_id}:3"]
    assert count == {"pay": 1, "email": 2}
    assert _outcome(eng, fork.run_id, 2)["source"] == "ledger"


@all_backends
def test_second_claimer_waits_for_an_executing_holder_then_treats_the_effect_as_uncertain(
    eng: Engine,
) -> None:
    """While run A executes a keyed effect, run B with the same key waits (at most the
    tool's timeout), then treats the effect as uncertain: with no verifier and no
    idempotency key it pauses naming the holder, without executing. Once A's outcome is
    settled, resuming B takes it from the ledger."""
    count: Counter[str] = Counter()
    started, gate = threading.Event(), threading.Event()
    timeout = 0.5

    @eng.tool(
        side_effect=True,
        key=lambda order: f"refund:{order}",
        timeout=timeout,
        retry=RetryPolicy(max_attempts=1),
    )
    def refund(order: str) -> str:
        count["refund"] += 1
        started.set()
        gate.wait(10)  # the outside service hangs: A's own call times out, unsure
        return f"refunded {order}"

    @eng.agent
    def refunder(run: Any, order: str) -> str:
        return str(refund(order))

    results: dict[str, Any] = {}

    def run_a() -> None:
        results["a"] = eng.run(refunder, run_id="claimer-a", order="o1")

    a = threading.Thread(target=run_a)
    a.start()
    assert started.wait(5)
    t0 = time.monotonic()
    b = eng.run(refunder, run_id="claimer-b", order="o1")
    waited = time.monotonic() - t0
    a.join(10)
    gate.set()

    assert waited >= timeout * 0.9, waited
    assert b.status == "paused" and "claimer-a" in (b.waiting or "")
    assert "refund:o1" in (b.waiting or "")
    assert eng.state("claimer-b").status == "paused"
    assert count == {"refund": 1}  # B did not execute it
    b_types = [t for _, t, _ in log_of(eng, "claimer-b")]
    assert "tool_invoked" in b_types and "tool_succeeded" not in b_types
    assert results["a"].status == "paused"  # A's own call timed out: uncertain too

    # A's abandoned attempt finishes late, after A paused: kept as evidence in the tool's
    # own stream (A's log belongs to whoever continues it); then a person settles A.
    late = wait_until(
        lambda: eng.store.read(stream_id("tool:" + tool_def(refund).name)),
        "the late result recorded",
        10,
    )
    assert [(e.event.run_id, e.event.result) for e in late] == [("claimer-a", "refunded o1")]  # type: ignore[attr-defined]
    assert "tool_late_result" not in [t for _, t, _ in log_of(eng, "claimer-a")]
    settled = eng.answer("claimer-a", Given("refunded o1"))  # the result the person saw
    assert settled.status == "completed"
    resumed = eng.resume("claimer-b")
    assert (resumed.status, resumed.output) == ("completed", settled.output)
    sources = [d["source"] for _, t, d in log_of(eng, "claimer-b") if t == "tool_succeeded"]
    assert sources == ["ledger"]
    assert count == {"refund": 1}


@all_backends
def test_same_business_key_with_different_arguments_is_a_permanent_error(eng: Engine) -> None:
    """Reusing a key for other arguments fails the run as permanent (the key names one
    effect); nothing executes for the second run."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True, key=lambda order, cents: f"refund:{order}")
    def refund(order: str, cents: int) -> str:
        count[f"{order}/{cents}"] += 1
        return "ok"

    @eng.agent
    def refunder(run: Any, order: str, cents: int) -> str:
        return str(refund(order, cents))

    first = eng.run(refunder, order="o1", cents=500)
    second = eng.run(refunder, order="o1", cents=700)
    assert first.status == "completed"
    assert second.status == "failed"
    assert "different arguments" in (second.error or "") and first.run_id in (second.error or "")
    failed = [d for _, t, d in log_of(eng, second.run_id) if t == "agent_failed"]
    assert failed[0]["kind"] == "permanent"
    assert count == {"o1/500": 1}
    again = eng.run(refunder, order="o1", cents=500)  # the same arguments: the ledger
    assert again.status == "completed" and count == {"o1/500": 1}


@all_backends
def test_compensating_an_effect_releases_its_business_key(eng: Engine) -> None:
    """Abandon runs the undo of each committed effect once, in reverse order, and releases
    the business key, so a later run may perform that effect again."""
    undone: list[str] = []
    count: Counter[str] = Counter()

    def void(result: str) -> str:
        undone.append(result)
        return f"void {result}"

    @eng.tool(side_effect=True, key=lambda order: f"hold:{order}", compensate=void)
    def hold(order: str) -> str:
        count["hold"] += 1
        return f"H-{order}"

    @eng.tool(side_effect=True, compensate=void)
    def reserve(order: str, *, idempotency_key: str) -> str:
        count["reserve"] += 1
        return f"S-{order}"

    @eng.agent
    def booking(run: Any, order: str) -> str:
        hold(order)
        reserve(order)
        return str(run.ask("confirm?"))

    r = eng.run(booking, order="o3")
    assert r.status == "paused"
    gone = eng.abandon(r.run_id)
    assert gone.status == "abandoned"
    assert undone == ["S-o3", "H-o3"]  # reverse order
    assert eng.abandon(r.run_id).status == "abandoned" and undone == ["S-o3", "H-o3"]
    again = eng.run(booking, order="o3")
    assert again.status == "paused" and count == {"hold": 2, "reserve": 2}


@all_backends
def test_a_fallback_outcome_frees_the_business_key_instead_of_committing_it(store_url: str) -> None:
    """The degraded path is not the effect: a later run with the same key executes it."""
    from engine import CircuitBreaker, RetryPolicy, Transient

    now = [0.0]
    engine = engine_on(store_url, now)
    sent: list[str] = []
    broken = {"on": True}

    def charge(order: str) -> dict[str, str]:
        if broken["on"]:
            raise Transient("503")
        sent.append(order)
        return {"charged": order}

    tool = engine.tool(
        charge,
        name="fallback_charge",
        side_effect=True,
        key=lambda order: f"charge:{order}",
        retry=RetryPolicy(max_attempts=3, initial=0.0),
        breaker=CircuitBreaker(failure_threshold=1, reset_timeout=60.0),
        fallback=lambda order: {"queued": order},
    )

    @engine.agent(name="tests:fallback_agent")
    def agent(run: object, order: str) -> object:
        return tool(order)

    first = engine.run(agent, order="o1")
    assert first.output == {"queued": "o1"}
    broken["on"] = False
    now[0] += 61.0  # the breaker half-opens and lets a trial through
    second = engine.run(agent, order="o1")
    assert second.output == {"charged": "o1"}
    assert sent == ["o1"]


def test_a_waiting_claimer_with_a_verifier_does_not_execute_when_the_holder_is_unsure(
    eng: Engine,
) -> None:
    """Run B waits on run A's claim; A is still executing when B's wait ends and the
    verifier finds nothing yet. B must not send the effect too (A may land it a moment
    later): it pauses for a person instead."""
    count: Counter[str] = Counter()
    started, gate = threading.Event(), threading.Event()
    landed: dict[str, str] = {}

    @eng.tool(
        side_effect=True,
        key=lambda order: f"ship:{order}",
        verify=lambda key: landed.get(key),
        timeout=0.3,
        retry=RetryPolicy(max_attempts=1),
    )
    def ship(order: str) -> str:
        count["ship"] += 1
        started.set()
        gate.wait(10)
        landed[f"ship:{order}"] = f"shipped {order}"
        return f"shipped {order}"

    @eng.agent
    def shipper(run: Any, order: str) -> str:
        return str(ship(order))

    a = threading.Thread(target=lambda: eng.run(shipper, run_id="ship-a", order="o1"))
    a.start()
    assert started.wait(5)
    b = eng.run(shipper, run_id="ship-b", order="o1")
    gate.set()
    a.join(10)
    assert b.status == "paused" and "ship-a" in (b.waiting or ""), b
    assert count == {"ship": 1}


@all_backends
def test_a_fallback_after_an_unsure_attempt_keeps_the_key_claimed(store_url: str) -> None:
    """An attempt timed out (the effect may have landed), then the breaker opened and the
    fallback answered: the key stays claimed, so no other run sends the effect blind."""
    from engine import CircuitBreaker
    from engine.runtime.call import ledger

    now = [0.0]
    engine = engine_on(store_url, now)

    def send(order: str, *, idempotency_key: str) -> str:
        raise TimeoutError("no reply")  # sent; outcome unknown

    tool = engine.tool(
        send,
        name="unsure_send",
        side_effect=True,
        key=lambda order: f"send:{order}",
        retry=RetryPolicy(max_attempts=3, initial=0.0),
        breaker=CircuitBreaker(failure_threshold=1, reset_timeout=60.0),
        fallback=lambda order: "queued",
    )

    @engine.agent(name="tests:unsure_fallback_agent")
    def agent(run: object, order: str) -> object:
        return tool(order)

    r = engine.run(agent, order="o1")
    assert (r.status, r.output) == ("completed", "queued")
    held = ledger.read(engine.store, "send:o1")
    assert held.claim is not None and held.claim.run_id == r.run_id
    assert held.committed is None


@all_backends
def test_a_final_failure_after_an_unsure_attempt_keeps_the_key_claimed(store_url: str) -> None:
    """Attempt 1 timed out (the charge may have landed), the verifier found nothing yet,
    attempt 2 failed permanently: the run fails but the ledger still holds its claim, so a
    second run with the same key does not send; it asks a person."""
    from engine.runtime.call import ledger

    eng = Engine(store_url, config=EngineConfig(sleep=lambda _s: None))
    sent: list[int] = []

    @eng.tool(
        side_effect=True,
        key=lambda order: f"charge:{order}",
        verify=lambda key: None,  # the provider's books do not show it (yet)
        retry=RetryPolicy(max_attempts=2, initial=0.0, jitter=False),
        timeout=2.0,  # also how long a second claimer waits for the holder
    )
    def charge(order: str) -> str:
        sent.append(len(sent) + 1)
        if len(sent) == 1:
            raise TimeoutError("read timed out")  # sent; outcome unknown
        raise Permanent("card declined")

    @eng.agent
    def checkout(run: Any, order: str) -> str:
        return str(charge(order))

    r = eng.run(checkout, order="o1")
    assert r.status == "failed" and "card declined" in (r.error or ""), r
    failures = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_failed"]
    assert [(d["kind"], d["final"]) for d in failures] == [
        ("indeterminate", False),
        ("permanent", True),
    ]
    held = ledger.read(eng.store, "charge:o1")
    assert held.claim is not None and (held.claim.run_id, held.claim.call) == (r.run_id, 1)
    assert held.committed is None

    second = eng.run(checkout, order="o1")
    assert second.status == "paused" and "charge:o1" in (second.waiting or ""), second
    assert sent == [1, 2]  # the second run sent nothing
    assert ledger.read(eng.store, "charge:o1").claim == held.claim
