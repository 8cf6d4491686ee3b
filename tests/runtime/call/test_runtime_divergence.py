"""Changed code against an old log, on every store: a decision called with other arguments
diverges like a tool does, and agent code that catches the divergence and raises
something else cannot hide it: ``verify``, ``answer`` and ``resume`` all raise
NonDeterminismError naming the call, and nothing is written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from agents.kit import log_of
from conftest import all_backends

from engine import Engine, NonDeterminismError
from engine import events as ev
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.secrets import key_check, replay_key


def _refused_everywhere(eng: Engine, run_id: str, needle: str) -> None:
    """verify, answer and resume each raise NonDeterminismError matching ``needle``; the
    log, the run's status and the run index are as they were."""
    before = (log_of(eng, run_id), eng.state(run_id).status, eng.runs())
    assert before[1] == "paused"
    for act in (
        lambda: eng.verify(run_id),
        lambda: eng.answer(run_id, "yes"),
        lambda: eng.resume(run_id),
    ):
        with pytest.raises(NonDeterminismError, match=needle):
            act()
        assert (log_of(eng, run_id), eng.state(run_id).status, eng.runs()) == before
    types = [t for _, t, _ in before[0]]
    assert "human_input_provided" not in types and "agent_resumed" not in types


@all_backends
@pytest.mark.parametrize("change", ["positional", "keyword"])
def test_a_decision_called_with_other_arguments_diverges(eng: Engine, change: str) -> None:
    """``run.decide("plan", fn, ...)`` recorded with one argument and now called with
    another (positional or keyword): NonDeterminismError naming call 1 and the decision,
    the model is not called again, nothing is written; the old code still resumes."""
    calls: Counter[str] = Counter()

    def make_plan(topic: str, *, tone: str = "calm") -> str:
        calls[topic + "/" + tone] += 1
        return f"plan for {topic} ({tone})"

    def v1(run: Any) -> str:
        plan = run.decide("plan", make_plan, "refund", tone="calm")
        return f"{plan}: {run.ask('go?')}"

    def v2(run: Any) -> str:
        if change == "positional":
            plan = run.decide("plan", make_plan, "reship", tone="calm")
        else:
            plan = run.decide("plan", make_plan, "refund", tone="curt")
        return f"{plan}: {run.ask('go?')}"

    agent = eng.agent(v1)
    r = eng.run(agent)
    assert r.status == "paused" and calls == {"refund/calm": 1}
    eng.agent(v2, name=agent.name)
    _refused_everywhere(eng, r.run_id, r"call 1.*decide 'plan'.*different arguments")
    assert calls == {"refund/calm": 1}
    eng.agent(v1, name=agent.name)
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "plan for refund (calm): yes")
    assert calls == {"refund/calm": 1}


def _wrapped(fn: Callable[..., Any], *args: Any) -> Any:
    """Agent code that turns every failure into its own error, hiding the cause."""
    try:
        return fn(*args)
    except Exception:
        raise RuntimeError("the step failed; see the service desk") from None


@all_backends
@pytest.mark.parametrize("diverges_at", ["tool", "decision", "question"])
def test_a_divergence_wrapped_in_another_error_still_stops_everything(
    eng: Engine, diverges_at: str
) -> None:
    """Changed agent code that wraps every call in ``try/except Exception: raise
    RuntimeError(...)``: verify raises NonDeterminismError (not a failed result),
    answer raises it before recording the answer (no human_input_provided, still
    paused), resume raises it and writes nothing; no tool runs."""
    sent: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def send(what: str, *, idempotency_key: str) -> str:
        sent[what] += 1
        return f"sent {what}"

    def v1(run: Any) -> str:
        receipt = _wrapped(send, "invoice")
        level = _wrapped(run.decide, "level", lambda: "gold")
        return f"{receipt} {level} {_wrapped(run.ask, 'ship it?')}"

    def v2(run: Any) -> str:
        receipt = _wrapped(send, "refund" if diverges_at == "tool" else "invoice")
        level = _wrapped(run.decide, "tier" if diverges_at == "decision" else "level", str)
        question = "ship now?" if diverges_at == "question" else "ship it?"
        answer = _wrapped(run.ask, question)
        return f"{receipt} {level} {answer} {_wrapped(send, 'parcel')}"

    agent = eng.agent(v1)
    r = eng.run(agent)
    assert r.status == "paused" and sent == {"invoice": 1}
    eng.agent(v2, name=agent.name)
    call = {"tool": 1, "decision": 2, "question": 3}[diverges_at]
    _refused_everywhere(eng, r.run_id, f"call {call}")
    assert sent == {"invoice": 1}
    eng.agent(v1, name=agent.name)
    assert eng.answer(r.run_id, "yes").output == "sent invoice gold yes"


@all_backends
def test_verify_of_a_completed_run_reports_code_that_now_makes_more_calls(eng: Engine) -> None:
    """A completed run's log is the whole run: code that now goes on past its last
    recorded call (a new decision before returning) diverges, and verify says so instead
    of reporting agreement; the unchanged code still verifies."""

    @eng.agent(name="divergence:grows")
    def grows_v1(run: Any) -> str:
        run.decide("a", lambda: 1)
        return "x"

    r = eng.run(grows_v1)
    assert r.status == "completed"
    assert eng.verify(r.run_id).status == "completed"

    @eng.agent(name="divergence:grows")
    def grows_v2(run: Any) -> str:
        run.decide("a", lambda: 1)
        run.decide("b", lambda: 2)
        return "x"

    with pytest.raises(NonDeterminismError, match="decide 'b'"):
        eng.verify(r.run_id)


@all_backends
def test_a_changed_sleep_duration_diverges_and_a_log_without_its_hash_replays(
    eng: Engine,
) -> None:
    """``run.sleep(0.01)`` recorded and now ``run.sleep(0.02)``: verify, answer and resume
    raise NonDeterminismError naming the sleep's call, nothing written; the old code
    still answers. A ``timer_set`` written before durations were hashed (no
    ``args_hash``) replays whatever the duration."""

    def v1(run: Any) -> str:
        run.sleep(0.01)
        return f"slept: {run.ask('go?')}"

    def v2(run: Any) -> str:
        run.sleep(0.02)
        return f"slept: {run.ask('go?')}"

    agent = eng.agent(v1)
    r = eng.run(agent)
    assert r.status == "paused"
    [timer] = [d for _, t, d in log_of(eng, r.run_id) if t == "timer_set"]
    assert timer["args_hash"]
    eng.agent(v2, name=agent.name)
    _refused_everywhere(eng, r.run_id, r"call 1.*sleep.*different arguments")
    eng.agent(v1, name=agent.name)
    assert eng.answer(r.run_id, "yes").output == "slept: yes"

    _old_sleep_log(eng, agent, "old-sleep")
    eng.agent(v2, name=agent.name)
    assert eng.verify("old-sleep").status == "paused"
    assert eng.answer("old-sleep", "yes").output == "slept: yes"


def _old_sleep_log(eng: Engine, agent: Any, run_id: str) -> None:
    """A run paused at ``ask('go?')`` after a sleep, as agentlog wrote it before sleep
    durations were hashed (its ``timer_set`` has no ``args_hash``)."""
    at = ev.now()
    writer = RunWriter(eng.store, RunState(run_id=run_id))
    started = ev.AgentStarted(
        at=at, agent=agent.name, import_path=agent.import_path, key_check=key_check(replay_key())
    )
    writer.append(started)
    writer.append(ev.TimerSet(at=at, call=1, until=at))
    writer.append(ev.HumanInputRequested(at=at, call=2, question="go?"))
