"""The runs view, the status board, on every store: after real runs of every shape
(completed, failed, paused and answered, abandoned with compensation, forks by rewind,
a crashed run resumed, imported runs adopted or not) its rows equal the engine's inline
run index field by field; the board's own columns (plan progress, attempts, owner,
lineage) hold what the runs did; filters and pages agree with the index filtered by hand."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest
from agents.kit import Crash
from conftest import all_backends

from engine import Engine, RetryPolicy
from engine import events as ev
from engine.kinds import RunStatus
from engine.log.history import RunWriter, run_stream
from engine.log.state import STATUS_AFTER, RunState, evolve
from engine.store import RunRow
from projections.directory import RunDirectory
from projections.fold import Envelope, RunFacts, moved_status
from projections.runner import Runner
from projections.views import runs as board
from replay.transfer import export_lines, import_run

FAST = RetryPolicy(max_attempts=3, initial=0.001, maximum=0.001)


class Shapes:
    """One engine's runs of many shapes, by label."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.ids: dict[str, str] = {}
        self.mode: dict[str, bool] = {"crash": False, "flaky": True}
        self.undone: list[str] = []
        self._define()

    def _define(self) -> None:
        eng, mode, undone = self.eng, self.mode, self.undone

        @eng.tool(side_effect=True, compensate=lambda receipt: undone.append(receipt))
        def reserve(item: str, *, idempotency_key: str) -> str:
            if mode["crash"]:
                raise Crash()
            return f"R-{item}"

        @eng.tool(retry=FAST)
        def fetch(url: str) -> str:
            if mode["flaky"]:
                mode["flaky"] = False
                raise ConnectionError("refused")
            return "page"

        @eng.tool
        def refuse(what: str) -> str:
            raise PermissionError(f"no {what}")

        @eng.agent(name="tests:planner")
        def planner(run: Any, item: str) -> list[str]:
            run.plan(["reserve", "fetch", "ask"])
            run.checkpoint("start")
            with run.step("reserve"):
                got = [reserve(item)]
            with run.step("fetch"):
                got.append(fetch(item))
            with run.step("ask"):
                got.append(run.ask(f"ship {item}?"))
            return got

        @eng.agent(name="tests:refuser")
        def refuser(run: Any) -> str:
            return str(refuse("way"))

        @eng.agent(name="tests:replanner")
        def replanner(run: Any) -> str:
            run.plan(["a", "b"])
            with run.step("a"):
                pass
            run.plan(["c", "d", "e"])  # a new plan: progress counts from it
            with run.step("c"):
                return "done"

        self.planner, self.refuser, self.replanner = planner, refuser, replanner

    def build(self) -> dict[str, str]:
        eng, ids = self.eng, self.ids
        paused = eng.run(self.planner, item="a")  # 2 attempts of fetch: one retry
        ids["paused"] = paused.run_id
        ids["answered"] = eng.run(self.planner, item="b").run_id
        eng.answer(ids["answered"], "yes")
        ids["failed"] = eng.run(self.refuser).run_id
        ids["replanned"] = eng.run(self.replanner).run_id
        ids["abandoned"] = eng.run(self.planner, item="c").run_id
        eng.abandon(ids["abandoned"])  # undoes reserve("c")
        self.mode["crash"] = True
        with pytest.raises(Crash):
            eng.run(self.planner, run_id="crashed", item="d")
        self.mode["crash"] = False
        eng.resume("crashed")
        ids["crashed"] = "crashed"
        ids["fork"] = eng.rewind(ids["answered"], to="start", effects="compensate").run_id
        ids["fork_of_fork"] = eng.rewind(ids["fork"], to="start").run_id
        asked = [e.position for e in eng.events(ids["answered"]) if e.type == "step_started"]
        ids["late_fork"] = eng.rewind(ids["answered"], to=asked[-1]).run_id
        # past the answer: the fork's copies pause it and its copied answer resumes it
        told = [e.position for e in eng.events(ids["answered"]) if e.type == "human_input_provided"]
        ids["past_answer"] = eng.rewind(ids["answered"], to=told[-1] + 1).run_id
        self._imported()
        return ids

    def _imported(self) -> None:
        """Two runs made in another store and imported here; one is adopted."""
        other = Engine.open("memory://")
        try:
            source = Shapes(other)
            made = [other.run(source.refuser).run_id, other.run(source.refuser).run_id]
            for rid in made:
                import_run(self.eng, b"".join(export_lines(other, rid)))
        finally:
            other.close()
        self.eng.adopt(made[1], "tests:planner")  # another agent runs it now
        self.ids["imported"], self.ids["adopted"] = made


def _index(eng: Engine) -> dict[str, RunRow]:
    return {r.run_id: r for r in eng.store.runs()}


