"""``agentlog rewind --set NAME=JSON --answer VALUE --dry-run`` through the real CLI: the
fork's edits and would-be effects printed (text and ``--json``), a dry run exits 0 having
sent nothing, and bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_kit import Workdir, one_line_error, sqlite_url

SHOP = """
from engine import Engine

engine = Engine.open()


@engine.tool(side_effect=True)
def charge(order: str, cents: int, *, idempotency_key: str) -> dict:
    with open("charges.txt", "a") as f:
        f.write(f"{order} {cents}\\n")
    return {"order": order, "cents": cents}


@engine.agent
def shop(run, order: str):
    plan = run.decide("plan", lambda: {"cents": 100})
    run.checkpoint("planned")
    if run.ask("approve?") != "yes":
        return {"declined": True}
    return charge(order, plan["cents"])
"""


@pytest.fixture
def work(tmp_path: Path) -> Workdir:
    (tmp_path / "shop.py").write_text(SHOP)
    return Workdir(tmp_path, sqlite_url(tmp_path))


def _charges(work: Workdir) -> list[str]:
    path = work.path / "charges.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_rewind_with_edits_an_answer_and_a_dry_run(work: Workdir) -> None:
    """A paused run forked with another answer and an edited plan as a dry run prints the
    edits and the charge it would send, exits 0 (status dry_run) and charges nothing; the
    same without --dry-run charges the edited amount; bad input exits 2 in one line."""
    parent = work.run_id("shop:shop", "--input", '{"order": "o1"}', code=3)
    dry = work.ok(
        "rewind", parent, "--answer", "yes", "--set", 'plan={"cents": 5}', "--dry-run", "--json"
    ).json()
    assert dry["status"] == "dry_run" and dry["dry_run"] is True and _charges(work) == []
    assert [x["name"] for x in dry["edits"]] == ["plan", "approve?"] and dry["edited_by"]
    [would] = dry["would_send"]
    assert (would["tool"], would["args"], would["stopped"]) == (
        "charge",
        {"order": "o1", "cents": 5},
        True,
    )
    text = work.ok("rewind", parent[:10], "--answer", "yes", "--set", 'plan={"cents": 6}').out
    assert "edited decision 'plan'" in text and "edited answer 'approve?'" in text
    assert _charges(work) == ["o1 6"]
    listed = work.ok("runs", "--status", "dry_run", "--json").json()
    assert [r["run_id"] for r in listed] == [dry["run_id"]]

    bad_json, unknown, no_to, no_equals = work.many(
        [
            ["rewind", parent, "--to", "planned", "--set", "plan={bad"],
            ["rewind", parent, "--to", "planned", "--set", "nope=1"],
            ["rewind", parent, "--set", "plan=1"],
            ["rewind", parent, "--to", "planned", "--set", "noequals"],
        ]
    )
    one_line_error(bad_json, "--set 'plan' is not valid JSON")
    one_line_error(unknown, "nothing named 'nope'", "decision 'plan' at position 2")
    one_line_error(no_to, "rewind needs --to")
    one_line_error(no_equals, "--set takes NAME=JSON")
    assert _charges(work) == ["o1 6"]
