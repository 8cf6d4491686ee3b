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
from agents.kit import ROOT, python
from conftest import backends
from test_cli_kit import agentlog

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


def _books(tmp_path: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[str, str]:
    """A SQLite store and fresh books of the fake service (this process's too, if asked)."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    if monkeypatch is not None:
        monkeypatch.setenv("AGENTLOG_TEST_SERVICE", svc)
    return f"sqlite:///{tmp_path}/agentlog.db", svc


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


def test_a_persons_resume_is_an_approval_and_abandon_stops_a_held_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, svc = _books(tmp_path, monkeypatch)
    _kill_mid_run(url, svc, "by-resume", "transfer", "after_tool:2")
    _kill_mid_run(url, svc, "dropped", "transfer", "after_tool:2")
    assert sorted(r[0] for r in _recover(url, svc)) == ["by-resume", "dropped"]
    e = Engine.open(url)
    try:
        assert e.resume("by-resume").status == "completed"
        [approved] = [v for v in e.events("by-resume") if v.type == "run_approved"]
        assert approved.data["via"] == "resume"
        assert e.abandon("dropped").status == "abandoned"
        assert e.state("dropped").waiting is None
    finally:
        e.close()
    assert _recover(url, svc) == []


def test_cli_approve(tmp_path: Path) -> None:
    """`agentlog approve RUN`: 2 for an unknown run and for a run that is not held (one
    line saying so), else the resumed run's status; `recover` exits 3 holding a run."""
    url, svc = _books(tmp_path)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    _kill_mid_run(url, svc, "cli-held", "transfer", "after_tool:2")
    recovered = agentlog("recover", "--url", url, cwd=ROOT, env=env)
    assert recovered.code == 3, recovered
    assert "held for" in recovered.out and "agentlog approve cli-held" in recovered.out
    listed = agentlog("runs", "--status", "held", "--url", url, cwd=ROOT, env=env)
    assert listed.code == 0 and "cli-held" in listed.out, listed
    unknown = agentlog("approve", "nosuch", "--url", url, cwd=ROOT, env=env)
    assert unknown.code == 2 and unknown.err.startswith("agentlog: error:"), unknown
    approved = agentlog("approve", "cli-held", "--url", url, cwd=ROOT, env=env)
    assert approved.code == 0 and "completed" in approved.out, approved
    again = agentlog("approve", "cli-held", "--url", url, cwd=ROOT, env=env)
    assert again.code == 2 and "is completed, not held" in again.err, again
    assert len(again.err.strip().splitlines()) == 1
    timeline = agentlog("timeline", "cli-held", "--url", url, cwd=ROOT, env=env)
    assert "held for approval" in timeline.out and "approved by" in timeline.out, timeline


def test_an_approval_covers_one_execution(tmp_path: Path) -> None:
    """A run approved, then killed again mid-resume, is held again by the next recovery:
    the approval was spent by the execution it let go on."""
    url, svc = _books(tmp_path)
    _kill_mid_run(url, svc, "twice", "transfer", "after_tool:2")
    assert _recover(url, svc) == [["twice", "held", "held"]]
    env = {"AGENTLOG_TEST_SERVICE": svc, "AGENTLOG_FAILPOINTS": "after_outcome:1"}
    killed = agentlog("approve", "twice", "--url", url, cwd=ROOT, env=env)
    assert killed.code == -9, killed
    assert _recover(url, svc) == [["twice", "held", "held"]]
    assert (
        agentlog(
            "approve", "twice", "--url", url, cwd=ROOT, env={"AGENTLOG_TEST_SERVICE": svc}
        ).code
        == 0
    )
    assert service.effects(svc) == Counter({("wire", "o1-0"): 1, ("wire", "o1-1"): 1})


def test_a_parent_waits_on_its_held_child_and_goes_on_once_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, svc = _books(tmp_path, monkeypatch)
    _kill_mid_run(url, svc, "parent", "parent", "after_tool:2")  # the child's wire in flight
    found = {r[0]: r[1:] for r in _recover(url, svc)}
    assert found.pop("parent") == ["waiting", None]  # suspended on its held child
    [(child, outcome)] = found.items()
    assert outcome == ["held", "held"]
    assert _recover(url, svc) == []  # the held child is no news for its parent
    e = Engine.open(url)
    try:
        assert e.approve(child).status == "completed"
        parent = e.state("parent")
        assert (parent.status, parent.output) == ("completed", EXPECTED)
    finally:
        e.close()
    assert service.effects(svc) == Counter({("wire", "o1-0"): 1, ("wire", "o1-1"): 1})


def test_starting_a_crashed_run_again_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine.start`` (how a parent's wait revives a child whose owner died) holds a
    crashed run of such an agent too, and leaves a held one alone."""
    url, svc = _books(tmp_path, monkeypatch)
    _kill_mid_run(url, svc, "revived", "transfer", "after_tool:2")
    for _ in range(2):
        e = Engine.open(url)
        e.start("revived")
        e.close()  # waits for the runs it executes in the background
    e = Engine.open(url)
    try:
        assert e.state("revived").status == "held"
        assert [v.type for v in e.events("revived")].count("run_held") == 1
    finally:
        e.close()
    assert service.effects(svc) == Counter({("wire", "o1-0"): 1})


@PROCESS_BACKENDS
def test_a_worker_holds_a_crashed_risky_run_and_resumes_the_plain_one(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody types recover: a worker takes both crashed runs over, holds the one whose
    agent resumes on approval (nothing resumes it, pass after pass) and finishes the
    other; after approve the held one finishes too, each effect once."""
    import threading

    svc = str(tmp_path / "service.db")
    monkeypatch.setenv("AGENTLOG_TEST_SERVICE", svc)
    service.reset(svc)
    _kill_mid_run(store_url, svc, "risky", "transfer", "after_tool:2")
    _kill_mid_run(store_url, svc, "plain", "auto", "after_tool:2")
    e = Engine.open(store_url)
    w = e.worker(concurrency=2, grace=5)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert e.wait("plain", timeout=120).status == "completed"
        assert e.wait("risky", timeout=120).status == "held"
        seen = w.passes
        while w.passes < seen + 3:  # three more passes: still held, nothing written
            e.signals.wait(e.signals.version, 0.2)
        types = [v.type for v in e.events("risky")]
        assert types[-1] == "run_held" and types.count("run_held") == 1
        assert service.effects(svc)[("wire", "o1-1")] == 1  # the plain run's, not the risky's
        assert e.approve("risky").output == EXPECTED
    finally:
        w.stop()
        t.join()
        e.close()
