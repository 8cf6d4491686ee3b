"""``agentlog projections status|rebuild`` in a real subprocess: each view's place and lag,
rebuilding all views or one, a progress bar only on a terminal, one clear line for an
unknown view or a missing store."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_kit import Result, Workdir, clean_env, make_workdir, one_line_error, sqlite_url

from engine.polling import poll_until

VIEWS = ["runs", "tools", "recovery", "timeline"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Workdir:
    if request.param == "sqlite":
        return make_workdir(tmp_path, sqlite_url(tmp_path))
    return make_workdir(tmp_path, request.getfixturevalue("pg_url"))


def _places(work: Workdir, status: Result | None = None) -> dict[str, tuple[int, int, int, bool]]:
    """Each view's place from ``projections status --json`` (run now unless given)."""
    docs = (status or work.ok("projections", "status", "--json")).json()
    assert [d["name"] for d in docs] == VIEWS
    return {d["name"]: (d["position"], d["head"], d["lag"], d["current"]) for d in docs}


def test_status_and_rebuild_of_every_view(work: Workdir) -> None:
    """Before any build every view lags by the whole log; after ``rebuild`` none does, and
    the bar stays off a stderr that is no terminal."""
    work.ok("run", "agents:hello")
    work.ok("run", "agents:hello", "--input", '{"name": "you"}')
    status = ["projections", "status", "--json"]
    argvs = [status, ["projections", "rebuild", "--json"], status, ["projections", "status"]]
    results = work.many(argvs)  # one process for the four, in turn
    assert [r.code for r in results] == [0] * 4, results
    before, rebuilt, after, shown = results
    places = _places(work, before)
    head = places["runs"][1]
    assert head > 0
    assert places == {v: (0, head, head, False) for v in VIEWS}
    assert rebuilt.err == ""
    assert {d["name"]: d["position"] for d in rebuilt.json()} == {v: head for v in VIEWS}
    assert _places(work, after) == {v: (head, head, 0, True) for v in VIEWS}
    text = shown.out.splitlines()
    assert text[0].split() == ["view", "position", "head", "lag", "version"]
    assert [line.split()[:4] for line in text[1:]] == [
        [v, str(head), str(head), "0"] for v in VIEWS
    ]


def test_rebuild_of_one_view_leaves_the_others(tmp_path: Path) -> None:
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.ok("run", "agents:hello")
    [doc] = work.ok("projections", "rebuild", "tools", "--json").json()
    assert (doc["name"], doc["lag"], doc["current"]) == ("tools", 0, True)
    places = _places(work)
    assert places["tools"][3] and not any(places[v][3] for v in VIEWS if v != "tools")


def test_an_unknown_view_is_one_clear_line(tmp_path: Path) -> None:
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.ok("run", "agents:hello")
    r = work.cli("projections", "rebuild", "nope")
    one_line_error(r, "no view named 'nope'", "runs, tools, recovery, timeline")
    assert _places(work)["runs"][3] is False  # nothing rebuilt


def test_status_of_a_missing_store_is_one_clear_line(tmp_path: Path) -> None:
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "missing.db"))
    one_line_error(work.cli("projections", "status"), "no store at")
    assert not (tmp_path / "missing.db").exists()


def test_rebuild_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """With stderr a terminal, rebuild draws one bar a view there (stdout unchanged)."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.ok("run", "agents:hello")
    main, other = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", "projections", "rebuild", "--url", work.url],
        cwd=tmp_path,
        env=clean_env({"COLUMNS": "100", "TERM": "xterm"}),
        stderr=other,
        stdout=subprocess.PIPE,
    )
    os.close(other)
    err = b""
    while chunk := _read(main):  # read while it writes: a full terminal would block it
        err += chunk
    os.close(main)
    out = proc.stdout.read() if proc.stdout else b""
    proc.wait()
    assert proc.returncode == 0, err
    for view in VIEWS:
        assert f"rebuild {view}".encode() in err
    assert b"rebuild" not in out and b"timeline" in out


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the other end closed
        return b""


def test_follow_keeps_every_view_current_until_interrupted(work: Workdir) -> None:
    """``projections follow`` in its own process brings every view to the head of the log
    and keeps it there as other processes run agents; Ctrl-C (SIGINT) stops it, exit 130."""
    import signal

    work.ok("run", "agents:hello")
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", "projections", "follow", "--url", work.url],
        cwd=work.path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def settled() -> bool:
            places = _places(work)
            return all(lag == 0 and current for _, _, lag, current in places.values())

        for runs in (1, 3):  # after the first run, then after two more
            while runs > 1:
                work.ok("run", "agents:hello")
                runs -= 1
            # A condition, not a clock: at most 2 minutes.
            poll_until(lambda: settled() or proc.poll() is not None, 120, most=0.1)
            assert proc.poll() is None, proc.communicate()
            assert settled(), _places(work)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err, err
