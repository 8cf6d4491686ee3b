"""How the CLI and the views show many agents: every event of engine/events/agents.py
has a readable timeline line (the same from the log and from the timeline view), a
child says "child of" where a fork says "fork of" (timeline, show, context), the runs
view's lineage and status follow children and waiting runs, a resume of a waiting run
is no crash, and an imported file is refused whole when a run-id field of one of the new
events is not a run id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import all_backends, backends
from hostile_kit import docs_of, fingerprint, forge, renumber
from tree_kit import Node, root, three_levels, tick

from engine import Engine
from engine import events as ev
from engine.events import AnyAgentEvent
from projections.views import runs as board
from replay.cli.entry import run_cli
from replay.transfer import export_lines, import_run

UNTIL = 4102444800.0  # 2100-01-01T00:00:00Z


def _every_agent_event(store: Any) -> Node:
    """A run recording each event of many agents a run's own stream can hold."""
    r = root(store, "all")
    r.spawn("all-c1")
    r.add(
        ev.ChildPaused(
            at=tick(), call=1, child_run_id="all-c1", asking_run_id="all-g", question="ok?"
        ),
        ev.AgentResumed(at=tick(), owner="h:1:a"),
        ev.ChildFinished(at=tick(), call=1, child_run_id="all-c1", status="failed", error="boom"),
        ev.ChildRestarted(
            at=tick(),
            call=1,
            child_run_id="all-c2",
            previous_run_id="all-c1",
            strategy="one_for_all",
            reason="boom",
            restarts=2,
        ),
        ev.SupervisorEscalated(at=tick(), call=1, child_run_id="all-c2", reason="boom", restarts=3),
        ev.LockAcquired(at=tick(), call=2, name="customer:42", fence=7, ttl=30.0),
        ev.LockReleased(at=tick(), call=2, name="customer:42", fence=7),
        ev.MessageSent(at=tick(), call=3, to_run_id="peer", topic="offer", message_id="all:3"),
        ev.TimerSet(at=UNTIL - 3600, call=4, until=UNTIL),
        ev.RunWaiting(at=UNTIL - 3600, call=4, reason="timer", until=UNTIL),
        ev.AgentResumed(at=UNTIL, owner="h:2:b"),
        ev.TimerSet(at=UNTIL, call=5, until=UNTIL + 60, purpose="recv", topic="offer"),
        ev.MessageReceived(at=UNTIL, call=5, topic="offer", message_id="peer:9", value={"p": 3}),
        ev.MessageReceived(at=UNTIL, call=6, topic="offer"),
        ev.ChildFinished(at=UNTIL, call=1, child_run_id="all-c2", status="completed", output=[1]),
        ev.RunWaiting(at=UNTIL, call=7, reason="child", child_run_id="all-c2"),
    )
    return r


