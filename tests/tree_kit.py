"""Helpers for the run-tree tests (no tests here): run trees written by hand into a store,
as the runtime writes them (a parent's ``child_spawned`` committed with the child's
``agent_started`` and index row), since ``run.spawn`` is not what these tests exercise."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from engine import events as ev
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState, evolve
from engine.store import Append, Store

_clock = itertools.count(1)


def tick() -> float:
    """A fresh, strictly increasing event time (runs started in order list in order)."""
    return time.time() + next(_clock) * 1e-3


@dataclass
class Node:
    """One hand-written run: its writer, and its spawn calls so far."""

    store: Store
    run_id: str
    writer: RunWriter
    calls: int = 0
    children: list[Node] = field(default_factory=list)

    def call(self) -> int:
        self.calls += 1
        return self.calls

    def add(self, *events: ev.Event, extra: list[Append] | None = None, rows: Any = ()) -> None:
        self.writer.append(*events, extra=extra or [], rows=rows)

    def spawn(self, run_id: str, agent: str = "agents:worker") -> Node:
        """A child run of this one, spawned as ``open_child`` does (one commit)."""
        started = ev.AgentStarted(
            at=tick(), agent=agent, import_path="agents", parent_run_id=self.run_id
        )
        first = evolve(RunState(run_id=run_id), started, 1)
        spawned = ev.ChildSpawned(at=tick(), call=self.call(), child_run_id=run_id, agent=agent)
        head = Append(run_stream(run_id), 1, started)
        self.add(spawned, extra=[head], rows=[RunWriter.index_row(first)])
        child = Node(self.store, run_id, RunWriter(self.store, first))
        child.writer.snapshot_at = 0
        self.children.append(child)
        return child

    def step(self, name: str, done: bool = False) -> None:
        n = self.call()
        self.add(ev.StepStarted(at=tick(), call=n, name=name))
        if done:
            self.add(ev.StepCompleted(at=tick(), call=n, name=name))

    def ask(self, question: str) -> None:
        self.add(ev.HumanInputRequested(at=tick(), call=self.call(), question=question))

    def finish(self, output: Any = None) -> None:
        self.add(ev.AgentFinished(at=tick(), output=output))

    def child_paused(self, child: Node, asking: Node, question: str) -> None:
        """This run pauses because ``child`` (whose descendant ``asking`` asks) waits."""
        call = next(i + 1 for i, c in enumerate(self.children) if c is child)
        self.add(
            ev.ChildPaused(
                at=tick(),
                call=call,
                child_run_id=child.run_id,
                asking_run_id=asking.run_id,
                question=question,
            )
        )

    def waits_on(self, child: Node) -> None:
        self.add(
            ev.RunWaiting(at=tick(), call=self.call(), reason="child", child_run_id=child.run_id)
        )


def root(store: Store, run_id: str, agent: str = "agents:boss", **started: Any) -> Node:
    """A run with no parent (or with ``parent_run_id``/``fork_position`` given)."""
    writer = RunWriter(store, RunState(run_id=run_id))
    writer.append(ev.AgentStarted(at=tick(), agent=agent, import_path="agents", **started))
    return Node(store, run_id, writer)


def three_levels(store: Store) -> dict[str, Node]:
    """boss -> (lead -> (w1 asks, w2 running step 'fetch'), solo completed), and a fork
    of boss (not a child): boss paused on lead, lead paused on w1; solo done."""
    boss = root(store, "boss")
    boss.add(ev.PlanCreated(at=tick(), call=boss.call(), steps=["hire", "work", "report"]))
    boss.step("hire", done=True)
    lead = boss.spawn("lead", "agents:lead")
    solo = boss.spawn("solo", "agents:solo")
    w1 = lead.spawn("w1")
    w2 = lead.spawn("w2")
    w1.ask("which region?")
    w2.step("fetch")
    solo.step("sum", done=True)
    solo.finish({"sum": 3})
    lead.child_paused(w1, w1, "which region?")
    boss.child_paused(lead, w1, "which region?")
    fork = root(store, "boss-fork", parent_run_id="boss", fork_position=2)
    return {"boss": boss, "lead": lead, "solo": solo, "w1": w1, "w2": w2, "fork": fork}
