"""LangGraph #8039, many rounds: a node SIGKILLed right after its post reached a counting
service, re-run from another process (tests/integrations/lg_crash_kit.py does one round's
stages). Counts, per saver and store, the rounds whose post was sent more than once.

    python scripts/langgraph_crash.py --rounds 50                  # SQLite and SqliteSaver
    python scripts/langgraph_crash.py --rounds 50 --postgres URL   # and PostgreSQL

With AgentlogSaver (a durable node, an ``@engine.tool(side_effect=True)`` with a verifier)
every round posts once; with SqliteSaver and a plain call, every round posts twice.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "tests" / "integrations" / "lg_crash_kit.py"


def one_round(saver: str, url: str, work: Path) -> int:
    """The posts of one round (start, resume killed after the post, continue)."""
    service = work / f"service-{uuid.uuid4().hex}.txt"
    thread = uuid.uuid4().hex
    for stage, kill in (("start", "0"), ("resume", "1"), ("continue", "0")):
        env = {**os.environ, "KILL_AFTER_SEND": kill}
        argv = [sys.executable, str(KIT), saver, url, thread, stage, str(service)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode != (-9 if kill == "1" else 0):
            raise SystemExit(f"{saver} {stage}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return len(service.read_text().split())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--postgres", help="a PostgreSQL URL for AgentlogSaver's PostgreSQL rounds")
    p.add_argument("--no-sqlite-saver", action="store_true", help="skip SqliteSaver's rounds")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = [("agentlog", f"sqlite:///{work}/agentlog.db", "AgentlogSaver on SQLite")]
        if args.postgres:
            cases.append(("agentlog", args.postgres, "AgentlogSaver on PostgreSQL"))
        if not args.no_sqlite_saver:
            cases.append(("sqlite", str(work / "lg.sqlite"), "SqliteSaver, plain call"))
        print("| saver | rounds | posted once | posted more than once |")
        print("| --- | ---: | ---: | ---: |")
        for saver, url, label in cases:
            posts = [one_round(saver, url, work) for _ in range(args.rounds)]
            once = sum(1 for n in posts if n == 1)
            print(f"| {label} | {args.rounds} | {once} | {args.rounds - once} |", flush=True)


if __name__ == "__main__":
    main()