def _same_as_index(eng: Engine) -> dict[str, board.RunBoardRow]:
    """The board, checked equal to the inline index on every field they share."""
    rows = board.list_runs(eng.store)
    index = eng.store.runs()
    assert [r.run_id for r in rows] == [r.run_id for r in index]
    for row, indexed in zip(rows, index, strict=True):
        shared = (row.agent, row.status, row.started_at, row.updated_at)
        assert shared == (indexed.agent, indexed.status, indexed.started_at, indexed.updated_at)
        assert (row.parent_run_id, row.position) == (indexed.parent_run_id, indexed.position)
    return {r.run_id: r for r in rows}


@all_backends
def test_the_board_equals_the_inline_index_after_runs_of_every_shape(eng: Engine) -> None:
    """Every run's agent, status, times, parent and position on the board equal the
    inline index's, caught up once at the end and caught up after every act alike."""
    ids = Shapes(eng).build()
    rows = _same_as_index(eng)
    expected = {
        "paused": "paused",
        "answered": "completed",
        "failed": "failed",
        "replanned": "completed",
        "abandoned": "abandoned",
        "crashed": "paused",
        "fork": "paused",
        "fork_of_fork": "paused",
        "late_fork": "paused",
        "past_answer": "completed",
        "imported": "failed",
        "adopted": "failed",
    }
    assert {label: rows[rid].status for label, rid in ids.items()} == expected
    eng.answer(ids["fork"], "no")
    assert _same_as_index(eng)[ids["fork"]].status == RunStatus.COMPLETED
    built = board.query(eng.store, board.RunFilter())
    Runner(eng.store, [board.View()]).rebuild("runs")
    assert (
        board.query(eng.store, board.RunFilter()) == built
    )  # rebuilt from scratch: the same board


@all_backends
def test_the_board_shows_progress_attempts_owner_and_lineage(eng: Engine) -> None:
    """Plan progress and the step under way, tool attempts with retries (a fork's copies
    of its parent's calls not counted again), the resuming or adopting owner, the fork's
    position and effects mode, and whether a run is imported."""
    shapes = Shapes(eng)
    ids = shapes.build()
    rows = _same_as_index(eng)
    paused = rows[ids["paused"]]
    assert (paused.steps_planned, paused.steps_done, paused.step) == (3, 2, "ask")
    assert (paused.tool_calls, paused.retries, paused.attempts) == (2, 1, 3)
    assert paused.last_event == "human_input_requested" and paused.lineage is None
    answered = rows[ids["answered"]]
    assert (answered.steps_done, answered.step, answered.attempts) == (3, None, 2)
    assert rows[ids["failed"]].failures == 1 and rows[ids["failed"]].attempts == 1
    replanned = rows[ids["replanned"]]
    assert (replanned.steps_done, replanned.steps_planned, replanned.step) == (1, 3, None)
    crashed = rows[ids["crashed"]]
    assert crashed.resumes == 1 and crashed.owner == eng.leases.owner
    # the crashed intent is resent on resume under the same intent: one call each
    assert (crashed.tool_calls, crashed.retries, crashed.step) == (2, 0, "ask")
    fork = rows[ids["fork"]]
    assert (fork.lineage, fork.parent_run_id, fork.effects) == (
        "fork",
        ids["answered"],
        "compensate",
    )
    assert fork.fork_position is not None and fork.inherited > 0
    assert (fork.steps_planned, fork.owner) == (3, None)
    # the fork re-sent reserve and fetch after compensating; its copies are not counted
    assert fork.tool_calls == 2
    assert rows[ids["fork_of_fork"]].parent_run_id == ids["fork"]
    late = rows[ids["late_fork"]]  # copies of reserve and fetch: the parent's work
    assert late.inherited >= 8 and (late.tool_calls, late.retries, late.attempts) == (0, 0, 0)
    assert (late.steps_planned, late.steps_done, late.step) == (3, 2, "ask")
    assert rows[ids["imported"]].imported and rows[ids["imported"]].owner is None
    adopted = rows[ids["adopted"]]
    assert not adopted.imported and adopted.owner == eng.leases.owner
    assert adopted.last_event == "run_adopted"
    # adopted under another agent: the index row names it on every store, as the board does
    assert adopted.agent == _index(eng)[ids["adopted"]].agent == "tests:planner"
    assert shapes.undone == ["R-c", "R-b"]  # abandon and the compensating rewind undid these


