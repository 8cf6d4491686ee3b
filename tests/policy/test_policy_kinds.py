"""Failure kinds on every store: what each kind does to a call and to the run.

Transient/Permanent/Indeterminate/Logical share the engine's error root; other
exceptions follow the documented default table (row by row in test_policy_table.py),
which a tool's ``classify`` overrides.
Permanent fails the call at once (one execution, no retry); Logical reaches agent code
as ``engine.Logical``, which it can catch to re-plan, and the run completes; an
indeterminate side effect is resolved by the verifier, a re-send under the same key, or
a person, never by a blind re-send. Clocks, sleeps and random draws are injected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engine
from agents.kit import Crash, log_of
from conftest import all_backends

from engine import (
    AgentlogError,
    Engine,
    Given,
    Indeterminate,
    Logical,
    Permanent,
    RetryPolicy,
    Transient,
)
from engine.errors import ToolError
from engine.policy.failure import classify


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=1)


def types_of(eng: Engine, run_id: str) -> list[str]:
    return [t for _, t, _ in log_of(eng, run_id)]


def failures(eng: Engine, run_id: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == "tool_failed"]


# --- the hierarchy and the default mapping ---------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (Transient, "transient"),
        (Permanent, "permanent"),
        (Indeterminate, "indeterminate"),
        (Logical, "logical"),
    ],
)
def test_failure_kinds_are_engine_errors_that_say_their_kind(cls: type, kind: str) -> None:
    assert issubclass(cls, AgentlogError) and issubclass(cls, ToolError)
    assert cls("x").kind == kind
    for side_effect in (False, True):
        assert classify(cls("x"), side_effect=side_effect) == kind


class Http5xx(Exception):
    pass


def test_classify_hook_overrides_the_default_and_none_falls_back_to_it() -> None:
    def hook(e: BaseException) -> type[ToolError] | None:
        if isinstance(e, Http5xx):
            return Permanent
        if isinstance(e, TimeoutError):
            return Logical
        return None

    assert classify(Http5xx("501"), side_effect=False, hook=hook) == "permanent"
    assert classify(TimeoutError(), side_effect=True, hook=hook) == "logical"
    assert classify(ValueError(), side_effect=False, hook=hook) == "permanent"
    assert classify(ConnectionError(), side_effect=True, hook=hook) == "indeterminate"
    assert classify(Permanent("x"), side_effect=False, hook=lambda e: Transient) == "transient"


# --- permanent -------------------------------------------------------------------------


@all_backends
@pytest.mark.parametrize("error", [ValueError("bad id"), Permanent("no such customer")])
def test_permanent_fails_the_call_at_once(eng: Engine, fake: FakeTime, error: Exception) -> None:
    """Exactly one execution, no retry event, one final tool_failed of kind permanent; the
    agent sees engine.Permanent and the run fails naming the error."""
    count = Counter[str]()
    seen: list[BaseException] = []

    @eng.tool(retry=RetryPolicy(max_attempts=5, initial=1.0))
    def lookup(customer: str) -> str:
        count["lookup"] += 1
        raise error

    @eng.agent
    def agent(run: Any) -> str:
        try:
            return str(lookup("c1"))
        except Exception as e:
            seen.append(e)
            raise

    r = eng.run(agent)
    assert r.status == "failed" and str(error) in (r.error or "")
    assert count["lookup"] == 1 and fake.slept == []
    assert "retry_scheduled" not in types_of(eng, r.run_id)
    (failed,) = failures(eng, r.run_id)
    assert failed["kind"] == "permanent" and failed["final"] and failed["attempt"] == 1
    assert failed["error_type"] == type(error).__name__
    assert len(seen) == 1 and isinstance(seen[0], Permanent)
    assert isinstance(seen[0], AgentlogError)
    finals = [d for _, t, d in log_of(eng, r.run_id) if t == "agent_failed"]
    assert finals[0]["kind"] == "permanent"


@all_backends
def test_classify_overrides_per_tool_in_a_run(eng: Engine) -> None:
    """One tool's hook makes a rate-limit error permanent (no retry); another's makes a
    ValueError transient (retried with backoff until it passes)."""
    count = Counter[str]()

    class RateLimited(Exception):
        pass

    @eng.tool(
        retry=RetryPolicy(max_attempts=4, initial=0.5),
        classify=lambda e: Permanent if isinstance(e, RateLimited) else None,
    )
    def strict(x: int) -> int:
        count["strict"] += 1
        raise RateLimited("429 quota exceeded for today")

    @eng.tool(
        retry=RetryPolicy(max_attempts=4, initial=0.5),
        classify=lambda e: Transient if isinstance(e, ValueError) else None,
    )
    def lenient(x: int) -> int:
        count["lenient"] += 1
        if count["lenient"] < 3:
            raise ValueError("half-written file, try again")
        return x

    @eng.agent
    def agent(run: Any) -> str:
        out = lenient(7)
        try:
            strict(1)
        except Permanent as e:
            return f"{out} then {e}"
        return "unreachable"

    r = eng.run(agent)
    assert r.status == "completed" and "429 quota exceeded" in r.output
    assert count == {"lenient": 3, "strict": 1}
    kinds = [(d["tool"].rsplit(".", 1)[-1], d["kind"]) for d in failures(eng, r.run_id)]
    assert kinds == [("lenient", "transient"), ("lenient", "transient"), ("strict", "permanent")]
    assert types_of(eng, r.run_id).count("retry_scheduled") == 2


# --- logical ---------------------------------------------------------------------------


@all_backends
def test_logical_reaches_agent_code_which_replans_and_the_run_completes(eng: Engine) -> None:
    """A Logical failure is never retried: the agent catches engine.Logical, re-plans with
    a different decision and completes. A later crash and resume replays the same path
    without executing the failed tool again."""
    count = Counter[str]()
    crash = {"on": True}

    @eng.tool(retry=RetryPolicy(max_attempts=5, initial=1.0))
    def parse_plan(text: str) -> list[str]:
        count["parse"] += 1
        if not text.startswith("["):
            raise Logical(f"model output is not a JSON list: {text!r}")
        return text.strip("[]").split(",")

    @eng.tool
    def act(step: str) -> str:
        count[step] += 1
        if crash["on"] and step == "b":
            raise Crash
        return step.upper()

    @eng.agent
    def planner(run: Any) -> list[str]:
        draft = run.decide("draft", lambda: "first do a then b")
        try:
            steps = parse_plan(draft)
        except Logical as e:
            assert isinstance(e, AgentlogError) and "not a JSON list" in str(e)
            steps = parse_plan(run.decide("replan", lambda: "[a,b]"))
        return [act(s) for s in steps]

    with pytest.raises(Crash):
        eng.run(planner, run_id="logical")
    crash["on"] = False
    r = eng.resume("logical")
    assert (r.status, r.output) == ("completed", ["A", "B"])
    assert count == {"parse": 2, "a": 1, "b": 2}  # b crashed once; nothing else repeated
    assert "retry_scheduled" not in types_of(eng, "logical")
    (failed,) = failures(eng, "logical")
    assert failed["kind"] == "logical" and failed["final"] and failed["attempt"] == 1
    assert "agent_failed" not in types_of(eng, "logical")
    assert eng.state("logical").status == "completed"


@all_backends
def test_logical_not_caught_fails_the_run_with_its_kind(eng: Engine) -> None:
    @eng.tool
    def validate(answer: str) -> str:
        raise Logical("answer lacks a citation")

    @eng.agent
    def agent(run: Any) -> str:
        return str(validate("42"))

    r = eng.run(agent)
    assert r.status == "failed" and "lacks a citation" in (r.error or "")
    finals = [d for _, t, d in log_of(eng, r.run_id) if t == "agent_failed"]
    assert finals[0]["kind"] == "logical"


# --- indeterminate side effects --------------------------------------------------------


class Gateway:
    """A payment gateway: dedupes by idempotency key, counts every request it sees."""

    def __init__(self) -> None:
        self.effects: dict[str, str] = {}
        self.requests: list[str | None] = []

    def charge(self, cents: int, key: str | None) -> str:
        self.requests.append(key)
        if key is not None and key in self.effects:
            return self.effects[key]
        receipt = f"ch-{cents}-{len(self.requests)}"
        self.effects[key or f"nokey-{len(self.requests)}"] = receipt
        return receipt


@all_backends
def test_indeterminate_effect_found_by_the_verifier_is_not_sent_again(eng: Engine) -> None:
    """The request landed but the answer was lost (ConnectionError on a side effect):
    the verifier finds the effect; nothing is re-sent."""
    gw = Gateway()

    @eng.tool(side_effect=True, verify=lambda key: gw.effects.get(key))
    def charge(cents: int, *, idempotency_key: str) -> str:
        gw.charge(cents, idempotency_key)
        raise ConnectionError("connection reset after the request was written")

    @eng.agent
    def payer(run: Any) -> str:
        return str(charge(500))

    r = eng.run(payer)
    assert (r.status, r.output) == ("completed", "ch-500-1")
    assert gw.requests == [f"{r.run_id}:1"]
    (failed,) = failures(eng, r.run_id)
    assert failed["kind"] == "indeterminate" and not failed["final"]
    done = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_succeeded"]
    assert done[0]["source"] == "verified"


@all_backends
def test_indeterminate_effect_is_resent_only_under_the_same_key(eng: Engine) -> None:
    """No verifier, but the tool takes an idempotency key: it is re-sent with the same key
    (the gateway dedupes), never with a fresh one."""
    gw = Gateway()
    lost = {"n": 1}

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=3, initial=0.1))
    def charge(cents: int, *, idempotency_key: str) -> str:
        receipt = gw.charge(cents, idempotency_key)
        if lost["n"]:
            lost["n"] -= 1
            raise TimeoutError("read timed out")
        return receipt

    @eng.agent
    def payer(run: Any) -> str:
        return str(charge(700))

    r = eng.run(payer)
    assert (r.status, r.output) == ("completed", "ch-700-1")
    assert gw.requests == [f"{r.run_id}:1"] * 2 and len(gw.effects) == 1
    intents = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_invoked"]
    assert [d["key"] for d in intents] == [f"{r.run_id}:1"]
    (failed,) = failures(eng, r.run_id)
    assert failed["kind"] == "indeterminate" and failed["error_type"] == "TimeoutError"


@all_backends
def test_indeterminate_effect_without_verifier_or_key_pauses_for_a_person(eng: Engine) -> None:
    """Nobody can tell whether it happened: the run pauses (exactly one request sent);
    'done' completes without sending again; the log records the question as uncertain."""
    gw = Gateway()

    @eng.tool(side_effect=True, retry=RetryPolicy(max_attempts=5, initial=0.1))
    def wire(cents: int) -> str:
        gw.charge(cents, None)
        raise Indeterminate("bank did not confirm")

    @eng.agent
    def payer(run: Any) -> str:
        return str(wire(900))

    r = eng.run(payer)
    assert r.status == "paused" and "wire" in (r.waiting or "")
    assert len(gw.requests) == 1
    asked = [d for _, t, d in log_of(eng, r.run_id) if t == "human_input_requested"]
    assert asked[0]["reason"] == "uncertain"
    assert "retry_scheduled" not in types_of(eng, r.run_id)
    done = eng.answer(r.run_id, Given("W-900"))  # the result it had
    assert (done.status, done.output) == ("completed", "W-900") and len(gw.requests) == 1
    succeeded = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_succeeded"]
    assert succeeded[0]["source"] == "human"


@all_backends
def test_the_same_timeout_is_transient_for_a_read_only_tool(eng: Engine) -> None:
    """A read-only call that times out is simply retried (reading twice is harmless)."""
    count = Counter[str]()

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=0.1))
    def balance(account: str) -> int:
        count["balance"] += 1
        if count["balance"] == 1:
            raise TimeoutError("read timed out")
        return 42

    @eng.agent
    def agent(run: Any) -> int:
        return int(balance("a1"))

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", 42)
    assert [d["kind"] for d in failures(eng, r.run_id)] == ["transient"]
    assert types_of(eng, r.run_id).count("retry_scheduled") == 1
