"""The engine's run search, on a SQLite file and on PostgreSQL: ``Catalog.key_claims``
lists every claim of a business key with how it ended (committed, compensated, released),
and ``Catalog.find`` picks runs from the run index by status, agent, start time and the
text of their input (secret-named fields redacted first)."""

from __future__ import annotations

from typing import Any

import pytest
from eventsourcing.cipher import AESCipher

from engine import Engine, Permanent
from engine.errors import AgentlogError, UsageError
from engine.kinds import KeyOutcome
from engine.runtime.run.catalog import Catalog
from tests.conftest import backends


def _agents(eng: Engine) -> dict[str, Any]:
    sent: list[str] = []

    @eng.tool(side_effect=True, key=lambda order: f"hold:{order}", compensate=lambda r: None)
    def hold(order: str, *, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return f"held {order}"

    @eng.tool(side_effect=True, key=lambda order: f"refuse:{order}")
    def refuse(order: str, *, idempotency_key: str) -> str:
        raise Permanent("no")

    @eng.agent
    def booking(run: Any, order: str, note: str = "", password: str = "") -> Any:
        hold(order)
        return run.ask("ship it?")

    @eng.agent
    def refusing(run: Any, order: str) -> Any:
        return refuse(order)

    return {"booking": booking, "refusing": refusing, "sent": sent}


@backends("sqlite", "postgres")
def test_key_claims_name_each_claiming_run_and_how_its_claim_ended(eng: Engine) -> None:
    """A compensated claim, then a new run's committed claim under the versioned key; a
    refused effect's claim is released; a key never claimed has no claims."""
    a = _agents(eng)
    first = eng.run(a["booking"], order="A")
    eng.abandon(first.run_id)
    second = eng.run(a["booking"], order="A")
    refused = eng.run(a["refusing"], order="B")
    assert refused.status == "failed"

    claims = eng.key_claims("hold:A")
    assert [(c.run_id, c.call, c.outcome) for c in claims] == [
        (first.run_id, 1, KeyOutcome.COMPENSATED),
        (second.run_id, 1, KeyOutcome.COMMITTED),
    ]
    assert claims[1].sent_key == "hold:A#v2" and claims[0].settled_at is not None
    assert [(c.run_id, c.outcome) for c in eng.key_claims("refuse:B")] == [
        (refused.run_id, KeyOutcome.RELEASED)
    ]
    assert eng.key_claims("hold:never") == []


@backends("sqlite", "postgres")
def test_find_picks_runs_by_status_agent_start_and_input_text(eng: Engine) -> None:
    """Each filter narrows the index's newest-first list; the input is searched in its
    JSON form and in its strings, never in a secret-named field."""
    a = _agents(eng)
    quoted = eng.run(a["booking"], order="A-123", note='say "hi"')
    other = eng.run(a["booking"], order="B-7")
    failed = eng.run(a["refusing"], order="C")
    ids = lambda found: [r.run_id for r in found]  # noqa: E731

    assert ids(eng.find()) == [failed.run_id, other.run_id, quoted.run_id]
    assert ids(eng.find(status="paused")) == [other.run_id, quoted.run_id]
    assert ids(eng.find(agent=eng.state(failed.run_id).agent)) == [failed.run_id]
    assert eng.find(since="1h") == eng.find()  # a span back: every run here is newer
    assert ids(eng.find(since=eng.state(other.run_id).started_at)) == [failed.run_id, other.run_id]
    assert ids(eng.find(input_contains="A-12")) == [quoted.run_id]
    assert ids(eng.find(input_contains='"order":"B-7"')) == [other.run_id]
    assert ids(eng.find(input_contains='say "hi"')) == [quoted.run_id]  # the string itself
    assert ids(eng.find(status="failed", input_contains="A-12")) == []
    with pytest.raises(UsageError, match="needs some text"):
        eng.find(input_contains="")


@backends("sqlite", "postgres")
def test_input_search_on_a_sealed_store_reads_with_the_key_and_refuses_without(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the cipher key the sealed inputs are searched, a secret-named field never
    (it is redacted first); without the key the search is one clear error, not a miss."""
    monkeypatch.setenv("AGENTLOG_CIPHER_KEY", AESCipher.create_key(32))
    eng = Engine.open(store_url)
    try:
        a = _agents(eng)
        r = eng.run(a["booking"], order="A-1", password="hunter2")
        assert [x.run_id for x in eng.find(input_contains="A-1")] == [r.run_id]
        assert eng.find(input_contains="hunter2") == []
        assert eng.find(input_contains="redacted") != []  # what users see is what is searched
    finally:
        eng.close()
    monkeypatch.delenv("AGENTLOG_CIPHER_KEY")
    keyless = Catalog(store_url, create=False)
    try:
        with pytest.raises(AgentlogError) as refused:
            keyless.find(input_contains="A-1")
    finally:
        keyless.close()
    assert "key" in str(refused.value).lower() and "hunter2" not in str(refused.value)
