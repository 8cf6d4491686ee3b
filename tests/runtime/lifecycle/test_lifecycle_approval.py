"""Runs that wait for a person after a crash (``@engine.agent(resume="approve")``, or a
predicate of the run's state): a real process killed by SIGKILL mid-run leaves its run
running with a dead owner; ``recover`` in another process holds it (``run_held``, status
``held``) and resumes nothing, pass after pass; ``approve`` records who approved it and
continues it, each effect still happening once. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from agents import service
from agents.kit import python
from conftest import backends

from engine import Engine
from engine.errors import UsageError
from engine.log.history import read_events
from replay.timeline import story

PROCESS_BACKENDS = backends("sqlite", "postgres")

RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps([[r.run_id, r.status, r.not_resumed] for r in e.recover()]))
"""


def _kill_mid_run(url: str, svc: str, run_id: str, agent: str, failpoint: str) -> None:
    env = {"AGENTLOG_TEST_SERVICE": svc, "AGENTLOG_FAILPOINTS": failpoint}
    data = json.dumps({"order": "o1", "n": 2})
    p = python("-m", "tests.agents.approval_agents", url, run_id, agent, data, env=env)
    assert p.returncode == -9, p.stderr[-2000:]


def _recover(url: str, svc: str) -> list[list[str | None]]:
    p = python("-c", RECOVER, url, env={"AGENTLOG_TEST_SERVICE": svc})
    assert p.returncode == 0, p.stderr[-2000:]
    found: list[list[str | None]] = json.loads(p.stdout)
    return found


def _timeline(e: Engine, run_id: str) -> str:
    """The run's timeline as the CLI prints it, without styles."""
    lines = story(read_events(e.store, run_id))
    return "\n".join("".join(p if isinstance(p, str) else p[0] for p in line) for line in lines)


EXPECTED = {"quote": 200, "receipts": ["wire:o1-0", "wire:o1-1"]}


@PROCESS_BACKENDS
def test_a_crashed_run_is_held_until_approved(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = str(tmp_path / "service.db")
    monkeypatch.setenv("AGENTLOG_TEST_SERVICE", svc)
    service.reset(svc)
    _kill_mid_run(store_url, svc, "risky", "transfer", "after_tool:2")  # wire o1-0 in flight
    assert _recover(store_url, svc) == [["risky", "held", "held"]]
    assert _recover(store_url, svc) == []  # held: nothing resumes it, nothing written
    e = Engine.open(store_url)
    try:
        state = e.state("risky")
        assert state.status == "held" and state.waiting is not None
        assert "resumes on approval" in state.waiting
        types = [v.type for v in e.events("risky")]
        assert types[-1] == "run_held" and types.count("run_held") == 1
        assert e.runs(status="held")[0].run_id == "risky"
        assert service.effects(svc) == Counter({("wire", "o1-0"): 1})
        r = e.approve("risky")
        assert (r.status, r.output) == ("completed", EXPECTED)
        approved = [v for v in e.events("risky") if v.type == "run_approved"]
        assert len(approved) == 1 and "@" in approved[0].data["by"]
        text = _timeline(e, "risky")
        assert "held for approval" in text and "approved by" in text
        with pytest.raises(UsageError, match="is completed, not held"):
            e.approve("risky")
    finally:
        e.close()
    assert service.effects(svc) == Counter({("wire", "o1-0"): 1, ("wire", "o1-1"): 1})


@PROCESS_BACKENDS
def test_an_auto_agent_and_a_predicate_that_says_no_are_resumed(
    store_url: str, tmp_path: Path
) -> None:
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    _kill_mid_run(store_url, svc, "plain", "auto", "after_tool:2")
    _kill_mid_run(store_url, svc, "read", "careful", "after_tool:1")  # only a read in flight
    _kill_mid_run(store_url, svc, "doubt", "careful", "after_tool:2")  # an effect in flight
    found = sorted(_recover(store_url, svc), key=lambda r: str(r[0]))
    assert found == [
        ["doubt", "held", "held"],
        ["plain", "completed", None],
        ["read", "completed", None],
    ]
