"""The pure plan of graded recovery (``lifecycle.recovery.choose``): by failure kind, and
by cost (recoveries so far, the budget left, the paid model calls a re-run would redo)."""

from __future__ import annotations

from engine import Recovery
from engine.kinds import FailureKind, RecoveryAction
from engine.runtime.lifecycle.recovery import Failure, choose

T, L, P = FailureKind.TRANSIENT, FailureKind.LOGICAL, FailureKind.PERMANENT
A = RecoveryAction


def failure(kind: FailureKind, **facts: object) -> Failure:
    return Failure(kind=kind, error="boom", position=9, call=4, **facts)  # type: ignore[arg-type]


def test_a_transient_failure_is_retried_until_its_retries_are_spent() -> None:
    assert choose(Recovery(), failure(T)).action == A.RETRY
    assert choose(Recovery(), failure(T, retries=2)).action == A.ASK
    assert choose(Recovery(retry=False), failure(T)).action == A.ASK


def test_a_rollback_that_would_redo_many_paid_model_calls_loses_to_a_retry() -> None:
    spent = failure(T, retries=2, checkpoint=(1, 2), rollback_paid=3)
    cheap = choose(Recovery(), spent)
    assert (cheap.action, cheap.from_position, cheap.from_call) == (A.ROLLBACK, 2, 2)
    dear = failure(T, retries=2, checkpoint=(1, 2), rollback_paid=40)
    assert choose(Recovery(), dear).action == A.RETRY  # the retry wins: cheaper than 40 calls
    assert choose(Recovery(retry=False), dear).action == A.ASK


def test_a_logical_failure_replans_unless_the_budget_cannot_pay_for_it() -> None:
    plan = choose(Recovery(), failure(L, decision=(3, 7)))
    assert (plan.action, plan.from_position, plan.from_call) == (A.REPLAN, 7, 3)
    assert choose(Recovery(), failure(L, decision=(3, 7), affordable=False)).action == A.ASK
    assert choose(Recovery(replan=False), failure(L, decision=(3, 7))).action == A.ASK


def test_a_broken_invariant_after_an_effect_rolls_back_if_it_can_be_undone() -> None:
    facts = {"decision": (1, 2), "checkpoint": (2, 3), "effects": 1}
    broken = {"invariant": "paid_means_charged"}
    assert choose(Recovery(), failure(L, evidence=broken, **facts)).action == A.ROLLBACK
    stuck = failure(L, evidence=broken, undoable=False, **facts)
    assert choose(Recovery(), stuck).action == A.REPLAN  # no compensation: re-plan instead


def test_permanent_goes_to_a_person_and_the_attempts_are_bounded() -> None:
    assert choose(Recovery(), failure(P, decision=(1, 2), checkpoint=(2, 3))).action == A.ASK
    assert choose(Recovery(ask=False), failure(P)).action == A.GIVE_UP
    assert choose(Recovery(max_attempts=1), failure(T, attempts=1)).action == A.ASK
