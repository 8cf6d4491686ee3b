"""Forks and the parent's side effects: reuse (the default) sends nothing the parent sent,
compensate undoes the parent's effects first, resend sends again; a fork names the
parent's effects that still stand, and each effect is undone by the run that made it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from agents.kit import Crash, log_of
from conftest import all_backends

from engine import Engine, Given, Indeterminate
from engine.errors import UsageError


class Shop:
    """A payment service that counts what it receives and what it undoes."""

    def __init__(self, eng: Engine, name: str, **options: Any) -> None:
        self.sent: list[tuple[str, int]] = []
        self.undone: list[str] = []
        self.plan: dict[str, Any] = {"items": [("a", 1)]}

        def undo(receipt: dict[str, Any]) -> str:
            self.undone.append(receipt["item"])
            return "voided"

        @eng.tool(side_effect=True, compensate=undo, name=f"{name}_charge", **options)
        def charge(item: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
            self.sent.append((item, cents))
            return {"item": item, "cents": cents, "key": idempotency_key}

        def decide() -> list[list[Any]]:
            return [list(i) for i in self.plan["items"]]

        @eng.agent(name=f"tests:{name}")
        def agent(run: Any) -> list[Any]:
            run.checkpoint("start")
            items = run.decide("items", decide)
            return [charge(item, cents) for item, cents in items]

        self.agent = agent


def _events(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == kind]


@all_backends
def test_reuse_sends_nothing_and_records_the_parent_outcome(eng: Engine) -> None:
    """The fork's same call (same tool, same arguments) records the parent's outcome with
    source 'parent' and its intent under the parent's key; nothing is sent, nothing stands."""
    shop = Shop(eng, "reuse")
    parent = eng.run(shop.agent)
    fork = eng.rewind(parent.run_id, to="start")  # effects="reuse" is the default
    assert (fork.status, fork.output) == ("completed", parent.output)
    assert shop.sent == [("a", 1)] and fork.standing == ()
    [intent] = _events(eng, fork.run_id, "tool_invoked")
    [parent_intent] = _events(eng, parent.run_id, "tool_invoked")
    assert intent["key"] == parent_intent["key"] == f"{parent.run_id}:3"
    assert intent["parent_call"] == 3
    [done] = _events(eng, fork.run_id, "tool_succeeded")
    assert done["source"] == "parent" and done["result"] == parent.output[0]
    assert eng.verify(fork.run_id).status == "completed"  # the fork's log is well formed


@all_backends
def test_reuse_takes_each_parent_effect_once_in_call_order_and_sends_the_rest(
    eng: Engine,
) -> None:
    """Two identical parent charges are taken by the fork's first two identical calls, in
    order; the fork's third identical call is sent (the parent made only two)."""
    shop = Shop(eng, "reuse_once")
    shop.plan["items"] = [("a", 1), ("a", 1)]
    parent = eng.run(shop.agent)
    shop.plan["items"] = [("a", 1), ("a", 1), ("a", 1)]
    fork = eng.rewind(parent.run_id, to="start")
    assert fork.status == "completed" and shop.sent == [("a", 1)] * 3
    taken = [(d["call"], d.get("parent_call")) for d in _events(eng, fork.run_id, "tool_invoked")]
    assert taken == [(3, 3), (4, 4), (5, None)]
    assert fork.output[2]["key"] == f"{fork.run_id}:5"  # sent under the fork's own key
    assert [d["source"] for d in _events(eng, fork.run_id, "tool_succeeded")] == [
        "parent",
        "parent",
        "executed",
    ]


