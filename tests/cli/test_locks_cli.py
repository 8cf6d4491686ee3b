"""``agentlog locks [--json]``: the locks held now (holder run, fence, expiry, name), by
name, on SQLite and PostgreSQL, in a real subprocess; expired and released holds are not
listed; a stored name or holder with control characters is shown escaped, never obeyed."""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from conftest import backends, schema_of
from test_cli_kit import make_workdir

from engine.store import open_store


def _plant(url: str, name: str, holder: str, fence: int, expires: float) -> None:
    """A lock row written behind the store's back (what a damaged or hostile row holds)."""
    sql = "INSERT INTO {t} VALUES ({p},{p},{p},{p},{p})"
    params = (name, holder, fence, expires, time.time())
    if url.startswith("sqlite"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            conn.execute(sql.format(t="agentlog_locks", p="?"), params)
    else:
        table = f'"{schema_of(url)}".agentlog_locks'
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(sql.format(t=table, p="%s"), params)  # type: ignore[arg-type]


@backends("sqlite", "postgres")
def test_locks_lists_the_held_locks_in_text_and_json(store_url: str, tmp_path: Path) -> None:
    work = make_workdir(tmp_path, store_url)
    store = open_store(store_url)
    try:
        assert store.locks.acquire("customer:42", "r" * 32, 60) == 1
        assert store.locks.acquire("account:7", "s" * 32, 60) == 1
        assert store.locks.acquire("gone", "t" * 32, 60) == 1
        store.locks.release("gone", "t" * 32, 1)
        _plant(store_url, "expired", "u" * 32, 3, time.time() - 5)
        _plant(store_url, "evil\x1b[2J\rname", "run\x07x", 9, time.time() + 60)
    finally:
        store.close()

    doc = work.ok("locks", "--json").json()
    assert [(d["name"], d["holder"], d["fence"]) for d in doc] == [
        ("account:7", "s" * 32, 1),
        ("customer:42", "r" * 32, 1),
        ("evil\x1b[2J\rname", "run\x07x", 9),
    ]
    for d in doc:
        expires = datetime.fromisoformat(d["expires"].replace("Z", "+00:00"))
        assert 0 < expires.timestamp() - time.time() <= 61

    text = work.ok("locks").out
    lines = text.splitlines()
    assert lines[0].split() == ["HOLDER", "RUN", "FENCE", "EXPIRES", "(UTC)", "NAME"]
    assert len(lines) == 4
    assert lines[1].split()[0] == "s" * 32 and lines[1].endswith("account:7")
    assert lines[2].split()[1] == "1" and lines[2].endswith("customer:42")
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert lines[3].endswith("evil\\x1b[2J\\rname") and lines[3].startswith("run\\x07x")
    assert "expired" not in text and "gone" not in text


@pytest.mark.parametrize("as_json", [False, True])
def test_locks_on_a_store_with_none_held(tmp_path: Path, as_json: bool) -> None:
    work = make_workdir(tmp_path, f"sqlite:///{tmp_path}/agentlog.db")
    open_store(work.url).close()
    if as_json:
        assert work.ok("locks", "--json").json() == []
    else:
        assert work.ok("locks").out.startswith("no locks held in ")


def test_locks_shows_the_lock_a_paused_run_holds(tmp_path: Path) -> None:
    """A run paused inside its lock block keeps the hold: ``locks`` names it."""
    work = make_workdir(tmp_path, f"sqlite:///{tmp_path}/agentlog.db")
    (tmp_path / "lockers.py").write_text(
        "from engine import Engine\n"
        "engine = Engine.open()\n"
        "@engine.agent\n"
        "def holder(run):\n"
        "    with run.lock('printer', ttl=600) as fence:\n"
        "        return run.ask(f'fence {fence}: go?')\n"
    )
    rid = work.run_id("lockers:holder", code=3)
    assert [(d["name"], d["holder"], d["fence"]) for d in work.ok("locks", "--json").json()] == [
        ("printer", rid, 1)
    ]
    assert work.ok("abandon", rid, code=4)
    assert work.ok("locks", "--json").json() == []


def test_a_damaged_lock_row_is_shown_not_a_crash(tmp_path: Path) -> None:
    """SQLite keeps any type in any column: a row whose name is NULL, fence text and
    expiry a word is listed as it reads (expiry unknown), and the command exits 0."""
    work = make_workdir(tmp_path, f"sqlite:///{tmp_path}/agentlog.db")
    open_store(work.url).close()
    with sqlite3.connect(tmp_path / "agentlog.db") as conn:
        conn.execute("INSERT INTO agentlog_locks VALUES (NULL, 'h', 'x', 'soon', 0)")
    assert work.ok("locks", "--json").json() == [
        {"name": None, "holder": "h", "fence": "x", "expires": None}
    ]
    line = work.ok("locks").out.splitlines()[1]
    assert line.split() == ["h", "x", "?", "None"]
