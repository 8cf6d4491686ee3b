"""The durable-call spine on every store (memory, SQLite, PostgreSQL).

Replay returns recorded outcomes without executing; changed code raises
NonDeterminismError and changes nothing; intents commit before side effects; the
idempotency key is stable; resume, rewind (forks, lineage) and the read API behave as
CONTRACT.md says. A crash is simulated in-process by a BaseException raised inside a
tool (nothing after it is recorded); real SIGKILLs are in test_runtime_failpoints.py.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from agents.kit import Crash, log_of
from conftest import all_backends

from engine import (
    AgentlogError,
    Engine,
    NonDeterminismError,
    Permanent,
    RetryPolicy,
    RunResult,
    RunState,
    Transient,
)
from engine.errors import UsageError

EVENT_TYPES = {
    "agent_started",
    "agent_resumed",
    "agent_finished",
    "agent_failed",
    "tool_invoked",
    "tool_succeeded",
    "tool_failed",
    "retry_scheduled",
    "llm_decided",
    "step_started",
    "step_completed",
    "checkpoint",
    "saves_timed",
    "plan_created",
    "human_input_requested",
    "human_input_provided",
}


# --- replay --------------------------------------------------------------------------


@all_backends
def test_durable_calls_replay_recorded_outcomes_without_executing(eng: Engine) -> None:
    """Read-only tools, side-effecting tools and decisions execute once; answering (which
    re-executes the agent from the top) and resuming a completed run replay them all."""
    count: Counter[str] = Counter()

    @eng.tool
    def lookup(customer: str) -> dict[str, str]:
        count["lookup"] += 1
        return {"customer": customer, "tier": "gold"}

    @eng.tool(side_effect=True)
    def refund(order: str, cents: int, *, idempotency_key: str) -> dict[str, str]:
        count["refund"] += 1
        return {"receipt": f"r-{order}-{cents}"}

    def make_plan(customer: dict[str, str]) -> list[str]:
        count["plan"] += 1
        return ["refund", "reply"]

    @eng.agent
    def support(run: Any, customer: str, order: str) -> dict[str, Any]:
        c = lookup(customer)
        plan = run.decide("plan", make_plan, c)
        run.plan(plan)
        with run.step("refund"):
            r = refund(order, 500)
        run.checkpoint("refunded")
        ok = run.ask("close the ticket?")
        return {"tier": c["tier"], "plan": plan, "receipt": r["receipt"], "ok": ok}

    first = eng.run(support, customer="c1", order="o1")
    assert first.status == "paused" and first.waiting == "close the ticket?"
    assert count == {"lookup": 1, "refund": 1, "plan": 1}

    done = eng.answer(first.run_id, "yes")
    expected = {"tier": "gold", "plan": ["refund", "reply"], "receipt": "r-o1-500", "ok": "yes"}
    assert (done.status, done.output) == ("completed", expected)
    assert count == {"lookup": 1, "refund": 1, "plan": 1}  # replayed, not executed

    before = log_of(eng, first.run_id)
    again = eng.resume(first.run_id)
    assert (again.status, again.output) == ("completed", expected)
    assert count == {"lookup": 1, "refund": 1, "plan": 1}
    assert log_of(eng, first.run_id) == before  # a completed run's resume writes nothing


@all_backends
def test_resume_after_a_crash_replays_finished_calls_and_continues(eng: Engine) -> None:
    """Calls finished before a crash are replayed from the log; only the rest execute."""
    count: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool
    def fetch(i: int) -> int:
        count[f"fetch{i}"] += 1
        if i == 3 and crash["on"]:
            raise Crash
        return i * 10

    @eng.agent
    def loop(run: Any, n: int) -> int:
        total = 0
        for i in range(n):
            total += fetch(i)
            total += run.decide("bump", lambda x: x + 1, i)
        return total

    with pytest.raises(Crash):
        eng.run(loop, run_id="crashy-run", n=5)
    assert eng.state("crashy-run").status == "running"  # the process "died" running it
    crash["on"] = False
    r = eng.resume("crashy-run")
    assert (r.status, r.output) == ("completed", 100 + 15)
    assert count == {"fetch0": 1, "fetch1": 1, "fetch2": 1, "fetch3": 2, "fetch4": 1}
    types = [t for _, t, _ in log_of(eng, "crashy-run")]
    assert types.count("agent_resumed") == 1


# --- non-determinism -----------------------------------------------------------------

CHANGES = {
    "tool_renamed": "call 1",
    "args_changed": "call 1",
    "decision_renamed": "call 2",
    "call_removed": "call 3",
    "last_call_removed": "call 4",
}


@all_backends
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changed_code_raises_nondeterminism_and_changes_nothing(eng: Engine, change: str) -> None:
    """Resuming with changed code (a tool renamed, its arguments changed, a decision
    renamed, a call removed in the middle or at the end) raises NonDeterminismError naming
    the first call that no longer matches; nothing further runs, the log and the run's
    status are unchanged; restoring the old code lets the run resume and complete."""
    execs: Counter[str] = Counter()
    keys: list[str] = []
    crash = {"on": True}

    @eng.tool
    def lookup(customer: str) -> str:
        execs["lookup"] += 1
        return customer

    @eng.tool
    def lookup_customer(customer: str) -> str:
        execs["lookup_customer"] += 1
        return customer

    @eng.tool(side_effect=True)
    def charge(plan: str, *, idempotency_key: str) -> str:
        execs["charge"] += 1
        return f"charged {plan}"

    @eng.tool(side_effect=True)
    def ship(plan: str, *, idempotency_key: str) -> str:
        execs["ship"] += 1
        keys.append(idempotency_key)
        if crash["on"]:
            raise Crash
        return f"shipped {plan}"

    def v1(run: Any, customer: str) -> str:
        c = lookup(customer)  # call 1
        plan = run.decide("plan", str.upper, c)  # call 2
        charge(plan)  # call 3
        return ship(plan)  # call 4: crashes with its intent recorded

    def v2(run: Any, customer: str) -> str:
        c = (
            lookup_customer(customer)
            if change == "tool_renamed"
            else lookup(customer + "!" if change == "args_changed" else customer)
        )
        name = "plan-v2" if change == "decision_renamed" else "plan"
        plan = run.decide(name, str.upper, c)
        if change != "call_removed":
            charge(plan)
        if change == "last_call_removed":
            return plan
        return ship(plan)

    agent = eng.agent(v1)
    with pytest.raises(Crash):
        eng.run(agent, run_id="nd-run", customer="c1")
    before_log, before_status = log_of(eng, "nd-run"), eng.state("nd-run").status
    before_execs = Counter(execs)
    assert before_status == "running" and execs["ship"] == 1

    eng.agent(v2, name=agent.name)  # the code changes under the same agent name
    with pytest.raises(NonDeterminismError) as info:
        eng.resume("nd-run")
    message = str(info.value)
    assert CHANGES[change] in message and "nd-run" in message
    assert isinstance(info.value, AgentlogError)
    assert execs == before_execs  # nothing further ran
    assert log_of(eng, "nd-run") == before_log
    assert eng.state("nd-run").status == before_status

    eng.agent(v1, name=agent.name)  # the old code is back
    crash["on"] = False
    r = eng.resume("nd-run")
    assert (r.status, r.output) == ("completed", "shipped C1")
    assert execs["ship"] == 2 and len(set(keys)) == 1  # re-sent once, with the same key
    assert execs["charge"] == 1 and execs["lookup"] == 1


@all_backends
def test_divergence_swallowed_by_agent_code_still_stops_the_run(eng: Engine) -> None:
    """Agent code that catches the NonDeterminismError (``except Exception``) cannot go on:
    every later durable step raises it again, nothing executes and nothing is written."""
    execs: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def first(x: str, *, idempotency_key: str) -> str:
        execs["first"] += 1
        return x

    @eng.tool(side_effect=True)
    def second(x: str, *, idempotency_key: str) -> str:
        execs["second"] += 1
        return x

    def v1(run: Any) -> str:
        first("a")
        return str(run.ask("go on?"))

    def v2(run: Any) -> str:
        with contextlib.suppress(Exception):  # agent code swallowing every error
            second("a")  # diverges at call 1
        second("b")  # would be live: must not run
        return "done"

    agent = eng.agent(v1)
    r = eng.run(agent)
    before = log_of(eng, r.run_id)
    eng.agent(v2, name=agent.name)
    with pytest.raises(NonDeterminismError, match="call 1"):
        eng.resume(r.run_id)
    assert execs == {"first": 1}
    assert log_of(eng, r.run_id) == before
    assert eng.state(r.run_id).status == "paused"


# --- intent before effect, the idempotency key ---------------------------------------


@all_backends
def test_intent_is_committed_before_a_side_effecting_tool_runs(eng: Engine, store_url: str) -> None:
    """From inside the tool, another connection already sees the committed tool_invoked
    (with the call's key) as the run's last event, and no outcome for it."""
    seen: dict[str, Any] = {}
    other = eng if store_url.startswith("memory") else Engine.open(store_url)

    @eng.tool(side_effect=True)
    def transfer(cents: int, *, idempotency_key: str) -> str:
        run_id = idempotency_key.rsplit(":", 1)[0]
        events = other.events(run_id)
        seen["last"] = (events[-1].type, events[-1].data)
        seen["types"] = [e.type for e in events]
        return "sent"

    @eng.agent
    def pay(run: Any) -> str:
        run.checkpoint("before")
        return str(transfer(250))

    r = eng.run(pay)
    assert r.status == "completed"
    kind, data = seen["last"]
    assert kind == "tool_invoked"
    assert data["call"] == 2 and data["side_effect"] is True
    assert data["key"] == f"{r.run_id}:2" and data["args"] == {"cents": 250}
    assert "tool_succeeded" not in seen["types"]
    if other is not eng:
        other.close()


@all_backends
def test_idempotency_key_is_stable_across_retries_and_resume(eng: Engine) -> None:
    """A tool declaring ``idempotency_key`` gets the same key on every retry and after a
    crash and resume; the default key is derived from the run id and the call number,
    a business key is the key itself; tools without the parameter get none."""
    keys: list[str] = []
    attempts = {"n": 0}

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=5, initial=0.0, jitter=False))
    def send(op: str, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        attempts["n"] += 1
        if attempts["n"] <= 2:
            raise Transient("busy, try later")
        if attempts["n"] == 3:
            raise Crash
        return f"sent {op}"

    business: list[str] = []

    @eng.tool(side_effect=True, key=lambda order: f"invoice:{order}")
    def invoice(order: str, *, idempotency_key: str) -> str:
        business.append(idempotency_key)
        return order

    @eng.tool(side_effect=True)
    def plain(op: str) -> str:  # declares no key: receives none
        return op

    @eng.agent
    def mailer(run: Any) -> list[str]:
        return [plain("x"), send("hello"), invoice("o9")]

    with pytest.raises(Crash):
        eng.run(mailer, run_id="key-run")
    r = eng.resume("key-run")
    assert (r.status, r.output) == ("completed", ["x", "sent hello", "o9"])
    assert keys == ["key-run:2"] * 4
    assert business == ["invoice:o9"]
    types = [t for _, t, _ in log_of(eng, "key-run")]
    assert types.count("retry_scheduled") == 2
    intents = [d for _, t, d in log_of(eng, "key-run") if t == "tool_invoked" and d["call"] == 2]
    assert {d["key"] for d in intents} == {"key-run:2"}


# --- runs: resume --------------------------------------------------------------------


@all_backends
def test_resume_of_a_completed_run_returns_its_recorded_result_executing_nothing(
    eng: Engine,
) -> None:
    """resume() of a completed run returns the recorded output and writes nothing."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def act(x: int, *, idempotency_key: str) -> int:
        count["act"] += 1
        return x * 2

    @eng.agent
    def double(run: Any, x: int) -> int:
        return int(act(x)) + int(run.decide("one", lambda: 1))

    r = eng.run(double, x=21)
    assert (r.status, r.output) == ("completed", 43)
    before = log_of(eng, r.run_id)
    again = eng.resume(r.run_id[:12])  # a unique prefix names the run
    assert again == RunResult(r.run_id, "completed", 43, None)
    assert count == {"act": 1}
    assert log_of(eng, r.run_id) == before
    same = eng.run(double, run_id=r.run_id, x=21)  # a run id never runs twice
    assert same.output == 43 and count == {"act": 1}


@all_backends
def test_resume_of_a_failed_run_reattempts_the_call_whose_failure_ended_it(eng: Engine) -> None:
    """A permanent tool failure fails the run (one-line error, the call recorded); resume
    re-attempts that call (same key) without re-running the calls before it."""
    count: Counter[str] = Counter()
    keys: list[str] = []
    broken = {"on": True}

    @eng.tool
    def lookup(order: str) -> str:
        count["lookup"] += 1
        return order

    @eng.tool(side_effect=True)
    def book(order: str, *, idempotency_key: str) -> str:
        count["book"] += 1
        keys.append(idempotency_key)
        if broken["on"]:
            raise Permanent("sold out")
        return f"booked {order}"

    @eng.agent
    def trip(run: Any, order: str) -> str:
        return str(book(lookup(order)))

    r = eng.run(trip, order="o1")
    assert r.status == "failed" and "sold out" in (r.error or "")
    assert "\n" not in (r.error or "")
    failed = [d for _, t, d in log_of(eng, r.run_id) if t == "agent_failed"]
    assert failed and failed[0]["call"] == 2 and failed[0]["kind"] == "permanent"
    assert eng.state(r.run_id).status == "failed"

    again = eng.resume(r.run_id)  # still broken: re-attempted, fails again
    assert again.status == "failed" and count["book"] == 2
    broken["on"] = False
    done = eng.resume(r.run_id)
    assert (done.status, done.output) == ("completed", "booked o1")
    assert count == {"lookup": 1, "book": 3}
    assert set(keys) == {f"{r.run_id}:2"}


# --- rewind --------------------------------------------------------------------------


def _rewind_setup(eng: Engine) -> tuple[Any, Counter[str], list[str]]:
    count: Counter[str] = Counter()
    keys: list[str] = []

    @eng.tool(side_effect=True)
    def charge(op: str, *, idempotency_key: str) -> str:
        count[f"charge {op}"] += 1
        keys.append(idempotency_key)
        return f"c-{op}"

    @eng.tool(side_effect=True, key=lambda order: f"fee:{order}")
    def fee(order: str) -> str:
        count["fee"] += 1
        return f"fee-{order}"

    def pick(i: int) -> int:
        count["pick"] += 1
        return i + 100

    @eng.agent
    def shop(run: Any, order: str) -> list[Any]:
        out: list[Any] = []
        run.checkpoint("start")  # call 1
        out.append(charge(f"{order}-0"))  # call 2
        run.checkpoint("mid")  # call 3
        out.append(run.decide("pick", pick, 1))  # call 4
        out.append(charge(f"{order}-1"))  # call 5
        out.append(fee(order))  # call 6 (business key)
        run.checkpoint("mid")  # call 7: the name repeats
        out.append(charge(f"{order}-2"))  # call 8
        return out

    return shop, count, keys


def _positions(eng: Engine, run_id: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for e in eng.events(run_id):
        if e.type == "checkpoint":
            found.setdefault(e.data["name"], []).append(e.position)
        if e.type == "tool_invoked":
            found.setdefault(f"intent {e.data['call']}", []).append(e.position)
    return found


def _check_fork(eng: Engine, parent: str, fork: RunResult, position: int) -> None:
    assert fork.run_id != parent
    state = eng.state(fork.run_id)
    assert (state.parent_run_id, state.fork_position) == (parent, position)
    head = eng.events(fork.run_id)[0]
    assert head.type == "agent_started"
    assert (head.data["parent_run_id"], head.data["fork_position"]) == (parent, position)
    rows = {r.run_id: r for r in eng.runs()}
    assert rows[fork.run_id].parent_run_id == parent
    assert rows[parent].parent_run_id is None


@all_backends
def test_rewind_to_a_repeated_checkpoint_name_forks_from_its_latest_occurrence(
    eng: Engine,
) -> None:
    """to='mid' means the last 'mid'; the fork has its own id and lineage; only calls after
    the target run again, under the fork's own default keys (effects='resend')."""
    shop, count, keys = _rewind_setup(eng)
    r = eng.run(shop, order="o")
    assert r.status == "completed"
    mids = _positions(eng, r.run_id)["mid"]
    assert len(mids) == 2
    parent_log = log_of(eng, r.run_id)

    fork = eng.rewind(r.run_id, to="mid", effects="resend")
    assert (fork.status, fork.output) == ("completed", r.output)
    _check_fork(eng, r.run_id, fork, mids[-1])
    assert count == {"charge o-0": 1, "charge o-1": 1, "charge o-2": 2, "fee": 1, "pick": 1}
    assert keys == [f"{r.run_id}:2", f"{r.run_id}:5", f"{r.run_id}:8", f"{fork.run_id}:8"]
    assert log_of(eng, r.run_id) == parent_log  # the parent is untouched


@all_backends
def test_rewind_to_a_position_reexecutes_what_follows_with_business_keys_deduped(
    eng: Engine,
) -> None:
    """to='<digits>' is a 1-based position: decisions after it are made again; with
    effects='resend' default-key effects are sent again under the fork's keys, and a
    business key is deduped by the ledger (source 'ledger', no execution)."""
    shop, count, keys = _rewind_setup(eng)
    r = eng.run(shop, order="o")
    first_mid = _positions(eng, r.run_id)["mid"][0]

    fork = eng.rewind(r.run_id, to=str(first_mid), effects="resend")
    assert (fork.status, fork.output) == ("completed", r.output)
    _check_fork(eng, r.run_id, fork, first_mid)
    assert count == {"charge o-0": 1, "charge o-1": 2, "charge o-2": 2, "fee": 1, "pick": 2}
    assert keys[-2:] == [f"{fork.run_id}:5", f"{fork.run_id}:8"]
    fee_outcome = [
        d for _, t, d in log_of(eng, fork.run_id) if t == "tool_succeeded" and d["call"] == 6
    ]
    assert fee_outcome[0]["source"] == "ledger" and fee_outcome[0]["result"] == "fee-o"

    by_int = eng.rewind(r.run_id, to=first_mid)  # an int works as well
    _check_fork(eng, r.run_id, by_int, first_mid)


@all_backends
def test_rewind_to_a_position_inside_a_call_means_just_before_it(eng: Engine) -> None:
    """A position between a call's intent and its outcome forks just before the call,
    which the fork then makes afresh under its own key (not as an uncertain intent; with
    effects='resend', so the parent's outcome of that call is not reused)."""
    shop, count, keys = _rewind_setup(eng)
    r = eng.run(shop, order="o")
    intent = _positions(eng, r.run_id)["intent 5"][0]

    fork = eng.rewind(r.run_id, to=intent, effects="resend")
    _check_fork(eng, r.run_id, fork, intent - 1)
    assert fork.status == "completed"
    assert count["charge o-1"] == 2 and keys[-2] == f"{fork.run_id}:5"
    with pytest.raises(UsageError):
        eng.rewind(r.run_id, to="no-such-checkpoint")
    with pytest.raises(UsageError):
        eng.rewind(r.run_id, to=10_000)


# --- the read API --------------------------------------------------------------------


@all_backends
def test_state_events_and_runs_have_the_contract_shapes(eng: Engine) -> None:
    """state(): RunState with run_id/status/position/output, at a position or checkpoint
    name; checkpoints(): the named positions, read from the log; events(): 1-based
    positions, snake_case types, UTC datetimes, dict data; runs(): summaries newest first
    with module:qualname agents, filterable."""

    @eng.tool
    def echo(x: int) -> int:
        return x

    @eng.agent
    def shaper(run: Any, x: int) -> dict[str, int]:
        run.checkpoint("begin")
        y = echo(x)
        run.checkpoint("end")
        if x < 0:
            run.ask("negative?")
        return {"y": y}

    one = eng.run(shaper, x=1)
    two = eng.run(shaper, x=-1)
    assert one.status == "completed" and two.status == "paused"

    s = eng.state(one.run_id)
    assert isinstance(s, RunState)
    assert (s.run_id, s.status, s.output) == (one.run_id, "completed", {"y": 1})
    events = eng.events(one.run_id)
    assert s.position == len(events) == events[-1].position
    marks = eng.checkpoints(one.run_id)
    assert [c.name for c in marks] == ["begin", "end"]
    assert [c.position for c in marks] == [e.position for e in events if e.type == "checkpoint"]
    assert all(c.at > 0 for c in marks)
    assert eng.checkpoints(one.run_id, upto=marks[1].position - 1) == marks[:1]
    at_begin = eng.state(one.run_id, at="begin")
    assert at_begin.position == marks[0].position and at_begin.status == "running"
    assert eng.state(one.run_id, at=str(marks[1].position)).position == marks[1].position

    assert [e.position for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "agent_started" and events[-1].type == "agent_finished"
    for e in events:
        assert e.type in EVENT_TYPES, e.type
        assert isinstance(e.at, datetime) and e.at.tzinfo is not None
        assert e.at.utcoffset() == UTC.utcoffset(None)
        assert isinstance(e.data, dict) and "type" not in e.data
    assert (
        events[0]
        .data["agent"]
        .endswith(":test_state_events_and_runs_have_the_contract_shapes.<locals>.shaper")
    )
    assert events[-1].data["output"] == {"y": 1}

    runs = eng.runs()
    assert [r.run_id for r in runs[:2]] == [two.run_id, one.run_id]  # newest first
    for r in runs:
        assert ":" in r.agent and r.parent_run_id is None
        assert isinstance(r.started_at, datetime) and isinstance(r.updated_at, datetime)
        assert r.updated_at >= r.started_at
    assert [r.run_id for r in eng.runs(status="paused")] == [two.run_id]
    assert [r.run_id for r in eng.runs(status="completed")] == [one.run_id]
    assert eng.state(two.run_id).waiting == "negative?"


@all_backends
def test_rewind_with_changed_code_raises_nondeterminism_and_leaves_no_fork(eng: Engine) -> None:
    """The fork's inherited prefix is replayed against the current code before anything is
    written: a mismatch raises NonDeterminismError naming the call; no fork run exists."""
    shop, count, _ = _rewind_setup(eng)
    r = eng.run(shop, order="o")

    def changed(run: Any, order: str) -> list[Any]:
        run.checkpoint("start")
        run.checkpoint("mid")  # call 2 was a charge
        return []

    eng.agent(changed, name=shop.name)
    with pytest.raises(NonDeterminismError, match="call 2"):
        eng.rewind(r.run_id, to="mid")
    assert [x.run_id for x in eng.runs()] == [r.run_id]
    assert count == {"charge o-0": 1, "charge o-1": 1, "charge o-2": 1, "fee": 1, "pick": 1}
    eng.agent(shop.fn, name=shop.name)
    assert eng.rewind(r.run_id, to="mid").status == "completed"


@all_backends
def test_resume_of_a_run_failed_on_a_business_key_reclaims_the_key_and_reattempts(
    eng: Engine,
) -> None:
    """A final failure releases the business key; resume claims it again and re-attempts
    the call; later runs with the key then get its outcome from the ledger."""
    count: Counter[str] = Counter()
    broken = {"on": True}

    @eng.tool(side_effect=True, key=lambda order: f"book:{order}")
    def book(order: str, *, idempotency_key: str) -> str:
        count[idempotency_key] += 1
        if broken["on"]:
            raise Permanent("no seats")
        return f"booked {order}"

    @eng.agent
    def trip(run: Any, order: str) -> str:
        return str(book(order))

    r = eng.run(trip, order="o2")
    assert r.status == "failed"
    broken["on"] = False
    assert eng.resume(r.run_id).output == "booked o2"
    other = eng.run(trip, order="o2")
    assert other.output == "booked o2" and count == {"book:o2": 2}


@all_backends
def test_answer_with_changed_code_raises_nondeterminism_and_records_nothing(
    eng: Engine,
) -> None:
    """Answering a paused run whose code changed raises NonDeterminismError before the
    answer is recorded: the log and the 'paused' status stay; the old code takes it."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def send(x: str, *, idempotency_key: str) -> str:
        count[x] += 1
        return x

    def v1(run: Any) -> str:
        send("a")
        return f"{run.ask('go?')} {send('b')}"

    def v2(run: Any) -> str:
        send("z")
        return str(run.ask("go?"))

    agent = eng.agent(v1)
    r = eng.run(agent)
    before = log_of(eng, r.run_id)
    eng.agent(v2, name=agent.name)
    with pytest.raises(NonDeterminismError, match="call 1"):
        eng.answer(r.run_id, "yes")
    assert log_of(eng, r.run_id) == before and eng.state(r.run_id).status == "paused"
    eng.agent(v1, name=agent.name)
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "yes b")
    assert count == {"a": 1, "b": 1}
