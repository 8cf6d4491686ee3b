"""Forks with edits (``engine.rewind(..., set=..., answer=...)``): the fork inherits its
parent's calls with the named values replaced, as if recorded so, records what was edited
and by whom (``fork_edited``), and refuses a name it cannot tell, a side effect's result,
and an edit the code would not replay to the fork point, writing nothing then."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import backends

from engine import Engine
from engine.errors import UsageError

both = backends("sqlite", "postgres")


class Plan(msgspec.Struct):
    cents: int


class Agent:
    """A read, a decision, a question, then a charge (counted) of the decided amount."""

    def __init__(self, eng: Engine, name: str) -> None:
        self.sent: list[tuple[str, int]] = []

        @eng.tool(name=f"{name}_lookup")
        def lookup(cid: str) -> dict[str, Any]:
            return {"id": cid, "tier": "basic"}

        @eng.tool(side_effect=True, name=f"{name}_charge")
        def charge(order: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
            self.sent.append((order, cents))
            return {"order": order, "cents": cents}

        @eng.agent(name=f"tests:{name}")
        def agent(run: Any, order: str) -> dict[str, Any]:
            customer = lookup("c1")
            plan = run.decide("plan", lambda: {"cents": 100})
            run.checkpoint("planned")
            if run.ask("approve?") != "yes":
                return {"declined": True, "tier": customer["tier"]}
            receipt = charge(order, plan["cents"])
            return {"cents": receipt["cents"], "tier": customer["tier"]}

        self.agent, self.lookup, self.charge = agent, f"{name}_lookup", f"{name}_charge"


def _data(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


@both
def test_set_replaces_a_decision_and_a_read_only_result_and_records_the_edit(
    eng: Engine,
) -> None:
    """The fork continues as if the parent had decided 7 cents and read a gold customer;
    ``fork_edited`` names both (keyed hashes, not values) and who edited; the parent's
    log is untouched."""
    a = Agent(eng, "edits")
    parent = eng.run(a.agent, order="o1")
    assert eng.answer(parent.run_id, "yes").output == {"cents": 100, "tier": "basic"}
    before = eng.events(parent.run_id)
    gold = {"id": "c1", "tier": "gold"}
    fork = eng.rewind(parent.run_id, to="planned", set={"plan": {"cents": 7}, a.lookup: gold})
    assert fork.status == "paused"  # it asks again: the question came after the fork point
    assert eng.answer(fork.run_id, "yes").output == {"cents": 7, "tier": "gold"}
    assert a.sent == [("o1", 100), ("o1", 7)]
    [edited] = _data(eng, fork.run_id, "fork_edited")
    assert [(x["kind"], x["name"]) for x in edited["edits"]] == [
        ("decision", "plan"),
        ("tool", a.lookup),
    ]
    assert all(x["old_hash"] != x["new_hash"] for x in edited["edits"])
    assert all(
        set(x) == {"kind", "name", "call", "position", "old_hash", "new_hash"}
        for x in edited["edits"]
    )
    assert edited["by"]
    [decided] = _data(eng, fork.run_id, "llm_decided")
    assert decided["value"] == {"cents": 7}
    assert eng.events(parent.run_id) == before
    assert eng.verify(fork.run_id).status == "completed"


@both
def test_answer_forks_a_paused_run_at_its_question_with_another_answer(eng: Engine) -> None:
    """``answer=`` alone forks at the parent's last question; the parent stays paused, and
    its own answer later goes its own way. An answer given already is changed by ``set``
    with the question's text."""
    a = Agent(eng, "answers")
    parent = eng.run(a.agent, order="o2")
    fork = eng.rewind(parent.run_id, answer="no", by="ops@example")
    assert fork.output == {"declined": True, "tier": "basic"} and a.sent == []
    [edited] = _data(eng, fork.run_id, "fork_edited")
    assert edited["by"] == "ops@example" and edited["edits"][0]["name"] == "approve?"
    assert eng.state(parent.run_id).status == "paused"
    assert eng.answer(parent.run_id, "yes").output["cents"] == 100
    [at] = [e.position for e in eng.events(parent.run_id) if e.type == "human_input_provided"]
    changed = eng.rewind(parent.run_id, to=at, set={"approve?": "no"})
    assert changed.output == {"declined": True, "tier": "basic"}


@both
def test_names_that_cannot_be_set_are_refused_naming_the_candidates(eng: Engine) -> None:
    """Unknown and side-effecting names are refused with one clear UsageError naming the
    candidates; no fork is written for any of them."""
    a = Agent(eng, "refusals")
    parent = eng.run(a.agent, order="o3")
    done = eng.answer(parent.run_id, "yes")
    end = len(eng.events(parent.run_id))
    runs = len(eng.runs())
    with pytest.raises(UsageError, match=r"nothing named 'nope'.*decision 'plan' at position"):
        eng.rewind(done.run_id, to="planned", set={"nope": 1})
    with pytest.raises(UsageError, match="side-effecting tool: its result cannot be set"):
        eng.rewind(done.run_id, to=end, set={a.charge: {"cents": 1}})
    assert len(eng.runs()) == runs  # nothing forked


