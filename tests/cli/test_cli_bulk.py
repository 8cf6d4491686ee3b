"""``agentlog resume|abandon|verify --status S [--agent A] [--since T] --yes`` on a SQLite
file and on PostgreSQL, in one process per batch of commands: without --yes the runs are
only listed (exit 2, nothing done); with it each run's outcome is a line and the exit is
0 when all ended well, else the worst of theirs; RUN and --status together are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_cli_kit import make_workdir, sqlite_url

from tests.conftest import backends


@backends("sqlite", "postgres")
def test_bulk_commands_preview_then_act_on_every_run_the_filter_picks(
    store_url: str, tmp_path: Path
) -> None:
    work = make_workdir(tmp_path, store_url)
    made = work.many(
        [["run", "agents:failing", "--json"]] * 2
        + [["run", "agents:booker", "--json"], ["run", "agents:hello", "--json"]]
    )
    assert [r.code for r in made] == [4, 4, 3, 0]
    failed = sorted(r.json()["run_id"] for r in made[:2])
    booker, hello = made[2].json()["run_id"], made[3].json()["run_id"]

    preview, resumed, both, none, agent, abandoned, verified, bad = work.many(
        [
            ["resume", "--status", "failed"],
            ["resume", "--status", "failed", "--yes", "--json"],
            ["resume", booker, "--status", "paused"],
            ["abandon", "--status", "running", "--yes"],
            ["abandon", "--status", "failed", "--agent", "agents:hello", "--since", "1h"],
            ["abandon", "--status", "paused", "--agent", "agents:booker", "--yes"],
            ["verify", "--status", "completed", "--yes", "--json"],
            ["resume", "--status", "bogus", "--yes"],
        ]
    )
    assert preview.code == 2 and "add --yes to resume these 2 runs" in preview.err
    assert sorted(preview.out.splitlines()[1:]) == failed and "would resume 2 runs" in preview.out
    assert resumed.code == 4  # each failed again: the worst (and only) outcome
    doc = resumed.json()
    assert (doc["action"], doc["count"], doc["done"]) == ("resume", 2, True)
    assert sorted(r["run_id"] for r in doc["runs"]) == failed
    assert {r["status"] for r in doc["runs"]} == {"failed"}
    assert both.code == 2 and "give RUN or --status, not both" in both.err
    assert none.code == 0 and "no runs match status running" in none.out
    assert agent.code == 0 and "no runs match" in agent.out  # the agent filter left none
    assert abandoned.code == 0, abandoned
    assert booker in abandoned.out and "1 abandoned, 0 not" in abandoned.out
    assert (tmp_path / "undone.txt").read_text().splitlines() == ["flight", "hotel"]
    assert verified.code == 0 and [r["run_id"] for r in verified.json()["runs"]] == [hello]
    assert bad.code == 2 and "--status must be one of" in bad.err

    agents = tmp_path / "agents.py"  # a deploy that changes hello's first call
    agents.write_text(agents.read_text().replace("greeting = greet(name)", "greeting = name"))
    (diverged,) = work.many([["verify", "--status", "completed", "--yes"]])
    assert diverged.code == 2, diverged
    assert hello in diverged.out and "refused" in diverged.out
    assert "0 agree with their log, 1 not" in diverged.out
    as_json = work.many([["verify", "--status", "completed", "--yes", "--json"]])[0]
    (doc,) = as_json.json()["runs"]
    assert (
        as_json.code == 2
        and doc["run_id"] == hello
        and "the log recorded tool 'greet'" in doc["refused"]
    ), doc


def test_a_run_whose_status_moved_on_since_the_listing_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``abandon --status failed --yes`` lists the failed runs, then acts on each: one that
    was resumed meanwhile (now paused on a question) is not abandoned, it is reported."""
    from engine.runtime.run import catalog
    from replay.cli.entry import run_cli

    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    (made,) = work.many([["run", "agents:booker", "--json"]])
    rid = made.json()["run_id"]
    real = catalog.Catalog.find

    def stale(self: catalog.Catalog, status: str | None = None, *a: Any, **k: Any) -> Any:
        # the listing ran when the run was still failed: the index said so then
        return real(self, "paused", *a, **k) if status == "failed" else real(self, status, *a, **k)

    monkeypatch.setattr(catalog.Catalog, "find", stale)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    code = run_cli(["abandon", "--status", "failed", "--yes", "--json", "--url", work.url])
    doc = json.loads(capsys.readouterr().out)
    (one,) = doc["runs"]
    assert "now paused" in one["refused"], one
    assert code == 2
    (state,) = work.many([["state", rid, "--json"]])
    assert state.json()["status"] == "paused"


def test_ctrl_c_mid_bulk_still_reports_what_was_done_and_what_was_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Interrupted at its second run, ``abandon --status paused --yes --json`` still
    writes which run was abandoned, which one it was at and which it never touched,
    and exits 130."""
    from replay.cli import bulk
    from replay.cli.entry import run_cli

    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    made = work.many([["run", "agents:booker", "--json"]] * 3)
    work_one, verb, well = bulk.ACTIONS["abandon"]
    calls: list[str] = []

    def interrupted(s: Any, rid: str) -> Any:
        calls.append(rid)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return work_one(s, rid)

    monkeypatch.setitem(bulk.ACTIONS, "abandon", (interrupted, verb, well))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "agents", raising=False)  # this test's, not another's
    try:
        code = run_cli(["abandon", "--status", "paused", "--yes", "--json", "--url", work.url])
    finally:
        sys.modules.pop("agents", None)
    assert code == 130
    doc = json.loads(capsys.readouterr().out)
    assert doc["done"] is False
    assert [r["run_id"] for r in doc["runs"]] == calls[:1]
    assert doc["runs"][0]["status"] == "abandoned"
    assert doc["interrupted"] == calls[1]
    assert sorted([*calls, *doc["left"]]) == sorted(r.json()["run_id"] for r in made)
