"""Bad input of every kind CONTRACT.md lists exits 2 with one clear line on stderr (three
at most), never a traceback, and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_kit import (
    AGENTS,
    Result,
    Workdir,
    agentlog,
    make_workdir,
    one_line_error,
    sqlite_url,
)

from engine.store import open_store
from replay.cli.entry import run_cli


@pytest.fixture
def work(tmp_path: Path) -> Workdir:
    return make_workdir(tmp_path, sqlite_url(tmp_path))


RUN_COMMANDS = [
    ["show"],
    ["timeline"],
    ["checkpoints"],
    ["state"],
    ["resume"],
    ["answer", "@", "yes"],
    ["abandon"],
    ["rewind", "@", "--to", "1"],
    ["context"],
    ["export"],
    ["verify"],
    ["diff", "@", "@"],
]


def _in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """The same entry point without a process boundary, for the wide matrices."""
    code = run_cli(argv)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def test_unknown_run_exits_2(work: Workdir, capsys: pytest.CaptureFixture[str]) -> None:
    """Every command that takes RUN refuses an id that matches no run (two of them through
    a subprocess, all of them through the same entry point in-process)."""
    open_store(work.url).close()  # an existing store without that run
    for command in RUN_COMMANDS:
        args = [a.replace("@", "feedface") for a in command]
        if "feedface" not in args:
            args.append("feedface")
        one_line_error(_in_process([*args, "--url", work.url], capsys), "feedface")
    one_line_error(work.cli("show", "feedface"), "feedface")
    one_line_error(work.cli("rewind", "feedface", "--to", "1"), "feedface")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("foo", "not a store URL"),
        ("mysql://db/x", "unknown store scheme"),
        ("sqlite://relative.db", "sqlite:///"),
        ("sqlite:///no/such/dir/x.db", "does not exist"),
        ("postgresql://u@127.0.0.1:notaport/db", "postgresql://"),
        ("postgresql://127.0.0.1", "expected postgresql://"),
    ],
)
def test_malformed_url_exits_2(
    tmp_path: Path, url: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    one_line_error(_in_process(["runs", "--url", url], capsys), needle)


def test_malformed_url_through_a_subprocess(tmp_path: Path) -> None:
    one_line_error(agentlog("--url", "sqlite:/x.db", "runs", cwd=tmp_path), "sqlite:/x.db")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://agent:s3cr3t-pw@127.0.0.1:1/agentlog",  # nothing listens: unreachable
        "postgresql://postgres:s3cr3t-pw@127.0.0.1:5432/no_such_database_here",  # refusing
    ],
)
def test_unreachable_or_refusing_store_masks_the_password(tmp_path: Path, url: str) -> None:
    r = agentlog("runs", "--url", url, cwd=tmp_path)
    one_line_error(r, "***")
    assert "s3cr3t-pw" not in r.err + r.out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "agents:hello", "--input", "{not json"], "--input is not valid JSON"),
        (["run", "agents:hello", "--input", "[1, 2]"], "JSON object"),
        (["run", "agents"], "MODULE:AGENT"),
        (["run", "no_such_module:agent"], "no_such_module"),
        (["run", "agents:no_such_agent"], "no_such_agent"),
        (["run", "broken_module:agent"], "RuntimeError"),
        (["runs", "--status", "sleeping"], "--status"),
        (["no-such-command"], "No such command"),
        (["runs", "--no-such-option"], "No such option"),
        (["show"], "Missing argument"),
        (["rewind", "x"], "--to"),
        (["import", "missing.jsonl"], "missing.jsonl"),
    ],
)
def test_bad_usage_and_bad_input_exit_2(work: Workdir, args: list[str], needle: str) -> None:
    (work.path / "broken_module.py").write_text("raise RuntimeError('cannot start')\n")
    one_line_error(work.cli(*args), needle)


def test_input_that_does_not_fit_the_agent_exits_2_and_writes_nothing(work: Workdir) -> None:
    """A missing or unknown keyword in --input is bad input (exit 2, naming the agent),
    caught before the run is written; it was a failed run (exit 4)."""
    one_line_error(work.cli("run", "agents:asker", "--input", '{"nope": 1}'), "does not fit")
    extra = '{"name": "x", "n": 2}'
    one_line_error(work.cli("run", "agents:hello", "--input", extra), "does not fit")
    assert not list(work.path.glob("agentlog.db*"))  # not even the store was created


def test_bad_positions_values_and_states_exit_2(work: Workdir) -> None:
    """Out-of-range positions, unknown checkpoints and bad answers change nothing."""
    rid = work.run_id("agents:asker", code=3)
    one_line_error(work.cli("state", rid, "--at", "99"), "outside the run")
    one_line_error(work.cli("state", rid, "--at", "nowhere"), "nowhere")
    one_line_error(work.cli("rewind", rid, "--to", "nowhere"), "nowhere")
    one_line_error(work.cli("answer", rid, "{oops", "--json-value"), "not valid JSON")
    assert [r["run_id"] for r in work.ok("runs", "--json").json()] == [rid]
    assert work.ok("state", rid, "--json").json()["status"] == "paused"


def test_changed_agent_code_is_refused_by_resume_and_verify(work: Workdir) -> None:
    """Code that no longer matches the log: resume and verify exit 2 naming the call, the
    log and status stay as they were, and restoring the code lets the run resume."""
    rid = work.run_id("agents:asker", code=3)
    before = work.ok("timeline", rid, "--json").json()
    agents = work.path / "agents.py"
    agents.write_text(AGENTS.replace('run.decide("plan"', 'run.decide("replan"'))
    for command in ("resume", "verify"):
        r = work.cli(command, rid)
        one_line_error(r, "call 1", "'plan'")
    assert work.ok("timeline", rid, "--json").json() == before
    assert work.ok("state", rid, "--json").json()["status"] == "paused"
    agents.write_text(AGENTS)
    work.ok("verify", rid)
    work.ok("resume", rid, code=3)


def test_unexpected_errors_exit_1_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anything unexpected exits 1 with one line and a hint, no traceback."""
    from engine.runtime.run.catalog import Catalog

    def explode(self: Catalog, status: str | None = None) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Catalog, "runs", explode)
    open_store(sqlite_url(tmp_path)).close()
    assert run_cli(["runs", "--url", sqlite_url(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "disk on fire" in err and "AGENTLOG_DEBUG" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 3


def test_no_arguments_shows_help(tmp_path: Path) -> None:
    r = agentlog(cwd=tmp_path)
    assert r.code in (0, 2) and "Usage" in r.out + r.err and "error" not in r.err
