"""The pure fold's speed: ``engine.log.state.fold`` over a typical run's events, in memory.

A run of ``--calls`` durable calls mixes what agents record (a plan, steps, model
decisions, read-only and side-effecting tool calls with retries, checkpoints); the figure
is the median over ``--repeat`` folds of the whole list, in microseconds per event. Run it
twice in one session to compare two checkouts::

    python scripts/bench_fold.py
    PYTHONPATH=/path/to/older/checkout python scripts/bench_fold.py
"""

from __future__ import annotations

import argparse
import statistics
import time

from engine import events as ev
from engine.log.state import RunState, fold


def history(calls: int) -> list[tuple[int, ev.Event]]:
    """A run's events: started, a plan, then per call one of the usual shapes."""
    out: list[ev.Event] = [
        ev.AgentStarted(at=1.0, agent="m:f", import_path="m", input={"x": 1}),
        ev.PlanCreated(at=1.0, call=1, steps=["a", "b", "c"]),
    ]
    for n in range(2, calls + 2):
        at = float(n)
        match n % 5:
            case 0:
                out += [
                    ev.ToolInvoked(at=at, call=n, tool="charge", key=f"k{n}", side_effect=True),
                    ev.ToolFailed(
                        at=at, call=n, tool="charge", kind="transient", message="x", final=False
                    ),
                    ev.RetryScheduled(at=at, call=n, tool="charge", attempt=2, delay=0.1),
                    ev.ToolSucceeded(at=at, call=n, tool="charge", result={"id": n}, attempt=2),
                ]
            case 1:
                out += [
                    ev.ToolInvoked(at=at, call=n, tool="lookup", args={"q": n}),
                    ev.ToolSucceeded(at=at, call=n, tool="lookup", result={"rows": [n, n]}),
                ]
            case 2:
                out.append(ev.LlmDecided(at=at, call=n, name="triage", value={"next": "b"}))
            case 3:
                out += [
                    ev.StepStarted(at=at, call=n, name="b"),
                    ev.StepCompleted(at=at, call=n, name="b", duration=0.1),
                ]
            case _:
                out.append(ev.Checkpoint(at=at, call=n, name=f"c{n}"))
    out.append(ev.AgentFinished(at=float(calls + 2), output={"ok": True}))
    return list(enumerate(out, start=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    events = history(args.calls)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        fold(events, RunState(run_id="r"))
        times.append(time.perf_counter() - t)
    per = statistics.median(times) / len(events) * 1e6
    print(f"fold: {len(events)} events, median of {args.repeat}: {per:.3f} us/event")


if __name__ == "__main__":
    main()
