"""The schedules' proof, short (scripts/schedule_campaign.py runs it for a minute): with
``every=2`` and two worker processes SIGKILLed and restarted at random for 15 s, every
tick while a worker ran has exactly one run, no tick has two, and no run belongs to no
tick of the schedule."""

from __future__ import annotations

import pytest
from conftest import backends

from scripts.schedule_campaign import campaign

pytestmark = pytest.mark.processes  # worker processes, killed with SIGKILL


@backends("sqlite", "postgres")
def test_every_tick_a_worker_ran_through_has_one_run_under_kills(store_url: str) -> None:
    report = campaign(store_url, seconds=15.0, every=2, seed=5)
    assert report.kills >= 2, report
    assert report.covered >= 1, report  # the run saw ticks a live worker had to start
    assert (report.missing, report.doubled, report.stray) == ([], [], []), report
    assert report.runs >= report.covered
