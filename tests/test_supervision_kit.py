"""Helpers for the supervision and abandon tests: a spawn and a wait built on the runtime's
own pieces (``children.open_child``, ``RunContext.recorded``/``record``), so restarts and
tree abandons are tested against real runs while the public ``run.spawn`` lands apart.

``spawn`` is durable (a replay returns the recorded child and starts nothing); ``wait``
records the child's end in the parent as ``child_finished`` and, for a supervised parent,
hands a failure to ``supervisor.restart``, then waits on the run it names."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import msgspec

from engine import Engine
from engine import events as ev
from engine.errors import ChildFailed, Permanent
from engine.kinds import RunStatus
from engine.log.history import rebuild
from engine.polling import poll_until
from engine.runtime.children import spawn as children
from engine.runtime.children import supervisor
from engine.runtime.defs.definitions import AgentDef
from engine.runtime.run.context import RunContext
from engine.secrets import key_check, replay_key

ENDS = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED)


def spawn(run: RunContext, agent: AgentDef, **input: Any) -> tuple[int, str]:
    """Start ``agent`` as a child of ``run``: its spawn call and child run id."""
    call = run.next_call()
    entry = run.recorded(call, "spawn", agent.name)
    if entry is not None:
        assert entry.ref is not None
        return call, entry.ref
    run.live(call, "spawn")
    child = uuid.uuid4().hex
    check = key_check(replay_key())
    started = ev.AgentStarted(ev.now(), agent.name, agent.import_path, input, run.run_id)
    started = msgspec.structs.replace(started, code_version=agent.version, key_check=check)
    record = ev.ChildSpawned(at=ev.now(), call=call, child_run_id=child, agent=agent.name)
    children.open_child(run, record, started)
    return call, child


def wait(run: RunContext, call: int, child: str, timeout: float = 60.0) -> Any:
    """The child's output; its failure restarted by the parent's supervisor (ChildFailed
    when it gives up, or when the parent does not supervise)."""
    entry = run.journal.calls.get(call)
    out = entry.outcome if entry is not None else None
    if isinstance(out, ev.ChildFinished) and out.child_run_id == child:
        if out.status == RunStatus.COMPLETED:
            return out.output
        child = _failed(run, call, child, out.error, out.status)
    waited = [child]  # the run doing the child's work, a restart's once it was restarted

    def ended() -> tuple[Any] | None:
        child = waited[0] = supervisor.current(run, call, waited[0])
        state = rebuild(run.store, child)
        if state.status == RunStatus.COMPLETED:
            run.record(_end(call, child, state.status, output=state.output))
            return (state.output,)
        if state.status in (RunStatus.FAILED, RunStatus.ABANDONED):
            run.record(_end(call, child, state.status, error=state.error))
            waited[0] = _failed(run, call, child, state.error, state.status)
        return None

    done = poll_until(ended, timeout, first=0.02, most=0.02)
    if done is None:
        raise AssertionError(f"child {waited[0]} did not end in time")
    return done[0]


def _failed(run: RunContext, call: int, child: str, error: str | None, status: str) -> str:
    if run.agent.supervise is None:
        raise ChildFailed(child, error, status)
    return supervisor.restart(run, call, child, error)


def _end(call: int, child: str, status: str, **more: Any) -> ev.ChildFinished:
    return ev.ChildFinished(at=ev.now(), call=call, child_run_id=child, status=status, **more)


def settle(eng: Engine, run_ids: list[str], statuses: tuple[str, ...], timeout: float = 60) -> None:
    """Wait until each run has one of ``statuses`` (generous: only against hanging)."""
    if poll_until(lambda: all(eng.state(r).status in statuses for r in run_ids), timeout):
        return
    raise AssertionError({r: eng.state(r).status for r in run_ids})


def child_ids(eng: Engine, run_id: str) -> list[str]:
    """The child runs a run's log names, in the order it started them."""
    return [
        e.data["child_run_id"]
        for e in eng.events(run_id)
        if e.type in ("child_spawned", "child_restarted")
    ]


def events_of(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The data of the run's events of type ``kind`` (with their time, ``at``)."""
    return [{**e.data, "at": e.at} for e in eng.events(run_id) if e.type == kind]


class Counter:
    """Attempts counted in a file (shared by threads and processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def bump(self, name: str) -> int:
        with self.lock:
            n = self.get(name) + 1
            part = self.path / f"{name}.part"
            part.write_text(str(n))
            os.replace(part, self.path / f"{name}.count")  # readers never see it half written
            return n

    def get(self, name: str) -> int:
        f = self.path / f"{name}.count"
        return int(f.read_text()) if f.exists() else 0


class Books:
    """An outside service: effects done and undone, in global order, and by the key they
    came under (its verifier's answer); an undo of a receipt in ``refuse`` fails, once."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.keys: dict[str, str] = {}
        self.lock = threading.Lock()
        self.refuse: set[str] = set()

    def add(self, kind: str, what: str, key: str | None = None) -> str:
        with self.lock:
            if kind == "undo" and what in self.refuse:
                self.refuse.discard(what)
                raise RuntimeError(f"cannot void {what} now")
            self.log.append((kind, what))
            if key is not None:
                self.keys[key] = what
        return what

    def found(self, key: str) -> str | None:
        with self.lock:
            return self.keys.get(key)

    def done(self, what: str) -> bool:
        with self.lock:
            return ("do", what) in self.log

    def undone(self) -> list[str]:
        return [w for k, w in self.log if k == "undo"]


def booking(eng: Engine, books: Books) -> Any:
    """A tool of ``eng`` that books ``what`` at ``books``; its compensation voids it, its
    verifier finds it by key (a run stopped after the effect, before its outcome was
    recorded, is settled by asking it, then undone)."""

    def undo(result: str, idempotency_key: str | None = None) -> str:
        return books.add("undo", result)

    @eng.tool(side_effect=True, compensate=undo, verify=books.found)
    def book(what: str, *, idempotency_key: str) -> str:
        return books.add("do", what, idempotency_key)

    return book


def fetcher(eng: Engine, counter: Counter) -> Any:
    """An agent ``worker(n)`` of ``eng`` whose one tool call fails (permanently) on its
    first attempt and returns ``2 * n`` after; it returns that plus one."""

    @eng.tool
    def fetch(n: int) -> int:
        if counter.bump("fetch") == 1:
            raise Permanent("the service said 503")
        return n * 2

    @eng.agent
    def worker(run: Any, n: int) -> int:
        return fetch(n) + 1

    return worker