@both
def test_an_ambiguous_name_is_refused_and_name_at_position_picks_one(eng: Engine) -> None:
    @eng.agent(name="tests:twice")
    def twice(run: Any) -> list[int]:
        first = run.decide("n", lambda: 1)
        second = run.decide("n", lambda: 2)
        run.checkpoint("end")
        return [first, second]

    parent = eng.run(twice)
    with pytest.raises(UsageError, match=r"'n' is ambiguous: decision 'n' at position 2; "):
        eng.rewind(parent.run_id, to="end", set={"n": 5})
    fork = eng.rewind(parent.run_id, to="end", set={"n@3": 5})
    assert fork.output == [1, 5]
    with pytest.raises(UsageError, match="asked no question to answer"):
        eng.rewind(parent.run_id, answer="x")  # and no fork point to start from


@both
def test_an_edit_the_code_would_not_replay_to_the_fork_point_is_refused(eng: Engine) -> None:
    """A decision edited before a recorded call that depended on it: the code now makes
    that call with other arguments, so the fork is refused, naming the edited call's
    position to fork at instead; forked there, the fork goes the edited way."""
    sent: list[int] = []

    @eng.tool(side_effect=True, name="dep_charge")
    def charge(cents: int, *, idempotency_key: str) -> int:
        sent.append(cents)
        return cents

    @eng.agent(name="tests:depends")
    def depends(run: Any) -> int:
        cents = run.decide("cents", lambda: 100)
        charged = charge(cents)
        run.checkpoint("charged")
        return charged

    parent = eng.run(depends)
    runs = len(eng.runs())
    with pytest.raises(UsageError, match="forks at position 2"):
        eng.rewind(parent.run_id, to="charged", set={"cents": 5})
    assert len(eng.runs()) == runs
    fork = eng.rewind(parent.run_id, to=2, set={"cents": 5})
    assert fork.output == 5 and sent == [100, 5]


@both
def test_a_secret_named_field_set_is_redacted_as_recorded_values_are(eng: Engine) -> None:
    @eng.agent(name="tests:secret_edit")
    def secretive(run: Any) -> str:
        creds = run.decide("creds", lambda: {"user": "u", "api_key": "old"})
        run.checkpoint("got")
        return str(creds["user"])

    parent = eng.run(secretive)
    fork = eng.rewind(parent.run_id, to="got", set={"creds": {"user": "v", "api_key": "s3cr3t"}})
    assert fork.output == "v"
    assert "s3cr3t" not in str([e.data for e in eng.events(fork.run_id)])


@both
def test_a_value_that_does_not_fit_its_declared_type_is_refused(eng: Engine) -> None:
    """A read-only tool's new result is checked against the type the tool declares, a
    decision's as its replay reads it; each misfit is refused and nothing is forked."""

    @eng.tool(name="typed_lookup")
    def lookup(cid: str) -> Plan:
        return Plan(3)

    def plan() -> Plan:
        return Plan(100)

    @eng.agent(name="tests:typed_edit")
    def typed(run: Any) -> int:
        found = lookup("c")
        decided = run.decide("plan", plan)
        run.checkpoint("x")
        return int(found.cents + decided.cents)

    parent = eng.run(typed)
    runs = len(eng.runs())
    with pytest.raises(UsageError, match="'typed_lookup' does not fit its declared type Plan"):
        eng.rewind(parent.run_id, to="x", set={"typed_lookup": 5})
    with pytest.raises(UsageError, match="a value must fit the type its call declares"):
        eng.rewind(parent.run_id, to="x", set={"plan": "nope"})
    assert len(eng.runs()) == runs
    fork = eng.rewind(
        parent.run_id, to="x", set={"plan": {"cents": 7}, "typed_lookup": {"cents": 1}}
    )
    assert fork.output == 8


@both
def test_answer_with_a_fork_point_before_the_question_answers_the_fork_s_question(
    eng: Engine,
) -> None:
    """``to=`` a checkpoint before the question with ``answer=``: the fork runs to its
    question, the answer is recorded as an edit and given, and the fork goes on."""
    a = Agent(eng, "later")
    parent = eng.run(a.agent, order="o4")
    fork = eng.rewind(parent.run_id, to="planned", answer="no", set={"plan": {"cents": 2}})
    assert fork.output == {"declined": True, "tier": "basic"} and a.sent == []
    [edited, answered] = _data(eng, fork.run_id, "fork_edited")
    assert [x["name"] for x in edited["edits"]] == ["plan"]
    assert [(x["kind"], x["name"]) for x in answered["edits"]] == [("answer", "approve?")]
    assert eng.rewind(parent.run_id, to="planned", answer="yes").output["cents"] == 100
    assert a.sent == [("o4", 100)]


@both
def test_a_read_only_result_set_is_redacted_with_the_tool_s_own_secret_names(
    eng: Engine,
) -> None:
    """A tool declaring ``redact=["ssn"]`` has ``ssn`` redacted in its recorded result; a
    fork setting that result records it redacted too, never in clear."""

    @eng.tool(name="ssn_lookup", redact=["ssn"])
    def lookup(cid: str) -> dict[str, Any]:
        return {"id": cid, "ssn": "000-00-0000"}

    @eng.agent(name="tests:ssn_edit")
    def agent(run: Any) -> str:
        person = lookup("c1")
        run.checkpoint("read")
        return str(person["id"])

    parent = eng.run(agent)
    assert "000-00-0000" not in str([e.data for e in eng.events(parent.run_id)])
    fork = eng.rewind(
        parent.run_id, to="read", set={"ssn_lookup": {"id": "c2", "ssn": "123-45-6789"}}
    )
    assert fork.output == "c2"
    assert "123-45-6789" not in str([e.data for e in eng.events(fork.run_id)])
