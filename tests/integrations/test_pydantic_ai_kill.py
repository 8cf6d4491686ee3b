"""A SIGKILLed pydantic-ai agent (tests/agents/pai_agents.py) resumes in a new process
without calling the model again for the turns its log recorded, and without charging
again: model calls and charges are counted in files outside the log. SQLite and
PostgreSQL (a memory store does not outlive its process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents import pai_agents
from agents.kit import RESUME, python

from engine import Engine

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def _start(store_url: str, env: dict[str, str], *agent: str) -> None:
    p = python("-m", "tests.agents.pai_agents", store_url, "pai1", *agent, env=env)
    assert p.returncode == -9, p.stdout + p.stderr[-3000:]


def _resume(
    store_url: str, env: dict[str, str], how: str = "resume", *args: str
) -> dict[str, object]:
    p = python("-c", RESUME, store_url, how, "pai1", *args, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(json.loads(p.stdout.splitlines()[-1]))


@STORES
def test_killed_mid_turn_resumes_without_asking_the_model_again(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside the third model request (two turns and both charges recorded): the
    resume asks the model once, for that turn alone, and charges nothing."""
    monkeypatch.setenv("PAI_DIR", str(tmp_path))
    _start(store_url, {"PAI_DIR": str(tmp_path), "PAI_KILL_AT_MODEL": "3"})
    assert (pai_agents.model_calls(), pai_agents.charges()) == (3, ["charge:o1", "charge:o2"])

    r = _resume(store_url, {"PAI_DIR": str(tmp_path)})
    assert (r["status"], r["output"]) == ("completed", "charged 2 orders"), r
    assert pai_agents.model_calls() == 4  # the killed request again, no recorded turn
    assert pai_agents.charges() == ["charge:o1", "charge:o2"]


@STORES
def test_killed_after_a_charge_landed_resumes_without_charging_again(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the second charge was made, before its outcome was recorded: the
    resume finds it with the tool's verifier and goes on to the last turn."""
    monkeypatch.setenv("PAI_DIR", str(tmp_path))
    env = {"PAI_DIR": str(tmp_path), "AGENTLOG_FAILPOINTS": "after_tool:2"}
    _start(store_url, env)
    assert (pai_agents.model_calls(), pai_agents.charges()) == (2, ["charge:o1", "charge:o2"])

    r = _resume(store_url, {"PAI_DIR": str(tmp_path)})
    assert (r["status"], r["output"]) == ("completed", "charged 2 orders"), r
    assert pai_agents.model_calls() == 3  # only the turn after the kill
    assert pai_agents.charges() == ["charge:o1", "charge:o2"]


@STORES
def test_an_uncertain_charge_without_a_verifier_is_asked_of_a_person(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No verifier: the resumed run pauses on the charge whose outcome is unknown (sends
    nothing); answered "done", it goes on without charging again."""
    monkeypatch.setenv("PAI_DIR", str(tmp_path))
    env = {"PAI_DIR": str(tmp_path), "AGENTLOG_FAILPOINTS": "after_tool:1"}
    _start(store_url, env, "unverified")
    assert (pai_agents.model_calls(), pai_agents.charges()) == (1, ["charge:o1"])

    r = _resume(store_url, {"PAI_DIR": str(tmp_path)})
    assert r["status"] == "paused" and "charge" in str(r["waiting"]), r
    r = _resume(store_url, {"PAI_DIR": str(tmp_path)}, "answer", "done")
    assert (r["status"], r["output"]) == ("completed", "charged 2 orders"), r
    assert pai_agents.model_calls() == 3
    assert pai_agents.charges() == ["charge:o1", "charge:o2"]


@STORES
def test_killed_mid_stream_resumes_by_streaming_the_answer_again(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the first chunk of a streamed answer: nothing of it was recorded, so
    the resume streams it again, whole, and records it once."""
    monkeypatch.setenv("PAI_DIR", str(tmp_path))
    _start(store_url, {"PAI_DIR": str(tmp_path), "PAI_KILL_IN_STREAM": "1"}, "writer")
    assert pai_agents.model_calls() == 1

    r = _resume(store_url, {"PAI_DIR": str(tmp_path)})
    assert (r["status"], r["output"]) == ("completed", "Dear customer, thanks."), r
    assert pai_agents.model_calls() == 2
    eng = Engine.open(store_url)
    try:
        decided = [e.data for e in eng.events("pai1") if e.type == "llm_decided"]
    finally:
        eng.close()
    assert [d["name"] for d in decided] == ["pai_writer.model"]


@STORES
def test_a_killed_run_abandoned_by_another_process_refunds_its_charges(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The abandoning process calls no tool: it finds the charges' compensation through
    the agent's module, which defines the DurableAgent's tools."""
    monkeypatch.setenv("PAI_DIR", str(tmp_path))
    _start(store_url, {"PAI_DIR": str(tmp_path), "PAI_KILL_AT_MODEL": "3"})
    r = _resume(store_url, {"PAI_DIR": str(tmp_path)}, "abandon")
    assert r["status"] == "abandoned", r
    assert pai_agents.refunds() == ["receipt-o1", "receipt-o2"]
    assert pai_agents.model_calls() == 3
