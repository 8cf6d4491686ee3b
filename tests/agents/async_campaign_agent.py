"""The crash campaign's async agent: ``async def`` tools issued concurrently with
``asyncio.gather`` against the fake outside service (tests/agents/service.py).

Each batch gathers read-only quotes, takes one async decision (``await run.decide``)
routing every operation to a tool, then gathers the side-effecting calls. Within a
gather, calls issued later finish first (each sleeps ``DELAY * (WIDTH - slot)``), so
call identities (taken in the order calls are issued) and completion order disagree.

    tool     key          idempotency_key  verify  compensate   on an uncertain outcome
    apay     business     yes              yes     void         verify, else re-send
    areserve default      yes              yes     void         verify, else re-send
    aship    default      yes              no      -            re-send, same key (deduped)
    anotify  business     no               yes     -            verify, else send
    anote    default      no               no      -            pause: a person answers
    afee     business, shared by two runs (the second gets it from the ledger)
    aquote   read-only

``python -m tests.agents.async_campaign_agent URL RUN_ID JSON_INPUT`` starts a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from engine import Engine

from . import service

engine = Engine.open()
DELAY = float(os.environ.get("AGENTLOG_CAMPAIGN_DELAY", "0.004"))
WIDTH = 4  # calls per gather
COMMIT_QUESTION = "commit the batch?"
HUMAN_TOOLS = ("anote",)  # a person's "done" stands in for their result


async def _perform(tool: str, op: str, key: str | None, slot: int) -> str:
    # Later-issued calls finish first: completion order is the reverse of issue order.
    await asyncio.sleep(DELAY * max(1, WIDTH - slot))
    return service.perform(tool, op, key)


def _receipt(found: str | None) -> dict[str, str] | None:
    return None if found is None else {"receipt": found}


def _by_key(key: str) -> dict[str, str] | None:
    return _receipt(service.by_key(key))


def _void(result: Any, idempotency_key: str | None = None) -> Any:
    return service.void(result["receipt"], idempotency_key)


@engine.tool
async def aquote(op: str) -> dict[str, Any]:
    await asyncio.sleep(DELAY / 2)
    service.read_only("aquote", op)
    return {"op": op, "cents": 100 + sum(map(ord, op)) % 89}


@engine.tool(side_effect=True, key=lambda op, slot: f"apay:{op}", verify=_by_key, compensate=_void)
async def apay(op: str, slot: int, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": await _perform("apay", op, idempotency_key, slot)}


@engine.tool(side_effect=True, verify=_by_key, compensate=_void)
async def areserve(op: str, slot: int, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": await _perform("areserve", op, idempotency_key, slot)}


@engine.tool(side_effect=True)
async def aship(op: str, slot: int, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": await _perform("aship", op, idempotency_key, slot)}


@engine.tool(
    side_effect=True,
    key=lambda op, slot: f"anotify:{op}",
    verify=lambda key: _receipt(service.by_op("anotify", key.split(":", 1)[1])),
)
async def anotify(op: str, slot: int) -> dict[str, str]:
    return {"receipt": await _perform("anotify", op, None, slot)}


@engine.tool(side_effect=True)
async def anote(op: str, slot: int) -> dict[str, str]:
    return {"receipt": await _perform("anote", op, None, slot)}


@engine.tool(side_effect=True, key=lambda group: f"afee:{group}", verify=_by_key)
async def afee(group: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": await _perform("afee", group, idempotency_key, WIDTH - 1)}


TOOLS = {"apay": apay, "areserve": areserve, "aship": aship, "anotify": anotify, "anote": anote}
ORDER = tuple(TOOLS)


async def route(ops: list[str], cents: list[int], start: int) -> list[str]:
    """The async 'model' routing a batch: deterministic, so an uncrashed run agrees."""
    await asyncio.sleep(0)
    return [ORDER[(c + start + i) % len(ORDER)] for i, c in enumerate(cents)]


@engine.agent(snapshot_every=7)
async def async_campaign(
    run: Any, order: str, ops: int, group: str, confirm: bool
) -> dict[str, Any]:
    receipts: dict[str, Any] = {"fee": (await afee(group))["receipt"]}
    for start in range(0, ops, WIDTH):
        batch = [f"{order}-{i}" for i in range(start, min(ops, start + WIDTH))]
        quotes = await asyncio.gather(*(aquote(op) for op in batch))
        routes = await run.decide("routes", route, batch, [q["cents"] for q in quotes], start)
        results = await asyncio.gather(
            *(
                TOOLS[which](op, slot)
                for slot, (op, which) in enumerate(zip(batch, routes, strict=True))
            )
        )
        for op, which, result in zip(batch, routes, results, strict=True):
            receipts[op] = which if which in HUMAN_TOOLS else result["receipt"]
        run.checkpoint("batch")
    if confirm:
        receipts["confirmed"] = run.ask(COMMIT_QUESTION)
    return receipts


@engine.tool(side_effect=True, verify=_by_key, compensate=_void)
async def charge(op: str, slot: int, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": await _perform("charge", op, idempotency_key, slot)}


@engine.tool(side_effect=True, key=lambda op, slot: f"post:{op}")
async def post(op: str, slot: int) -> dict[str, str]:
    """No verifier, no idempotency key: only a person can settle an uncertain post."""
    return {"receipt": await _perform("post", op, None, slot)}


@engine.agent
async def fan_out(run: Any, order: str, n: int = WIDTH, posts: bool = False) -> dict[str, Any]:
    """One gather of ``n`` charges (or posts) issued in order, finishing in reverse."""
    tool = post if posts else charge
    results = await asyncio.gather(*(tool(f"{order}-{slot}", slot) for slot in range(n)))
    # A person's "done" stands in for the result of a post nobody could verify.
    return {"receipts": [r["receipt"] if isinstance(r, dict) else r for r in results]}


def main(argv: list[str]) -> None:
    url, run_id, name = argv[:3]
    data = json.loads(argv[3]) if len(argv) > 3 else {}
    agent = {"async_campaign": async_campaign, "fan_out": fan_out}[name]
    r = Engine.open(url).run(agent, run_id=run_id, **data)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))


if __name__ == "__main__":
    main(sys.argv[1:])
