"""kill -9 inside a run's prune transaction (failpoint ``in_prune``, a real process):
every run is whole or gone, never half; a second prune finishes the job, and the views
still equal a rebuild."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import backends
from test_cli_kit import clean_env

from engine import Engine, EngineConfig
from engine.log.history import run_stream
from projections import Runner
from projections.views import all_views

PRUNE = """
import sys, time
from engine import Engine, EngineConfig
eng = Engine(sys.argv[1], config=EngineConfig(wall=lambda: time.time() + 40 * 86400))
eng.prune(older_than="30d")
"""


@backends("sqlite", "postgres")
def test_a_prune_killed_mid_transaction_leaves_each_run_whole_or_gone(
    store_url: str, tmp_path: Path
) -> None:
    eng = Engine(store_url)
    try:

        @eng.tool(side_effect=True, key=lambda order: f"kill:{order}")
        def charge(order: str) -> str:
            return f"charged {order}"

        @eng.agent(name="tests:kill_buy")
        def buy(run: Any, order: str) -> str:
            run.checkpoint("start")
            return charge(order)

        runs = [eng.run(buy, order=f"o{i}").run_id for i in range(12)]
        before = {rid: [(e.position, e.type) for e in eng.events(rid)] for rid in runs}
        eng.stats()
        env = clean_env({"AGENTLOG_FAILPOINTS": "in_prune:9"})  # the 5th run's transaction
        proc = subprocess.run(
            [sys.executable, "-c", PRUNE, store_url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == -9, proc.stderr.decode()[-2000:]
        gone, whole = [], []
        for rid in runs:
            if eng.store.last_position(run_stream(rid)) == 0:
                assert eng.store.indexed_position(rid) is None, f"{rid}: index row left"
                gone.append(rid)
            else:
                assert [(e.position, e.type) for e in eng.events(rid)] == before[rid]
                assert eng.verify(rid).status == "completed"
                whole.append(rid)
        assert len(gone) == 4 and len(whole) == 8
        stats = eng.stats()
        Runner(eng.store, all_views()).rebuild()
        assert eng.stats() == stats and stats.runs.total == 8
        eng.close()
        eng = Engine(store_url, config=EngineConfig(wall=lambda: time.time() + 40 * 86400))
        assert sorted(eng.prune(older_than="30d")["run_ids"]) == sorted(whole)
        assert eng.store.runs() == []
    finally:
        eng.close()
