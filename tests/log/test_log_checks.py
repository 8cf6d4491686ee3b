"""Every reader checks the run log it reads, on every store: a gap in positions, a log that
does not begin with ``agent_started`` (or has a second one), or an event after the run
ended raises ``CorruptData`` naming the run and the position, from every reader and every
act on the run; nothing is answered from a damaged log and nothing is written to it.
Damage is planted behind the store's back (raw rows written or deleted with sqlite3 /
psycopg, or inside the memory recorder)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from conftest import all_backends, backends, write_raw_row

from engine import AgentlogError, CorruptData, Engine
from engine import events as ev
from engine.log.history import RunWriter, read_run, run_stream
from engine.log.runcheck import RunCheck
from engine.log.snapshots import snapshot_at_or_before
from engine.log.state import RunState
from engine.store.codec import encode_event
from replay import compare, export_lines, recovery_context
from replay.diff import side
from replay.timeline import views


def _flow(eng: Engine, snapshot_every: int = 100) -> Any:
    @eng.tool
    def lookup(x: str) -> dict[str, str]:
        return {"x": x}

    @eng.agent(snapshot_every=snapshot_every, name=f"checks:flow{snapshot_every}")
    def flow(run: Any, x: str) -> dict[str, Any]:
        found = lookup(x)
        plan = run.decide("plan", lambda: "p")
        return {"found": found, "plan": plan}

    return flow


def _plant(store_url: str, eng: Engine, run_id: str, position: int, event: ev.Event) -> None:
    topic, data = encode_event(event)
    write_raw_row(store_url, eng.store, "events", run_stream(run_id), position, topic, data)


def _delete_row(store_url: str, run_id: str, position: int) -> None:
    """Delete one event row with the database's own client (SQLite and PostgreSQL)."""
    stream = run_stream(run_id)
    sql = "DELETE FROM {t} WHERE originator_id = {p} AND originator_version = {p}"
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url[len("sqlite:///") :]) as conn:
            conn.execute(sql.format(t="agentlog_events", p="?"), (stream.hex, position))
        return
    schema = dict(parse_qsl(urlsplit(store_url).query))["schema"]
    with psycopg.connect(store_url.split("?")[0], autocommit=True) as conn:
        table = f'"{schema}".agentlog_events'
        conn.execute(sql.format(t=table, p="%s"), (stream, position))  # type: ignore[arg-type]


def _rows(eng: Engine, run_id: str) -> list[tuple[int, str]]:
    """The stored rows of the run, read raw (no check)."""
    return [(r.position, type(r.event).__name__) for r in eng.store.read(run_stream(run_id))]


# Every reader and every act on a run, as a user reaches it.
READERS: dict[str, Callable[[Engine, str], object]] = {
    "state": lambda e, r: e.state(r),
    "state --at": lambda e, r: e.state(r, at=2),
    "events": lambda e, r: e.events(r),
    "timeline": lambda e, r: list(views(e, r)),
    "export": lambda e, r: list(export_lines(e, r)),
    "context": lambda e, r: recovery_context(e.state(r), views(e, r)),
    "diff": lambda e, r: compare(side(e, r), side(e, r + "@1")),
    "resume": lambda e, r: e.resume(r),
    "verify": lambda e, r: e.verify(r),
    "answer": lambda e, r: e.answer(r, "yes"),
    "abandon": lambda e, r: e.abandon(r),
    "rewind": lambda e, r: e.rewind(r, to=1),
}


def _damage(kind: str, store_url: str, eng: Engine, rid: str, end: int) -> int:
    """Plant damage of ``kind`` in the completed run ``rid`` (``end`` events); returns the
    position a reader must name."""
    at = ev.now()
    if kind == "event after agent_finished":
        _plant(store_url, eng, rid, end + 1, ev.ToolSucceeded(at=at, call=1, tool="lookup"))
        return end + 1
    if kind == "gap":
        _plant(store_url, eng, rid, end + 2, ev.AgentResumed(at=at))
        return end + 1
    if kind == "agent_started again":
        _plant(store_url, eng, rid, 2, ev.AgentStarted(at=at, agent="x:y", import_path="x"))
        return 2
    assert kind == "no agent_started first"
    _plant(store_url, eng, rid, 1, ev.AgentResumed(at=at))
    return 1


