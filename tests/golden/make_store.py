"""Record the golden store once: ``python -m tests.golden.make_store``.

It runs the agents of ``store_agents.py`` on a fresh SQLite store and keeps the file as
``store_v1.sqlite``, with what today's code reads from it in ``store_v1.json`` (every run's
status, event types and folded state). Never regenerate them to make a failing test pass:
they are a store as users have it on disk, written by the code of the day, and
``tests/test_golden_store.py`` holds today's code to them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import msgspec

from engine import Engine
from engine.polling import poll_until
from engine.secrets import SECRET_ENV

from . import store_agents as a

HERE = Path(__file__).parent
STORE = HERE / "store_v1.sqlite"
# The replay key the golden runs were hashed under (a test key: it guards nothing).
REPLAY_KEY = "agentlog-golden-store-v1"


def record(engine: Engine, work: Path) -> list[str]:
    """Run every scenario; the run ids, in the order they were made."""
    ledger = str(work / "ledger.txt")
    inbox = receiving(engine, "inbox-1")
    shop = engine.run(a.shop, run_id="shop-1", ledger=ledger, order="o1", to="inbox-1")
    assert shop.status == "paused", shop
    inbox.join()
    assert engine.answer("shop-1", True).status == "completed"
    fork = engine.rewind("shop-1", to="before-charge")
    assert fork.status == "paused", fork
    assert engine.answer(fork.run_id, False).status == "completed"
    inbox = receiving(engine, "inbox-2")
    paused = engine.run(a.shop, run_id="shop-2", ledger=ledger, order="o2", to="inbox-2")
    assert paused.status == "paused", paused
    inbox.join()
    team = engine.run(a.team, run_id="team-1", order="o3", marks=str(work / "marks.txt"))
    assert team.status == "completed", team
    assert engine.run(a.counter, run_id="counter-1", n=8).status == "completed"
    assert engine.run(a.broken, run_id="broken-1", order="o4").status == "failed"
    return [r.run_id for r in engine.runs()]


def receiving(engine: Engine, run_id: str) -> threading.Thread:
    """An ``inbox`` run waiting for its message (a recipient must exist before a send)."""
    inbox = threading.Thread(target=engine.run, args=(a.inbox,), kwargs={"run_id": run_id})
    inbox.start()
    poll_until(lambda: run_id in {r.run_id for r in engine.runs()}, None)
    return inbox


def seen(engine: Engine, run_ids: list[str]) -> dict[str, Any]:
    """What today's code reads of each run, and its views' counts of runs and tool calls."""
    runs = {
        rid: {
            "events": [e.type for e in engine.events(rid)],
            "state": msgspec.to_builtins(engine.state(rid)),
        }
        for rid in run_ids
    }
    return {"runs": runs, "stats": tallies(engine)}


def tallies(engine: Engine) -> dict[str, Any]:
    """The figures of ``engine.stats()`` that do not depend on timing."""
    stats = msgspec.to_builtins(engine.stats())
    tools = {t["tool"]: [t["calls"], t["failures"], t["attempt_failures"]] for t in stats["tools"]}
    return {"runs": stats["runs"], "tools": tools}


def main() -> None:
    os.environ[SECRET_ENV] = REPLAY_KEY
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = f"sqlite:///{work / 'store.sqlite'}"
        engine = Engine.open(url)
        try:
            run_ids = record(engine, work)
            expected = seen(engine, run_ids)
        finally:
            engine.close()
        shutil.copyfile(work / "store.sqlite", STORE)
    text = json.dumps(expected, ensure_ascii=False, indent=1, sort_keys=True)
    (HERE / "store_v1.json").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
