"""Two hosts, a cut link: the cut-off worker writes nothing more once its lease is gone,
its run continues on the other host, and the link's return duplicates and corrupts
nothing (scripts/two_hosts.py: network namespaces, a veth pair, a PostgreSQL cluster of
the test's own on the veth address)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "two_hosts.py"
sys.path.insert(0, str(SCRIPT.parent))

from two_hosts import can_run  # noqa: E402

WHY = can_run()

# A worker thread that outlives its engine's close fails on the closed store during a
# later test: an error here, not a warning.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.mark.skipif(WHY is not None, reason=f"two hosts cannot be made here: {WHY}")
def test_a_cut_off_worker_stops_writing_and_its_run_continues_elsewhere() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert report["status"] == "completed" and report["output"] == 8
    assert report["lost_effects"] == 0 and report["duplicated_effects"] == 0
    assert report["written_after_the_link_came_back"] == 0
    assert report["verify"] == "completed"  # the log replays against the code, whole
    assert report["b_stopped"], "the cut-off worker never said it stopped writing"
