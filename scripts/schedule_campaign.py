#!/usr/bin/env python
"""Schedules under kills: one schedule ``every=2`` and two worker processes that are
SIGKILLed and restarted at random for a minute; then every tick while at least one
worker ran must have exactly one run, and no tick two.

Each worker (``tests.agents.schedule_agents.serve``) says when it is ready; the parent
notes when it kills it. A tick counts as covered when some worker was ready at or before
it and lived ``GRACE`` seconds past it (time for the pass that enqueues it). The report
counts ticks, covered ticks, runs, covered ticks without a run (``missing``), ticks with
more than one run (``doubled``) and runs of no tick of the schedule (``stray``): the last
three must be empty. Ticks while no worker ran may have a run (the latest one missed is
started when a worker comes back) or not.

    python scripts/schedule_campaign.py                       # SQLite, 60 s
    python scripts/schedule_campaign.py --seconds 120 --url postgresql://...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import Engine  # noqa: E402
from engine.runtime.schedules.cadence import parse_tick, tick_id  # noqa: E402

NAME = "tick2"
AGENT = "tests.agents.schedule_agents"
GRACE = 1.5  # seconds a worker must outlive a tick to have enqueued it
SERVE = f"from {AGENT} import serve; serve()"


@dataclass
class Life:
    """One worker process: when it was ready, when it was killed (None: still alive)."""

    slot: int
    ready: float
    ended: float | None = None

    def covers(self, tick: float) -> bool:
        return self.ready <= tick and self.ended is not None and tick + GRACE <= self.ended


@dataclass
class Report:
    seconds: float
    every: int
    kills: int = 0
    ticks: int = 0
    covered: int = 0
    runs: int = 0
    completed: int = 0
    missing: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)

    @property
    def damage(self) -> int:
        return len(self.missing) + len(self.doubled) + len(self.stray)


class Workers:
    """The worker processes of the campaign, one per slot, on the store at ``url``."""

    def __init__(self, url: str, slots: int) -> None:
        self.env = {**os.environ, "AGENTLOG_URL": url, "PYTHONPATH": str(ROOT)}
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.lives: list[Life] = []
        self.slots = slots

    def start(self, slot: int) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "ready <epoch>" once its engine and store are open
        if not line.startswith("ready "):
            proc.kill()
            raise RuntimeError(f"worker {slot} did not start: {line!r}")
        self.procs[slot] = proc
        self.lives.append(Life(slot, float(line.split()[1])))

    def kill(self, slot: int) -> None:
        proc = self.procs.pop(slot)
        ended = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        life = next(x for x in reversed(self.lives) if x.slot == slot and x.ended is None)
        life.ended = ended

    def kill_all(self) -> None:
        for slot in list(self.procs):
            self.kill(slot)


def churn(workers: Workers, seconds: float, rng: random.Random) -> int:
    """Kill and restart the workers at random until ``seconds`` have passed; the kills."""
    end = time.time() + seconds
    due = {slot: time.time() for slot in range(workers.slots)}  # each slot's next move
    kills = 0
    while (now := time.time()) < end:
        slot = min(due, key=due.__getitem__)
        if due[slot] > now:
            time.sleep(min(due[slot], end) - now)
            continue
        if slot in workers.procs:
            workers.kill(slot)
            kills += 1
            due[slot] = time.time() + rng.uniform(0.0, 3.0)  # down for a while
        else:
            workers.start(slot)
            due[slot] = time.time() + rng.uniform(1.0, 6.0)  # up for a while
    workers.kill_all()
    return kills


def campaign(url: str, seconds: float = 60.0, every: int = 2, seed: int = 0) -> Report:
    """Schedule ``tick`` every ``every`` seconds on ``url``, churn two workers for
    ``seconds``, and count the runs of each tick."""
    engine = Engine(url)
    try:
        from tests.agents.schedule_agents import tick

        if any(s.name == NAME for s in engine.schedules()):
            engine.unschedule(NAME)  # a store used before: this campaign's ticks only
        created = engine.schedule(NAME, tick, every=every).created_at
        workers = Workers(url, 2)
        report = Report(seconds, every)
        try:
            report.kills = churn(workers, seconds, random.Random(seed))
        finally:
            workers.kill_all()
        _count(engine, report, created, workers.lives)
        return report
    finally:
        engine.close()


def _count(engine: Engine, report: Report, created: float, lives: list[Life]) -> None:
    last = max(x.ended or 0.0 for x in lives)
    ticks = [
        float(t)
        for t in range(int(created // report.every + 1) * report.every, int(last) + 1, report.every)
    ]
    runs: dict[float, list[str]] = {}
    for r in engine.runs():
        if not r.run_id.startswith(NAME + "@"):
            continue
        tick = parse_tick(r.run_id[len(NAME) + 1 :])
        if tick is None or tick % report.every or tick <= created:
            report.stray.append(r.run_id)
            continue
        runs.setdefault(tick, []).append(r.run_id)
        report.runs += 1
        report.completed += r.status == "completed"
    report.ticks = len(ticks)
    for t in ticks:
        if any(x.covers(t) for x in lives):
            report.covered += 1
            if not runs.get(t):
                report.missing.append(tick_id(NAME, t))
    report.doubled = [ids[0] for ids in runs.values() if len(ids) > 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--url", default=None, help="a store URL (default: a new SQLite file)")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        url = a.url or f"sqlite:///{d}/schedules.db"
        report = campaign(url, a.seconds, a.every, a.seed)
    print(json.dumps({**asdict(report), "seed": a.seed, "damage": report.damage}, indent=2))
    return 1 if report.damage else 0


if __name__ == "__main__":
    sys.exit(main())
