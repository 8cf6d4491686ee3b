"""``agentlog runs`` with filters and pages, through a real subprocess on SQLite and
PostgreSQL: they read the runs view, which agrees with the run index that plain ``runs``
reads (same rows, same text, same contract fields); bad values exit 2 with one line."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from test_cli_kit import Workdir, make_workdir, one_line_error, sqlite_url

CONTRACT = ("run_id", "agent", "status", "started_at", "updated_at", "parent_run_id")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Workdir:
    if request.param == "sqlite":
        return make_workdir(tmp_path, sqlite_url(tmp_path))
    return make_workdir(tmp_path, request.getfixturevalue("pg_url"))


def _runs(work: Workdir) -> dict[str, str]:
    """A completed, a paused, a failed run, a paused booking and its fork."""
    ids = {
        "hello": work.run_id("agents:hello", code=0),
        "asker": work.run_id("agents:asker", code=3),
        "failing": work.run_id("agents:failing", code=4),
        "booker": work.run_id("agents:booker", code=3),
    }
    fork = work.ok("rewind", ids["booker"], "--to", "3", "--json", code=3).json()
    ids["fork"] = fork["run_id"]
    return ids


def _listed(work: Workdir, *flags: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = work.ok("runs", *flags, "--json").json()
    return found


def _contract(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in CONTRACT) for r in rows]


def test_the_view_and_the_index_list_the_same_runs(work: Workdir) -> None:
    """Plain ``runs`` (the index) and ``runs`` with a page (the view) give the same text
    and the same contract fields, newest first, with or without --status; the view adds
    the board's columns."""
    ids = _runs(work)
    index = _listed(work)
    assert len(index) == 5 and index[0]["run_id"] == ids["fork"]
    board = _listed(work, "--limit", "100")
    assert _contract(board) == _contract(index)
    assert work.ok("runs", "--offset", "0").out == work.ok("runs").out
    paused = _listed(work, "--status", "paused")
    assert _contract(_listed(work, "--status", "paused", "--offset", "0")) == _contract(paused)
    assert {r["run_id"] for r in paused} == {ids["asker"], ids["booker"], ids["fork"]}
    fork = board[0]
    assert (fork["lineage"], fork["fork_position"], fork["effects"]) == ("fork", 3, "reuse")
    lineage = {ids[k]: "fork" if k == "fork" else "root" for k in ids}
    assert {r["run_id"]: r["lineage"] for r in index} == lineage  # the index's column
    assert [r["lineage"] for r in board] == [r["lineage"] for r in index]
    hello = next(r for r in board if r["run_id"] == ids["hello"])
    assert (hello["steps_done"], hello["steps_planned"], hello["attempts"]) == (2, 2, 1)
    events = work.ok("timeline", ids["hello"], "--json").json()
    assert hello["last_event"] == "agent_finished" and hello["position"] == len(events)


def test_filters_and_pages_pick_the_runs_they_name(work: Workdir) -> None:
    """--agent, --parent (a prefix resolved), --since/--until (spans and ISO-8601 times),
    --limit and --offset each select what the full list holds for them."""
    ids = _runs(work)
    every = [r["run_id"] for r in _listed(work)]
    assert [r["run_id"] for r in _listed(work, "--agent", "agents:asker")] == [ids["asker"]]
    assert [r["run_id"] for r in _listed(work, "--parent", ids["booker"][:10])] == [ids["fork"]]
    assert [r["run_id"] for r in _listed(work, "--limit", "2", "--offset", "1")] == every[1:3]
    assert [r["run_id"] for r in _listed(work, "--offset", "4")] == every[4:]
    assert [r["run_id"] for r in _listed(work, "--since", "1h")] == every
    assert _listed(work, "--until", "1h") == []
    assert "no runs match in" in work.ok("runs", "--until", "1h").out
    starts = [dt.datetime.fromisoformat(r["started_at"]) for r in _listed(work)]
    cut = (starts[3] + (starts[2] - starts[3]) / 2).isoformat()  # between the 3rd and 4th
    assert [r["run_id"] for r in _listed(work, "--since", cut)] == every[:3]
    assert [r["run_id"] for r in _listed(work, "--until", cut)] == every[3:]
    both = _listed(work, "--agent", "agents:booker", "--status", "paused", "--limit", "5")
    assert [r["run_id"] for r in both] == [ids["fork"], ids["booker"]]


def test_the_view_reads_its_own_writes(work: Workdir) -> None:
    """A run started after the view was last brought up to date is listed at once."""
    first = work.run_id("agents:hello", code=0)
    assert [r["run_id"] for r in _listed(work, "--limit", "5")] == [first]
    second = work.run_id("agents:failing", code=4)
    assert [r["run_id"] for r in _listed(work, "--limit", "5")] == [second, first]
    assert [r["status"] for r in _listed(work, "--agent", "agents:failing")] == ["failed"]


def test_parent_names_a_run_the_store_does_not_hold(work: Workdir, tmp_path: Path) -> None:
    """An imported fork whose parent stayed behind is listed by ``--parent`` with the
    parent's full id (no run to resolve it to); a prefix of it matches nothing."""
    ids = _runs(work)
    exported = tmp_path / "fork.jsonl"
    work.ok("export", ids["fork"], "-o", str(exported))
    other = Workdir(work.path, sqlite_url(tmp_path, "other.db"))
    other.ok("import", str(exported))
    assert [r["run_id"] for r in _listed(other, "--parent", ids["booker"])] == [ids["fork"]]
    assert _listed(other, "--parent", ids["booker"][:10]) == []
    assert ids["fork"] in other.ok("runs", "--parent", ids["booker"]).out


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--limit", "-1"], "--limit '-1' is not a whole number"),
        (["--limit", "ten"], "--limit 'ten'"),
        (["--offset", "1.5"], "--offset '1.5'"),
        (["--limit", "9" * 30], "at most 2**62"),
        (["--since", "yesterday"], "--since 'yesterday' is neither a span"),
        (["--until", "12 o'clock"], "--until"),
        (["--parent", "no such id"], "not a --parent run id: 'no such id'"),
        (["--status", "asleep", "--limit", "1"], "--status must be one of"),
        (["--since", "1h", "--until", "2h"], "--until must be later than --since"),
    ],
)
def test_bad_values_exit_2_with_one_line(tmp_path: Path, flags: list[str], needle: str) -> None:
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.run_id("agents:hello", code=0)
    one_line_error(work.cli("runs", *flags), needle)


def test_filters_on_an_empty_database_file_write_nothing(tmp_path: Path) -> None:
    """An existing database file without tables reads as an empty store: no runs, and
    bringing the view up to date writes nothing to the file."""
    (tmp_path / "empty.db").touch()
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "empty.db"))
    assert _listed(work, "--agent", "agents:hello", "--limit", "3") == []
    assert (tmp_path / "empty.db").stat().st_size == 0
