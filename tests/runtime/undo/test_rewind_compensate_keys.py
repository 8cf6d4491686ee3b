"""``rewind --effects compensate`` frees the compensated effect's key for a new effect: the
fork's charge reaches the payment service under a new key version (recorded in the log),
so the customer is charged once and the charge stands. Through the real CLI and the
demo's own payment service, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_kit import Workdir, sqlite_url

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def demo(request: pytest.FixtureRequest, tmp_path: Path) -> Workdir:
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    work = Workdir(tmp_path, url)
    work.ok("demo")
    return work


def _charges(work: Workdir) -> list[dict[str, object]]:
    world = json.loads((work.path / "agentlog-demo-payments.json").read_text())
    return list(world["charges"].values())


def test_a_compensating_rewind_charges_again_under_a_new_key_version(demo: Workdir) -> None:
    """The parent's charge is refunded, the fork's charge is a new one that stands (the
    fork's reply names it, its payment is "paid"), made once, under ``charge:<order>#v2``
    recorded in the fork's intent; nothing of the parent stands."""
    runs = demo.ok("runs", "--json").json()
    [original] = [x["run_id"] for x in runs if not x["parent_run_id"]]
    [before] = _charges(demo)
    r = demo.ok("rewind", original, "--to", "customer-loaded", "--effects", "compensate", "--json")
    fork = r.json()
    assert fork["status"] == "completed" and fork["standing"] == []
    [undone] = fork["compensated"]  # named in the rewind's output
    assert (undone["run_id"], undone["key"]) == (original, f"charge:{before['order_id']}")
    charges = _charges(demo)
    refunded = [c for c in charges if c["refunded"]]
    standing = [c for c in charges if not c["refunded"]]
    assert [c["charge_id"] for c in refunded] == [before["charge_id"]]
    assert len(standing) == 1, charges  # charged once, and it stands
    [new] = standing
    business = f"charge:{before['order_id']}"
    assert before["key"] == business and new["key"] == f"{business}#v2"
    assert fork["output"]["charge"] == new["charge_id"]
    assert fork["output"]["payment"] == "paid"
    assert new["charge_id"] in fork["output"]["reply"]

    events = demo.ok("timeline", fork["run_id"], "--json").json()
    [intent] = [e for e in events if e["type"] == "tool_invoked" and e["tool"] == "charge_card"]
    assert intent["key"] == business and intent["sent_key"] == f"{business}#v2"
    demo.ok("verify", fork["run_id"])
    assert len(_charges(demo)) == 2  # reading and verifying sent nothing
