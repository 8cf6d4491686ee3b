"""The drill's rounds: one run of the agent, step after step in fresh processes (start,
resume after a kill, answer an uncertain effect), each step perhaps armed to die at a
failpoint or by a timer, until the run ends or waits on its own question."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.errors import UsageError
from engine.kinds import RunStatus

from .options import ENV, STEP_ENV, Options, encode

MAX_STEPS = 24  # a round that needs more steps is stopped (reported, never looped forever)
ROUND_KILLS = 3  # kills at most per round (recoveries of recoveries included)
STEP_SECONDS = 600.0  # a drilled step that runs longer is killed and the drill stops


@dataclass
class Kills:
    """The kills still to make, and how they are chosen (seeded)."""

    left: int
    rng: random.Random
    options: Options
    typical: float = 0.2  # seconds a step takes, for timer kills (the reference's)

    def arm(self, first: bool, made: int) -> tuple[str | None, float | None]:
        """A failpoint (``name:nth``) or a timer (seconds) for the next step, or neither."""
        if self.left <= 0 or made >= ROUND_KILLS or not (first or self.rng.random() < 0.5):
            return None, None
        if self.rng.random() < self.options.timer_share:
            return None, self.rng.uniform(0.0, self.typical)
        point = self.rng.choice(self.options.failpoints)
        return f"{point}:{self.rng.randint(1, 2)}", None


@dataclass
class Round:
    """One run's drill: its final result, its kills and the times they took to recover."""

    run_id: str
    url: str
    books: str
    doc: dict[str, Any] = field(default_factory=dict)
    kills: list[str] = field(default_factory=list)  # how each kill was made
    rto: list[float] = field(default_factory=list)  # seconds from a kill to progress again
    steps: int = 0
    seconds: float = 0.0
    stopped: bool = False  # MAX_STEPS steps did not end it

    @property
    def recoveries(self) -> int:
        return len(self.rto)


def drive(r: Round, options: Options, kills: Kills | None) -> Round:
    """Run round ``r`` to its end (a status other than running, or a question)."""
    cmd, pending = "run", []  # pending: when each kill not yet recovered from happened
    started = time.monotonic()
    while r.steps < MAX_STEPS:
        point, timer = kills.arm(r.steps == 0, len(r.kills)) if kills else (None, None)
        step = f"{r.run_id}#{r.steps}"
        r.steps += 1
        doc, died_at = _step(cmd, r, options, step, point, timer)
        if doc is None:  # killed
            r.kills.append(point.partition(":")[0] if point else "timer")
            pending.append(died_at)
            if kills:
                kills.left -= 1
            cmd = "resume"
            continue
        if pending:
            back = _went_live(r.books, step) or died_at
            r.rto.extend(max(0.0, back - t) for t in pending)
            pending = []
        r.doc = doc
        if doc.get("uncertain"):
            cmd = "answer"
        elif doc.get("status") == RunStatus.RUNNING:
            cmd = "resume"
        else:
            break
    else:
        r.stopped = True
    r.seconds = time.monotonic() - started
    return r


def _step(
    cmd: str, r: Round, options: Options, step: str, point: str | None, timer: float | None
) -> tuple[dict[str, Any] | None, float]:
    """One drilled process: its result (None if it was killed) and when it ended."""
    env = {**os.environ, ENV: encode(options), STEP_ENV: step}
    env.pop("AGENTLOG_FAILPOINTS", None)
    if point:
        env["AGENTLOG_FAILPOINTS"] = point
    argv = [sys.executable, "-m", "replay.drill", cmd, r.url, r.run_id, r.books]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timer if timer is not None else STEP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        if timer is None:
            late = f"drill: a step of run {r.run_id} ran over {STEP_SECONDS:.0f} s"
            raise UsageError(late) from None
    ended = time.time()
    if proc.returncode == -signal.SIGKILL:
        return None, ended
    if proc.returncode != 0 or not out.strip():
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"drill: {cmd} of run {r.run_id} exited {proc.returncode}: {last}")
    doc: dict[str, Any] = msgspec.json.decode(out.strip().splitlines()[-1])
    return doc, ended


def _went_live(books: str, step: str) -> float | None:
    from .books import Books

    b = Books(books)
    try:
        return b.went_live(step)
    finally:
        b.close()
