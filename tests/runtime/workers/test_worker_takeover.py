"""A worker takes over the runs of a dead worker at once, without waiting for the
dead one's lease to expire: here a queued run that a worker claimed (its lease taken,
the run not started yet) when its process died, as a SIGKILL between the claim and
the run's first event leaves it.

Found by the worker campaign, where such a run waited a whole lease (2.9 s with a 2 s
ttl) while running runs were taken in 0.1-0.5 s: a worker looked for dead owners only
among running and suspended runs, and a claim takes a queued run only once its lease
expired, so a claimed queued run waited out its lease (30 s by default)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine import Engine
from tests.conftest import backends
from tests.runtime.workers.worker_kit import ROOT, limits_agent, serving, started

PATIENCE = 20.0  # seconds: far more than a worker's pass, far less than the lease


def _dead_owner() -> str:
    """The owner id of an engine in a process that has exited (and was reaped): an
    owner this host can tell is gone."""
    code = "from engine import Engine\nprint(Engine.open('memory://').leases.owner)"
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, check=True
    )
    return p.stdout.strip()


@backends("sqlite", "postgres")
def test_a_queued_run_claimed_by_a_dead_worker_is_taken_over_at_once(
    store_url: str, tmp_path: Path
) -> None:
    engine = Engine.open(store_url)
    with serving(store_url, tmp_path) as (_, fleet):
        rid = engine.enqueue(limits_agent.limited, part="p", i=0, calls=1, seconds=0.0).run_id
        now = engine.config.wall()
        dead = _dead_owner()
        assert engine.store.queues.claim_next(("default",), dead, now + 3600, now) == rid
        started(fleet, 0)
        result = engine.wait(rid, timeout=PATIENCE)
    engine.close()
    assert result.status == "completed"
