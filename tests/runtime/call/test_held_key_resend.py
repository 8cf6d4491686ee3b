"""A run whose business key another run holds, uncertain (its holder was killed after
the effect, before its outcome was committed: the window a deferred outcome widens to the
holder's next commit), waits, then re-sends under the key the holder's request went out
with (``key#v2`` once an effect under the key was undone), never the bare key, whose copy
at the service is the undone effect. And an effect whose loss only a person could settle
for an undo (a compensation, no verifier) is not deferred."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import service
from agents.kit import engine_call, python
from conftest import backends

from engine import Engine
from engine.runtime.call import ledger

MODULE = "tests.agents.held_key_agents"


def _ship(url: str, run_id: str, then: str, env: dict[str, str]) -> Any:
    p = python("-m", MODULE, url, run_id, "o1", then, env=env)
    return p.returncode, p.stdout, p.stderr


@backends("sqlite", "postgres")
def test_a_sibling_resends_under_the_key_a_killed_holder_sent(
    store_url: str, tmp_path: Path
) -> None:
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    rc, out, err = _ship(store_url, "r0", "ask", env)
    assert rc == 0, err[-3000:]
    assert engine_call(store_url, "abandon", "r0", env=env)["status"] == "abandoned"
    # The key's next effect goes out as ship:o1#v2; its holder is killed right after it.
    rc, _, err = _ship(store_url, "ra", "ask", {**env, "AGENTLOG_FAILPOINTS": "after_tool:1"})
    assert rc == -9, err[-3000:]
    e = Engine.open(store_url)
    try:
        held = ledger.read(e.store, "ship:o1")
        assert held.claim is not None and held.claim.run_id == "ra" and held.committed is None
        assert held.claim.sent_key == "ship:o1#v2"
    finally:
        e.close()
    rc, out, err = _ship(store_url, "rb", "end", env)
    assert rc == 0, err[-3000:]
    done = json.loads(out.strip().splitlines()[-1])
    assert done["status"] == "completed", done
    assert done["output"]["key"] == "ship:o1#v2", done  # the holder's request, deduped
    assert service.effects(svc)[("ship", "o1")] == 2  # the undone one, and one standing


@backends("sqlite", "postgres")
def test_an_effect_only_its_compensation_can_settle_is_not_deferred(
    store_url: str, tmp_path: Path
) -> None:
    """A tool that takes the key, has a compensation and no verifier: killed right after
    the effect, its resume would settle it by a re-send, but an abandon (a rewind's
    compensate) cannot without a person. So its outcome is not deferred: the abandon of
    the killed run finds it committed and voids it."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    rc, _, err = _ship(store_url, "rk", "ask", {**env, "AGENTLOG_FAILPOINTS": "after_outcome:1"})
    assert rc == -9, err[-3000:]
    done = engine_call(store_url, "abandon", "rk", env=env)
    assert done["status"] == "abandoned", done
    assert service.voids(svc) == {"ship:o1"}
    assert service.effects(svc)[("ship", "o1")] == 1
