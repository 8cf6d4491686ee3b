"""Graded recovery (``@engine.agent(recovery=Recovery(...), invariants=[...])``): a
scenario per action, on SQLite and PostgreSQL, each with its decision log (the run's
``recovery_decided`` events) equal to a hand-written expectation: a transient failure is
retried, a logical failure of the model's plan re-planned (the decision made again with
the failure in its input), an invariant broken after a side effect rolled back to the
checkpoint (the effect compensated), a permanent failure given to a person."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import backends

from engine import Engine, Logical, Permanent, Recovery, RetryPolicy, Transient
from engine.errors import UsageError
from engine.log.history import read_events
from replay.cli.stats_tables import recovery_table
from replay.timeline import story

ONCE = RetryPolicy(max_attempts=1)  # the call's own retries spent at once: recovery's turn
BOTH = backends("sqlite", "postgres")


def decisions(e: Engine, run_id: str) -> list[tuple[str, str, int, str]]:
    """The run's decision log: (kind, action, attempt, type of the event it goes on from)."""
    events = e.events(run_id)
    at = {x.position: x.type for x in events}
    return [
        (x.data["kind"], x.data["action"], x.data["attempt"], at[x.data["from_position"]])
        for x in events
        if x.type == "recovery_decided"
    ]


@BOTH
def test_a_transient_failure_is_retried(eng: Engine) -> None:
    tries: list[int] = []

    @eng.tool(retry=ONCE)
    def fetch(order: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise Transient("503 from the shop")
        return f"got {order}"

    @eng.agent(recovery=Recovery())
    def shop(run: Any, order: str) -> str:
        return fetch(order)

    r = eng.run(shop, order="o1")
    assert (r.status, r.output) == ("completed", "got o1")
    assert decisions(eng, r.run_id) == [("transient", "retry", 1, "agent_failed")]
    assert len(tries) == 2


@BOTH
def test_a_logical_failure_of_the_plan_is_replanned_with_the_failure(eng: Engine) -> None:
    seen: list[Any] = []

    def make_plan(order: str, failure: dict[str, Any] | None = None) -> str:
        seen.append(failure)
        return "ship to nowhere" if failure is None else "ship to the customer"

    @eng.tool(retry=ONCE)
    def execute(plan: str) -> str:
        if "nowhere" in plan:
            raise Logical(f"the plan {plan!r} names no address")
        return f"done: {plan}"

    @eng.agent(recovery=Recovery())
    def planner(run: Any, order: str) -> str:
        plan = run.decide("plan", make_plan, order)
        return execute(plan)

    r = eng.run(planner, order="o1")
    assert (r.status, r.output) == ("completed", "done: ship to the customer")
    assert decisions(eng, r.run_id) == [("logical", "replan", 1, "llm_decided")]
    assert seen[0] is None
    assert seen[1]["kind"] == "logical" and "names no address" in seen[1]["error"]
    assert eng.verify(r.run_id).status == "completed"  # the log replays as it ran


def paid_means_charged(state: Any, results: dict[str, Any]) -> bool:
    """Seed 000's "paid but the order shows unpaid": a paid order was charged in full."""
    return not results.get("mark_paid") or results.get("charge", {}).get("amount") == 100


@BOTH
def test_an_invariant_broken_after_an_effect_rolls_back_and_compensates(eng: Engine) -> None:
    charges: list[int] = []
    refunds: list[Any] = []
    unmarked: list[bool] = []

    @eng.tool(name="charge", side_effect=True, compensate=lambda result: refunds.append(result))
    def charge(order: str) -> dict[str, Any]:
        charges.append(1)
        return {"order": order, "amount": 0 if len(charges) == 1 else 100}  # a glitch, once

    @eng.tool(name="mark_paid", side_effect=True, compensate=unmarked.append)
    def mark_paid(order: str) -> bool:
        return True

    @eng.agent(invariants=[paid_means_charged], recovery=Recovery())
    def checkout(run: Any, order: str) -> str:
        run.decide("route", lambda: "card")  # a decision point: the broken state is no plan's
        run.checkpoint("before-payment")
        with run.step("pay"):
            charge(order)
            mark_paid(order)
        return "paid"

    r = eng.run(checkout, order="o1")
    assert (r.status, r.output) == ("completed", "paid")
    assert decisions(eng, r.run_id) == [("logical", "rollback", 1, "checkpoint")]
    assert len(charges) == 2 and refunds == [{"order": "o1", "amount": 0}]
    assert unmarked == [True]  # undone last first: mark_paid, then the charge
    assert eng.verify(r.run_id).status == "completed"
    failed = next(x for x in eng.events(r.run_id) if x.type == "agent_failed")
    evidence = failed.data["evidence"]
    assert (evidence["invariant"], evidence["step"]) == ("paid_means_charged", "pay")
    assert '"amount":0' in evidence["values"]["charge"]


@BOTH
def test_a_permanent_failure_goes_to_a_person_and_the_answer_retries(eng: Engine) -> None:
    allowed: list[bool] = []

    @eng.tool(retry=ONCE)
    def refund(order: str) -> str:
        if not allowed:
            raise Permanent("no permission to refund")
        return f"refunded {order}"

    @eng.agent(recovery=Recovery())
    def support(run: Any, order: str) -> str:
        return refund(order)

    r = eng.run(support, order="o1")
    assert r.status == "paused" and "no permission to refund" in (r.waiting or "")
    assert decisions(eng, r.run_id) == [("permanent", "ask", 1, "agent_failed")]
    allowed.append(True)  # a person granted it
    done = eng.answer(r.run_id, "try again")
    assert (done.status, done.output) == ("completed", "refunded o1")


def test_recovery_gives_up_to_a_person_after_its_attempts(eng: Engine) -> None:
    @eng.tool(retry=ONCE)
    def flaky() -> str:
        raise Transient("still down")

    @eng.agent(recovery=Recovery(max_retries=5, max_attempts=2))
    def stubborn(run: Any) -> str:
        return flaky()

    r = eng.run(stubborn)
    assert r.status == "paused"
    assert [d[:3] for d in decisions(eng, r.run_id)] == [
        ("transient", "retry", 1),
        ("transient", "retry", 2),
        ("transient", "ask", 3),
    ]


def test_without_ask_recovery_leaves_the_run_failed(eng: Engine) -> None:
    @eng.tool(retry=ONCE)
    def broken() -> str:
        raise Permanent("gone")

    @eng.agent(recovery=Recovery(ask=False))
    def quiet(run: Any) -> str:
        return broken()

    r = eng.run(quiet)
    assert r.status == "failed"
    assert decisions(eng, r.run_id) == [("permanent", "give_up", 1, "agent_failed")]


def test_recovery_and_invariants_are_checked_at_declaration(eng: Engine) -> None:
    with pytest.raises(UsageError, match="Recovery"):
        eng.agent(lambda run: None, recovery=True)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="invariants"):
        eng.agent(lambda run: None, invariants=["x"])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="max_attempts"):
        Recovery(max_attempts=-1)


