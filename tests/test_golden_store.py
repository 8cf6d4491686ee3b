"""A store as users have it on disk: ``tests/golden/store_v1.sqlite``, recorded once by
``tests/golden/make_store.py`` (children, a supervised restart, a fork, a message, a lock,
a decision, snapshots, a paused run, a failed run). Today's code must read every run of it
to the recorded states, replay every run against today's agents without divergence, fold
the same state with and without its snapshots, build the views over it, and continue the
run it left paused."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import Engine
from engine.events import AgentStarted
from engine.log.history import run_stream
from engine.log.snapshots import snapshot_at_or_before
from engine.log.state import RunState, fold, lineage_of
from engine.secrets import SECRET_ENV
from tests.golden.make_store import REPLAY_KEY, tallies

GOLDEN = Path(__file__).parent / "golden"
RECORDED: dict[str, Any] = json.loads((GOLDEN / "store_v1.json").read_text())
EXPECTED: dict[str, Any] = RECORDED["runs"]


@pytest.fixture(autouse=True)
def _replay_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, REPLAY_KEY)


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A copy of the golden store (reading and continuing it must not touch the original)."""
    copy = tmp_path / "store.sqlite"
    shutil.copyfile(GOLDEN / "store_v1.sqlite", copy)
    return f"sqlite:///{copy}"


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    e = Engine.open(url)
    yield e
    e.close()


# Fields RunState gained since the store was recorded, each checked against what it is
# derived from (a field recorded then and gone now is still read through a property).
ADDED_SINCE = {"lineage", "waits_on"}


def test_every_run_reads_as_recorded(engine: Engine) -> None:
    assert sorted(r.run_id for r in engine.runs()) == sorted(EXPECTED)
    for run_id, seen in EXPECTED.items():
        assert [e.type for e in engine.events(run_id)] == seen["events"], run_id
        state = engine.state(run_id)
        now = msgspec.to_builtins(state)
        assert set(now) - set(seen["state"]) <= ADDED_SINCE, run_id
        read = {k: msgspec.to_builtins(getattr(state, k)) for k in seen["state"]}
        assert read == seen["state"], run_id
        started = engine.store.read(run_stream(run_id))[0].event
        assert isinstance(started, AgentStarted)
        assert state.lineage == lineage_of(started), run_id


def test_snapshots_fold_to_the_same_state_as_the_whole_log(engine: Engine) -> None:
    snapshotted = 0
    for run_id in EXPECTED:
        stream = run_stream(run_id)
        events = [(r.position, r.event) for r in engine.store.read(stream)]
        from_scratch = fold(events, RunState(run_id=run_id))
        assert engine.state(run_id) == from_scratch, run_id
        snapshotted += snapshot_at_or_before(engine.store, stream, None) is not None
    assert snapshotted, "the golden store holds snapshots"


def test_every_run_replays_against_todays_agents(engine: Engine) -> None:
    for run_id in EXPECTED:
        engine.verify(run_id)  # raises NonDeterminismError on the first divergence


def test_the_views_build_over_the_old_store(engine: Engine) -> None:
    """Every view folds the whole old log (the golden store was recorded with none built)."""
    by_status = Counter(seen["state"]["status"] for seen in EXPECTED.values())
    assert RECORDED["stats"]["runs"] == {"total": len(EXPECTED), "by_status": dict(by_status)}
    assert tallies(engine) == RECORDED["stats"]


def test_the_paused_run_continues_on_todays_code(engine: Engine) -> None:
    result = engine.answer("shop-2", True)
    assert result.status == "completed", result
    assert result.output == {"pick": "a", "amount": 4900, "receipt": "ch_o2", "ship": True}
