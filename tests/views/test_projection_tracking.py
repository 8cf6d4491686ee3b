"""A view's tracking row keeps the identity of the last event it applied (stream and
position): a row moved back (or forward) by hand is refused with one error naming the
view and its rebuild, never a silent double count; an old row without the identity
keeps working and gains it at its next commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import all_backends, backends, raw_sql
from test_cli_kit import make_workdir, one_line_error

from engine import Engine
from engine.errors import CorruptData
from engine.store import open_store
from engine.store.ports import Tracking

_sql = raw_sql


def _work(eng: Engine, runs: int = 3) -> None:
    @eng.tool
    def fetch(n: int) -> int:
        return n

    @eng.agent(name="tracking:work")
    def work(run: Any, n: int) -> int:
        return fetch(n)

    for i in range(runs):
        eng.run(work, n=i)


def _move_back(eng: Engine, store_url: str, view: str, by: int) -> None:
    """Move the view's tracking position back by ``by``, the identity left as it was."""
    if store_url.startswith("memory"):
        port: Any = eng.store.views.port
        t: Tracking = port.tracked[view]
        port.tracked[view] = Tracking(view, t.position - by, t.version, t.last)
        return
    _sql(
        store_url,
        "UPDATE {s}agentlog_tracking SET position = position - ? WHERE name = ?",
        (by, view),
    )


def _calls(eng: Engine) -> int:
    return sum(t.calls for t in eng.stats().tools)


@all_backends
def test_a_tracking_row_moved_back_is_refused_naming_the_view_and_its_rebuild(
    eng: Engine, store_url: str
) -> None:
    """Moved back three events, the tools view would count them twice: the next read
    refuses it (CorruptData naming the view, what is wrong and the rebuild)."""
    _work(eng)
    before = _calls(eng)
    assert before == 3
    tracked = eng.store.views.tracking("tools")
    assert tracked is not None and tracked.last is not None
    _move_back(eng, store_url, "tools", 3)
    with pytest.raises(CorruptData) as raised:
        eng.stats()
    text = str(raised.value)
    assert "view tools is damaged" in text and "tracking row" in text
    assert "agentlog projections rebuild tools" in text
    from projections import Runner
    from projections.views import all_views

    Runner(eng.store, all_views()).rebuild("tools")
    assert _calls(eng) == before


@backends("sqlite", "postgres")
def test_the_cli_refuses_a_moved_tracking_row_in_one_line(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """``agentlog stats`` on such a view exits 2 with one line naming the rebuild, and
    the rebuild it names repairs it to the figures of before."""
    _work(eng)
    w = make_workdir(tmp_path, store_url)
    before = w.ok("stats", "--json").json()
    _move_back(eng, store_url, "tools", 2)
    one_line_error(w.cli("stats"), "view tools is damaged", "agentlog projections rebuild tools")
    w.ok("projections", "rebuild", "tools")
    assert w.ok("stats", "--json").json() == before


@backends("sqlite", "postgres")
def test_an_old_tracking_table_without_the_identity_keeps_working_and_gains_it(
    eng: Engine, store_url: str
) -> None:
    """A tracking table made before the identity was kept (no such columns): opening
    the store adds them, its rows read with no identity and are not refused, and the
    next commit fills it in."""
    _work(eng, runs=2)
    before = _calls(eng)
    eng.close()
    for column in ("last_stream", "last_position"):
        _sql(store_url, f"ALTER TABLE {{s}}agentlog_tracking DROP COLUMN {column}")
    store = open_store(store_url)
    try:
        old = store.views.tracking("tools")
        assert old is not None and old.last is None
    finally:
        store.close()
    again = Engine.open(store_url)
    try:
        assert _calls(again) == before
        _work(again, runs=1)
        assert _calls(again) == before + 1
        tracked = again.store.views.tracking("tools")
        assert tracked is not None and tracked.last is not None
    finally:
        again.close()


OPEN_WHEN_TOLD = """
import sys
import subprocess
import sys
from pathlib import Path
from engine.polling import poll_until
from engine.store import open_store
go = Path(sys.argv[2])
poll_until(go.exists, None, first=0.001, most=0.001)
open_store(sys.argv[1]).close()
"""


@backends("sqlite", "postgres")
def test_processes_opening_an_old_tracking_table_at_once_all_open_it(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """Several processes opening a store whose tracking table predates the identity, at
    the same moment: each opens it (the columns are added once, never twice)."""
    _work(eng, runs=1)
    eng.close()
    for column in ("last_stream", "last_position"):
        _sql(store_url, f"ALTER TABLE {{s}}agentlog_tracking DROP COLUMN {column}")
    go = tmp_path / "go"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_WHEN_TOLD, store_url, str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    go.touch()
    for p in openers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    again = Engine.open(store_url)
    try:
        assert _calls(again) > 0  # the views build over it, the identity kept
        tracked = again.store.views.tracking("tools")
        assert tracked is not None and tracked.last is not None
    finally:
        again.close()
