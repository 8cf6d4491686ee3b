"""What the worker-process tests share: the timing service (campaign/overlap.py) and a
fleet of worker processes (campaign/fleet.py) serving campaign/limits_agent.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))  # the campaign package

from campaign import limits_agent  # noqa: E402
from campaign.fleet import Fleet, Proc  # noqa: E402
from campaign.overlap import URL_ENV, Intervals  # noqa: E402

MODULE = "campaign.limits_agent"
TTL = "2"  # seconds: a stopped worker's runs are taken over soon


@contextmanager
def serving(
    url: str, workdir: Path, *, queues: str = "default", grace: float = 30.0
) -> Iterator[tuple[Intervals, Fleet]]:
    """The timing service and a fleet (no worker started yet), both ended after."""
    service = Intervals()
    env = {URL_ENV: service.url, "AGENTLOG_LEASE_TTL": TTL}
    fleet = Fleet(url, MODULE, env, workdir, queues=queues, grace=grace)
    try:
        yield service, fleet
    finally:
        fleet.close()
        service.close()


def started(fleet: Fleet, slot: int) -> Proc:
    """A worker in ``slot``, once it serves."""
    proc = fleet.start(slot)
    assert proc.serving.wait(120), proc.stderr_tail()
    return proc


__all__ = ["Fleet", "Intervals", "Proc", "limits_agent", "serving", "started"]
