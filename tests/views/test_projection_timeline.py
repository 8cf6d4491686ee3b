"""The timeline view: ``agentlog timeline`` reads it when it holds the whole run and the
log otherwise, and both give byte-identical text and JSON for every shape of run
(completed, failed after retries, paused, answered, abandoned with compensations, a
rewound fork, resumed after a crash, secrets in arguments and in an encrypted store's
input) on memory, SQLite and PostgreSQL. A view that is missing, built by other code,
behind the run, damaged or gapped is not read; the per-run tally matches a hand count."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from typing import Any

import msgspec
import pytest
from agents.kit import ROOT, Crash
from conftest import all_backends, backends
from eventsourcing.cipher import AESCipher

from engine import Engine
from engine import events as ev
from engine.errors import CorruptData, Transient
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState
from engine.policy.failure import RetryPolicy
from engine.store.cipher import CIPHER_ENV
from engine.store.ports import ViewQuery, ViewRow
from projections.runner import Runner
from projections.views import timeline as tv
from replay.cli.app import Session
from replay.cli.entry import run_cli
from replay.cli.reading import render_timeline, write_timeline
from replay.output import Out
from replay.timeline import views

NOW = time.time()
SECRET = "hunter2-very-secret"


def _shapes(eng: Engine) -> dict[str, str]:
    """One run of each shape, recorded by the real engine; their ids by shape."""
    calls = {"lookup": 0, "login": 0}
    crash = {"on": True}
    books: list[str] = []
    fast = RetryPolicy(max_attempts=3, initial=0.0, jitter=False)

    @eng.tool(retry=fast)
    def lookup(order: str) -> dict[str, Any]:
        calls["lookup"] += 1
        if calls["lookup"] % 3 != 0:
            raise Transient("upstream 504")
        return {"order": order, "cents": 500}

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0.0, jitter=False))
    def broken(order: str) -> str:
        raise Transient(f"{order} is down")

    @eng.tool(side_effect=True, compensate=lambda result: books.append(f"void {result}"))
    def charge(order: str, *, idempotency_key: str) -> str:
        books.append(order)
        return f"R-{order}"

    @eng.tool
    def crashy(i: int) -> int:
        if crash["on"]:
            raise Crash
        return i

    @eng.tool(retry=fast)
    def login(user: str, password: str) -> dict[str, str]:
        calls["login"] += 1
        if calls["login"] == 1:
            raise Transient(f"rejected {password}")  # the engine masks it in the message
        return {"user": user}

    @eng.agent
    def flow(run: Any, order: str, mode: str = "done") -> Any:
        run.plan(["look", "pay"])
        with run.step("look"):
            quote = lookup(order)
        run.checkpoint("looked")
        with run.step("pay"):
            receipt = charge(order)
        if mode == "fail":
            broken(order)
        if mode == "crash":
            crashy(1)
        if mode == "secret":
            login("ann", SECRET)
        if mode.startswith("ask"):
            answer = run.ask(f"ship {order}?")
            if mode == "ask-then-crash":
                crashy(2)
            return answer
        return {"quote": quote, "receipt": receipt}

    ids = {
        "completed": eng.run(flow, order="o1").run_id,
        "failed": eng.run(flow, order="o2", mode="fail").run_id,
        "paused": eng.run(flow, order="o3", mode="ask").run_id,
        "answered": eng.run(flow, order="o4", mode="ask").run_id,
        "abandoned": eng.run(flow, order="o5", mode="ask").run_id,
        "secret": eng.run(flow, order="o6", mode="secret").run_id,
    }
    eng.answer(ids["answered"], {"ok": True})
    eng.abandon(ids["abandoned"])
    ids["fork"] = eng.rewind(ids["completed"], to="looked").run_id
    ids["answered_crashed"] = eng.run(flow, order="o8", mode="ask-then-crash").run_id
    with pytest.raises(Crash):
        eng.answer(ids["answered_crashed"], "go")  # the process "dies" after the answer
    with pytest.raises(Crash):
        eng.run(flow, run_id="crashed-run", order="o7", mode="crash")
    crash["on"] = False
    eng.resume("crashed-run")
    ids["crashed"] = "crashed-run"
    return ids


def _record(eng: Engine, count: int) -> str:
    """A long run written directly: ``count`` calls, each invoked, failed, retried and
    succeeded, a checkpoint every tenth (many chunks of the view)."""
    rid = uuid.uuid4().hex
    events: list[ev.Event] = [ev.AgentStarted(at=NOW, agent="m:long", import_path="m")]
    for n in range(1, count + 1):
        t = NOW + n
        events += [
            ev.ToolInvoked(at=t, call=n, tool="fetch", args={"page": n}),
            ev.ToolFailed(at=t, call=n, tool="fetch", kind="transient", message="504", final=False),
            ev.RetryScheduled(at=t, call=n, tool="fetch", attempt=2, delay=0.1),
            ev.ToolSucceeded(at=t + 0.5, call=n, tool="fetch", result={"n": n}, attempt=2),
        ]
        if n % 10 == 0:
            events.append(ev.Checkpoint(at=t + 0.5, call=n, name=f"c{n}"))
    RunWriter(eng.store, RunState(run_id=rid)).append(*events)
    return rid


def _printed(eng: Engine, rid: str, found: Any = None) -> tuple[str, str]:
    """The timeline's text (styled, as on a terminal) and JSON: as the command writes it
    (``found`` None), or rendered from the given events."""
    out = []
    for as_json in (False, True):
        buf = io.StringIO()
        s = Session(as_json=as_json, out=Out(buf, color=True), _catalog=eng)
        if found is None:
            write_timeline(s, rid)
        else:
            render_timeline(s, rid, found() if callable(found) else found)
        out.append(buf.getvalue())
    return out[0], out[1]


def _from_view(eng: Engine, rid: str) -> tuple[str, str]:
    read = tv.read(eng.store, rid)
    assert read is not None, f"the view does not vouch for {rid}"
    return _printed(eng, rid, read.entries)


def _from_log(eng: Engine, rid: str) -> tuple[str, str]:
    return _printed(eng, rid, lambda: views(eng, rid))


def _catch_up(eng: Engine, batch: int = 1000) -> None:
    Runner(eng.store, [tv.View()], batch=batch).catch_up()


# --- the same output from both -----------------------------------------------------------


@all_backends
def test_view_and_log_print_the_same_timeline_for_every_shape_of_run(eng: Engine) -> None:
    """Before the view is built the command reads the log; built (in small batches, so
    rows cross batches), the view vouches for every run and the command's text and JSON
    are byte-identical to the log's."""
    ids = _shapes(eng)
    ids["long"] = _record(eng, 40)
    before = {rid: _printed(eng, rid) for rid in ids.values()}
    assert all(tv.read(eng.store, rid) is None for rid in ids.values())
    _catch_up(eng, batch=7)
    for shape, rid in ids.items():
        log = _from_log(eng, rid)
        assert log == before[rid], shape
        assert _from_view(eng, rid) == log, shape
        assert _printed(eng, rid) == log, shape
    text = {
        shape: re.sub(r"\x1b\[[0-9;]*m", "", _printed(eng, rid)[0]) for shape, rid in ids.items()
    }
    assert "inherited" in text["fork"] and "a fork of" in text["fork"]
    assert "+0.000s" in text["completed"] and "now running" in text["answered_crashed"]
    assert "⟳ resumed" in text["crashed"] and "completed" in text["crashed"]
    assert "↶ undone" in text["abandoned"] and "abandoned" in text["abandoned"]
    assert "✎ answered" in text["answered"] and "? asks" in text["paused"]
    assert "gave up" in text["failed"] and "↻ retry" in text["failed"]
    assert "rejected ***" in text["secret"] and "<redacted>" in text["secret"]
    assert all(SECRET not in t + j for t, j in map(lambda r: _printed(eng, r), ids.values()))


