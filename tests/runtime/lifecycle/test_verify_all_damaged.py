"""``engine.verify_all`` over a store holding a run whose log does not read: that run is
reported with the reason and the others are still verified (one damaged run does not
hide every other run's divergence before a deploy)."""

from __future__ import annotations

from typing import Any

from conftest import backends, write_raw_row

from engine import Engine
from engine.log.history import run_stream


@backends("sqlite", "postgres")
def test_a_run_whose_log_does_not_read_is_reported_and_the_rest_are_verified(
    eng: Engine, store_url: str
) -> None:
    @eng.agent(name="tests:verify_damaged")
    def asker(run: Any) -> str:
        return str(run.ask("ok?"))

    bad = eng.run(asker).run_id
    good = eng.run(asker).run_id
    stream = run_stream(bad)
    write_raw_row(store_url, eng.store, "events", stream, 1, "agent_started", b"\xff\x00junk")
    found = {d["run_id"]: d["divergence"] for d in eng.verify_all()}
    assert set(found) == {bad}, found
    assert found[bad]
    assert good not in found