@all_backends
def test_a_resumed_fork_does_not_take_a_parent_effect_twice(eng: Engine) -> None:
    """A fork that crashed after taking over the parent's first charge, resumed, takes the
    parent's second identical charge for its next identical call, not the first again."""
    from engine.log.subtree import fork_effects

    sent: list[str] = []
    crash = {"on": False}

    @eng.tool(side_effect=True, name="resumed_charge")
    def charge(item: str, *, idempotency_key: str) -> str:
        sent.append(item)
        return f"{item}@{idempotency_key}"

    @eng.tool(name="resumed_lookup")
    def lookup() -> str:
        if crash["on"]:
            crash["on"] = False
            raise Crash
        return "ok"

    @eng.agent(name="tests:resumed_fork")
    def agent(run: Any) -> list[str]:
        run.checkpoint("start")
        return [charge("a"), lookup(), charge("a")]

    parent = eng.run(agent)
    crash["on"] = True
    with pytest.raises(Crash):
        eng.rewind(parent.run_id, to="start")
    [fork] = [r.run_id for r in eng.runs() if r.parent_run_id == parent.run_id]
    assert eng.resume(fork).output == parent.output and sent == ["a", "a"]
    taken = [d.get("parent_call") for d in _events(eng, fork, "tool_invoked")]
    assert taken == [2, None, 4]
    assert fork_effects(eng.store, fork)[0] == []


@all_backends
def test_an_async_fork_reuses_concurrent_effects_each_once(eng: Engine) -> None:
    """Concurrent identical charges of an async agent (asyncio.gather) are each taken over
    once by the fork's concurrent calls: nothing is sent, and both parent calls are taken."""
    import asyncio

    sent: list[str] = []

    @eng.tool(side_effect=True, name="async_reuse_charge")
    async def charge(item: str, *, idempotency_key: str) -> str:
        await asyncio.sleep(0.01)
        sent.append(item)
        return idempotency_key

    @eng.agent(name="tests:async_reuse")
    async def agent(run: Any) -> list[str]:
        run.checkpoint("start")
        return list(await asyncio.gather(charge("a"), charge("a"), charge("b")))

    parent = eng.run(agent)
    fork = eng.rewind(parent.run_id, to="start")
    assert fork.status == "completed" and sorted(sent) == ["a", "a", "b"]
    assert sorted(fork.output) == sorted(parent.output) and fork.standing == ()
    taken = sorted(d["parent_call"] for d in _events(eng, fork.run_id, "tool_invoked"))
    assert taken == [2, 3, 4]


@all_backends
def test_reuse_with_changed_arguments_sends_and_the_parent_effect_still_stands(
    eng: Engine,
) -> None:
    """Different arguments are a different effect: the fork sends it under its own key, and
    the parent's effect is named as still standing."""
    shop = Shop(eng, "reuse_changed")
    parent = eng.run(shop.agent)
    shop.plan["items"] = [("a", 2)]
    fork = eng.rewind(parent.run_id, to="start")
    assert shop.sent == [("a", 1), ("a", 2)]
    [standing] = fork.standing
    assert (standing.call, standing.tool, standing.key) == (
        3,
        "reuse_changed_charge",
        f"{parent.run_id}:3",
    )
    assert standing.result == parent.output[0]


@all_backends
def test_a_fork_that_skips_the_effect_lists_it_as_standing(eng: Engine) -> None:
    """A fork that takes another path and never makes the call leaves the parent's effect
    in the world, and says so; once the parent is abandoned (its effect undone), it no
    longer stands."""
    from engine.log.subtree import fork_effects

    shop = Shop(eng, "skip")
    shop.plan["items"] = [("a", 1), ("b", 2)]
    parent = eng.run(shop.agent, run_id="skip-parent")
    shop.plan["items"] = [("b", 2)]
    fork = eng.rewind(parent.run_id, to="start")
    assert shop.sent == [("a", 1), ("b", 2)]
    assert [(s.call, s.result["item"]) for s in fork.standing] == [(3, "a")]
    assert fork_effects(eng.store, fork.run_id)[0] == list(fork.standing)
    assert fork_effects(eng.store, parent.run_id)[0] == []  # not a fork


