"""Two peers negotiate a price by messages, then each signs the deal in an outside
registry while holding the shared lock ``deal``. The lock's fencing token goes to the
registry with the write, and the registry refuses a token lower than one it has seen:
a holder whose lease expired (it stalled, or its process died) cannot overwrite the
newer holder's work.

    python examples/peers.py                 # a SQLite file in a temporary directory
    AGENTLOG_URL=postgresql://... python examples/peers.py
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from _store import engine_for

from engine import Permanent

engine = engine_for("peers", PEERS_REGISTRY="registry.jsonl")


def registry() -> Path:
    return Path(os.environ.get("PEERS_REGISTRY") or "registry.jsonl")


def entries() -> list[dict[str, Any]]:
    if not registry().exists():
        return []
    return [json.loads(line) for line in registry().read_text().splitlines() if line]


def signed(key: str) -> dict[str, Any] | None:
    """The registry's entry under ``key`` (the verifier of an uncertain signature)."""
    return next((e for e in entries() if e["key"] == key), None)


@engine.tool(side_effect=True, key=lambda deal, party, fence, price: f"sign:{deal}:{party}")
def sign(deal: str, party: str, fence: int, price: int, *, idempotency_key: str) -> dict:
    """The outside registry: it records a signature once per key, and refuses a fencing
    token lower than the highest it has seen for the deal (a stale lock holder)."""
    registry().touch()
    with open(registry(), "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        seen = [json.loads(line) for line in f.read().splitlines() if line]
        same = [e for e in seen if e["key"] == idempotency_key]
        if same:
            return dict(same[0])
        highest = max((e["fence"] for e in seen if e["deal"] == deal), default=0)
        if fence < highest:
            raise Permanent(f"stale fence {fence} for {deal}: the registry has seen {highest}")
        entry = {"key": idempotency_key, "deal": deal, "party": party, "fence": fence}
        f.write(json.dumps({**entry, "price": price}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return {**entry, "price": price}


@engine.agent
def seller(run: Any, deal: str, floor: int) -> dict[str, Any]:
    """Answers offers until one reaches ``floor``; signs after the buyer has signed."""
    while True:
        offer = run.recv("offer", timeout=60)
        if offer is None:
            return {"party": "seller", "deal": None}
        if offer["price"] >= floor:
            run.send(offer["from"], "reply", {"accept": True, "price": offer["price"]})
            break
        run.send(offer["from"], "reply", {"accept": False, "counter": floor + 10})
    theirs = run.recv("signed", timeout=60)
    with run.lock("deal", ttl=30) as fence:
        mine = sign(deal, "seller", fence, offer["price"])
    return {"party": "seller", "price": offer["price"], "fence": fence, "signed": [theirs, mine]}


@engine.agent
def buyer(run: Any, deal: str, seller_id: str, budget: int) -> dict[str, Any]:
    """Offers low, meets the seller's counter half-way, signs when accepted."""
    price, rounds = 60, 0
    while True:
        rounds += 1
        run.send(seller_id, "offer", {"price": price, "from": run.run_id})
        reply = run.recv("reply", timeout=60)
        if reply is None:
            return {"party": "buyer", "deal": None}
        if reply["accept"]:
            break
        price = min(budget, (price + reply["counter"] + 1) // 2)
    with run.lock("deal", ttl=30) as fence:
        mine = sign(deal, "buyer", fence, price)
    run.send(seller_id, "signed", mine)
    return {"party": "buyer", "price": price, "fence": fence, "rounds": rounds}


@engine.agent
def market(run: Any, deal: str) -> list[dict[str, Any]]:
    s = run.spawn(seller, deal=deal, floor=90)
    b = run.spawn(buyer, deal=deal, seller_id=s.run_id, budget=120)
    return list(run.gather(s, b))


def main() -> int:
    result = engine.run(market, deal="d1")
    print(f"market {result.run_id}: {result.status}")
    for party in result.output or []:
        print(f"  {party['party']:6} price {party.get('price')} fence {party.get('fence')}")
    for e in entries():
        print(f"  registry: {e['party']} signed {e['deal']} at {e['price']} (fence {e['fence']})")
    engine.close()
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
