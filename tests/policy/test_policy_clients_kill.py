"""A real SIGKILL after a real httpx POST landed: the run resumes with one effect.

A subprocess runs an agent whose side-effecting tool posts with httpx to a loopback
service; the process is killed (failpoint ``after_tool``) after the service answered and
before the outcome was recorded. ``engine.resume`` in the test process then resolves the
uncertain call: a plain tool asks a person (nothing re-sent), a keyed tool re-sends under
the same key (the service dedupes), a verified tool finds the charge. SQLite and
PostgreSQL.
"""

from __future__ import annotations

import pytest
from agents.kit import ROOT, python
from agents.loopback import loopback

from engine import Engine

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@STORES
@pytest.mark.parametrize("how", ["plain", "keyed", "verified"])
def test_killed_after_the_post_landed_resume_charges_once(
    store_url: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # resume imports tests.agents.http_agents
    with loopback() as svc:
        monkeypatch.setenv("AGENTLOG_TEST_HTTP", svc.url)
        env = {"AGENTLOG_TEST_HTTP": svc.url, "AGENTLOG_FAILPOINTS": "after_tool:1"}
        p = python("-m", "tests.agents.http_agents", store_url, "k1", "o1", how, env=env)
        assert p.returncode == -9, p.stderr[-3000:]
        assert len(svc.requests) == 1 and svc.charges("o1") == 1

        eng = Engine.open(store_url)
        try:
            assert eng.state("k1").status == "running"
            r = eng.resume("k1")
            if how == "plain":
                assert r.status == "paused" and "charge_plain" in (r.waiting or ""), r
                assert eng.resume("k1").status == "paused"
                assert len(svc.requests) == 1
                r = eng.answer("k1", "done")
            assert r.status == "completed", r
            sources = [e.data["source"] for e in eng.events("k1") if e.type == "tool_succeeded"]
            assert sources == [{"plain": "human", "keyed": "executed", "verified": "verified"}[how]]
        finally:
            eng.close()
        assert svc.charges("o1") == 1
        expected = {"plain": [None], "keyed": ["k1:1"] * 2, "verified": ["charge:o1"]}[how]
        assert svc.keys() == expected