@all_backends
def test_compensate_undoes_in_reverse_order_recorded_in_the_parent_then_resends(
    eng: Engine,
) -> None:
    """effects='compensate' undoes the parent's effects after the target last first, each
    recorded in the parent; the fork then sends its own under its own keys."""
    shop = Shop(eng, "compensate")
    shop.plan["items"] = [("a", 1), ("b", 2)]
    parent = eng.run(shop.agent)
    fork = eng.rewind(parent.run_id, to="start", effects="compensate")
    assert fork.status == "completed"
    assert shop.undone == ["b", "a"]
    assert shop.sent == [("a", 1), ("b", 2), ("a", 1), ("b", 2)]
    assert [r["key"] for r in fork.output] == [f"{fork.run_id}:3", f"{fork.run_id}:4"]
    types = [(t, d.get("call")) for _, t, d in log_of(eng, parent.run_id)[-4:]]
    assert types == [
        ("compensation_started", 4),
        ("compensated", 4),
        ("compensation_started", 3),
        ("compensated", 3),
    ]
    assert fork.standing == ()
    assert eng.state(parent.run_id).status == "completed"
    # A second compensating rewind undoes nothing twice; the first fork's effects are its own.
    again = eng.rewind(parent.run_id, to="start", effects="compensate")
    assert again.status == "completed" and shop.undone == ["b", "a"]


@all_backends
def test_compensate_stops_naming_an_effect_that_cannot_be_undone_and_forks_nothing(
    eng: Engine,
) -> None:
    """No compensation at all stops before anything is undone; a compensation that fails
    stops after the later effects were undone (the parent's log shows them); either way
    the rewind names the effect and no fork exists."""
    sent: list[str] = []
    undone: list[str] = []

    def undo(receipt: str) -> str:
        if receipt == "a":
            raise RuntimeError("void refused")
        undone.append(receipt)
        return "voided"

    @eng.tool(side_effect=True, compensate=undo, name="stop_charge")
    def charge(item: str) -> str:
        sent.append(item)
        return item

    @eng.tool(side_effect=True, name="stop_email")
    def email(to: str) -> str:
        sent.append(f"mail {to}")
        return "sent"

    @eng.agent(name="tests:stop")
    def agent(run: Any) -> list[str]:
        run.checkpoint("start")
        mailed = email("ada")
        run.checkpoint("mailed")
        return [mailed, charge("a"), charge("b")]

    parent = eng.run(agent)
    with pytest.raises(UsageError, match=r"stop_email \(call 2\) has no compensation"):
        eng.rewind(parent.run_id, to="start", effects="compensate")
    assert undone == [] and [r.run_id for r in eng.runs()] == [parent.run_id]

    with pytest.raises(UsageError, match=r"stop_charge \(call 4\) failed: .*void refused"):
        eng.rewind(parent.run_id, to="mailed", effects="compensate")
    assert undone == ["b"]  # the later effect was undone before the earlier one failed
    assert [r.run_id for r in eng.runs()] == [parent.run_id]
    tail = [(t, d.get("call"), d.get("error")) for _, t, d in log_of(eng, parent.run_id)[-4:]]
    assert [t[:2] for t in tail] == [
        ("compensation_started", 5),
        ("compensated", 5),
        ("compensation_started", 4),
        ("compensated", 4),
    ]
    assert tail[1][2] is None and "void refused" in (tail[3][2] or "")
    assert sent == ["mail ada", "a", "b"]


