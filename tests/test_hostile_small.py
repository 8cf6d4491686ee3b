"""Small hostile cases: an export file is its owner's only, and a store URL naming a
FIFO is refused rather than hanging the open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_cli_kit import make_workdir, sqlite_url

from engine.errors import StoreUnavailable
from engine.store import open_store
from replay.cli import run_cli


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
