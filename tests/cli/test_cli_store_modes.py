"""Only ``run``, ``demo`` and ``import`` create a store: every other command refuses a
SQLite file that does not exist ("no store at ...", exit 2) and creates nothing; no command
converts a SQLite database of other tables; a database without agentlog's tables reads as
empty. Every command's ``--help`` lists ``--url`` and (where it means something) ``--json``."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import PG_URL, drop_schema
from test_cli_kit import Result, agentlog, make_workdir, one_line_error, sqlite_url

from replay.cli.app import CREATES_STORE
from replay.cli.entry import NO_JSON, _command, run_cli

GROUP: Any = _command()


def _dummy_args(command: Any) -> list[str]:
    """Values for a command's arguments (optional ones too: ``resume [RUN]`` takes --status
    instead) and required options (a run id no store holds); for a group of commands
    (``metrics``), its first command and that one's values."""
    subcommands = getattr(command, "commands", None)
    if subcommands:
        name, first = next(iter(subcommands.items()))
        return [name, *_dummy_args(first)]
    args: list[str] = []
    for p in command.params:
        if p.param_type_name == "argument":
            args.append("feedface")
        elif p.required:  # a value each option takes ("1" as a count, a span, a position)
            args += [p.opts[0], "1d" if p.opts[0] == "--older-than" else "1"]
    return args


# Every command the CLI has, with dummy values for what it requires.
COMMANDS = {name: _dummy_args(command) for name, command in GROUP.commands.items()}
COMMANDS["rewind"] += ["--to", "1"]  # optional to Typer (--answer may stand for it)
COMMANDS["blob"] = ["feedface.1"]  # a blob id as a context names one: HEX.SIZE
# drill runs in scratch stores of its own (--store names one), never in --url's
READING = sorted(set(COMMANDS) - CREATES_STORE - {"drill"})


def _in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    code = run_cli(argv)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))


def test_the_walk_covers_every_command_that_reads_or_moves_runs() -> None:
    assert {
        "runs", "show", "timeline", "checkpoints", "state", "context", "export", "diff",
        "verify", "resume", "answer", "abandon", "rewind", "recover",
    } <= set(READING)  # fmt: skip


def test_commands_other_than_run_demo_import_refuse_a_missing_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with one line naming the path, and no file (nor -wal/-shm) is created."""
    url = sqlite_url(tmp_path, "typo.db")
    for name in READING:
        r = _in_process([name, *COMMANDS[name], "--url", url], capsys)
        one_line_error(r, "no store at", "typo.db")
    one_line_error(agentlog("runs", "--url", "sqlite:///typo.db", cwd=tmp_path), "no store at")
    assert list(tmp_path.iterdir()) == []


def test_run_and_import_create_the_store(tmp_path: Path) -> None:
    """``run`` creates the store it names; ``import`` creates the store it imports into."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "new.db"))
    rid = work.run_id("agents:hello", code=0)
    assert (tmp_path / "new.db").exists()
    work.ok("export", rid, "--output", str(tmp_path / "run.jsonl"))
    target = make_workdir(tmp_path, sqlite_url(tmp_path, "imported.db"))
    target.ok("import", str(tmp_path / "run.jsonl"))
    assert [r["run_id"] for r in target.ok("runs", "--json").json()] == [rid]


def test_a_sqlite_database_of_other_tables_is_refused_by_every_command(tmp_path: Path) -> None:
    """No command (run, import and demo included) turns someone else's database into a
    store: exit 2 with one line naming the file, and its tables are left as they were."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "source.db"))
    rid = work.run_id("agents:hello", code=0)
    work.ok("export", rid, "--output", str(tmp_path / "run.jsonl"))
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    foreign = make_workdir(tmp_path, sqlite_url(tmp_path, "other.db"))
    argvs = [[name, *COMMANDS[name]] for name in READING]
    argvs += [["run", "agents:hello"], ["import", str(tmp_path / "run.jsonl")], ["demo"]]
    for r in foreign.many(argvs):  # one process for them all, each command in turn
        one_line_error(r, "other.db", "not an agentlog store", "users")
    assert _tables(other) == ["users"]


def test_an_existing_empty_sqlite_file_reads_as_an_empty_store(tmp_path: Path) -> None:
    """A database with no tables at all gives empty results and is not written to."""
    (tmp_path / "empty.db").touch()
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "empty.db"))
    assert work.ok("runs", "--json").json() == []
    assert work.ok("recover", "--json").json() == []
    one_line_error(work.cli("show", "feedface"), "feedface")
    assert (tmp_path / "empty.db").stat().st_size == 0


def _schema_exists(schema: str) -> bool:
    with psycopg.connect(PG_URL.split("?")[0]) as conn:
        sql = "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s"
        return conn.execute(sql, (schema,)).fetchone() is not None


@pytest.mark.postgres
def test_reading_a_postgres_schema_without_tables_creates_nothing(tmp_path: Path) -> None:
    """Reading commands on an existing database whose schema was never created read it as
    an empty store and create neither schema nor tables; ``run`` creates both."""
    schema = f"cli_{uuid.uuid4().hex[:10]}"
    url = f"{PG_URL.split('?')[0]}?schema={schema}"
    work = make_workdir(tmp_path, url)
    try:
        assert work.ok("runs", "--json").json() == []
        one_line_error(work.cli("show", "feedface"), "feedface")
        assert not _schema_exists(schema)
        rid = work.run_id("agents:hello", code=0)
        assert [r["run_id"] for r in work.ok("runs", "--json").json()] == [rid]
    finally:
        drop_schema(schema)


JSON_LINE = re.compile(r"^\s+--json\s{2,}Machine-readable output on stdout\.$", re.MULTILINE)
URL_LINE = re.compile(r"^\s+--url URL\s{2,}Store URL", re.MULTILINE)


def test_every_help_lists_url_and_json_correctly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentlog --help`` and each command's ``--help`` show ``--url URL`` and a bare
    ``--json`` flag (no ``<bool>``), ``--json`` only where it changes the output."""
    pages = {"": agentlog("--help", cwd=tmp_path)}
    for name in COMMANDS:
        pages[name] = _in_process([name, "--help"], capsys)
    for name, page in pages.items():
        assert page.code == 0 and page.err == "", (name, page)
        assert URL_LINE.search(page.out), (name, page.out)
        assert "<bool>" not in page.out and "BOOLEAN" not in page.out, (name, page.out)
        if name in NO_JSON:
            assert "--json" not in page.out, (name, page.out)
        else:
            assert JSON_LINE.search(page.out), (name, page.out)
    assert all(name in pages[""].out for name in COMMANDS)


def test_the_default_store_not_created_yet_reads_as_a_new_empty_store(tmp_path: Path) -> None:
    """With no --url and no $AGENTLOG_URL, a ./agentlog.db not created yet is a new store
    (CONTRACT: reading commands on a new store succeed with empty results): `runs` lists
    nothing (exit 0), a run id matches nothing (exit 2), and no file is created. A --url
    naming a missing file is still refused (a typo is not an empty store)."""
    listed = agentlog("runs", cwd=tmp_path)
    assert listed.code == 0 and "not created yet" in listed.out, listed
    assert agentlog("runs", "--json", cwd=tmp_path).out.strip() == "[]"
    one_line_error(agentlog("show", "abc", cwd=tmp_path), "no run matches")
    one_line_error(agentlog("runs", "--url", "sqlite:///typo.db", cwd=tmp_path), "no store at")
    assert list(tmp_path.iterdir()) == []