@all_backends
def test_compensate_stops_on_an_unknown_outcome_without_a_verifier(eng: Engine) -> None:
    """An effect whose outcome nobody knows (no verifier) cannot be undone safely: the
    compensating rewind stops naming it and writes nothing."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True, compensate=lambda r: "voided", name="unknown_charge")
    def charge(item: str) -> str:
        count[item] += 1
        raise Indeterminate("the connection dropped after the request was sent")

    @eng.agent(name="tests:unknown")
    def agent(run: Any) -> str:
        run.checkpoint("start")
        return str(charge("a"))

    parent = eng.run(agent)
    assert parent.status == "paused"  # a person must say whether it happened
    before = log_of(eng, parent.run_id)
    with pytest.raises(UsageError, match=r"unknown_charge \(call 2, key .*\) has an unknown"):
        eng.rewind(parent.run_id, to="start", effects="compensate")
    assert log_of(eng, parent.run_id) == before and count == {"a": 1}
    assert len(eng.runs()) == 1


@all_backends
def test_compensate_settles_an_unknown_parent_effect_with_its_verifier(eng: Engine) -> None:
    """A parent effect a crash left unknown is asked of its verifier: found, its outcome is
    recorded in the parent (source 'verified') and it is undone; one never made is not."""
    world: dict[str, str] = {}
    undone: list[str] = []
    crash = {"on": True}

    def void(receipt: str) -> str:
        undone.append(receipt)
        return "voided"

    @eng.tool(side_effect=True, verify=world.get, compensate=void, name="settle_pay")
    def pay(item: str, *, idempotency_key: str) -> str:
        world[idempotency_key] = f"paid {item}"
        if crash["on"]:
            raise Crash
        return world[idempotency_key]

    @eng.agent(name="tests:settle")
    def agent(run: Any) -> str:
        run.checkpoint("start")
        return str(pay("a"))

    with pytest.raises(Crash):
        eng.run(agent, run_id="settle-parent")
    crash["on"] = False
    fork = eng.rewind("settle-parent", to="start", effects="compensate")
    assert fork.status == "completed" and undone == ["paid a"]
    assert fork.output == "paid a" and world[f"{fork.run_id}:2"] == "paid a"
    tail = [(t, d.get("source")) for _, t, d in log_of(eng, "settle-parent")[-3:]]
    assert tail == [
        ("tool_succeeded", "verified"),
        ("compensation_started", None),
        ("compensated", None),
    ]


@all_backends
def test_resend_sends_again_under_the_fork_keys(eng: Engine) -> None:
    """effects='resend' is the old behaviour: the fork sends its effects again under its
    own keys, and the parent's still stand."""
    shop = Shop(eng, "resend")
    parent = eng.run(shop.agent)
    fork = eng.rewind(parent.run_id, to="start", effects="resend")
    assert shop.sent == [("a", 1), ("a", 1)]
    assert fork.output[0]["key"] == f"{fork.run_id}:3"
    assert [s.key for s in fork.standing] == [f"{parent.run_id}:3"]
    with pytest.raises(UsageError, match="effects must be one of reuse, compensate, resend"):
        eng.rewind(parent.run_id, to="start", effects="again")


@all_backends
def test_abandoning_a_reuse_fork_does_not_undo_the_parent_effect(eng: Engine) -> None:
    """A reused effect is the parent's: the fork's abandon leaves it (undoing only what the
    fork sent itself); the parent's abandon undoes it, once."""
    shop = Shop(eng, "reuse_abandon")
    shop.plan["items"] = [("a", 1)]

    @eng.agent(name="tests:reuse_abandon_asking")
    def asking(run: Any) -> Any:
        out = shop.agent.fn(run)
        return [out, run.ask("ok?")]

    parent = eng.run(asking)
    shop.plan["items"] = [("a", 1), ("b", 2)]
    fork = eng.rewind(parent.run_id, to="start")
    assert (parent.status, fork.status) == ("paused", "paused")
    assert shop.sent == [("a", 1), ("b", 2)]
    assert eng.abandon(fork.run_id).status == "abandoned"
    assert shop.undone == ["b"]  # only the fork's own charge
    assert eng.abandon(parent.run_id).status == "abandoned"
    assert shop.undone == ["b", "a"]
    assert eng.abandon(fork.run_id).status == "abandoned"
    assert shop.undone == ["b", "a"]  # nothing undone twice


@all_backends
def test_abandoning_a_resend_fork_and_its_parent_undoes_each_effect_once(eng: Engine) -> None:
    """A resend fork inherits its parent's recorded effects but does not own them:
    abandoning the fork undoes only the effects it made itself, the parent's abandon
    undoes the rest."""
    undone: Counter[str] = Counter()

    def undo(result: dict[str, str]) -> str:
        undone[result["order"]] += 1
        return "voided"

    @eng.tool(side_effect=True, compensate=undo, name="fork_saga_charge")
    def charge(order: str) -> dict[str, str]:
        return {"order": order}

    @eng.agent(name="tests:fork_saga_agent")
    def agent(run: Any, order: str) -> str:
        charge(order)
        run.checkpoint("charged")
        charge(order + "-extra")
        return str(run.ask("ok?"))

    parent = eng.run(agent, order="o1")
    fork = eng.rewind(parent.run_id, to="charged", effects="resend")
    assert (parent.status, fork.status) == ("paused", "paused")
    assert eng.abandon(fork.run_id).status == "abandoned"
    assert undone == Counter({"o1-extra": 1})  # only the fork's own charge
    assert eng.abandon(parent.run_id).status == "abandoned"
    assert undone == Counter({"o1-extra": 2, "o1": 1})  # each charge undone exactly once


