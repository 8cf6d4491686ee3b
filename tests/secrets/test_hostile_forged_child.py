"""A forged import that claims a real paused run as its child: answering the import is
refused (it is not adopted), and an answer passes down only to a run whose recorded
parent is the run being answered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import backends
from hostile_kit import docs_of, forge, honest_export, renumber

from engine import Engine
from engine.errors import UsageError
from replay import import_run

kit = Engine.open("memory://")


@kit.tool(side_effect=True, key=lambda ledger, cents: f"refund:{cents}")
def refund(ledger: str, cents: int, *, idempotency_key: str) -> int:
    """The counting service: every real refund is a line in ``ledger``."""
    path = Path(ledger)
    sent = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps([*sent, cents]))
    return cents


@kit.agent
def refunder(run: Any, ledger: str) -> str:
    if run.ask("send the 50,000-cent refund?") == "yes":
        refund(ledger, 50_000)
        return "refunded"
    return "kept"


def _claiming(child: str) -> bytes:
    """The honest payer export cut after its plan, then paused on ``child``'s question."""
    docs = docs_of(honest_export())[:3]
    paused = {**docs[-1], "type": "child_paused"}
    paused["event"] = {
        "type": "child_paused",
        "at": docs[-1]["event"]["at"],
        "call": 3,
        "child_run_id": child,
        "asking_run_id": child,
        "question": "send the 50,000-cent refund?",
    }
    return forge(renumber([*docs, paused]))


def _sent(ledger: Path) -> list[int]:
    return json.loads(ledger.read_text()) if ledger.exists() else []


@backends("sqlite", "postgres")
def test_a_forged_import_cannot_answer_a_real_run_it_claims_as_child(
    store_url: str, tmp_path: Path
) -> None:
    """The import is refused naming adopt; adopted, it is still refused (the real run's
    recorded parent is not the import); the real run is untouched and answers itself."""
    ledger = tmp_path / "refunds.json"
    eng = Engine(store_url)
    try:
        victim = eng.run(refunder, ledger=str(ledger))
        assert victim.status == "paused"
        rid, _ = import_run(eng, _claiming(victim.run_id), "forged.jsonl")
        with pytest.raises(UsageError, match=f"agentlog adopt {rid}"):
            eng.answer(rid, "yes")
        eng.adopt(rid)
        with pytest.raises(UsageError, match=f"not a child of run {rid}"):
            eng.answer(rid, "yes")
        assert _sent(ledger) == []
        assert eng.events(victim.run_id)[-1].type == "human_input_requested"
        assert eng.answer(victim.run_id, "yes").status == "completed"
        assert _sent(ledger) == [50_000]
    finally:
        eng.close()
