"""Real processes, really killed: each failpoint (``AGENTLOG_FAILPOINTS=name[:n]``) SIGKILLs
a subprocess at after_intent, after_tool, after_outcome, in_snapshot and in_compensation;
a new process, which never imports the agent's module itself, resumes the run through
the import path it recorded (a module, or a script run as __main__) and completes it
with every effect done exactly once, under keys stable across processes."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import engine_call, python
from conftest import backends

from engine import Engine
from engine.failpoints import _load
from engine.log.snapshots import snapshot_at_or_before
from engine.runtime.call import ledger

PROCESS_BACKENDS = backends("sqlite", "postgres")
MODULE = "tests.agents.runtime_agents"


def _start(url: str, run_id: str, svc: str, failpoint: str | None, **data: Any) -> int:
    env = {"AGENTLOG_TEST_SERVICE": svc}
    if failpoint:
        env["AGENTLOG_FAILPOINTS"] = failpoint
    p = python("-m", MODULE, url, run_id, "durable_flow", json.dumps(data), env=env)
    assert p.returncode in (0, -9), p.stderr[-3000:]
    return p.returncode


def _expected(order: str, n: int) -> dict[str, Any]:
    return {
        "quote": 100 * len(order),
        "receipts": [f"charge:{order}-{i}" for i in range(n)] + [f"notify:{order}"],
    }


def test_failpoint_spec_parses_names_and_counts() -> None:
    """``name[:n][,name[:n]]``: n defaults to 1."""
    import os

    old = os.environ.get("AGENTLOG_FAILPOINTS")
    os.environ["AGENTLOG_FAILPOINTS"] = "after_tool:3, in_snapshot"
    try:
        assert _load() == {"after_tool": 3, "in_snapshot": 1}
    finally:
        if old is None:
            del os.environ["AGENTLOG_FAILPOINTS"]
        else:
            os.environ["AGENTLOG_FAILPOINTS"] = old


@PROCESS_BACKENDS
@pytest.mark.parametrize(
    "failpoint",
    [
        "after_intent:1",  # a charge's intent committed, the charge not sent
        "after_intent:4",  # notify (business key + verifier) intent committed, not sent
        "after_tool:1",  # the read-only quote ran, its outcome not recorded: runs again
        "after_tool:2",  # a charge sent, its outcome not recorded: re-sent, same key
        "after_tool:5",  # notify sent, outcome lost: the verifier finds it
        "after_outcome:2",  # a charge's outcome deferred (it takes the key): re-sent, same key
        # notify sent, its outcome and its key's commit deferred to the next commit and
        # lost with the process: the verifier finds it, the key is committed on resume
        "after_outcome:5",
        "in_snapshot:1",  # events committed, the snapshot not written
    ],
)
def test_killed_at_a_failpoint_resumes_in_a_new_process_without_duplicated_effects(
    store_url: str, tmp_path: Path, failpoint: str
) -> None:
    """The child dies by SIGKILL exactly at the failpoint, the run is left 'running'; a
    fresh process resumes it through the recorded import path and completes with the
    uncrashed output; every effect happened once; each op saw a single idempotency key."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    code = _start(store_url, "fp-run", svc, failpoint, order="o1", n=3)
    assert code == -9, f"{failpoint} was not reached"
    e = Engine.open(store_url)
    assert e.state("fp-run").status == "running"
    e.close()

    r = engine_call(store_url, "resume", "fp-run", env={"AGENTLOG_TEST_SERVICE": svc})
    assert r["status"] == "completed", r
    assert r["output"] == _expected("o1", 3)
    assert MODULE in r["modules"]  # imported by the engine, from the recorded path
    effects = service.effects(svc)
    assert effects == Counter({**{("charge", f"o1-{i}"): 1 for i in range(3)}, ("notify", "o1"): 1})
    keys: dict[str, set[str | None]] = {}
    for tool, op, key in service.requests(svc, kind="perform"):
        keys.setdefault(f"{tool}:{op}", set()).add(key)
    assert all(len(k) == 1 for k in keys.values()), keys
    assert keys["charge:o1-0"] == {"fp-run:2"}
    e = Engine.open(store_url)
    held = ledger.read(e.store, "notify:o1")  # the business key's effect committed
    e.close()
    assert held.claim is not None and held.committed is not None

    again = engine_call(store_url, "resume", "fp-run", env={"AGENTLOG_TEST_SERVICE": svc})
    assert (again["status"], again["output"]) == ("completed", r["output"])
    assert service.effects(svc) == effects