@all_backends
def test_an_uncertain_parent_effect_is_not_sent_blind_by_a_reuse_fork(eng: Engine) -> None:
    """The parent's intent has no outcome (its process died). The fork's same call resolves
    it under the parent's key: a verifier that finds it settles it (nothing sent); with no
    verifier and no key the fork asks a person, and 'done' settles it without a send."""
    world: dict[str, str] = {}
    count: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool(side_effect=True, verify=world.get, name="uncertain_verified")
    def pay(item: str, *, idempotency_key: str) -> str:
        count["pay"] += 1
        world[idempotency_key] = f"paid {item}"
        if crash["on"]:
            raise Crash
        return world[idempotency_key]

    @eng.tool(side_effect=True, name="uncertain_blind")
    def mail(to: str) -> str:
        count["mail"] += 1
        if crash["on"]:
            raise Crash
        return "mailed"

    @eng.agent(name="tests:uncertain_verified")
    def paying(run: Any) -> str:
        run.checkpoint("start")
        return str(pay("a"))

    @eng.agent(name="tests:uncertain_blind")
    def mailing(run: Any) -> str:
        run.checkpoint("start")
        return str(mail("ada"))

    for agent in (paying, mailing):
        with pytest.raises(Crash):
            eng.run(agent, run_id=f"dead-{agent.name[6:]}")
    crash["on"] = False
    verified = eng.rewind("dead-uncertain_verified", to="start")
    assert (verified.status, verified.output) == ("completed", "paid a")
    [done] = _events(eng, verified.run_id, "tool_succeeded")
    assert done["source"] == "verified" and count["pay"] == 1
    [intent] = _events(eng, verified.run_id, "tool_invoked")
    assert intent["key"] == "dead-uncertain_verified:2" and intent["parent_call"] == 2

    asked = eng.rewind("dead-uncertain_blind", to="start")
    assert asked.status == "paused" and "dead-uncertain_blind:2" in (asked.waiting or "")
    assert count["mail"] == 1
    settled = eng.answer(asked.run_id, Given("mailed a"))
    assert settled.status == "completed" and count["mail"] == 1
    # A resumed fork never takes the same parent effect twice, nor sends it.
    assert eng.resume(asked.run_id).status == "completed" and count["mail"] == 1


@all_backends
def test_rewind_to_a_decision_or_a_tool_outcome_inherits_it(eng: Engine) -> None:
    """A target at an llm_decided or tool_succeeded position is part of the fork: the fork
    neither decides nor calls again (issue 9, 5e)."""
    count: Counter[str] = Counter()

    @eng.tool(name="inherit_lookup")
    def lookup(x: int) -> int:
        count["lookup"] += 1
        return x + count["lookup"]

    def choose() -> int:
        count["decide"] += 1
        return count["decide"]

    @eng.agent(name="tests:inherit")
    def agent(run: Any) -> list[int]:
        first = run.decide("first", choose)
        return [first, lookup(1), run.decide("last", choose)]

    parent = eng.run(agent)
    assert parent.output == [1, 2, 2]
    events = eng.events(parent.run_id)
    decided = next(e.position for e in events if e.type == "llm_decided")
    looked = next(e.position for e in events if e.type == "tool_succeeded")
    at_decision = eng.rewind(parent.run_id, to=decided)
    assert at_decision.output[:2] == [1, 3] and count == {"decide": 3, "lookup": 2}
    at_lookup = eng.rewind(parent.run_id, to=looked)
    assert at_lookup.output[:2] == [1, 2] and count == {"decide": 4, "lookup": 2}
    fork_types = [e.type for e in eng.events(at_lookup.run_id)]
    assert fork_types[:4] == ["agent_started", "llm_decided", "tool_invoked", "tool_succeeded"]
