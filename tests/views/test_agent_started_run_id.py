"""``AgentStarted.run_id``: every start writes the run's own id (a run, a child, a
supervisor's restart, a fork), and the projections match a stream to its run by it,
checked against the stream it derives (a forged id is not believed); logs from before
it was kept (None) are still matched by their start time in the run index."""

from __future__ import annotations

from typing import Any

import msgspec
from conftest import backends, write_raw_row

from engine import Engine
from engine.events import AgentStarted
from engine.log.history import run_stream
from engine.store.codec import encode_event
from projections import Runner
from projections.views import all_views


def _family(eng: Engine) -> Any:
    @eng.agent(name="run-id:child")
    def child(run: Any, n: int) -> int:
        return n + 1

    @eng.agent(name="run-id:parent")
    def parent(run: Any) -> int:
        run.checkpoint("start")
        got: int = run.spawn(child, n=1).result()
        return got

    return parent


def _head(eng: Engine, run_id: str) -> AgentStarted:
    head = eng.store.read(run_stream(run_id), upto=1)[0].event
    assert isinstance(head, AgentStarted)
    return head


@backends("memory", "sqlite", "postgres")
def test_every_start_writes_its_own_run_id(eng: Engine) -> None:
    """A run, its child and a fork of the run each open with their own id."""
    r = eng.run(_family(eng))
    assert r.status == "completed", r.error
    [child] = eng.store.children(r.run_id)
    fork = eng.rewind(r.run_id, to="start")
    for rid in (r.run_id, child.run_id, fork.run_id):
        assert _head(eng, rid).run_id == rid


@backends("sqlite", "postgres")
def test_streams_are_named_by_the_run_id_they_hold_and_a_forged_one_is_not_believed(
    eng: Engine, store_url: str
) -> None:
    """The directory names a stream by its ``agent_started`` run id without asking the
    index; one whose id is another run's (a forged import) is matched in the index, as
    an old log without the id is."""
    parent = _family(eng)
    a, b, c = (eng.run(parent).run_id for _ in range(3))
    forged = msgspec.structs.replace(_head(eng, b), run_id=a)
    old = msgspec.structs.replace(_head(eng, c), run_id=None)
    for rid, head in ((b, forged), (c, old)):
        topic, payload = encode_event(head)
        write_raw_row(store_url, eng.store, "events", run_stream(rid), 1, topic, payload)
    runner = Runner(eng.store, all_views())
    asked: list[tuple[float, float]] = []
    real = eng.store.runs_started
    eng.store.runs_started = lambda low, high: asked.append((low, high)) or real(low, high)  # type: ignore[method-assign]
    names = {s: runner.directory.facts(run_stream(s)) for s in (a, b, c)}
    assert {s: f.run_id for s, f in names.items() if f is not None} == {a: a, b: b, c: c}
    assert len(asked) == 2  # b and c, each met alone; a needed no lookup
