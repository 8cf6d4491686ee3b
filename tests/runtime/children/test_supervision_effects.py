"""A group restart never sends a sibling's effect twice (SQLite files and PostgreSQL,
with a counting service): under one_for_all and rest_for_one a sibling abandoned to be
restarted has its compensable effects undone first (test_supervision_restart), and the
new run started in its place takes over every effect its abandon left standing when it
makes the same call: it records the old run's outcome under the old key and sends
nothing (``source`` ``parent``), so a default-keyed payment without a compensation
happens once, however many restarts, also through a run stopped before it paid."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import wait_until
from conftest import backends
from structlog.testing import capture_logs
from test_supervision_kit import Counter, events_of

from engine import Engine, Supervisor
from engine import observe as engine_log
from engine.kinds import RunStatus
from engine.polling import poll_until

STORES = backends("sqlite", "postgres")


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    where = str(tmp_path / "service.db")
    service.reset(where)
    monkeypatch.setenv("AGENTLOG_TEST_SERVICE", where)
    yield where


def _payer(eng: Engine, counter: Counter, stall_at: int = 0) -> Any:
    """An agent that pays for ``order`` through the service, under its default key, with
    no compensation; its ``stall_at``-th run works on (durably) until it is stopped."""

    @eng.tool(side_effect=True)
    def pay(order: str, *, idempotency_key: str) -> str:
        return service.perform("pay", order, idempotency_key)

    @eng.agent
    def payer(run: Any, order: str) -> str:
        if counter.bump("payer") == stall_at:
            for _ in range(5000):
                run.decide("tick", time.sleep, 0.01)
        return str(pay(order))

    return payer


def _team(eng: Engine, tmp_path: Path, strategy: str, fails: int) -> Any:
    """A supervised team of a payer (a default-keyed payment with no compensation) and a
    breaker that fails its first ``fails`` attempts once the payment was made; under
    rest_for_one the payer is spawned after the breaker, so that its restart covers it."""
    counter = Counter(tmp_path)
    payer = _payer(eng, counter)

    @eng.agent
    def breaker(run: Any, order: str) -> str:
        n = counter.bump("breaker")
        wait_until(lambda: service.by_op("pay", order), "the payer paid first", 60)
        if n <= fails:
            raise RuntimeError(f"breaker broke ({n})")
        return "fixed"

    @eng.agent(supervise=Supervisor(strategy, max_restarts=fails, within=60.0))  # type: ignore[arg-type]
    def team(run: Any, order: str) -> list[str]:
        if strategy == "rest_for_one":
            b = run.spawn(breaker, order=order)
            p = run.spawn(payer, order=order)
        else:
            p = run.spawn(payer, order=order)
            b = run.spawn(breaker, order=order)
        return [b.result(), p.result()]  # the breaker's failure first: the payer unsettled

    return team, counter


@STORES
@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
@pytest.mark.parametrize("fails", [1, 2])
def test_a_restarted_sibling_takes_over_its_payment_instead_of_paying_again(
    eng: Engine, tmp_path: Path, svc: str, strategy: str, fails: int
) -> None:
    """The payer's run is abandoned and started again at each of the breaker's failures;
    the service saw one payment request and made one payment, every new payer run took
    the payment over from the run it replaced (same key, sent nothing), and a replay of
    the team reaches the same."""
    team, counter = _team(eng, tmp_path, strategy, fails)
    result = eng.run(team, order="o1")
    assert (result.status, result.output) == (RunStatus.COMPLETED, ["fixed", "pay:o1"])
    assert counter.get("payer") == fails + 1 and counter.get("breaker") == fails + 1
    assert service.effects(svc) == {("pay", "o1"): 1}
    assert [op for tool, op, _ in service.requests(svc) if tool == "pay"] == ["o1"]
    restarts = events_of(eng, result.run_id, "child_restarted")
    payers = [r for r in restarts if r["call"] == (1 if strategy == "one_for_all" else 2)]
    assert len(payers) == fails
    first = payers[0]["previous_run_id"]
    [paid] = [e.data for e in eng.events(first) if e.type == "tool_invoked"]
    # A payer replaced again before it reached its payment (the breaker may fail again
    # first) made no call; every one that did took the payment over under its key.
    for i, r in enumerate(payers):
        new = [e.data for e in eng.events(r["child_run_id"])]
        invoked = [d for d in new if "key" in d and d.get("tool", "").endswith("pay")]
        sources = [d["source"] for d in new if "source" in d]
        if invoked or i == len(payers) - 1:  # the last one ran to its end
            assert [d["key"] for d in invoked] == [paid["key"]]
            assert sources == ["parent"]
        else:
            assert sources == []
    eng.verify(result.run_id)


def _one_for_all(eng: Engine, member: Any, breaker: Any, restarts: int) -> Any:
    """Run a one_for_all team of ``member`` and ``breaker`` on order o1 (the breaker's
    result waited for first); it completes with both outputs."""

    @eng.agent(supervise=Supervisor("one_for_all", max_restarts=restarts, within=60.0))
    def team(run: Any, order: str) -> list[str]:
        m, b = run.spawn(member, order=order), run.spawn(breaker, order=order)
        return [b.result(), m.result()]

    result = eng.run(team, order="o1")
    assert (result.status, result.output) == (RunStatus.COMPLETED, ["fixed", "pay:o1"])
    return result


@STORES
def test_a_payment_is_taken_over_across_a_run_stopped_before_it_paid(
    eng: Engine, tmp_path: Path, svc: str
) -> None:
    """one_for_all, the breaker failing twice: the payer's first run paid, its second was
    stopped by the second restart before it reached the payment; the third run takes the
    payment over from the first (its intent names that run), and nothing is paid twice."""
    counter = Counter(tmp_path)
    payer = _payer(eng, counter, stall_at=2)

    @eng.agent
    def breaker(run: Any, order: str) -> str:
        n = counter.bump("breaker")
        if n == 1:
            wait_until(lambda: service.by_op("pay", order), "the payer paid first", 60)
        if n == 2:
            wait_until(lambda: counter.get("payer") >= 2, "the payer's second run", 60)
        if n <= 2:
            raise RuntimeError(f"breaker broke ({n})")
        return "fixed"

    result = _one_for_all(eng, payer, breaker, restarts=2)
    assert counter.get("payer") == 3
    assert service.effects(svc) == {("pay", "o1"): 1}
    payers = [e for e in events_of(eng, result.run_id, "child_restarted") if e["call"] == 1]
    (first, second), third = [e["previous_run_id"] for e in payers], payers[-1]["child_run_id"]
    assert "tool_invoked" not in [e.type for e in eng.events(second)]
    [took] = [e.data for e in eng.events(third) if e.type == "tool_invoked"]
    assert took["parent_run"] == first and took["parent_call"] == 1
    eng.verify(result.run_id)


@STORES
def test_a_restarted_sibling_whose_own_child_paid_does_not_pay_again(
    eng: Engine, tmp_path: Path, svc: str
) -> None:
    """The sibling pays through a child of its own: its new run's spawn of the same agent
    with the same input, at the same call, starts a child that takes the payment over from
    the replaced run's child; one payment."""
    counter = Counter(tmp_path)
    payer = _payer(eng, counter)

    @eng.agent
    def sibling(run: Any, order: str) -> str:
        counter.bump("sibling")
        out: str = run.call(payer, order=order)
        return out

    @eng.agent
    def breaker(run: Any, order: str) -> str:
        n = counter.bump("breaker")
        wait_until(lambda: service.by_op("pay", order), "the sibling's child paid first", 60)
        if n == 1:
            raise RuntimeError("breaker broke")
        return "fixed"

    result = _one_for_all(eng, sibling, breaker, restarts=1)
    assert counter.get("sibling") == 2 and counter.get("payer") == 2
    assert service.effects(svc) == {("pay", "o1"): 1}
    eng.verify(result.run_id)