@all_backends
def test_an_encrypted_stores_secret_input_is_redacted_in_the_view_as_on_screen(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encrypted store keeps a secret-named input field (sealed) in the log; the view
    keeps it redacted, as the timeline shows it, and both print the same."""
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    eng = Engine.open(store_url)
    try:

        @eng.agent
        def greet(run: Any, name: str, api_token: str) -> str:
            return f"hello {name}"

        rid = eng.run(greet, name="ann", api_token=SECRET).run_id
        _catch_up(eng)
        first = eng.store.read(eng.store.read_all(limit=1)[0].stream, upto=1)[0].event
        assert isinstance(first, ev.AgentStarted) and first.input["api_token"] == SECRET
        read = tv.read(eng.store, rid)
        assert read is not None
        started = read.entries[0].event
        assert isinstance(started, ev.AgentStarted)
        assert started.input == {"name": "ann", "api_token": "<redacted>"}
        assert _from_view(eng, rid) == _from_log(eng, rid) == _printed(eng, rid)
    finally:
        eng.close()


@all_backends
def test_a_large_event_has_a_row_of_its_own_and_prints_the_same(eng: Engine) -> None:
    """A 40 KB result mid-run: its event has a row of its own (its chunk stays small,
    however often it is rewritten), and the timeline reads the same from the view."""
    rid = uuid.uuid4().hex
    big = {"blob": "x" * 40_000}
    events: list[ev.Event] = [ev.AgentStarted(at=NOW, agent="m:big", import_path="m")]
    for n in range(1, 6):
        events.append(ev.ToolInvoked(at=NOW + n, call=n, tool="fetch", args={"page": n}))
        events.append(
            ev.ToolSucceeded(at=NOW + n, call=n, tool="fetch", result=big if n == 3 else n)
        )
    RunWriter(eng.store, RunState(run_id=rid)).append(*events)
    _catch_up(eng, batch=2)
    assert _from_view(eng, rid) == _from_log(eng, rid)
    table = tv.View.table()
    found = eng.store.views.rows(table, [tv.key(rid, 1), tv.key(rid, 7, alone=True)])
    assert len(found[tv.key(rid, 7, alone=True)]) > 40_000 > tv.LARGE > len(found[tv.key(rid, 1)])


@backends("sqlite", "postgres")
def test_the_cli_prints_the_same_from_the_view_and_from_the_log(store_url: str) -> None:
    """``agentlog timeline`` in-process on a store URL: the same stdout with the view
    built and with it outdated (built by other code: the log is read)."""
    eng = Engine.open(store_url)
    try:
        ids = _shapes(eng)
        _catch_up(eng)
        assert all(tv.read(eng.store, rid) is not None for rid in ids.values())
    finally:
        eng.close()

    def cli(*args: str) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert run_cli([*args, "--url", store_url]) == 0
        return buf.getvalue()

    shown = {rid: (cli("timeline", rid), cli("timeline", rid, "--json")) for rid in ids.values()}
    eng = Engine.open(store_url)
    try:
        Runner(eng.store, [_Older()]).catch_up()  # the table rebuilt by older code
        assert all(tv.read(eng.store, rid) is None for rid in ids.values())
    finally:
        eng.close()
    for rid in ids.values():
        assert (cli("timeline", rid), cli("timeline", rid, "--json")) == shown[rid]


class _Older(tv.View):
    version = "0"


@backends("memory", "sqlite")
def test_the_command_reads_the_view_when_it_vouches_for_the_run(eng: Engine) -> None:
    """A row rewritten in the view (a tool renamed in the stored events) shows in the
    command's text and JSON: it reads the view, not the log, when the view is current."""
    rid = _record(eng, 3)
    _catch_up(eng)
    table, at = tv.View.table(), eng.store.max_global_position()
    [chunk] = eng.store.views.rows(table, [tv.key(rid, 1)]).values()
    row = msgspec.msgpack.decode(chunk, type=tv.Row)
    renamed = [
        tv.Entry(e.position, msgspec.structs.replace(e.event, tool="planted"))
        if isinstance(e.event, ev.ToolInvoked)
        else e
        for e in row.entries
    ]
    body = msgspec.msgpack.encode(msgspec.structs.replace(row, entries=tuple(renamed)))
    assert eng.store.views.commit(table, at, at, [ViewRow(tv.key(rid, 1), (rid, 1), body)])
    text, doc = _printed(eng, rid)
    assert "planted\x1b[0m(page=1)" in text and '"tool":"planted"' in doc.replace(" ", "")
    assert "planted" not in "".join(_from_log(eng, rid))


@backends("sqlite", "postgres")
def test_a_rebuilt_view_equals_the_one_built_as_the_log_grew(eng: Engine) -> None:
    """Built in small batches while runs were written (chunks completed across batches
    and commits), then rebuilt from scratch in one pass: the same rows, byte for byte."""
    _record(eng, 40)
    _catch_up(eng, batch=3)
    _shapes(eng)
    _catch_up(eng, batch=11)
    _record(eng, 20)
    _catch_up(eng)
    table, everything = tv.View.table(), ViewQuery(order_by=None, descending=False)
    grown = eng.store.views.query(table, everything)
    runner = Runner(eng.store, [tv.View()])
    runner.rebuild(tv.View.name)
    assert runner.position(tv.View.name) == eng.store.max_global_position()
    assert eng.store.views.query(table, everything) == grown and len(grown) > 20


# --- when the view is not read -----------------------------------------------------------


@all_backends
def test_a_view_behind_the_run_is_not_read(eng: Engine) -> None:
    """Built while the run waited, the view is behind once the run is answered: the
    command reads the log (the answer and the end are there), never the stale view;
    caught up, the view vouches again and prints the same."""
    ids = _shapes(eng)
    rid = ids["paused"]
    _catch_up(eng)
    stale = _from_view(eng, rid)
    eng.answer(rid, "yes")
    assert tv.read(eng.store, rid) is None
    now = _printed(eng, rid)
    assert now == _from_log(eng, rid) != stale
    assert "✎ answered" in now[0] and "■ completed" in now[0]
    _catch_up(eng)
    assert _from_view(eng, rid) == now


@backends("memory", "sqlite")
def test_a_damaged_or_gapped_view_is_not_read(eng: Engine) -> None:
    """A row that does not decode, or a chunk of events missing, and the view cannot
    vouch for the run: the command reads the log and prints the same as before."""
    rid = _record(eng, 40)  # 161 events: three chunks
    _catch_up(eng)
    good = _from_view(eng, rid)
    table, at = tv.View.table(), eng.store.max_global_position()
    damaged = ViewRow(tv.key(rid, 65), (rid, 65), b"\xc1not msgpack")
    assert eng.store.views.commit(table, at, at, [damaged])
    assert tv.read(eng.store, rid) is None and _printed(eng, rid) == good
    assert eng.store.views.commit(table, at, at, [], [tv.key(rid, 65)])
    assert tv.read(eng.store, rid) is None and _printed(eng, rid) == good


@backends("sqlite")
@pytest.mark.parametrize("table", ["agentlog_view_timeline", "agentlog_tracking"])
def test_a_view_whose_tables_are_gone_is_not_read(eng: Engine, store_url: str, table: str) -> None:
    """The view's table, or the tracking table, dropped behind the store's back (a store
    of older code): the store's error is not the command's; it reads the log."""
    rid = _record(eng, 3)
    _catch_up(eng)
    good = _from_view(eng, rid)
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        db.execute(f"DROP TABLE {table}")
    assert tv.read(eng.store, rid) is None
    assert _printed(eng, rid) == good


@backends("sqlite")
def test_a_log_missing_its_end_is_refused_even_with_the_view_built(
    eng: Engine, store_url: str
) -> None:
    """The view holds the whole run, but the log lost its last event behind the store's
    back: the command reads the log and refuses it, as it would without the view."""
    rid = _record(eng, 3)
    _catch_up(eng)
    assert tv.read(eng.store, rid) is not None
    last = eng.store.indexed_position(rid)
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        sql = "DELETE FROM agentlog_events WHERE originator_id = ? AND originator_version = ?"
        db.execute(sql, (run_stream(rid).hex, last))
    assert tv.read(eng.store, rid) is None
    with pytest.raises(CorruptData, match=f"position {last}"):
        _printed(eng, rid)


@backends("memory")
def test_an_event_time_that_is_no_timestamp_neither_stops_the_view_nor_shows(
    eng: Engine,
) -> None:
    """An event whose time is not a timestamp (planted: NaN) folds without raising, so
    the view goes on past it; the view does not stand in for that run, and the command
    refuses it as the log reader does."""
    rid = uuid.uuid4().hex
    started = ev.AgentStarted(at=NOW, agent="m:a", import_path="m")
    RunWriter(eng.store, RunState(run_id=rid)).append(
        started, ev.Checkpoint(at=math.nan, call=1, name="x")
    )
    after = _record(eng, 2)
    _catch_up(eng)
    assert Runner(eng.store, [tv.View()]).position(tv.View.name) == eng.store.max_global_position()
    assert tv.read(eng.store, rid) is None and tv.read(eng.store, after) is not None
    with pytest.raises(ValueError):
        _printed(eng, rid)


def test_the_cli_falls_back_to_the_log_in_a_subprocess(tmp_path: Any) -> None:
    """Real processes: ``agentlog timeline`` before the view exists and with the view
    built print the same; after the run moves on, the behind view is not used (the new
    events are printed)."""
    url = f"sqlite:///{tmp_path}/t.db"
    eng = Engine.open(url)
    try:
        rid = _record(eng, 30)
    finally:
        eng.close()

    def cli(*args: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "replay", *args, "--url", url],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return done.stdout

    log_text, log_json = cli("timeline", rid), cli("timeline", rid, "--json")
    eng = Engine.open(url)
    try:
        _catch_up(eng)
        assert tv.read(eng.store, rid) is not None
    finally:
        eng.close()
    assert (cli("timeline", rid), cli("timeline", rid, "--json")) == (log_text, log_json)
    eng = Engine.open(url)
    try:
        state = eng.state(rid)
        RunWriter(eng.store, state).append(ev.AgentFinished(at=NOW + 99, output={"done": 1}))
        assert tv.read(eng.store, rid) is None
    finally:
        eng.close()
    rows = json.loads(cli("timeline", rid, "--json"))
    assert rows[-1]["type"] == "agent_finished" and len(rows) == len(json.loads(log_json)) + 1
    assert "■ completed" in cli("timeline", rid)


# --- the per-run tally -------------------------------------------------------------------


@backends("memory", "postgres")
def test_the_tally_matches_a_hand_count(eng: Engine) -> None:
    """Per run: events, last position, duration, calls, attempts, retries, failure kinds,
    resumes, status, checkpoints and fork lineage, as counted by hand."""
    ids = _shapes(eng)
    _catch_up(eng)

    def figures(shape: str) -> tv.Figures:
        read = tv.read(eng.store, ids[shape])
        assert read is not None
        return read.figures

    done, failed, fork = figures("completed"), figures("failed"), figures("fork")
    assert (done.status, done.calls, done.attempts, done.retries) == ("completed", 2, 4, 2)
    assert (done.failed_attempts, done.failures, done.resumes) == (2, {"transient": 2}, 0)
    assert [m.name for m in done.checkpoints] == ["looked"] and done.events == done.last
    assert (failed.status, failed.failure) == ("failed", "transient")
    assert failed.failures == {"transient": 4}  # two before lookup's success, two gave up
    assert (fork.parent_run_id, fork.inherited) == (ids["completed"], fork.fork_position - 1)
    assert fork.checkpoints == done.checkpoints  # inherited, at the same position
    assert figures("crashed").resumes == 1 and figures("crashed").status == "completed"
    assert figures("paused").status == "paused" and figures("answered").status == "completed"
    assert figures("abandoned").status == "abandoned"
    assert figures("answered_crashed").status == "running"  # answered, then died running
    assert figures("secret").failures == {"transient": 3}
    assert msgspec.json.decode(msgspec.json.encode(done), type=tv.Figures) == done
    assert done.duration >= 0 and done.started_at is not None
