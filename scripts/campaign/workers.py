"""The workers workload: a queue of runs served by worker processes that the campaign
SIGKILLs and restarts at random, and stops (SIGSTOP) past their lease then continues;
nobody calls recover. The runs (campaign/worker_agent.py) book effects at the HTTP
ledger under business keys, sleep durably, receive two messages the campaign sends
from outside with ``engine.send``, and call a child run.

A run's second message is held back until a share of the kills and stops happened
(run ``i`` of N after ``(i + 1) / N`` of them), so the last runs cannot end before the
last kill. When a worker dies (or is stopped) the campaign notes the runs whose lease
it held and times how long each waits until another worker holds it (its lease taken
over, or already let go by the new owner): the takeover times.

Counted, all of which must be 0: duplicated and lost effects (every run's four ops
stand exactly once at the ledger), duplicated and lost messages (each message
received once by its run), final-state mismatches (a run not completed or its output
wrong), a worker that does not exit 0 when drained at the end, anomalies.
"""

from __future__ import annotations

import math
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from engine.kinds import FINAL, LIVE, RunStatus

from .child import INLINE_WAIT_ENV
from .fleet import Fleet
from .ledger import URL_ENV, Ledger
from .ledgered import judge_books
from .report import Report
from .rounds import _mask, check_log

INLINE_WAIT = 0.2  # the agent's 0.8 s nap suspends: a worker must wake it at its time
LOOK = 0.02  # seconds between two looks of the campaign's loop
CHAOS_GAP = (0.5, 2.0)  # seconds between two kills or stops (all workers serving)
RESTART_AFTER = (0.0, 1.0)  # seconds a killed worker's slot stays empty
STOPPED_FOR = (1.5, 2.5)  # a stop lasts this many leases
AIM = 2.0  # seconds a kill may wait for its worker to hold a run
MODULE = "campaign.worker_agent"


@dataclass
class Watch:
    """A run whose lease a dead (or stopped) worker held at ``since``."""

    run_id: str
    owner: str
    since: float
    stopped: bool


@dataclass
class Plan:
    """The campaign's size: runs, kills, stops, workers, and their settings."""

    runs: int = 20
    kills: int = 5
    stops: int = 1
    workers: int = 3
    concurrency: int = 4
    ttl: float = 2.0
    max_seconds: float = 900.0


