"""Races between threads continuing the same parent, on SQLite and PostgreSQL: while
children are answered (each answer continues its parent), other threads resume the
parents and answer them through the children at the same time. Each parent continues
once: one child_finished per spawn, one agent_finished, its own side effect sent once,
and every log reads back whole."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from conftest import backends

from engine import Engine
from engine.errors import RunBusy, UsageError

TREE = backends("sqlite", "postgres")
PARENTS = 6


def _child(eng: Engine, run_id: str) -> str:
    return str(
        next(e.data for e in eng.events(run_id) if e.type == "child_spawned")["child_run_id"]
    )


@TREE
def test_answers_and_resumes_racing_on_one_parent_continue_it_once(eng: Engine) -> None:
    sent: Counter[str] = Counter()
    lock = threading.Lock()

    @eng.tool(side_effect=True, key=lambda name: f"notify:{name}")
    def notify(name: str) -> str:
        with lock:
            sent[name] += 1
        return f"sent {name}"

    @eng.agent
    def asker(run: Any, name: str) -> Any:
        return run.ask(f"{name}?")

    @eng.agent
    def parent(run: Any, name: str) -> Any:
        got = run.call(asker, name=name)
        return [got, notify(name)]

    runs = [eng.run(parent, name=f"p{i}") for i in range(PARENTS)]
    assert {r.status for r in runs} == {"paused"}
    kids = {r.run_id: _child(eng, r.run_id) for r in runs}
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def quietly(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except (RunBusy, UsageError):
            pass  # taken by another thread, or answered already
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def answer_children() -> None:
        go.wait()
        for r in runs:
            quietly(eng.answer, kids[r.run_id], "yes")

    def answer_parents() -> None:
        go.wait()
        for r in reversed(runs):
            quietly(eng.answer, r.run_id, "yes")

    def resume_parents() -> None:
        go.wait()
        for _ in range(3):
            for r in runs:
                quietly(eng.resume, r.run_id)

    threads = [
        threading.Thread(target=f)
        for f in (answer_children, answer_children, answer_parents, resume_parents)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for r in runs:
        state = eng.state(r.run_id)
        assert state.status == "completed", (r.run_id, state)
        types = [e.type for e in eng.events(r.run_id)]
        assert types.count("child_finished") == 1 and types.count("agent_finished") == 1
        assert [e.type for e in eng.events(kids[r.run_id])].count("human_input_provided") == 1
        assert state.output == ["yes", f"sent {state.output[1][5:]}"]
    assert sent == {f"p{i}": 1 for i in range(PARENTS)}