# What each line of the timeline of "all" says after its time columns.
STORY = [
    "▶ started agents:boss  input {}",
    "⑂ spawned child all-c1 agents:worker  call 1",
    "? child all-c1 (its descendant all-g) asks: ok?",
    "⟳ resumed by h:1:a",
    "⑂ child all-c1 failed: boom",
    "↻ restarted child all-c1 as all-c2  one_for_all, restart 2: boom",
    "⚠ supervisor gave up on child all-c2 after 3 restarts: boom",
    "⚿ lock 'customer:42' acquired, fence 7, lease 30.00 s",
    "⚿ lock 'customer:42' released (fence 7)",
    "✉ sent 'offer' to peer  message all:3",
    "⏲ timer sleep until 2100-01-01 00:00:00 UTC  (60 min 0 s from then)",
    "⏸ waiting for timer until 2100-01-01T00:00:00+00:00  (no thread held)",
    "⟳ resumed by h:2:b",
    "⏲ timer wait for message 'offer' until 2100-01-01 00:01:00 UTC  (60.00 s from then)",
    "✉ received 'offer' → {\"p\":3}  message peer:9",
    "✉ no message on 'offer': the wait timed out",
    "⑂ child all-c2 completed → [1]",
    "⏸ waiting for child all-c2  (no thread held)",
]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert run_cli(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


_LINE = re.compile(r"^ *\d+  \d\d:\d\d:\d\d\.\d{3}  +(?:\+[\d.]+s|inherited)  (.*)$")


def _story(out: str) -> list[str]:
    """The timeline's event lines, from the event on (the time columns cut, the resumes'
    gaps too: they depend on the clock)."""
    found = (_LINE.match(ln) for ln in out.splitlines())
    lines = [m.group(1) for m in found if m]
    return [ln.split(" after ")[0] if ln.startswith("⟳") else ln for ln in lines]


@backends("sqlite", "postgres")
def test_the_timeline_tells_every_event_of_many_agents(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Line by line, from the log and then from the timeline view (rebuilt): the same
    text; the run ends waiting; each new event type is in --json with its fields."""
    eng = Engine(store_url)
    try:
        _every_agent_event(eng.store)
    finally:
        eng.close()
    out = _cli(capsys, "timeline", "all", "--url", store_url)
    assert _story(out) == STORY
    assert out.splitlines()[0].endswith("waiting") and out.splitlines()[-1].endswith("waiting")
    _cli(capsys, "projections", "rebuild", "--url", store_url)
    assert _story(_cli(capsys, "timeline", "all", "--url", store_url)) == STORY
    docs = __import__("json").loads(_cli(capsys, "timeline", "all", "--json", "--url", store_url))
    types = {d["type"] for d in docs}
    wanted = {t.__struct_config__.tag for t in AnyAgentEvent.__args__} - {"message_posted"}
    assert wanted <= types
    restarted = next(d for d in docs if d["type"] == "child_restarted")
    assert restarted["previous_run_id"] == "all-c1" and restarted["strategy"] == "one_for_all"


def test_a_message_in_an_inbox_has_a_line_too() -> None:
    """message_posted lives in an inbox stream, never a run's; its line still reads."""
    from replay.output import Out
    from replay.timeline import story

    posted = ev.MessagePosted(at=UNTIL, message_id="a:1", from_run_id="a", topic="t", value=2)
    first = next(story([_At(1, posted)]))
    assert Out(color=False).text(*first)[34:] == "✉ posted 't' from a → 2"


class _At:
    def __init__(self, position: int, event: ev.Event) -> None:
        self.position, self.event = position, event


@backends("sqlite")
def test_children_and_forks_are_told_apart_in_show_timeline_and_context(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A child: "child of" (show, timeline header and start line, context); the fork:
    "forked from"; the parent's show lists its fork as a branch, not its children."""
    eng = Engine(store_url)
    try:
        three_levels(eng.store)
    finally:
        eng.close()
    url = ("--url", store_url)
    show = _cli(capsys, "show", "lead", *url)
    assert "child of    boss" in show and "forked from" not in show
    assert "forked from boss at 2" in _cli(capsys, "show", "boss-fork", *url)
    boss = _cli(capsys, "show", "boss", *url)
    assert "branch      boss-fork forked at position 2" in boss and "lead" not in boss
    branches = __import__("json").loads(_cli(capsys, "show", "boss", "--json", *url))["branches"]
    assert branches == [{"run_id": "boss-fork", "fork_position": 2}]
    timeline = _cli(capsys, "timeline", "w1", *url).splitlines()
    assert timeline[1] == "  child of lead" and timeline[3].endswith("(a child of lead)")
    fork = _cli(capsys, "timeline", "boss-fork", *url).splitlines()
    assert fork[1] == "  forked from boss at position 2"
    context = _cli(capsys, "context", "lead", *url)
    assert "A child run of run boss" in context
    assert "child run w1 (spawn call 1) has not finished" in context
    assert "waiting for a person to answer: child w1 asks: which region?" in context


@backends("sqlite")
def test_the_context_of_a_waiting_run_tells_what_it_did_and_holds(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Children finished, messages, a lock still held, and what it waits for."""
    eng = Engine(store_url)
    try:
        r = _every_agent_event(eng.store)
        r.add(ev.LockAcquired(at=UNTIL, call=8, name="desk", fence=9))
    finally:
        eng.close()
    text = _cli(capsys, "context", "all", "--url", store_url)
    for line in (
        "child run all-c1 failed: boom",
        "child run all-c1 restarted (one_for_all): boom",
        "the supervisor gave up on child run all-c2: boom",
        "held lock 'customer:42' (fence 7) and released it",
        "sent message 'offer' to run peer",
        "received message 'offer' -> {\"p\":3}",
        "waited for message 'offer': none came before the timeout",
        "child run all-c2 completed -> [1]",
        "- waiting, holding no thread, for child all-c2; it resumes then.",
        "- holds lock 'desk' (fence 9).",
    ):
        assert line in text, line
    assert "has not finished" not in text and "waiting for a person" not in text


@all_backends
def test_the_runs_view_follows_children_and_waiting_runs(store_url: str) -> None:
    """Lineage child for children, fork for the fork; status waiting; a resume after a
    wait or a child's question is no crash."""
    eng = Engine(store_url)
    try:
        three_levels(eng.store)
        _every_agent_event(eng.store)
        rows = {r.run_id: r for r in board.list_runs(eng.store)}
        assert {k: rows[k].lineage for k in ("lead", "w1", "solo", "boss-fork", "boss")} == {
            "lead": "child",
            "w1": "child",
            "solo": "child",
            "boss-fork": "fork",
            "boss": None,
        }
        assert rows["all"].status == "waiting" and rows["w2"].step == "fetch"
        assert [r.run_id for r in board.list_runs(eng.store, parent="lead")] == ["w2", "w1"]
        assert [r.run_id for r in board.list_runs(eng.store, status="waiting")] == ["all"]
        figures = eng.stats()
        assert figures.runs.by_status["waiting"] == 1
        assert figures.recovery.crashes == 0
    finally:
        eng.close()


# (event type, field): a run id an imported file cannot forge.
FORGED = [
    ("child_spawned", "child_run_id"),
    ("child_finished", "child_run_id"),
    ("child_restarted", "previous_run_id"),
    ("child_paused", "asking_run_id"),
    ("message_sent", "to_run_id"),
    ("run_waiting", "child_run_id"),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The export of the run holding every event of many agents."""
    url = f"sqlite:///{tmp_path_factory.mktemp('src')}/src.db"
    eng = Engine(url)
    try:
        _every_agent_event(eng.store)
        return b"".join(export_lines(eng, "all"))
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_an_honest_export_of_many_agents_imports(store_url: str, exported: bytes) -> None:
    """The run-id checks refuse nothing an honest export holds."""
    eng = Engine(store_url)
    try:
        assert import_run(eng, exported) == ("all", True)
        assert eng.state("all").status == "waiting"
    finally:
        eng.close()


@backends("sqlite", "postgres")
@pytest.mark.parametrize(("kind", "field"), FORGED)
@pytest.mark.parametrize("bad", ["../../etc", "a\nb", ""])
def test_a_forged_run_id_in_a_new_event_is_refused_whole(
    store_url: str,
    exported: bytes,
    kind: str,
    field: str,
    bad: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2, one line naming the line and the field, the store unchanged."""
    Engine(store_url).close()  # the store exists, empty
    docs = docs_of(exported)
    index = next(i for i, d in enumerate(docs) if d["type"] == kind)
    docs[index].pop("msgpack", None)
    docs[index]["event"][field] = bad
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forge(renumber(docs)))
    before = fingerprint(store_url)
    assert run_cli(["import", str(path), "--url", store_url]) == 2
    err = capsys.readouterr().err
    assert f"line {index + 1}: not a {field.replace('_', ' ')}" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert fingerprint(store_url) == before


@backends("sqlite")
def test_a_message_posted_line_in_a_run_file_is_refused(
    store_url: str, exported: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An inbox's event smuggled into a run's file: refused, naming it."""
    Engine(store_url).close()
    docs = docs_of(exported)
    posted = {
        "type": "message_posted",
        "at": 1.0,
        "message_id": "x:1",
        "from_run_id": "x",
        "topic": "t",
    }
    docs.insert(2, {**docs[0], "type": "message_posted", "schema": 1, "event": posted})
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forge(renumber(docs)))
    assert run_cli(["import", str(path), "--url", store_url]) == 2
    assert "line 3: a message_posted event never belongs to a run" in capsys.readouterr().err