@STORES
def test_a_restart_that_can_neither_undo_nor_take_over_stops_naming_the_effect(
    eng: Engine, tmp_path: Path, svc: str
) -> None:
    """The sibling's payment has a compensation that fails: the restart stops before it
    starts anything again; the supervisor fails with one message naming the sibling, the
    tool and its call, and the payment was made once and never again."""
    counter = Counter(tmp_path)

    def refund(result: str) -> str:
        raise PermissionError(f"refunds of {result} are closed")

    @eng.tool(side_effect=True, compensate=refund, retry=None)
    def charge(order: str, *, idempotency_key: str) -> str:
        return service.perform("pay", order, idempotency_key)

    @eng.agent
    def payer(run: Any, order: str) -> str:
        counter.bump("payer")
        return str(charge(order))

    @eng.agent
    def breaker(run: Any, order: str) -> str:
        wait_until(lambda: service.by_op("pay", order), "the payer paid first", 60)
        raise RuntimeError("breaker broke")

    @eng.agent(supervise=Supervisor("one_for_all", max_restarts=3, within=60.0))
    def team(run: Any, order: str) -> list[str]:
        p, b = run.spawn(payer, order=order), run.spawn(breaker, order=order)
        return [b.result(), p.result()]

    result = eng.run(team, order="o1")
    assert result.status == RunStatus.FAILED
    paid = events_of(eng, result.run_id, "child_spawned")[0]["child_run_id"]
    error = result.error or ""
    assert paid in error and "charge" in error and "refunds of pay:o1 are closed" in error
    assert events_of(eng, result.run_id, "child_restarted") == []
    assert counter.get("payer") == 1
    assert service.effects(svc) == {("pay", "o1"): 1}


@STORES
def test_a_restarted_run_that_does_not_make_the_same_call_is_warned_about(
    eng: Engine, tmp_path: Path, svc: str
) -> None:
    """The payer's new run pays for another order (its call differs): it cannot take the
    first payment over, which still stands; when it completes, a warning names the run
    it replaced, the tool, the call and the key of that payment."""
    counter = Counter(tmp_path)

    @eng.tool(side_effect=True)
    def pay(order: str, *, idempotency_key: str) -> str:
        return service.perform("pay", order, idempotency_key)

    @eng.agent
    def payer(run: Any, order: str) -> str:
        n = counter.bump("payer")
        pay(order if n == 1 else f"{order}-again")
        return "pay:o1"

    @eng.agent
    def breaker(run: Any, order: str) -> str:
        n = counter.bump("breaker")
        wait_until(lambda: service.by_op("pay", order), "the payer paid first", 60)
        if n == 1:
            raise RuntimeError("breaker broke")
        return "fixed"

    engine_log.get()  # a first use may configure structlog, which would undo capture_logs
    with capture_logs() as logs:
        result = _one_for_all(eng, payer, breaker, restarts=1)
        # The child's thread may warn just after its parent returned.
        poll_until(lambda: _warned(logs) or None, 60)
    first = events_of(eng, result.run_id, "child_spawned")[0]["child_run_id"]
    [paid] = [e.data for e in eng.events(first) if e.type == "tool_invoked"]
    warned = _warned(logs)
    assert [(w["replaced"], w["call"], w["key"]) for w in warned] == [(first, 1, paid["key"])]
    assert warned[0]["tool"].endswith("pay")
    assert service.effects(svc) == {("pay", "o1"): 1, ("pay", "o1-again"): 1}


def _warned(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in logs if x["event"] == "restart_left_effect_standing"]
