"""Views damaged behind the store's back, on real SQLite files and PostgreSQL, planted with
sqlite3 / psycopg: a row body that does not decode, or a tracking position that is not
an integer, is one clear error naming the view and the rebuild that repairs it (exit 2
from the CLI, ``CorruptData`` from ``engine.stats()``); a tracking position no runner
could have written (negative, beyond the log's head) rebuilds the view, with a warning,
and ``projections status`` shows it as not current; a log that lost an event in the
middle of a run is not answered from the timeline view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog
from conftest import all_backends, backends, raw_sql
from test_cli_kit import Workdir, make_workdir, one_line_error

from engine import Engine
from engine.errors import CorruptData, Transient
from engine.log.history import run_stream
from engine.policy.failure import RetryPolicy
from engine.stats import Stats
from projections import Runner
from projections.views import all_views
from projections.views import timeline as tv

MALFORMED = b"\xc1\xc1\xc1"  # not MessagePack at all
WRONG_SHAPE = b"\x80"  # MessagePack, an empty map: no row of any view


_sql = raw_sql


def _work(eng: Engine, runs: int = 3) -> str:
    """``runs`` runs of an agent whose tool is retried once per run; the agent's name."""
    seen: set[int] = set()

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=0.0, jitter=False))
    def fetch(n: int) -> int:
        if n not in seen:
            seen.add(n)
            raise Transient("busy")
        return n

    @eng.agent
    def work(run: Any, n: int) -> int:
        return fetch(n)

    for i in range(runs):
        eng.run(work, n=i)
    return eng.runs()[0].agent


def _doc(s: Stats) -> dict[str, Any]:
    import msgspec

    return msgspec.to_builtins(s)  # type: ignore[no-any-return]


# --- a row body that does not decode ------------------------------------------------------


@backends("sqlite", "postgres")
@pytest.mark.parametrize("view", ["tools", "runs", "recovery"])
@pytest.mark.parametrize("body", [MALFORMED, WRONG_SHAPE], ids=["malformed", "wrong-shape"])
def test_a_row_that_does_not_decode_is_corrupt_data_naming_the_view(
    eng: Engine, store_url: str, view: str, body: bytes
) -> None:
    """``engine.stats()`` raises ``CorruptData`` naming the view and its rebuild, not a
    msgspec error; rebuilding the view gives back the figures it had."""
    agent = _work(eng)
    before = _doc(eng.stats())
    _sql(store_url, f"UPDATE {{s}}agentlog_view_{view} SET body = ?", (body,))
    with pytest.raises(CorruptData) as caught:
        eng.stats()
    message = str(caught.value)
    assert f"view {view} is damaged" in message
    assert f"`agentlog projections rebuild {view}`" in message
    if view == "runs":
        with pytest.raises(CorruptData, match="view runs is damaged"):
            eng.stats(agent=agent)
    Runner(eng.store, all_views()).rebuild(view)
    assert _doc(eng.stats()) == before


