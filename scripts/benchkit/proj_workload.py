"""The projections benchmark's log (scripts/bench_projections.py): many short runs as
agents record them (tool calls, retries, failures, side effects with compensations,
decisions, checkpoints, questions, crashes and resumes), written straight to a store with
their run-index rows, as the engine commits them; and one long run for ``engine.state``."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator

from engine import events as ev
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState, evolve
from engine.store import Append, Store

from .log_workload import run_events

AGENTS = ("bench.agents:support", "bench.agents:research", "bench.agents:billing")
TOOLS = ("crm.lookup", "web.search", "payments.charge", "mail.send")
RUNS_PER_COMMIT = 50
SPACING = 2.0  # seconds between run starts: 10,000 runs span about 5.5 hours


class Calls:
    """One run's events as it records them: each durable call takes the next number."""

    def __init__(self, rng: random.Random, at: float) -> None:
        self.rng = rng
        self.at = at
        self.call = 0
        self.events: list[ev.Event] = []

    def tick(self, seconds: float = 0.05) -> float:
        self.at += seconds
        return self.at

    def tool(self, tool: str, *, fail: str | None = None, retries: int = 0) -> None:
        """A tool call: ``retries`` transient failures first, then success (or, with
        ``fail``, a final failure of that kind)."""
        self.call += 1
        c, side = self.call, tool in ("payments.charge", "mail.send")
        key = f"k-{uuid.UUID(int=self.rng.getrandbits(128)).hex[:16]}" if side else None
        self.events.append(
            ev.ToolInvoked(self.tick(), c, tool, {"q": c}, "5be0c2d9", key, side_effect=side)
        )
        for attempt in range(1, retries + 1):
            self.events.append(
                ev.ToolFailed(
                    self.tick(0.2), c, tool, "transient", "503", attempt=attempt, duration=0.2
                )
            )
            self.events.append(ev.RetryScheduled(self.tick(), c, tool, attempt + 1, 0.5))
        took = self.rng.lognormvariate(-2.5, 0.8)
        if fail is not None:
            self.events.append(
                ev.ToolFailed(self.tick(took), c, tool, fail, "refused", final=True, duration=took)
            )
        else:
            self.events.append(
                ev.ToolSucceeded(
                    self.tick(took), c, tool, {"ok": True, "id": c}, retries + 1, duration=took
                )
            )

    def decide(self) -> None:
        self.call += 1
        self.events.append(ev.LlmDecided(self.tick(0.9), self.call, "next", {"a": 1}, "9f2c"))

    def checkpoint(self, name: str) -> None:
        self.call += 1
        self.events.append(ev.Checkpoint(self.tick(), self.call, name))


def one_run(rng: random.Random, agent: str, at: float) -> list[ev.Event]:
    """The events of one run: mostly completed, some failed, paused, crashed and
    resumed, or abandoned with a compensation."""
    c = Calls(rng, at)
    c.events.append(ev.AgentStarted(at, agent, "bench.agents", {"ticket": rng.randrange(10**6)}))
    c.call += 1
    c.events.append(ev.PlanCreated(c.tick(), c.call, ["look", "act", "reply"]))
    fate = rng.random()
    for n in range(rng.randint(2, 6)):
        roll = rng.random()
        if roll < 0.5:
            c.tool(rng.choice(TOOLS), retries=1 if rng.random() < 0.1 else 0)
        elif roll < 0.8:
            c.decide()
        else:
            c.checkpoint(f"c{n}")
        if n == 1 and 0.90 <= fate < 0.95:  # the owner died here; another resumed the run
            c.events.append(ev.AgentResumed(c.tick(30.0), "host-2:4242", "owner died"))
    if fate < 0.82 or fate >= 0.90:
        c.events.append(ev.AgentFinished(c.tick(), {"done": True}))
    elif fate < 0.86:
        c.tool("payments.charge", fail="permanent")
        c.events.append(ev.AgentFailed(c.tick(), "payments.charge: refused", call=c.call))
    elif fate < 0.88:
        c.call += 1
        c.events.append(ev.HumanInputRequested(c.tick(), c.call, "approve the refund?"))
    else:
        c.tool("payments.charge")
        charged = c.call
        c.events.append(ev.CompensationStarted(c.tick(), charged, "payments.charge"))
        c.events.append(ev.Compensated(c.tick(), charged, "payments.charge", {"refunded": 1}))
        c.events.append(ev.AgentAbandoned(c.tick(), "cancelled by a person"))
    return c.events


def write_runs(store: Store, runs: int, seed: int = 7) -> int:
    """Append ``runs`` runs, ``RUNS_PER_COMMIT`` to a commit, each with its index row;
    the number of events written."""
    rng = random.Random(seed)
    start = time.time() - runs * SPACING - 60
    written = 0
    for first in range(0, runs, RUNS_PER_COMMIT):
        items: list[Append] = []
        rows = []
        for i in range(first, min(runs, first + RUNS_PER_COMMIT)):
            rid = uuid.UUID(int=rng.getrandbits(128)).hex
            events = one_run(rng, AGENTS[i % len(AGENTS)], start + i * SPACING)
            stream = run_stream(rid)
            state = RunState(run_id=rid)
            for position, e in enumerate(events, start=1):
                state = evolve(state, e, position)
                items.append(Append(stream, position, e))
            rows.append(RunWriter.index_row(state))
        store.append(items, runs=rows)
        written += len(items)
    return written


def long_run(store: Store, events: int, chunk: int = 1000) -> str:
    """One run of ``events`` events, written as the engine writes it (commits of
    ``chunk`` events, snapshots at the engine's cadence); its run id."""
    rid = uuid.uuid4().hex
    writer = RunWriter(store, RunState(run_id=rid))
    for batch in _chunks(run_events(events), chunk):
        writer.append(*batch)
    return rid


def _chunks(items: list[ev.Event], size: int) -> Iterator[list[ev.Event]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