@all_backends
@pytest.mark.parametrize(
    "kind", ["event after agent_finished", "gap", "agent_started again", "no agent_started first"]
)
def test_every_reader_refuses_a_damaged_log_naming_run_and_position(
    eng: Engine, store_url: str, kind: str
) -> None:
    """Each reader raises CorruptData naming the run and the damaged position (never an
    AssertionError, never an answer); the acts write nothing and rewind forks nothing."""
    r = eng.run(_flow(eng), x="a")
    assert r.status == "completed"
    end = len(eng.events(r.run_id))
    position = _damage(kind, store_url, eng, r.run_id, end)
    before = _rows(eng, r.run_id)
    for name, read in READERS.items():
        with pytest.raises(CorruptData, match=f"run {r.run_id}.* position {position}\\b"):
            read(eng, r.run_id)
        assert _rows(eng, r.run_id) == before, name
    assert [s.run_id for s in eng.runs()] == [r.run_id]  # no fork was left behind
    assert eng.store.lease(r.run_id) is None


@backends("sqlite", "postgres")
def test_a_deleted_row_is_a_gap_every_reader_names(eng: Engine, store_url: str) -> None:
    """A row deleted with the database's own client leaves a gap: readers name its position."""
    r = eng.run(_flow(eng), x="a")
    _delete_row(store_url, r.run_id, 2)
    assert [p for p, _ in _rows(eng, r.run_id)][:2] == [1, 3]
    for read in READERS.values():
        with pytest.raises(CorruptData, match=f"run {r.run_id}.* position 2: it is missing"):
            read(eng, r.run_id)


@backends("sqlite", "postgres")
def test_a_deleted_last_row_is_missing_by_the_run_index(eng: Engine, store_url: str) -> None:
    """The run index is written in the same commit as the run's events: a stream that ends
    before the position the index recorded lost its last events, and every reader names
    the first missing position (a truncated tail read as a shorter, finished-looking log)."""
    r = eng.run(_flow(eng), x="a")
    end = len(eng.events(r.run_id))
    _delete_row(store_url, r.run_id, end)
    for read in READERS.values():
        with pytest.raises(CorruptData, match=f"run {r.run_id}.* position {end}: it is missing"):
            read(eng, r.run_id)


