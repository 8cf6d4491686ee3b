"""Readers of a store damaged behind its back with the database's own client (SQLite and
PostgreSQL): a refusal prints only its error, names the run and the position, and
``timeline`` refuses whatever ``show`` refuses, even when its view holds the run whole;
a snapshot never stands in for an event deleted from the middle of its run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import backends
from test_cli_kit import make_workdir, one_line_error

from engine import CorruptData, Engine
from engine.log.history import run_stream
from engine.log.snapshots import snapshot_at_or_before
from projections.views import timeline as tv
from tests.log.test_log_checks import _delete_row, _flow
from tests.views.test_projection_damage import _sql

MALFORMED = b"\xc1\xc1\xc1"  # not MessagePack at all


def _id(store_url: str, run_id: str) -> Any:
    stream = run_stream(run_id)
    return stream.hex if store_url.startswith("sqlite") else stream


def _overwrite(store_url: str, run_id: str, position: int) -> None:
    sql = (
        "UPDATE {s}agentlog_events SET state = ? WHERE originator_id = ? AND originator_version = ?"
    )
    _sql(store_url, sql, (MALFORMED, _id(store_url, run_id), position))


@backends("sqlite", "postgres")
def test_a_refused_timeline_prints_only_the_error(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """A snapshot at every position lets the state be read past a damaged middle event;
    the timeline, read from the log, meets it and prints nothing but the error (no ``[``)."""
    rid = eng.run(_flow(eng, snapshot_every=1), x="a").run_id
    _overwrite(store_url, rid, 3)
    w = make_workdir(tmp_path, store_url)
    argvs = [["timeline", rid, "--json"], ["timeline", rid]]
    for args, got in zip(argvs, w.many(argvs), strict=True):  # one process for both
        one_line_error(got, f"run {rid}", "position 3")
        assert got.out == "", args


@backends("sqlite", "postgres")
def test_an_event_that_does_not_decode_is_named_by_run_and_position(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """``show`` (and ``engine.state``) name the run and the position of the damaged event."""
    rid = eng.run(_flow(eng, snapshot_every=100), x="a").run_id
    _overwrite(store_url, rid, 2)
    damaged = f"run {rid}: its log is damaged at position 2: cannot decode"
    with pytest.raises(CorruptData, match=damaged):
        eng.state(rid)
    one_line_error(make_workdir(tmp_path, store_url).cli("show", rid), f"run {rid}", "position 2")


@backends("sqlite", "postgres")
def test_timeline_refuses_as_show_does_when_its_view_holds_the_run(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """An event's payload overwritten after the timeline view took the run in: ``timeline``
    (text and JSON) refuses with ``show``'s own error, not an answer from the view."""
    rid = eng.run(_flow(eng, snapshot_every=100), x="a").run_id
    other = eng.run(_flow(eng, snapshot_every=100), x="b").run_id
    eng.stats()  # every view current, the timeline's too
    _overwrite(store_url, rid, 3)
    assert tv.read(eng.store, rid) is not None  # the view would answer
    w = make_workdir(tmp_path, store_url)
    argvs = [["timeline", rid, "--json"], ["timeline", rid]]
    # One process for all four commands.
    shown, *timelines, fine = w.many([["show", rid], *argvs, ["timeline", other, "--json"]])
    one_line_error(shown, f"run {rid}", "position 3")
    for args, got in zip(argvs, timelines, strict=True):
        one_line_error(got, f"run {rid}", "position 3")
        assert (got.err, got.out) == (shown.err, ""), args
    assert fine.code == 0, fine


@backends("sqlite", "postgres")
def test_a_snapshot_does_not_stand_in_for_a_deleted_middle_event(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    """Positions of a run are contiguous: a middle event deleted under a snapshot makes
    ``engine.state`` and ``agentlog tree`` refuse, naming the run and the missing position."""
    rid = eng.run(_flow(eng, snapshot_every=1), x="a").run_id
    assert snapshot_at_or_before(eng.store, run_stream(rid), None) is not None
    _delete_row(store_url, rid, 2)
    for read in (lambda: eng.state(rid), lambda: eng.state(rid, at=4)):
        with pytest.raises(CorruptData, match=f"run {rid}: .*position 2: it is missing"):
            read()
    w = make_workdir(tmp_path, store_url)
    for got in w.many([["tree", rid], ["show", rid], ["state", rid]]):  # one process
        one_line_error(got, f"run {rid}", "position 2")
