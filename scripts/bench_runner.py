"""The projection runner's catch-up rate against raw reads of the same log.

Builds a log of ``--runs`` runs of ``--events`` events each (an ``AgentStarted`` with its
index row, then steps, written a run's worth per commit), then reads it whole with
``read_all`` (the raw rate) and catches a counting view up over it from position 0 (the
runner's rate; ``--views`` adds the product's views). ``--profile`` prints the top of a
cProfile of the catch-up. ``--live N`` then appends N runs one at a time, catching up
after each (a follower's work: each new run's id found in the index).

    python scripts/bench_runner.py                      # SQLite, 500 runs x 100 events
    python scripts/bench_runner.py --url postgresql://postgres@127.0.0.1/agentlog_test?schema=bench
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(HERE), str(HERE / "tests")]

from projection_kit import Count  # noqa: E402

from engine import events as ev  # noqa: E402
from engine.log.history import run_stream  # noqa: E402
from engine.store import Append, RunRow, Store, open_store  # noqa: E402
from projections import Runner  # noqa: E402
from projections.views import all_views  # noqa: E402


def build(store: Store, runs: int, events: int) -> None:
    t0 = 1_760_000_000.0
    for r in range(runs):
        run_id = uuid.uuid4().hex
        stream = run_stream(run_id)
        at = t0 + r
        batch = [Append(stream, 1, ev.AgentStarted(at=at, agent="bench:agent", import_path="b"))]
        batch += [
            Append(stream, p, ev.StepStarted(at=at + p / 1000, call=p, name=f"s{p % 7}"))
            for p in range(2, events + 1)
        ]
        row = RunRow(run_id, "bench:agent", "running", at, at + events / 1000, None, events)
        store.append(batch, runs=[row])


def raw_rate(store: Store) -> float:
    t = time.perf_counter()
    at, n = 0, 0
    while records := store.read_all(after=at, limit=1000):
        at = records[-1].global_position or at
        n += len(records)
    return n / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a store (default: a new SQLite file)")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--views", action="store_true", help="also the product's views")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--live", type=int, default=0, help="then follow N new runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(args.url or f"sqlite:///{tmp}/bench.db")
        if store.max_global_position() == 0:
            build(store, args.runs, args.events)
        head = store.max_global_position()
        raw = raw_rate(store)
        views = [Count(), *(all_views() if args.views else [])]
        runner = Runner(store, views)
        for v in views:
            store.views.reset(v.table(), runner.version(v))
        profile = cProfile.Profile() if args.profile else None
        t = time.perf_counter()
        if profile:
            profile.enable()
        read = runner.catch_up()
        if profile:
            profile.disable()
        rate = read / (time.perf_counter() - t)
        print(
            f"{store.name}: {head} events; raw read_all {raw:,.0f}/s; catch-up of "
            f"{', '.join(v.name for v in views)} {rate:,.0f}/s ({rate / raw:.2f} of raw)"
        )
        if profile:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        if args.live:
            t = time.perf_counter()
            for _ in range(args.live):
                build(store, 1, args.events)
                runner.catch_up()
            rate = args.live / (time.perf_counter() - t)
            print(f"following: {rate:,.0f} new runs/s caught up one by one")
        store.close()


if __name__ == "__main__":
    main()