@all_backends
def test_events_appended_while_a_reader_reads_are_no_damage(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader reads the stream, then the run index; a writer that commits in between (its
    events and the index row together) moves the index past what the reader saw. That is
    a live run, not a lost tail: no reader refuses it."""

    @eng.agent(name="checks:asks")
    def asks(run: Any) -> str:
        return str(run.ask("go on?"))

    r = eng.run(asks)
    assert r.status == "paused"
    store = eng.store
    real = store.indexed_position
    steps = iter(range(100, 200))

    def after_a_concurrent_append(run_id: str) -> int | None:
        monkeypatch.setattr(store, "indexed_position", real)  # one append is enough
        writer = RunWriter(store, read_run(store, run_id).state)
        writer.append(ev.StepStarted(at=ev.now(), call=next(steps), name="meanwhile"))
        return real(run_id)

    for name in ("state", "events", "timeline", "export", "context"):
        before = store.last_position(run_stream(r.run_id))
        monkeypatch.setattr(store, "indexed_position", after_a_concurrent_append)
        READERS[name](eng, r.run_id)  # no CorruptData
        assert store.last_position(run_stream(r.run_id)) == before + 1, name


@all_backends
def test_state_from_a_snapshot_checks_that_the_tail_continues_it(
    eng: Engine, store_url: str
) -> None:
    """With a snapshot at every position, state is the snapshot plus its tail: an event
    after a completed snapshot, or a tail that skips a position, is CorruptData."""
    r = eng.run(_flow(eng, snapshot_every=1), x="a")
    end = len(eng.events(r.run_id))
    newest = snapshot_at_or_before(eng.store, run_stream(r.run_id), None)
    assert newest is not None and (newest.position, newest.status) == (end, "completed")
    _plant(store_url, eng, r.run_id, end + 1, ev.Compensated(at=ev.now(), call=1, tool="x"))
    assert eng.state(r.run_id).position == end + 1  # an undo record may follow the end
    _plant(store_url, eng, r.run_id, end + 2, ev.AgentResumed(at=ev.now()))
    with pytest.raises(CorruptData, match=f"position {end + 2}: agent_resumed after the run"):
        eng.state(r.run_id)
    _plant(store_url, eng, r.run_id, end + 4, ev.AgentResumed(at=ev.now()))
    with pytest.raises(CorruptData, match=f"position {end + 2}"):
        eng.state(r.run_id, at=end)  # the latest state is read first, and it is damaged


def test_a_snapshot_tail_must_start_right_after_the_snapshot(tmp_path: Any) -> None:
    """Snapshots at 3, 6 and 9, row 5 then row 4 deleted: state at 5 whose tail ends at 4
    is missing 5, the tail after snapshot 3 that begins at 5 is a gap at 4, and the
    latest state (snapshot 9) does not stand in for the lost events either."""
    url = f"sqlite:///{tmp_path}/s.db"
    e = Engine.open(url)
    rid = uuid.uuid4().hex
    w = RunWriter(e.store, RunState(run_id=rid), snapshot_every=3)
    w.append(ev.AgentStarted(at=ev.now(), agent="a:b", import_path="a"))
    for call in range(1, 9):  # one commit each: a snapshot at every third position
        w.append(ev.StepStarted(at=ev.now(), call=call, name="s"))
    snapshots = [snapshot_at_or_before(e.store, run_stream(rid), p) for p in (3, 6, 9)]
    assert [s.position if s else None for s in snapshots] == [3, 6, 9]
    _delete_row(url, rid, 5)
    with pytest.raises(CorruptData, match=f"run {rid}.* position 5: it is missing"):
        e.state(rid)
    with pytest.raises(CorruptData, match=f"run {rid}.* position 5: it is missing"):
        e.state(rid, at=5)
    _delete_row(url, rid, 4)
    for at in (5, None):
        with pytest.raises(CorruptData, match="position 4: it is missing"):
            e.state(rid, at=at)


@all_backends
def test_a_gap_where_a_page_ends_is_found(eng: Engine, store_url: str) -> None:
    """A page that comes back short is the end of the log only if nothing follows: a gap
    that makes a page short is still named."""
    rid = uuid.uuid4().hex
    w = RunWriter(eng.store, RunState(run_id=rid))
    w.append(ev.AgentStarted(at=ev.now(), agent="a:b", import_path="a"))
    w.append(*(ev.StepStarted(at=ev.now(), call=i, name="s") for i in range(1, 6)))
    _plant(store_url, eng, rid, 8, ev.StepStarted(at=ev.now(), call=7, name="s"))
    with pytest.raises(CorruptData, match=f"run {rid}.* position 7: it is missing"):
        list(views(eng, rid, page=7))  # the first page holds 1..6 of up to 7


@backends("sqlite", "postgres")
def test_a_run_whose_rows_are_all_gone_is_damaged(eng: Engine, store_url: str) -> None:
    """The index knows the run but its stream is empty: readers say so (position 1)."""
    r = eng.run(_flow(eng), x="a")
    for position, _ in _rows(eng, r.run_id):
        _delete_row(store_url, r.run_id, position)
    for name, read in READERS.items():
        if name.startswith("state") or name in ("context", "diff"):
            with pytest.raises(AgentlogError, match="has no events"):
                read(eng, r.run_id)
            continue
        with pytest.raises(CorruptData, match=f"run {r.run_id}.* position 1: the run has no"):
            read(eng, r.run_id)


def test_run_check_accepts_undo_records_after_the_end_and_nothing_else() -> None:
    """Compensation records may follow agent_finished or agent_abandoned (a later undo of
    the run's effects); anything else after the end is refused, as is an out-of-order row."""
    s = ev.now()
    head = [ev.AgentStarted(at=s, agent="a:b", import_path="a")]
    undo = [ev.CompensationStarted(at=s, call=1, tool="t"), ev.Compensated(at=s, call=1, tool="t")]
    for end in (ev.AgentFinished(at=s), ev.AgentAbandoned(at=s)):
        log = [*head, end, *undo]
        RunCheck("r")([_Rec(i, e) for i, e in enumerate(log, 1)])
        for late in (ev.AgentResumed(at=s), ev.AgentFailed(at=s, error="x"), end):
            bad = [_Rec(i, e) for i, e in enumerate([*log, late], 1)]
            with pytest.raises(CorruptData, match=f"position {len(log) + 1}: .* after the run"):
                RunCheck("r")(bad)
    failed = [*head, ev.AgentFailed(at=s, error="x"), ev.AgentResumed(at=s)]
    RunCheck("r")([_Rec(i, e) for i, e in enumerate(failed, 1)])  # a failed run goes on
    with pytest.raises(CorruptData, match="position 2: an event is out of order"):
        RunCheck("r")([_Rec(1, head[0]), _Rec(1, head[0])])


class _Rec:
    def __init__(self, position: int, event: ev.Event) -> None:
        self.position, self.event = position, event


@all_backends
def test_a_healthy_log_reads_whole_across_pages(eng: Engine) -> None:
    """The paged reader crosses page boundaries without a false alarm."""
    rid = uuid.uuid4().hex
    w = RunWriter(eng.store, RunState(run_id=rid))
    w.append(ev.AgentStarted(at=ev.now(), agent="a:b", import_path="a"))
    w.append(*(ev.StepStarted(at=ev.now(), call=i, name="s") for i in range(1, 10)))
    assert [v.position for v in views(eng, rid, page=3)] == list(range(1, 11))
    assert read_run(eng.store, rid).state.position == 10


@backends("sqlite")
def test_import_refuses_a_well_chained_file_holding_a_damaged_log(eng: Engine) -> None:
    """An export file whose hash chain is intact (anyone can compute it) but whose log has
    an event after agent_finished is refused whole, naming the position."""
    from engine.log.exporting import HASH_KEY as _HASH_KEY
    from engine.log.exporting import chain as _chain
    from engine.log.exporting import line_body as _body
    from replay import import_run, read_lines

    r = eng.run(_flow(eng), x="a")
    events = [e for e in (rec.event for rec in eng.store.read(run_stream(r.run_id)))]
    events.append(ev.ToolSucceeded(at=ev.now(), call=1, tool="lookup"))
    lines, previous = [], ""
    for position, e in enumerate(events, start=1):
        body = _body(r.run_id, position, len(events), e)
        previous = _chain(previous, body)
        lines.append(body[:-1] + _HASH_KEY + previous.encode() + b'"}\n')
    data = b"".join(lines)
    message = f"run {r.run_id}.* position {len(events)}: tool_succeeded after the run ended"
    with pytest.raises(CorruptData, match=message):
        read_lines(data, "f.jsonl")
    other = Engine.open("memory://")
    with pytest.raises(CorruptData, match=message):
        import_run(other, data, "f.jsonl")
    assert other.runs() == []
    honest = b"".join(export_lines(eng, r.run_id))
    assert import_run(other, honest, "g.jsonl") == (r.run_id, True)


def test_cli_readers_exit_2_naming_run_and_position(tmp_path: Any) -> None:
    """Every reading command, and the acts, on a damaged log: exit 2, one clear line on
    stderr naming the run and the position, no traceback."""
    from test_cli_kit import make_workdir, one_line_error, sqlite_url

    url = sqlite_url(tmp_path)
    work = make_workdir(tmp_path, url)
    run_id = work.run_id("agents:hello", code=0)
    e = Engine.open(url)
    end = len(e.events(run_id))
    _plant(url, e, run_id, end + 1, ev.AgentResumed(at=ev.now()))
    e.close()
    for command in (
        ("show", "RUN"),
        ("state", "RUN"),
        ("checkpoints", "RUN"),
        ("timeline", "RUN"),
        ("timeline", "RUN", "--json"),
        ("export", "RUN"),
        ("context", "RUN"),
        ("verify", "RUN"),
        ("resume", "RUN"),
        ("answer", "RUN", "x"),
        ("abandon", "RUN"),
        ("rewind", "RUN", "--to", "2"),
    ):
        argv = [run_id if a == "RUN" else a for a in command]
        one_line_error(work.cli(*argv), f"run {run_id}", f"position {end + 1}")