def test_the_timeline_and_stats_show_each_choice(eng: Engine) -> None:
    """Each choice is a timeline line; stats count each action and how often it mended."""
    tries: list[int] = []

    @eng.tool(retry=ONCE)
    def fetch() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise Transient("503")
        return "ok"

    @eng.agent(recovery=Recovery())
    def shop(run: Any) -> str:
        return fetch()

    r = eng.run(shop)
    assert r.status == "completed"
    lines = [
        "".join(p if isinstance(p, str) else p[0] for p in line)
        for line in story(read_events(eng.store, r.run_id))
    ]
    shown = [line for line in lines if "⟲ recovery retry after a transient failure" in line]
    assert len(shown) == 2
    actions = eng.stats().recovery.actions
    assert {a: (s.decided, s.recovered) for a, s in actions.items()} == {"retry": (2, 1)}
    assert actions["retry"].success_rate == 0.5
    table = recovery_table(eng.stats().recovery)
    rows = dict(zip(table.columns[0]._cells, table.columns[1]._cells, strict=True))
    assert rows["recovery by retry: recovered / chosen"] == "1 / 2"


class Crash(BaseException):
    """The process dies here (nothing in the engine catches it)."""


@BOTH
def test_a_roll_back_a_crash_cut_short_is_finished_before_the_run_goes_on(eng: Engine) -> None:
    charges: list[int] = []
    undone: list[str] = []

    def unmark(done: bool, idempotency_key: str) -> None:
        if not undone:
            undone.append("crashed")
            raise Crash
        undone.append(idempotency_key)

    def refund(receipt: dict[str, Any], idempotency_key: str) -> None:
        undone.append(idempotency_key)

    @eng.tool(name="charge", side_effect=True, compensate=refund)
    def charge(order: str) -> dict[str, Any]:
        charges.append(1)
        return {"order": order, "amount": 0 if len(charges) == 1 else 100}

    @eng.tool(name="mark_paid", side_effect=True, compensate=unmark)
    def mark_paid(order: str) -> bool:
        return True

    @eng.agent(invariants=[paid_means_charged], recovery=Recovery())
    def checkout(run: Any, order: str) -> str:
        run.checkpoint("before-payment")
        with run.step("pay"):
            charge(order)
            mark_paid(order)
        return "paid"

    with pytest.raises(Crash):
        eng.run(checkout, order="o1", run_id="crashy")
    assert len(charges) == 1  # the decision is recorded, its compensations cut short
    r = eng.resume("crashy")
    assert (r.status, r.output) == ("completed", "paid")
    assert len(charges) == 2 and len(undone) == 3  # unmark again, then the refund
    assert decisions(eng, "crashy") == [("logical", "rollback", 1, "checkpoint")]


def at_most_one_tool_call(state: Any) -> bool:
    """An invariant of the state alone (``fn(state)``)."""
    return bool(state.tool_calls <= 1)


def test_invariants_hold_when_the_agent_returns_too(eng: Engine) -> None:
    """No step at all: the broken invariant is found as the agent returns, from the log."""

    @eng.tool
    def look(n: int) -> int:
        return n

    @eng.agent(invariants=[at_most_one_tool_call])
    def looker(run: Any) -> int:
        return look(1) + look(2)

    r = eng.run(looker)
    assert r.status == "failed" and "at_most_one_tool_call is false at the end" in (r.error or "")
    failed = next(x for x in eng.events(r.run_id) if x.type == "agent_failed")
    assert (failed.data["kind"], failed.data["evidence"]["step"]) == ("logical", "the end")
    assert "error" not in failed.data["evidence"]  # it was false: it did not raise


def test_an_async_agent_is_replanned_too(eng: Engine) -> None:
    async def make_plan(order: str, failure: dict[str, Any] | None = None) -> str:
        return "ship to nowhere" if failure is None else "ship to the customer"

    @eng.tool(retry=ONCE)
    async def execute(plan: str) -> str:
        if "nowhere" in plan:
            raise Logical("no address")
        return plan

    @eng.agent(recovery=Recovery())
    async def planner(run: Any, order: str) -> str:
        return await execute(await run.decide("plan", make_plan, order))

    r = eng.run(planner, order="o1")
    assert (r.status, r.output) == ("completed", "ship to the customer")
    assert decisions(eng, r.run_id) == [("logical", "replan", 1, "llm_decided")]
