"""``agentlog rewind --effects`` and the parent's effects that still stand, as the rewind
and ``show`` print them (text and ``--json``), through the real CLI in subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_kit import Workdir, one_line_error, sqlite_url

from tests.conftest import backends

SHOP = """
from pathlib import Path

from engine import Engine

engine = Engine.open()


def refund(receipt):
    with open("refunds.txt", "a") as f:
        f.write(receipt["item"] + "\\n")
    return {"refunded": receipt["item"]}


@engine.tool(side_effect=True, compensate=refund)
def charge(item: str, *, idempotency_key: str) -> dict:
    with open("charges.txt", "a") as f:
        f.write(item + "\\n")
    return {"item": item, "key": idempotency_key}


def choose() -> list:
    return Path("items.txt").read_text().split()


@engine.agent
def shop(run):
    run.checkpoint("start")
    return [charge(item) for item in run.decide("items", choose)]
"""


@pytest.fixture
def work(tmp_path: Path) -> Workdir:
    (tmp_path / "shop.py").write_text(SHOP)
    (tmp_path / "items.txt").write_text("a b")
    return Workdir(tmp_path, sqlite_url(tmp_path))


def _lines(work: Workdir, name: str) -> list[str]:
    path = work.path / name
    return path.read_text().split() if path.exists() else []


def test_rewind_effects_modes_and_the_standing_effects(work: Workdir) -> None:
    """reuse (default) sends nothing again and nothing stands; a fork on another path names
    the parent's standing effect in the rewind's output and in show (text and --json);
    resend sends again; compensate undoes first (recorded in the parent); a bad mode is
    one line and exit 2."""
    parent = work.run_id("shop:shop", code=0)
    reused = work.ok("rewind", parent, "--to", "start", "--json").json()
    assert reused["status"] == "completed" and reused["standing"] == []
    assert _lines(work, "charges.txt") == ["a", "b"]
    story = work.ok("timeline", reused["run_id"]).out
    assert "effects: reuse" in story and story.count("reused: the parent's effect") == 2

    (work.path / "items.txt").write_text("b")  # the fork takes another path
    other = work.ok("rewind", parent[:8], "--to", "start", "--json").json()
    assert _lines(work, "charges.txt") == ["a", "b"]
    assert other["standing"] == [
        {
            "run_id": parent,
            "call": 3,
            "tool": "charge",
            "key": f"{parent}:3",
            "result": {"item": "a", "key": f"{parent}:3"},
        }
    ]
    shown = work.ok("show", other["run_id"], "--json").json()
    assert shown["standing"] == other["standing"]
    text = work.ok("show", other["run_id"]).out
    assert "still standing" in text and f"call 3 charge (key {parent}:3)" in text
    assert "still standing" not in work.ok("show", reused["run_id"]).out
    assert work.ok("show", parent, "--json").json()["standing"] == []

    printed = work.ok("rewind", parent, "--to", "start", "--effects", "resend").out
    assert printed.startswith("fork ") and "(effects: resend)" in printed
    assert "still standing" in printed and f"call 4 charge (key {parent}:4)" in printed
    assert _lines(work, "charges.txt") == ["a", "b", "b"]

    compensated = work.ok("rewind", parent, "--to", "start", "--effects", "compensate", "--json")
    assert compensated.json()["standing"] == []
    assert _lines(work, "refunds.txt") == ["b", "a"]  # reverse order
    assert _lines(work, "charges.txt") == ["a", "b", "b", "b"]  # the fork sent its own
    tail = [e["type"] for e in work.ok("timeline", parent, "--json").json()[-4:]]
    assert tail == ["compensation_started", "compensated"] * 2
    # The first fork on another path: its parent's effect no longer stands.
    assert work.ok("show", other["run_id"], "--json").json()["standing"] == []

    one_line_error(work.cli("rewind", parent, "--to", "start", "--effects", "twice"), "twice")
    assert len(work.ok("runs", "--json").json()) == 5  # the bad mode forked nothing


def test_compensate_that_cannot_undo_exits_2_naming_the_effect(work: Workdir) -> None:
    """A compensating rewind past an effect with no compensation stops with one line
    naming it, exit 2, and forks nothing."""
    (work.path / "shop.py").write_text(
        SHOP.replace(
            "@engine.tool(side_effect=True, compensate=refund)", "@engine.tool(side_effect=True)"
        )
    )
    parent = work.run_id("shop:shop", code=0)
    r = work.cli("rewind", parent, "--to", "start", "--effects", "compensate")
    one_line_error(r, "charge (call 4) has no compensation", "nothing forked")
    assert len(work.ok("runs", "--json").json()) == 1


REUSED = "reused (the parent's effects"


@backends("sqlite", "postgres")
def test_rewind_names_the_effects_it_reused(tmp_path: Path, store_url: str) -> None:
    """A reusing rewind prints (and ``--json`` lists) the parent's effects it took over
    instead of sending again, beside the one that still stands; a resend reuses none."""
    (tmp_path / "shop.py").write_text(SHOP)
    (tmp_path / "items.txt").write_text("a b")
    work = Workdir(tmp_path, store_url)
    parent = work.run_id("shop:shop", code=0)
    (work.path / "items.txt").write_text("b")  # the fork charges b again, not a
    printed = work.ok("rewind", parent, "--to", "start").out
    assert _lines(work, "charges.txt") == ["a", "b"]  # the service saw b once
    reused, standing = printed.index(REUSED), printed.index("still standing")
    assert f"call 4 charge (key {parent}:4)" in printed[reused:standing]
    assert f"call 3 charge (key {parent}:3)" in printed[standing:]

    (work.path / "items.txt").write_text("a b")
    doc = work.ok("rewind", parent, "--to", "start", "--json").json()
    assert [(e["call"], e["tool"], e["key"]) for e in doc["reused"]] == [
        (4, "charge", f"{parent}:4"),  # the order they would be undone in: the last first
        (3, "charge", f"{parent}:3"),
    ]
    assert doc["standing"] == [] and _lines(work, "charges.txt") == ["a", "b"]
    resent = work.ok("rewind", parent, "--to", "start", "--effects", "resend", "--json")
    assert resent.json()["reused"] == [] and _lines(work, "charges.txt") == ["a", "b"] * 2
    assert REUSED not in work.ok("rewind", parent, "--to", "start", "--effects", "resend").out
