#!/usr/bin/env python
"""Benchmark the CLI's start-up against the bare interpreter, in the same run.

Two targets. Issue 9: ``agentlog runs`` on an empty store costs at most
``2 x (python -c "import msgspec") + open``, where ``open`` is what a fresh process pays to
open that empty store in-process (``open_store(url, create=False)``, its imports included,
then ``runs()`` and ``close()``); the ratio is ``runs / (2 * msgspec + open)``. Issue 24:
every read-only command costs at most ``2 x (python -c pass)``, on an empty store and on a
small store holding a few runs (a child-free agent, a paused run, a failed run and a fork).
Every process figure is the median of ``--repeat`` subprocess runs; the commands are run
round-robin (order reversed every other round) so load on a shared machine hits them alike.

Usage::

    python scripts/bench_cli.py                 # 15 repeats, prints, rewrites docs/bench_cli.md
    python scripts/bench_cli.py --repeat 5 --no-write
    git archive fix-fast engine projections replay | tar -x -C /tmp/before
    python -m compileall -q /tmp/before && python scripts/bench_cli.py --before /tmp/before
"""

from __future__ import annotations

import argparse
import ast
import compileall
import datetime as dt
import json
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
BARE, MSGSPEC = "python -c pass", "python -c 'import msgspec'"
IMPORT_ES, IMPORT_STORE = "import eventsourcing.sqlite", "import engine.store.sqlite"
IMPORT_QUICK = "import replay.cli.entry"  # what the console script imports first
BEFORE = "before: "  # the figures of --before's code
RUNS_EMPTY = "agentlog runs (empty store)"
OPEN = "open (in-process, first in a process)"
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
# Fills the small store; prints the ids the RUN commands name.
FILL = """
import json, sys
sys.path.insert(0, ".")
from engine import Engine
import agents
engine = Engine.open(sys.argv[1])
done = [engine.run(agents.hello, name=n).run_id for n in ("ann", "bob", "cy")]
engine.run(agents.asker)
engine.run(agents.failing)
fork = engine.rewind(done[0], to="greeted").run_id
engine.close()
print(json.dumps({"a": done[0], "b": done[1], "fork": fork}))
"""
# Read-only commands that need no run: measured on both stores.
STORE_WIDE = (
    ("runs",),
    ("runs", "--json"),
    ("runs", "--status", "completed"),
    ("stats",),
    ("stats", "--json"),
    ("locks",),
    ("workers",),
    ("schedules",),
    ("projections", "status"),
)
PLACEHOLDERS = {"{a}": "RUN", "{fork}": "FORK"}
# Read-only commands on one run (or two): measured on the small store. ``verify`` replays
# the log against the agent's code (it imports the agent module and the runtime).
ON_RUNS = (
    ("show", "{a}"),
    ("timeline", "{a}"),
    ("checkpoints", "{a}"),
    ("state", "{a}"),
    ("state", "{a}", "--at", "greeted"),
    ("context", "{a}"),
    ("tree", "{a}"),
    ("diff", "{a}", "{fork}"),
    ("export", "{a}"),
    ("runs", "--parent", "{a}"),
    ("verify", "{a}"),
)


def agentlog_command() -> list[str]:
    """The installed console script beside this interpreter (what users run)."""
    script = Path(sys.executable).with_name("agentlog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "replay"]


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    started = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if p.returncode != 0:
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stderr.decode()[-500:]}")
    return elapsed


def commands(empty: str, small: str, ids: dict[str, str]) -> dict[str, list[str]]:
    """Figure name -> argv: the interpreter baselines, then every read-only command."""
    agentlog = agentlog_command()
    found = {
        BARE: [sys.executable, "-c", "pass"],
        MSGSPEC: [sys.executable, "-c", "import msgspec"],
        # Where a reading command's time goes: the store's imports, then the CLI's.
        "python -c 'import eventsourcing.sqlite'": [sys.executable, "-c", IMPORT_ES],
        "python -c 'import engine.store.sqlite'": [sys.executable, "-c", IMPORT_STORE],
        "python -c 'import replay.cli.entry'": [sys.executable, "-c", IMPORT_QUICK],
        "agentlog --help": [*agentlog, "--help"],
    }
    for words in STORE_WIDE:
        name = " ".join(words)
        found[f"agentlog {name} (empty store)"] = [*agentlog, *words, "--url", empty]
        found[f"agentlog {name} (small store)"] = [*agentlog, *words, "--url", small]
    for words in ON_RUNS:
        argv = [w.format(**ids) for w in words]
        name = " ".join(PLACEHOLDERS.get(w, w) for w in words)
        found[f"agentlog {name} (small store)"] = [*agentlog, *argv, "--url", small]
    return found


