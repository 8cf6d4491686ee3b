"""What checking a run's log on every read costs: resume, state and events of a long run.

A run of ``--events`` events (one ``run.decide`` each) is recorded once, then copied into
fresh SQLite runs that crashed just before finishing. Each repeat resumes one (read,
check, fold, replay every recorded decision, finish) and reads ``state`` and ``events``.
The baseline, measured in the same process, is the bare read the check rides on:
``store.read`` of the same stream plus the fold. Figures are medians of ``--repeat``.

    python scripts/bench_read_check.py --events 10000 --repeat 7

Run it against two checkouts (``PYTHONPATH=/path/to/other/checkout``) to compare them.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine import Engine
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState, evolve
from engine.store import Append


def _recorded_run(events: int) -> tuple[Any, list[Any]]:
    """An agent making ``events - 2`` decisions, and the events of one run of it."""
    mem = Engine.open("memory://")

    @mem.agent(name="bench:decisions")
    def decisions(run: Any, n: int) -> int:
        total = 0
        for i in range(n):
            total += run.decide(f"d{i % 7}", lambda i=i: i)
        return total

    r = mem.run(decisions, n=events - 2)
    return decisions, [rec.event for rec in mem.store.read(run_stream(r.run_id))]


def _crashed_copy(engine: Engine, events: list[Any]) -> str:
    """A new run holding ``events`` without its finish: it crashed before the last commit."""
    rid = uuid.uuid4().hex
    stream = run_stream(rid)
    state = RunState(run_id=rid)
    for position, e in enumerate(events[:-1], start=1):
        state = evolve(state, e, position)
    items = [Append(stream, i, e) for i, e in enumerate(events[:-1], start=1)]
    engine.store.append(items, runs=[RunWriter.index_row(state)])
    return rid


def _check(run_id: str, recorded: list[Any]) -> None:
    """The log check every reader runs (absent from older checkouts: then 0)."""
    try:
        from engine.log.runcheck import RunCheck
    except ImportError:
        return
    RunCheck(run_id)(recorded)


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    agent, events = _recorded_run(args.events)
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine.open(f"sqlite:///{tmp}/bench.db")
        engine.agent(agent.fn, name=agent.name)
        done = _crashed_copy(engine, events)
        engine.resume(done)
        stream = run_stream(done)

        def bare() -> RunState:
            state = RunState(run_id=done)
            for r in engine.store.read(stream):
                state = evolve(state, r.event, r.position)
            return state

        def resume_one() -> None:
            rid = _crashed_copy(engine, events)  # setup, timed apart below
            t = time.perf_counter()
            assert engine.resume(rid).status == "completed"
            resumes.append(time.perf_counter() - t)

        def paused() -> RunState:
            # What Store.read did until it stopped toggling the collector (process-wide
            # state, from whatever thread reads): the cost of leaving it alone.
            gc.disable()
            try:
                return bare()
            finally:
                gc.enable()

        resumes: list[float] = []
        for _ in range(args.repeat):
            resume_one()
        recorded = engine.store.read(stream)
        rows = {
            "bare read + fold (baseline)": _median(bare, args.repeat),
            "bare read, collector paused": _median(paused, args.repeat),
            "the check alone": _median(lambda: _check(done, recorded), args.repeat),
            "resume (replays every call)": statistics.median(resumes),
            "state": _median(lambda: engine.state(done), args.repeat),
            "events": _median(lambda: engine.events(done), args.repeat),
        }
        engine.close()
    base = rows["bare read + fold (baseline)"]
    print(f"{len(events)} events, median of {args.repeat}")
    for name, seconds in rows.items():
        print(f"  {name:<30} {seconds * 1000:9.1f} ms   {seconds / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
