"""A worker process (until ``agentlog worker`` exists): opens the engine on a store,
imports the agents' module, turns SIGTERM into a drain and serves until then.

    python scripts/campaign/workerproc.py URL MODULE [--queues Q,..] [--concurrency N]
        [--grace S]

Prints one JSON line when it serves (``{"worker": id, "pid": pid}``), one when SIGTERM
made it drain (``{"draining": id}``) and one when it stopped (``{"stopped": id,
"clean": bool}``); exits 0 after a clean drain, 3 after a
drain that had to let runs go at the grace. The lease's ttl comes from
``$AGENTLOG_LEASE_TTL``, the inline wait from ``$AGENTLOG_CAMPAIGN_INLINE_WAIT``; with
``$AGENTLOG_LOG_LEVEL`` set the engine's log lines go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1]
for path in (str(SCRIPTS.parent), str(SCRIPTS)):  # engine, tests.agents and campaign.*
    if path not in sys.path:
        sys.path.insert(0, path)

from campaign.child import open_engine  # noqa: E402 - the paths first


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("module", help="the agents' module, imported before serving")
    p.add_argument("--queues", default="default", help="comma-separated queue names")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--grace", type=float, default=30.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    if os.environ.get("AGENTLOG_LOG_LEVEL"):  # the engine's lines on stderr, as the CLI's
        from engine import observe

        observe.configure()
    importlib.import_module(a.module)
    engine = open_engine(a.url)
    worker = engine.worker(
        queues=tuple(a.queues.split(",")), concurrency=a.concurrency, grace=a.grace
    )

    def stop() -> None:
        worker.stop()
        print(json.dumps({"draining": worker.id}), flush=True)

    def drain(signum: int, frame: object) -> None:
        # Not in the handler itself: it may interrupt the worker holding a lock stop takes.
        threading.Thread(target=stop, name="drain", daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    print(json.dumps({"worker": worker.id, "pid": os.getpid()}), flush=True)
    try:
        clean = worker.run()
    finally:
        engine.close()
    print(json.dumps({"stopped": worker.id, "clean": clean}), flush=True)
    return 0 if clean else 3


if __name__ == "__main__":
    sys.exit(main())