def measure(
    repeat: int, empty: str, small: str, where: str, before: str | None = None
) -> dict[str, float]:
    """Median seconds per figure; process figures are interleaved round-robin. With
    ``before`` (a source tree: ``git archive REV engine projections replay``, compiled),
    every agentlog figure is measured on that code too, in the same rounds."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("AGENTLOG_URL", None)
    ids = json.loads(Path(where, "ids.json").read_text())
    argvs = commands(empty, small, ids)
    envs = dict.fromkeys(argvs, env)
    if before is not None:
        old = {**env, "PYTHONPATH": before}
        for name in [n for n in argvs if n.startswith("agentlog ")]:
            argvs[f"{BEFORE}{name}"], envs[f"{BEFORE}{name}"] = argvs[name], old
    samples: dict[str, list[float]] = {name: [] for name in argvs}
    opens: list[float] = []
    warm: list[float] = []
    for name, argv in argvs.items():
        timed(argv, envs[name], where)  # warm the page cache once
    for r in range(repeat):
        names = list(argvs) if r % 2 == 0 else list(reversed(argvs))
        for name in names:
            samples[name].append(timed(argvs[name], envs[name], where))
        probe = subprocess.run(
            [sys.executable, "-c", OPEN_PROBE, empty], env=env, capture_output=True, check=True
        )
        cold_s, warm_s = probe.stdout.split()
        opens.append(float(cold_s))
        warm.append(float(warm_s))
    result = {name: statistics.median(values) for name, values in samples.items()}
    result[OPEN] = statistics.median(opens)
    result["open (in-process, again)"] = statistics.median(warm)
    return result


def verdict(result: dict[str, float]) -> tuple[float, bool]:
    """Issue 9's figure: runs / (2 x msgspec + open), met at 1.00 or below."""
    budget = 2 * result[MSGSPEC] + result[OPEN]
    ratio = result[RUNS_EMPTY] / budget
    return ratio, ratio <= 1.0


def read_only(result: dict[str, float]) -> dict[str, float]:
    """Issue 24's figures: each read-only command against ``python -c pass``."""
    base = result[BARE]
    return {
        name: seconds / base
        for name, seconds in result.items()
        if name.startswith("agentlog ") and name != "agentlog --help"
    }


def speedups(result: dict[str, float]) -> list[float]:
    """Per command, before / now (with ``--before``)."""
    return [
        result[f"{BEFORE}{name}"] / result[name]
        for name in read_only(result)
        if f"{BEFORE}{name}" in result
    ]


def table(result: dict[str, float]) -> str:
    base = result[BARE]
    rows = ["| figure | ms (median) | x python -c pass |", "|---|---:|---:|"]
    for name, seconds in result.items():
        rows.append(f"| {name} | {seconds * 1000:.1f} | {seconds / base:.2f} |")
    ratio, ok = verdict(result)
    ratios = read_only(result)
    within = sum(1 for x in ratios.values() if x <= 2.0)
    rows.append("")
    rows.append(
        f"runs / (2 x msgspec + open) = **{ratio:.2f}** "
        f"(issue 9 target <= 1.00: {'met' if ok else 'NOT met'})  "
    )
    rows.append(
        f"read-only commands x python -c pass: median **{statistics.median(ratios.values()):.2f}**"
        f", best {min(ratios.values()):.2f}, worst {max(ratios.values()):.2f}; "
        f"{within} of {len(ratios)} within 2.00 (issue 24 target)"
    )
    gains = speedups(result)
    if gains:
        rows[-1] += "  "
        rows.append(
            f"before / now per read-only command: median **{statistics.median(gains):.2f}**, "
            f"least {min(gains):.2f}, most {max(gains):.2f}"
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


def cli_kit_agents() -> str:
    """The CLI tests' agents module (``AGENTS`` in tests/test_cli_kit.py, read, not run): a
    tool, a decision, checkpoints, a question, a failure; the small store is filled with them."""
    tree = ast.parse((ROOT / "tests" / "test_cli_kit.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["AGENTS"]:
            return str(ast.literal_eval(node.value))
    raise SystemExit("tests/test_cli_kit.py has no AGENTS")


def make_stores(where: str) -> tuple[str, str]:
    """An empty store and a small one (ids of its runs in ``ids.json``), in ``where``."""
    empty, small = f"sqlite:///{where}/empty.db", f"sqlite:///{where}/small.db"
    code = "import sys; from engine.store import open_store as o; o(sys.argv[1]).close()"
    subprocess.run([sys.executable, "-c", code, empty], check=True)
    Path(where, "agents.py").write_text(cli_kit_agents())
    env = {**os.environ}
    env.pop("AGENTLOG_URL", None)
    filled = subprocess.run(
        [sys.executable, "-c", FILL, small], cwd=where, env=env, capture_output=True, check=True
    )
    Path(where, "ids.json").write_bytes(filled.stdout.strip().splitlines()[-1])
    return empty, small


def compiled(before: str | None) -> None:
    """Bytecode for every source measured, written once before the clock: the processes run
    with PYTHONDONTWRITEBYTECODE=1 (as this machine's shells do), so without it each would
    compile the whole engine again (an installed package has its bytecode from pip)."""
    for tree in [ROOT, *([Path(before)] if before else [])]:
        for package in ("engine", "projections", "replay"):
            compileall.compile_dir(tree / package, quiet=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=15, help="runs per figure (default 15)")
    p.add_argument("--out", type=Path, default=DEFAULT_DOC, help="Markdown page to update")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--before", metavar="DIR", help="also time the code in DIR (PYTHONPATH)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    compiled(args.before)
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-cli-") as tmp:
        empty, small = make_stores(tmp)
        result = measure(args.repeat, empty, small, tmp, args.before)
    report = table(result)
    print(report)
    _, ok = verdict(result)
    if not args.no_write:
        block = "\n".join(
            [
                f"Command: `python scripts/bench_cli.py --repeat {args.repeat}"
                + (f" --before {args.before}" if args.before else "")
                + "`  ",
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
