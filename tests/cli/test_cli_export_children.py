"""``agentlog export`` of a run with child runs says on stderr that they are not in the
export, naming each descendant (not its forks), on a SQLite file and on PostgreSQL; the
export itself (stdout or -o) is unchanged, and a run with no children gets no note."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from test_cli_kit import Workdir, make_workdir
from tree_kit import three_levels

from engine.store import open_store
from tests.conftest import backends


@pytest.fixture
def work(store_url: str, tmp_path: Path) -> Workdir:
    """A store holding boss -> (lead -> (w1, w2), solo) and a fork of boss."""
    with contextlib.closing(open_store(store_url)) as store:
        three_levels(store)
    return make_workdir(tmp_path, store_url)


@backends("sqlite", "postgres")
def test_export_of_a_parent_names_the_child_runs_left_out(work: Workdir) -> None:
    """Four descendants named, parents first; the fork is not one; stdout is the run."""
    r = work.ok("export", "boss")
    assert {json.loads(line)["run_id"] for line in r.out.splitlines()} == {"boss"}
    note = r.err.strip()
    assert note.startswith("note: the export holds run boss only, not its 4 descendant runs")
    assert note.endswith(": lead, w1, w2, solo; export them all with 'agentlog export RUN --tree'")
    assert "boss-fork" not in note and "\n" not in note

    out = work.path / "lead.jsonl"
    led = work.ok("export", "lead", "-o", str(out))
    assert "not its 2 descendant runs" in led.err and ": w1, w2;" in led.err
    assert {json.loads(line)["run_id"] for line in out.read_text().splitlines()} == {"lead"}

    assert work.ok("export", "solo").err == ""
    assert work.ok("export", "boss-fork").err == ""
