"""A supervised parent's child handles replay as they ran (SQLite files and PostgreSQL):
after a one_for_all or rest_for_one restart replaced a sibling, the sibling's handle
shows the run it was spawned as until the parent waits for it, and the run that did its
work after, live, on ``verify`` and on a resume after a crash; an agent that passes
``handle.run_id`` to a tool is not told its replay diverged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents.kit import Crash
from conftest import backends
from test_supervision_kit import Counter, events_of

from engine import Engine, Supervisor
from engine.kinds import RunStatus

STORES = backends("sqlite", "postgres")


def _team(eng: Engine, tmp_path: Path, strategy: str, crash: bool = False) -> Any:
    """A team whose ``breaker`` fails its first attempt, restarting its sibling
    ``member`` (spawned first under one_for_all, after it under rest_for_one); it notes
    the member's ``run_id`` before and after waiting for it (a crash after the first
    note, once, if ``crash``)."""
    counter = Counter(tmp_path)

    @eng.tool
    def note(run_id: str) -> str:
        if crash and counter.bump("note") == 1:
            raise Crash("killed after the note")
        return run_id

    @eng.agent
    def member(run: Any) -> str:
        return "member"

    @eng.agent
    def breaker(run: Any) -> str:
        if counter.bump("breaker") == 1:
            raise RuntimeError("breaker broke")
        return "breaker"

    @eng.agent(supervise=Supervisor(strategy, max_restarts=2, within=60.0))  # type: ignore[arg-type]
    def team(run: Any) -> list[str]:
        if strategy == "rest_for_one":
            b, m = run.spawn(breaker), run.spawn(member)
        else:
            m, b = run.spawn(member), run.spawn(breaker)
        b.result()  # the restart replaces the member's run
        before = note(m.run_id)
        m.result()
        return [before, note(m.run_id)]

    return team


def _member_runs(eng: Engine, run_id: str, strategy: str) -> tuple[str, str]:
    """The member's first spawned run and the run its restart started."""
    call = 2 if strategy == "rest_for_one" else 1
    [restart] = [e for e in events_of(eng, run_id, "child_restarted") if e["call"] == call]
    return restart["previous_run_id"], restart["child_run_id"]


@STORES
@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_a_restarted_siblings_handle_verifies_as_it_ran(
    eng: Engine, tmp_path: Path, strategy: str
) -> None:
    """The member's handle showed its first run before the wait and the replacement
    after; verify replays both notes without a divergence."""
    team = _team(eng, tmp_path, strategy)
    result = eng.run(team)
    assert result.status == RunStatus.COMPLETED, result.error
    first, replacement = _member_runs(eng, result.run_id, strategy)
    assert first != replacement
    assert result.output == [first, replacement]
    assert eng.verify(result.run_id).status == RunStatus.COMPLETED


@STORES
@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_a_restarted_siblings_handle_resumes_as_it_ran(
    eng: Engine, tmp_path: Path, strategy: str
) -> None:
    """The parent is killed after noting the member's first run, before waiting for it:
    the resume replays the note, waits on the replacement (not the abandoned first run)
    and completes with the same two ids as an uninterrupted run."""
    team = _team(eng, tmp_path, strategy, crash=True)
    with pytest.raises(Crash):
        eng.run(team)
    [parent] = [r for r in eng.store.runs() if r.parent_run_id is None]
    result = eng.resume(parent.run_id)
    assert result.status == RunStatus.COMPLETED, result.error
    first, replacement = _member_runs(eng, result.run_id, strategy)
    assert result.output == [first, replacement]
    finished = events_of(eng, result.run_id, "child_finished")
    assert first not in [f["child_run_id"] for f in finished]
    assert eng.verify(result.run_id).status == RunStatus.COMPLETED