@backends("sqlite", "postgres")
def test_the_cli_says_so_in_one_line_and_a_rebuild_repairs(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """``agentlog stats``, ``runs --agent`` and ``projections status`` on damaged views:
    exit 2, one line naming the view and ``agentlog projections rebuild NAME``; after
    that rebuild the commands answer again, with the figures of before."""
    agent = _work(eng)
    w: Workdir = make_workdir(tmp_path, store_url)
    before = w.ok("stats", "--json").json()
    _sql(store_url, "UPDATE {s}agentlog_view_tools SET body = ?", (MALFORMED,))
    one_line_error(w.cli("stats"), "view tools is damaged", "agentlog projections rebuild tools")
    w.ok("projections", "rebuild", "tools")
    assert w.ok("stats", "--json").json() == before
    _sql(store_url, "UPDATE {s}agentlog_view_runs SET body = ?", (WRONG_SHAPE,))
    for got in w.many([["runs", "--agent", agent], ["stats"]]):  # one process for both
        one_line_error(got, "view runs is damaged", "agentlog projections rebuild runs")
    w.ok("projections", "rebuild", "runs")
    assert len(w.ok("runs", "--agent", agent, "--json").json()) == 3


@backends("sqlite")
def test_a_tracking_position_that_is_no_integer_is_corrupt_data(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """SQLite keeps any value in an integer column: a text position is the view's damage,
    named with its rebuild (exit 2 from the CLI), until the rebuild."""
    _work(eng)
    before = _doc(eng.stats())
    _sql(store_url, "UPDATE agentlog_tracking SET position = 'abc' WHERE name = 'tools'")
    with pytest.raises(CorruptData, match="view tools is damaged: its tracking row"):
        eng.stats()
    w = make_workdir(tmp_path, store_url)
    for got in w.many([["stats"], ["projections", "status"]]):  # one process for both
        one_line_error(got, "view tools", "agentlog projections rebuild tools")
    w.ok("projections", "rebuild", "tools")
    assert _doc(eng.stats()) == before


# --- a tracking position no runner could have written ---------------------------------------


def _tools_calls(s: Stats) -> int:
    return sum(t.calls for t in s.tools)


@backends("sqlite", "postgres")
@pytest.mark.parametrize("planted", ["-5", "head+1", "9223372036854775807"])
def test_an_impossible_tracking_position_rebuilds_the_view(
    eng: Engine, store_url: str, planted: str
) -> None:
    """Before the log's start or beyond its head: the view is shown not current, then
    rebuilt at the next catch-up with a warning; its figures then follow the log (never
    frozen, never counted twice) and are those of a full rebuild."""
    _work(eng)
    eng.stats()
    head = eng.store.max_global_position()
    position = head + 1 if planted == "head+1" else int(planted)
    sql = "UPDATE {s}agentlog_tracking SET position = ? WHERE name = 'tools'"
    _sql(store_url, sql, (position,))
    runner = Runner(eng.store, all_views())
    status = {v.name: v for v in runner.status()}
    assert not status["tools"].current and status["tools"].position == position
    assert status["runs"].current
    with structlog.testing.capture_logs() as logs:
        assert _tools_calls(eng.stats()) == 3
    warned = [e for e in logs if e["event"] == "view_damaged_rebuilt"]
    assert [(e["view"], e["position"], e["log_level"]) for e in warned] == [
        ("tools", position, "warning")
    ]
    _work(eng, runs=1)  # the log moves on: the rebuilt view follows it
    got = eng.stats()
    assert _tools_calls(got) == 4 and got.tools[0].retries == 4
    assert all(v.current for v in runner.status())
    for name in runner.views:
        runner.rebuild(name)
    assert _doc(eng.stats()) == _doc(got)


@backends("sqlite")
def test_projections_status_shows_a_damaged_position_as_not_current(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """The CLI's status marks the view (text and JSON) instead of a lag of 0."""
    _work(eng)
    eng.stats()
    _sql(store_url, "UPDATE agentlog_tracking SET position = 9999999 WHERE name = 'recovery'")
    w = make_workdir(tmp_path, store_url)
    doc = {v["name"]: v for v in w.ok("projections", "status", "--json").json()}
    assert doc["recovery"]["current"] is False and doc["tools"]["current"] is True
    line = next(ln for ln in w.ok("projections", "status").out.splitlines() if "recovery" in ln)
    assert "rebuilt on next catch-up" in line


# --- the timeline of a log that lost an event in the middle ---------------------------------


@all_backends
def test_stream_length_counts_the_events_of_a_stream(eng: Engine) -> None:
    _work(eng, runs=2)
    for row in eng.runs():
        stream = run_stream(row.run_id)
        assert eng.store.stream_length(stream) == eng.store.last_position(stream) > 3
    assert eng.store.stream_length(run_stream("no-such-run")) == 0


@backends("sqlite", "postgres")
def test_a_log_missing_a_middle_event_is_not_read_from_the_view(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """The view holds the whole run, but the log lost an event in the middle behind the
    store's back: ``timeline`` refuses the run as ``show`` does (exit 2, the position),
    in text and JSON; its neighbour is still read from the view."""
    _work(eng, runs=2)
    damaged, other = (r.run_id for r in eng.runs())
    eng.stats()  # every view current, the timeline's too
    assert tv.read(eng.store, damaged) is not None
    sql = "DELETE FROM {s}agentlog_events WHERE originator_id = ? AND originator_version = 3"
    stream = run_stream(damaged)
    _sql(store_url, sql, (stream.hex if store_url.startswith("sqlite") else stream,))
    assert eng.store.last_position(stream) > eng.store.stream_length(stream)
    assert tv.read(eng.store, damaged) is None and tv.read(eng.store, other) is not None
    w = make_workdir(tmp_path, store_url)
    argvs = [["show", damaged], ["timeline", damaged], ["timeline", damaged, "--json"]]
    shown, *timelines, fine = w.many([*argvs, ["timeline", other]])  # one process for all
    one_line_error(shown, "position 3")
    for got in timelines:
        one_line_error(got, "position 3")
        assert got.err == shown.err
    assert fine.code == 0, fine