class WorkerCampaign:
    """One campaign on one store; ``run`` returns the report."""

    def __init__(self, url: str, workdir: Path, seed: int, plan: Plan, verbose: bool) -> None:
        from engine import Engine

        from . import worker_agent

        self.agent = worker_agent
        self.url, self.plan, self.verbose = url, plan, verbose
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        env = {URL_ENV: self.ledger.url, "AGENTLOG_LEASE_TTL": str(plan.ttl)}
        env[INLINE_WAIT_ENV] = str(INLINE_WAIT)
        self.engine = Engine.open(url)  # enqueues, sends and reads; never executes a run
        self.fleet = Fleet(url, MODULE, env, workdir, concurrency=plan.concurrency)
        self.report = Report(store=_mask(url), seed=seed)
        self.report.ledger = self.report.workers = True
        tag = f"{seed}-{uuid.uuid4().hex[:6]}"
        self.rids = [f"wjob-{tag}-{i}" for i in range(plan.runs)]
        self.sent: list[list[str]] = [[] for _ in self.rids]
        self.first = [0.0] * plan.runs  # when run i's first message goes
        self.second: list[float | None] = [None] * plan.runs  # once released
        events = plan.kills + plan.stops
        self.gates = [math.ceil((i + 1) * events / plan.runs) for i in range(plan.runs)]
        self.watched: list[Watch] = []
        self.restart_at: dict[int, float] = {}
        self.cont_at: dict[int, float] = {}
        self.aiming = 0.0  # since when the next kill waits for a busy worker

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"workers: {text}", file=sys.stderr, flush=True)

    # --- the campaign's loop ------------------------------------------------------

    def run(self) -> Report:
        started = time.monotonic()
        for i, rid in enumerate(self.rids):
            self.engine.enqueue(self.agent.job, run_id=rid, n=i)
            self.first[i] = started + self.rng.uniform(0.0, 1.5)
        for slot in range(self.plan.workers):
            self.fleet.start(slot)
        chaos_at = started + self.rng.uniform(*CHAOS_GAP)
        done_look = 0.0
        while True:
            now = time.monotonic()
            self.track(now)
            self.post(now)
            self.revive(now)
            if now >= done_look:
                if self.all_final():
                    break
                done_look = now + 0.25
            if now - started > self.plan.max_seconds:
                self.report.anomalies.append(f"runs not final after {self.plan.max_seconds:g} s")
                break
            if now >= chaos_at and self.chaos_left() and self.chaos():
                chaos_at = time.monotonic() + self.rng.uniform(*CHAOS_GAP)
            time.sleep(LOOK)
        self.finish()
        self.report.elapsed = time.monotonic() - started
        return self.report

    def all_final(self) -> bool:
        rows = {r.run_id: r.status for r in self.engine.store.runs()}
        return all(rows.get(rid) in FINAL for rid in self.rids)

    def post(self, now: float) -> None:
        """Send each run's messages when due: the first at its time, the second once
        its gate of kills and stops passed."""
        events = self.report.kills + self.report.stops
        for i, rid in enumerate(self.rids):
            if not self.sent[i] and now >= self.first[i]:
                self.send(i, rid)
            elif len(self.sent[i]) == 1 and self.second[i] is None and events >= self.gates[i]:
                self.second[i] = now + self.rng.uniform(0.0, 1.5)
            elif len(self.sent[i]) == 1 and self.second[i] is not None and now >= self.second[i]:
                self.send(i, rid)

    def send(self, i: int, rid: str) -> None:
        """Send run ``i`` its next message; a send the store refused (nothing posted:
        SQLite's lock under load) is counted and made again at the next look."""
        from engine.errors import StoreError

        value = f"m{i}.{len(self.sent[i]) + 1}"
        began = time.monotonic()
        try:
            self.engine.send(rid, "go", value)
        except StoreError as e:
            took = time.monotonic() - began
            self.report.send_errors.append(f"after {took:.2f} s: {str(e)[-160:]}")
            return
        self.sent[i].append(value)

    # --- kills, stops and what they leave -----------------------------------------

    def chaos_left(self) -> bool:
        return self.report.kills < self.plan.kills or self.report.stops < self.plan.stops

    def chaos(self) -> bool:
        """Kill or stop one worker (the busiest, most often) when all of them serve:
        whether it did."""
        slots = [s for s, p in self.fleet.procs.items() if not p.stopped and p.id]
        if len(slots) < self.plan.workers:
            return False  # one down already: the others take its runs over, timed alone
        kills_left = self.plan.kills - self.report.kills
        stops_left = self.plan.stops - self.report.stops
        if kills_left + stops_left <= 0:
            return False
        slot, held = self.target(slots)
        now = time.monotonic()
        self.aiming = self.aiming or now
        if not held and now - self.aiming < AIM:
            return False  # its worker holds no run: a moment later, maybe
        self.aiming = 0.0
        if self.rng.random() < stops_left / (kills_left + stops_left):
            self.stop(slot)
        else:
            self.kill(slot)
        return True

    def target(self, slots: list[int]) -> tuple[int, int]:
        """A slot to kill or stop (the busiest, most often) and how many runs it holds."""
        held = Counter({w.id: w.runs for w in self.engine.workers()})
        if self.rng.random() < 0.3:
            slot = self.rng.choice(slots)
        else:
            slot = max(slots, key=lambda s: (held[self.fleet.procs[s].id], self.rng.random()))
        return slot, held[self.fleet.procs[slot].id]

    def kill(self, slot: int) -> None:
        owner = self.fleet.procs[slot].id
        assert owner is not None
        since = time.monotonic()
        held: list[str] = []
        self.fleet.kill(slot, before_reap=lambda: held.extend(self.held_by(owner)))
        self.watched += [Watch(rid, owner, since, False) for rid in held]
        self.report.kills += 1
        self.restart_at[slot] = time.monotonic() + self.rng.uniform(*RESTART_AFTER)
        self.log(f"killed worker {slot} holding {len(held)} runs: {self.statuses(held)}")

    def stop(self, slot: int) -> None:
        proc = self.fleet.stop(slot)
        assert proc.id is not None
        since = time.monotonic()
        held = self.held_by(proc.id)
        self.watched += [Watch(rid, proc.id, since, True) for rid in held]
        self.report.stops += 1
        self.cont_at[slot] = since + self.plan.ttl * self.rng.uniform(*STOPPED_FOR)
        self.log(f"stopped worker {slot} holding {len(held)} runs: {self.statuses(held)}")

    def held_by(self, owner: str) -> list[str]:
        """The runs whose lease ``owner`` holds now (queued ones it claimed included)."""
        store, out = self.engine.store, []
        for status in sorted(LIVE):  # queued (claimed, not started) or running
            for row in store.runs(status):
                lease = store.lease(row.run_id)
                if lease is not None and lease[0] == owner:
                    out.append(row.run_id)
        return out

    def statuses(self, rids: list[str]) -> dict[str, int]:
        rows = {r.run_id: r for r in self.engine.store.runs()}
        return dict(Counter(f"{rows[r].agent.rsplit(':')[-1]} {rows[r].status}" for r in rids))

    def revive(self, now: float) -> None:
        """Restart killed workers and continue stopped ones when their time came."""
        for slot, when in list(self.restart_at.items()):
            if now >= when:
                del self.restart_at[slot]
                self.fleet.start(slot)
        for slot, when in list(self.cont_at.items()):
            if now >= when:
                del self.cont_at[slot]
                proc = self.fleet.cont(slot)
                mine = [w for w in self.watched if w.owner == proc.id]
                self.report.continued_by_itself += len(mine)  # nobody took them meanwhile
                self.watched = [w for w in self.watched if w.owner != proc.id]

    def track(self, now: float) -> None:
        """Time each watched run until another owner holds its lease (or let it go)."""
        store, left = self.engine.store, []
        for w in self.watched:
            lease = store.lease(w.run_id)
            if lease is not None and lease[0] == w.owner:
                left.append(w)
                continue
            took = now - w.since
            kind = "stop" if w.stopped else "death"
            self.log(f"{w.run_id} continued {took:.3f} s after its worker's {kind}")
            times = (
                self.report.takeover_after_stop if w.stopped else self.report.takeover_after_kill
            )
            times.append(took)
        self.watched = left

    # --- the end ------------------------------------------------------------------

    def finish(self) -> None:
        """Drain every worker (each must exit 0), then judge the runs and the books."""
        for slot in list(self.cont_at):
            self.fleet.cont(slot)
        procs = dict(self.fleet.procs)
        for slot, code in self.fleet.close().items():
            self.report.worker_exits[str(code)] += 1
            if code != 0:
                tail = procs[slot].stderr_tail().strip().splitlines()[-3:]
                self.report.anomalies.append(f"worker {slot} exited {code}: {tail}")
        wanted: Counter[str] = Counter()
        children: dict[str, list[str]] = {}
        for row in self.engine.store.runs():
            if row.parent_run_id is not None:
                children.setdefault(row.parent_run_id, []).append(row.run_id)
        for i, rid in enumerate(self.rids):
            wanted.update(self.agent.effects(i))
            self.judge_run(i, rid, children.get(rid, []))
        judge_books(self.ledger, wanted, self.report)

    def judge_run(self, i: int, rid: str, children: list[str]) -> None:
        """Run ``i`` completed with the messages sent to it, each received once; each
        call of it and of its ``children`` has one outcome."""
        state = self.engine.state(rid)
        want = self.agent.expected(i, self.sent[i])
        self.report.rounds += 1
        self.report.completed += state.status == RunStatus.COMPLETED
        if state.status != RunStatus.COMPLETED or state.output != want:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"run {rid}: {state.status} {state.output!r} != {want!r} ({state.error})"
            )
        events = self.engine.events(rid)
        got = Counter(
            e.data.get("value")
            for e in events
            if e.type == "message_received" and e.data.get("message_id")
        )
        self.report.duplicated_messages += sum(c - 1 for c in got.values() if c > 1)
        self.report.lost_messages += sum(1 for v in self.sent[i] if not got[v])
        for run_id in (rid, *children):
            check_log(self.engine, run_id, self.report.anomalies)
        if len(children) != 1:
            self.report.anomalies.append(f"run {rid} has {len(children)} children, not 1")

    def close(self) -> None:
        self.fleet.close()
        self.engine.close()
        self.ledger.close()
