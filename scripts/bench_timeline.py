#!/usr/bin/env python
"""Benchmark ``agentlog timeline`` on a long run against a raw read in the same run.

Each repeat times, on a fresh store handle, (1) the baseline: reading the run's events
through ``Store.read`` and writing one bare line per event, and (2) the CLI's
``timeline`` and ``timeline --json`` commands in-process, writing to memory, first
reading the log (no timeline view), then reading the timeline view (built once, timed
as "view catch-up"). The report
gives the medians and each command's median ratio to the baseline (ratios are taken per
repeat, then the median), so a busy machine slows both sides alike.

    python scripts/bench_timeline.py                  # 10,000 events, 5 repeats
    python scripts/bench_timeline.py --events 50000 --repeat 3 --max-ratio 8

Exit status: 0, or 1 when ``--max-ratio`` is given and a command's ratio exceeds it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.log.history import run_stream  # noqa: E402
from engine.store import open_store  # noqa: E402
from projections.runner import Runner  # noqa: E402
from projections.views import timeline  # noqa: E402
from replay.cli.entry import run_cli  # noqa: E402
from tests.agents.kit import long_run  # noqa: E402


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _baseline(url: str, run_id: str) -> None:
    store = open_store(url)
    try:
        out = io.StringIO()
        for r in store.read(run_stream(run_id)):
            out.write(f"{r.position} {r.event.__struct_config__.tag}\n")
    finally:
        store.close()


def _command(url: str, *args: str) -> Callable[[], None]:
    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            if run_cli([*args, "--url", url]) != 0:
                raise SystemExit(f"timeline failed: {args}")

    return run


def _catch_up(url: str, run_id: str) -> None:
    store = open_store(url)
    try:
        Runner(store, [timeline.View()]).catch_up()
        if timeline.read(store, run_id) is None:
            raise SystemExit("the timeline view does not vouch for the run")
    finally:
        store.close()


def _repeat(
    repeat: int,
    url: str,
    run_id: str,
    commands: dict[str, Callable[[], None]],
    base: list[float],
    took: dict[str, list[float]],
    suffix: str,
) -> None:
    for _ in range(repeat):
        base.append(_timed(lambda: _baseline(url, run_id)))
        for name, fn in commands.items():
            took[name + suffix].append(_timed(fn))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--max-ratio", type=float, default=None)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-timeline-") as tmp:
        url = f"sqlite:///{tmp}/timeline.db"
        rid = long_run(url, a.events)
        commands = {
            "timeline": _command(url, "timeline", rid),
            "timeline --json": _command(url, "timeline", rid, "--json"),
        }
        _command(url, "timeline", rid)()  # warm: imports and the first open
        base: list[float] = []
        took: dict[str, list[float]] = {name: [] for name in commands}
        took |= {f"{name} (view)": [] for name in commands}
        _repeat(a.repeat, url, rid, commands, base, took, "")
        caught_up = _timed(lambda: _catch_up(url, rid))
        _repeat(a.repeat, url, rid, commands, base, took, " (view)")
    print(f"{a.events} events, median of {a.repeat} repeats; view catch-up {caught_up:.2f} s")
    print(f"{'raw read + one line each':28} {statistics.median(base) * 1000:9.1f} ms   1.00x")
    worst = 0.0
    for name, times in took.items():
        # each run of a command is paired with the baseline timed in the same repeat
        paired = base[: len(times)] if not name.endswith("(view)") else base[len(times) :]
        ratio = statistics.median(t / b for t, b in zip(times, paired, strict=True))
        worst = max(worst, ratio)
        print(f"{name:28} {statistics.median(times) * 1000:9.1f} ms {ratio:6.2f}x")
    return 1 if a.max_ratio is not None and worst > a.max_ratio else 0


if __name__ == "__main__":
    sys.exit(main())