@PROCESS_BACKENDS
def test_in_snapshot_failpoint_is_reached_between_commit_and_snapshot(
    store_url: str, tmp_path: Path
) -> None:
    """in_snapshot fires after a commit's events are written and before the snapshot it
    takes is saved: the log has the events, the snapshot store does not."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    # durable_flow snapshots every 4 events (a checkpoint takes none): the 3rd snapshot is
    # the one of the commit that passes position 12, the last: notify's outcome (deferred:
    # its verifier settles it) rides with agent_finished.
    assert _start(store_url, "snap-run", svc, "in_snapshot:3", order="o2", n=3) == -9
    e = Engine.open(store_url)
    types = [x.type for x in e.events("snap-run")]
    assert len(types) >= 12 and types[-1] == "agent_finished" and "checkpoint" in types
    assert types.count("tool_succeeded") == 5
    from engine.log.history import run_stream

    snap = snapshot_at_or_before(e.store, run_stream("snap-run"), None)
    assert snap is not None and snap.position < len(types)
    e.close()
    r = engine_call(store_url, "resume", "snap-run", env={"AGENTLOG_TEST_SERVICE": svc})
    assert (r["status"], r["output"]) == ("completed", _expected("o2", 3))
    assert sum(service.effects(svc).values()) == 4


@PROCESS_BACKENDS
def test_killed_in_compensation_abandon_again_completes_every_undo(
    store_url: str, tmp_path: Path
) -> None:
    """A process abandoning a run dies after an undo ran but before it was recorded; a new
    abandon finishes: every charge voided, the run abandoned. Compensation is
    at-least-once: the interrupted undo is sent again, so it must be idempotent (voiding
    a receipt twice voids it once, as real payment APIs do)."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    assert _start(store_url, "undo-run", svc, None, order="o3", n=3, confirm=True) == 0
    e = Engine.open(store_url)
    assert e.state("undo-run").status == "paused"
    e.close()
    env = {"AGENTLOG_TEST_SERVICE": svc}
    p = python(
        "-c",
        "import sys; from engine import Engine; Engine.open(sys.argv[1]).abandon('undo-run')",
        store_url,
        env={**env, "AGENTLOG_FAILPOINTS": "in_compensation"},
    )
    assert p.returncode == -9, p.stderr[-2000:]
    assert service.voids(svc) == {"charge:o3-2"}  # reverse order: the last charge first

    r = engine_call(store_url, "abandon", "undo-run", env=env)
    assert r["status"] == "abandoned"
    receipts = {f"charge:o3-{i}" for i in range(3)}
    assert service.voids(svc) == receipts
    void_requests = Counter(op for _, op, _ in service.requests(svc, kind="void"))
    assert void_requests == Counter({"charge:o3-2": 2, "charge:o3-1": 1, "charge:o3-0": 1})
    again = engine_call(store_url, "abandon", "undo-run", env=env)
    assert again["status"] == "abandoned"
    assert sum(Counter(op for _, op, _ in service.requests(svc, kind="void")).values()) == 4


SCRIPT = """
import json, os, sys
from engine import Engine

engine = Engine.open()
LEDGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stamps.jsonl")


@engine.tool(side_effect=True)
def stamp(n: int, *, idempotency_key: str) -> str:
    seen = set()
    if os.path.exists(LEDGER):
        seen = {json.loads(line)["key"] for line in open(LEDGER)}
    if idempotency_key not in seen:  # the outside service dedupes by key
        with open(LEDGER, "a") as f:
            f.write(json.dumps({"n": n, "key": idempotency_key}) + "\\n")
    return f"stamp-{n}"


@engine.agent
def stamper(run, n: int) -> list:
    return [stamp(i) for i in range(n)]


if __name__ == "__main__":
    r = Engine.open(sys.argv[1]).run(stamper, run_id=sys.argv[2], n=3)
    print(r.status)
"""


@PROCESS_BACKENDS
def test_a_script_run_as_main_records_its_path_and_resumes_in_a_new_process(
    store_url: str, tmp_path: Path
) -> None:
    """An agent started from a script (``__main__``) records the script's file; a new
    process in another directory imports it from there (its main block does not run)."""
    script = tmp_path / "stamping.py"
    script.write_text(textwrap.dedent(SCRIPT))
    p = python(str(script), store_url, "script-run", env={"AGENTLOG_FAILPOINTS": "after_tool:2"})
    assert p.returncode == -9, p.stderr[-2000:]
    e = Engine.open(store_url)
    head = e.events("script-run")[0]
    assert head.data["agent"] == "__main__:stamper"
    assert head.data["import_path"] == str(script.resolve())
    e.close()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = engine_call(store_url, "resume", "script-run", cwd=elsewhere)
    assert (r["status"], r["output"]) == ("completed", ["stamp-0", "stamp-1", "stamp-2"])
    assert any(m.startswith("__agentlog_script") for m in r["modules"])
    lines = [json.loads(x) for x in (tmp_path / "stamps.jsonl").read_text().splitlines()]
    assert [x["n"] for x in lines] == [0, 1, 2]
    assert [x["key"] for x in lines] == [f"script-run:{i}" for i in (1, 2, 3)]
