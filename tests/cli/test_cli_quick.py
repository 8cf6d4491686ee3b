"""The quick path (``replay.cli.quick``): the reading commands it takes print the same
output and exit with the same status as the Typer app does for the same command line
(every case run both ways in one real process, on SQLite and PostgreSQL); what it does
not read exactly is left to the Typer app; and a reading command on a SQLite store loads
neither Typer, nor psycopg, nor the runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import backends
from test_cli_kit import MANY, Result, Workdir, agentlog_many, clean_env, make_workdir, sqlite_url

from replay.cli import quick
from replay.cli.entry import hoist

# Before MANY (test_cli_kit): the quick path declines everything, so run_cli hands each
# command line to the Typer app, as it does a line the quick path cannot read.
TYPER_ONLY = "import replay.cli.quick as q\nq.plan = lambda args: None\n"


def _typer_only(work: Workdir, argvs: list[list[str]]) -> list[Result]:
    proc = subprocess.run(
        [sys.executable, "-c", TYPER_ONLY + MANY],
        cwd=work.path,
        env=clean_env(),
        input=json.dumps(argvs).encode(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return [Result(code, out, err) for code, out, err in json.loads(proc.stdout)]


def _lines(ids: dict[str, str], url: str) -> list[list[str]]:
    a, fork = ids["hello"], ids["fork"]
    lines = [
        ["runs"],
        ["runs", "--json"],
        ["--json", "runs", "--status", "completed"],
        ["runs", "--status=paused"],
        ["runs", "--status", "bogus"],
        ["runs", "--limit", "2", "--offset", "1"],
        ["runs", "--parent", ids["booker"][:8]],
        ["runs", "--since", "1h", "--until", "never"],
        ["show", a],
        ["show", a[:6], "--json"],
        ["show", "nosuchrun"],
        ["show", "x" * 200],
        ["show", ""],
        ["timeline", a],
        ["timeline", fork, "--json"],
        ["checkpoints", a],
        ["state", a, "--at", "greeted"],
        ["state", "--at=2", a, "--json"],
        ["state", a, "--at", "99999999999999999999"],
        ["state", a, "--at", "no-such-checkpoint"],
        ["context", ids["asker"]],
        ["diff", a, f"{a}@greeted"],
        ["diff", ids["booker"], fork, "--json"],
        ["export", a],
        ["locks"],
        ["locks", "--json"],
        ["schedules"],
        ["--json", "schedules"],
    ]
    return [[*line, "--url", url] for line in lines]


@backends("sqlite", "postgres")
def test_the_quick_path_prints_what_the_typer_app_prints(store_url: str, tmp_path: Path) -> None:
    """Every reading command line, errors included: same exit status, stdout and stderr."""
    work = make_workdir(tmp_path, store_url)
    ids = {
        "hello": work.run_id("agents:hello", code=0),
        "asker": work.run_id("agents:asker", code=3),
        "booker": work.run_id("agents:booker", code=3),
    }
    ids["fork"] = work.ok("rewind", ids["booker"], "--to", "3", "--json", code=3).json()["run_id"]
    argvs = _lines(ids, work.url)
    for argv in argvs:
        assert quick.plan(hoist(argv)) is not None, argv
    quick_results = agentlog_many(argvs, cwd=work.path)
    for argv, fast, slow in zip(argvs, quick_results, _typer_only(work, argvs), strict=True):
        assert fast == slow, argv
    codes = {tuple(argv[:2]): r.code for argv, r in zip(argvs, quick_results, strict=True)}
    assert codes[("show", "nosuchrun")] == 2 and codes[("runs", "--json")] == 0


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["runs", "--help"],
        ["runs", "-h"],
        ["show"],
        ["show", "a", "b"],
        ["runs", "--status"],
        ["runs", "--status", "--json"],
        ["runs", "--status", "a", "--status", "b"],
        ["runs", "--bogus", "x"],
        ["runs", "extra"],
        ["export", "RUN", "-o", "file"],
        ["export", "RUN", "--sign"],
        ["--json", "--json", "runs"],
        ["--url", "a", "--url", "b", "runs"],
        ["runs", "--", "x"],
        ["run", "agents:hello"],
        ["verify", "RUN"],
        ["tree", "RUN"],
        ["show", "-RUN"],
    ],
)
def test_what_the_quick_path_does_not_read_exactly_goes_to_the_typer_app(
    argv: list[str],
) -> None:
    assert quick.plan(hoist(argv)) is None


def test_a_reading_command_on_sqlite_loads_neither_typer_nor_psycopg(tmp_path: Path) -> None:
    """``runs``, ``show``, ``timeline``, ``state`` and ``diff`` on a SQLite store, in one
    process: no Typer (or click), no psycopg, none of the runtime that executes runs."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    a = work.run_id("agents:hello", code=0)
    script = """
import json, sys
from replay.cli.entry import run_cli
a, url = sys.argv[1], sys.argv[2]
for argv in (["runs"], ["show", a], ["timeline", a], ["state", a], ["diff", a, a + "@1"]):
    assert run_cli([*argv, "--url", url]) == 0, argv
heavy = ("typer", "click", "psycopg", "engine.runtime.engine", "engine.runtime.call")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy[:3] or m in heavy)))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, a, work.url],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert json.loads(proc.stdout.decode().strip().splitlines()[-1]) == []