@all_backends
def test_filters_and_pages_agree_with_the_index_filtered_by_hand(eng: Engine) -> None:
    """status, agent, since/until (start time), parent, limit and offset each pick the
    rows the inline index holds for them, newest first; counts() adds them up."""
    ids = Shapes(eng).build()
    index = eng.store.runs()

    def listed(**filters: Any) -> list[str]:
        return [r.run_id for r in board.list_runs(eng.store, **filters)]

    def by_hand(keep: Any) -> list[str]:
        return [r.run_id for r in index if keep(r)]

    assert listed(status="paused") == by_hand(lambda r: r.status == "paused")
    assert len(listed(status="paused")) == 5
    assert listed(agent="tests:refuser") == by_hand(lambda r: r.agent == "tests:refuser")
    assert len(listed(agent="tests:refuser")) == 2
    done = [ids["past_answer"], ids["answered"]]
    assert listed(agent="tests:planner", status="completed") == done
    middle = index[len(index) // 2].started_at
    assert listed(since=middle) == by_hand(lambda r: r.started_at >= middle)
    assert listed(until=middle) == by_hand(lambda r: r.started_at < middle)
    assert listed(since=middle, until=middle) == []
    forks = [ids["past_answer"], ids["late_fork"], ids["fork"]]
    assert listed(parent=ids["answered"]) == forks
    assert listed(parent=ids["fork"]) == [ids["fork_of_fork"]]
    everything = by_hand(lambda r: True)
    assert listed(limit=3) == everything[:3]
    assert listed(limit=3, offset=3) == everything[3:6]
    assert listed(offset=7) == everything[7:] and len(everything) == 12
    assert listed(limit=0) == []
    counted = board.counts(eng.store, middle, None)
    later = [r for r in index if r.started_at >= middle]
    assert counted.total == len(later)
    assert counted.by_status == {
        s: sum(r.status == s for r in later) for s in {r.status for r in later}
    }
    assert board.counts(eng.store, None, "tests:refuser").by_status == {"failed": 2}


@all_backends
def test_list_runs_reads_its_own_writes(eng: Engine) -> None:
    """A run committed just before list_runs is on the board: it catches the view up."""
    shapes = Shapes(eng)
    assert board.list_runs(eng.store) == []
    first = eng.run(shapes.refuser).run_id
    assert [r.run_id for r in board.list_runs(eng.store)] == [first]
    second = eng.run(shapes.refuser).run_id
    assert [r.run_id for r in board.list_runs(eng.store)] == [second, first]


@all_backends
def test_at_every_position_the_board_row_is_the_index_row_of_the_fold(eng: Engine) -> None:
    """Folded event by event, a fork's copies included, each run's board row matches the
    index row the engine writes for the state at that position (not only at the end)."""
    ids = Shapes(eng).build()
    directory, view = RunDirectory(eng.store), board.View()
    for rid in ids.values():
        stream = run_stream(rid)
        facts = directory.facts(stream)
        row: board.RunBoardRow | None = None
        state = RunState(run_id=rid)
        for g, r in enumerate(eng.store.read(stream), start=1):
            env = Envelope(g, stream, r.position, r.event, facts)
            row = view.apply({rid: row}, env)[rid]
            state = evolve(state, r.event, r.position)
            indexed = RunWriter.index_row(state)
            assert row is not None and (row.agent, row.status, row.position) == (
                indexed.agent,
                indexed.status,
                indexed.position,
            ), (rid, r.position)
            assert (row.started_at, row.updated_at, row.parent_run_id) == (
                indexed.started_at,
                indexed.updated_at,
                indexed.parent_run_id,
            )


def _sample(kind: type[ev.Event]) -> ev.Event:
    """An instance of ``kind`` with plain values in its required fields."""
    plain = {str: "x", int: 1, float: 1.0, bool: False, bytes: "eA=="}  # (bytes: base64)
    data: dict[str, Any] = {"at": 1.0}
    for f in msgspec.structs.fields(kind):
        if f.required and f.name != "at":
            shape = typing.get_origin(f.type)
            empty = [] if shape in (list, tuple) else {} if shape is dict else "x"
            data[f.name] = plain.get(f.type, "x") if isinstance(f.type, type) else empty
    closed = {"kind": "permanent", "status": "completed", "reason": "timer", "action": "retry"}
    for name, value in closed.items():
        if name in data and isinstance(data[name], str) and data[name] == "x":
            data[name] = value  # a closed vocabulary: one of its values
    return msgspec.convert(data, kind)


def test_the_one_transition_table_is_what_the_fold_and_the_board_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """engine.log.state.STATUS_AFTER is the status rule of evolve and of the views alike: for
    every event type and every status before it, the fold gives the table's status, and a
    changed table changes the fold, the board and the timeline together."""
    kinds = [k for k in ev.Event.__subclasses__() if k.__struct_config__.tag]
    assert len(kinds) >= 20
    for kind in kinds:
        event = _sample(kind)
        for status in RunStatus:
            assert evolve(RunState(status=status), event, 1).status == (
                STATUS_AFTER.get(kind, status)
            ), (kind, status)
    mark = ev.Checkpoint(at=2.0, call=1, name="m")
    monkeypatch.setitem(STATUS_AFTER, ev.Checkpoint, RunStatus.WAITING)
    assert evolve(RunState(status=RunStatus.RUNNING), mark, 2).status == RunStatus.WAITING
    assert moved_status(mark) == RunStatus.WAITING
    stream, facts = run_stream("r"), RunFacts("r", "a:b")
    started = board.View().apply(
        {"r": None}, Envelope(1, stream, 1, _sample(ev.AgentStarted), facts)
    )
    row = board.View().apply(dict(started), Envelope(2, stream, 2, mark, facts))["r"]
    assert row is not None and row.status == RunStatus.WAITING
