#!/usr/bin/env python
"""Benchmark the CLI's start-up against the bare interpreter, in the same run.

Target (issue 9): ``agentlog runs`` on an empty store costs at most
``2 x (python -c "import msgspec") + open``, where ``open`` is what a fresh process pays to
open that empty store in-process (``open_store(url, create=False)``, its imports included,
then ``runs()`` and ``close()``). Every process figure is the median of ``--repeat``
subprocess runs; the commands are run round-robin (order reversed every other round) so
load on a shared machine hits them alike. The ratio is ``runs / (2 * msgspec + open)``.

Usage::

    python scripts/bench_cli.py                 # 15 repeats, prints, rewrites docs/bench_cli.md
    python scripts/bench_cli.py --repeat 5 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "bench_cli.md"
BEGIN, END = "<!-- bench_cli:begin -->", "<!-- bench_cli:end -->"
# Times, in a fresh interpreter, the first open of the store: what a CLI process pays.
OPEN_PROBE = """
import sys, time
t = time.perf_counter()
from engine.store import open_store
s = open_store(sys.argv[1], create=False)
s.runs()
s.close()
cold = time.perf_counter() - t
t = time.perf_counter()
s = open_store(sys.argv[1], create=False)
s.runs()
s.close()
print(cold, time.perf_counter() - t)
"""


def agentlog_command() -> list[str]:
    """The installed console script beside this interpreter (what users run)."""
    script = Path(sys.executable).with_name("agentlog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "replay"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if p.returncode != 0:
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stderr.decode()[-500:]}")
    return elapsed


def measure(repeat: int, url: str) -> dict[str, float]:
    """Median seconds per figure; process figures are interleaved round-robin."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("AGENTLOG_URL", None)
    agentlog = agentlog_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import msgspec'": [sys.executable, "-c", "import msgspec"],
        "agentlog runs (empty store)": [*agentlog, "runs", "--url", url],
        "agentlog --help": [*agentlog, "--help"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    opens: list[float] = []
    warm: list[float] = []
    for argv in commands.values():
        timed(argv, env)  # warm the page cache and the bytecode caches once
    for r in range(repeat):
        names = list(commands) if r % 2 == 0 else list(reversed(commands))
        for name in names:
            samples[name].append(timed(commands[name], env))
        probe = subprocess.run(
            [sys.executable, "-c", OPEN_PROBE, url], env=env, capture_output=True, check=True
        )
        cold_s, warm_s = probe.stdout.split()
        opens.append(float(cold_s))
        warm.append(float(warm_s))
    result = {name: statistics.median(values) for name, values in samples.items()}
    result["open (in-process, first in a process)"] = statistics.median(opens)
    result["open (in-process, again)"] = statistics.median(warm)
    return result


def verdict(result: dict[str, float]) -> tuple[float, bool]:
    budget = (
        2 * result["python -c 'import msgspec'"] + result["open (in-process, first in a process)"]
    )
    ratio = result["agentlog runs (empty store)"] / budget
    return ratio, ratio <= 1.0


def table(result: dict[str, float]) -> str:
    base = result["python -c pass"]
    rows = ["| figure | ms (median) | x python -c pass |", "|---|---:|---:|"]
    for name, seconds in result.items():
        rows.append(f"| {name} | {seconds * 1000:.1f} | {seconds / base:.2f} |")
    ratio, ok = verdict(result)
    rows.append("")
    rows.append(
        f"runs / (2 x msgspec + open) = **{ratio:.2f}** "
        f"(target <= 1.00: {'met' if ok else 'NOT met'})"
    )
    return "\n".join(rows)


def write_doc(path: Path, block: str) -> None:
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = f"{head}{BEGIN}\n{block}\n{END}{tail}"
    else:
        text += f"\n{BEGIN}\n{block}\n{END}\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=15, help="runs per figure (default 15)")
    p.add_argument("--out", type=Path, default=DEFAULT_DOC, help="Markdown page to update")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-cli-") as tmp:
        url = f"sqlite:///{tmp}/empty.db"
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from engine.store import open_store as o; o(sys.argv[1]).close()",
                url,
            ],
            check=True,
        )
        result = measure(args.repeat, url)
    report = table(result)
    print(report)
    _, ok = verdict(result)
    if not args.no_write:
        block = "\n".join(
            [
                f"Command: `python scripts/bench_cli.py --repeat {args.repeat}`  ",
                f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC  ",
                f"Machine: {os.cpu_count()} cores, shared (other work running); "
                f"{platform.system()} {platform.machine()}, Python {platform.python_version()}  ",
                f"Repeats: {args.repeat} per figure; total runtime "
                f"{time.perf_counter() - started:.0f} s",
                "",
                report,
            ]
        )
        write_doc(args.out, block)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
