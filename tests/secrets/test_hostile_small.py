"""Small hostile cases: an export file is its owner's only, and a store URL naming a
FIFO is refused rather than hanging the open."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import backends, schema_of
from test_cli_kit import make_workdir, sqlite_url

from engine.errors import StoreError, StoreUnavailable, UsageError
from engine.store import open_store
from replay.cli.entry import run_cli


def test_export_to_a_new_file_is_readable_by_its_owner_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export -o NEW`` under the usual umask 022 writes mode 0600: the file holds the
    run's inputs and results."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    run_id = work.run_id("agents:hello", code=0)
    target = tmp_path / "out.jsonl"
    old = os.umask(0o022)
    try:
        assert run_cli(["export", run_id, "-o", str(target), "--url", work.url]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_bytes().count(b"\n") > 1
    capsys.readouterr()


@pytest.mark.parametrize("create", [True, False])
def test_a_fifo_as_sqlite_store_is_refused_without_opening_it(tmp_path: Path, create: bool) -> None:
    """``sqlite:///a/fifo``: one StoreUnavailable naming a non-regular file (opening a
    FIFO would wait for a writer forever)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(StoreUnavailable, match="is not a regular file"):
        open_store(f"sqlite:///{fifo}", create=create)


def test_import_of_dev_zero_stops_at_one_overlong_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``import /dev/zero`` (an endless line) exits 2 naming a line longer than any event
    could be, after reading about twice the payload cap, never the file whole."""
    url = f"sqlite:///{tmp_path}/a.db?max_payload=65536&blob_threshold=1024"
    assert run_cli(["import", "/dev/zero", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero: a line longer than" in err and err.count("\n") == 1, err


def test_import_of_a_file_past_the_size_cap_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file of short lines larger than the cap: exit 2 naming the cap, nothing read on."""
    from replay import transfer

    monkeypatch.setattr(transfer, "MAX_FILE", 3 << 20)
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"{}\n" * (2 << 20))
    assert run_cli(["import", str(big), "--url", f"sqlite:///{tmp_path}/a.db"]) == 2
    assert f"larger than {3 << 20} bytes" in capsys.readouterr().err


@pytest.mark.postgres
def test_demo_passes_the_store_url_to_its_child_by_environment(
    tmp_path: Path,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``agentlog demo --url postgresql://user:PASSWORD@...``: the child process that is
    killed mid-payment gets the URL in its environment, never on its command line (which
    ``ps`` shows to every user)."""
    from replay.cli import tour

    url = pg_url.replace("postgres@", "postgres:s3cret-pw@", 1)
    seen: list[tuple[list[str], dict[str, str]]] = []
    real = subprocess.run

    def spy(args: list[str], **kw: Any) -> Any:
        seen.append((args, kw["env"]))
        return real(args, **kw)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tour.subprocess, "run", spy)
    assert run_cli(["demo", "--url", url]) == 0, capsys.readouterr()
    [(args, env)] = seen
    assert not any("s3cret-pw" in a for a in args) and env["AGENTLOG_URL"] == url
    # the tour names its payment file to the child only: nothing is left in this process
    # for a later run (another test's rewind) to charge into
    assert env[tour.demo.WORLD_ENV] == str(tmp_path / tour.demo.WORLD_FILE)
    assert tour.demo.WORLD_ENV not in os.environ


@backends("sqlite", "postgres")
def test_a_lock_past_its_last_fencing_token_is_one_clear_error(store_url: str) -> None:
    """A lock whose fence is at 2**63 - 1 (moved there by hand): the next acquire is a
    StoreError naming the lock and the exhausted tokens, and a token out of range passed
    to renew or release is a UsageError, never an OverflowError."""
    store = open_store(store_url)
    try:
        assert store.locks.acquire("edge", "a", 30) == 1
        assert store.locks.release("edge", "a", 1)
        _set_fence(store_url, 2**63 - 1)
        with pytest.raises(StoreError, match="'edge' has used every fencing token"):
            store.locks.acquire("edge", "b", 30)
        with pytest.raises(UsageError, match="is not a fencing token"):
            store.locks.renew("edge", "b", 2**63, 30)
        with pytest.raises(UsageError, match="is not a fencing token"):
            store.locks.release("edge", "b", 2**63)
    finally:
        store.close()


def _set_fence(url: str, fence: int) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("?")[0][len("sqlite:///") :]) as conn:
            conn.execute("UPDATE agentlog_locks SET fence = ?", (fence,))
        return
    with psycopg.connect(url.split("?")[0]) as conn:
        conn.execute(f'UPDATE "{schema_of(url)}".agentlog_locks SET fence = %s', (fence,))
