"""Verify before a deploy: every unfinished run (or every run of one status) replayed
against the current code, nothing executed, each divergence reported."""

from __future__ import annotations

from typing import Any

from ...errors import AgentlogError, UsageError
from ...kinds import FINAL, RunStatus
from ...log.history import rebuild
from ..run.repository import RunRepository
from .driver import Driver
from .driver import verify as verify_run


def verify_all(
    runs: RunRepository, driver: Driver, agent: str | None = None, status: str | None = None
) -> list[dict[str, Any]]:
    """``[{"run_id", "divergence"}]`` for each run that the current code does not replay
    ([] if none): the runs of ``agent`` (``module:qualname``; None: every agent) in
    ``status`` (None: every run not completed or abandoned). A run that cannot be replayed
    here (its agent does not import, its log is damaged) is reported with the reason;
    imported runs not adopted are history and are skipped. Writes nothing."""
    if status is not None and status not in set(RunStatus):
        raise UsageError(f"status must be one of {', '.join(RunStatus)}, not {status!r}")
    found: list[dict[str, Any]] = []
    for row in runs.store.runs(status):
        if (agent is not None and row.agent != agent) or (status is None and row.status in FINAL):
            continue
        try:  # a log that does not read is reported as such: the others still verify
            if rebuild(runs.store, row.run_id).imported:
                continue
            verify_run(runs, driver, row.run_id)
        except AgentlogError as e:
            found.append({"run_id": row.run_id, "divergence": " ".join(str(e).split())})
    return found
