"""The model workload's agent: for every operation a planning decision that returns a
pydantic model (``-> Plan``) through a real ``httpx`` client from a local model server
that answers some requests with 429 (``raise_for_status``: the decision's RetryPolicy
retries them), the side-effecting tool the plan names (the flat campaign's tools, with
business and default keys, against its outside service), and a streamed summary
(``run.stream`` of a generator of 60-100 chunks read off a streaming HTTP response).

Every value the agent gets, live or replayed, is checked against what the model answers
(campaign/model_replies.py): a plan must be a ``Plan`` equal to the model's, a summary
the complete text. Each check is reported to the server (``/v1/check``), a wrong one as
a mismatch. ``campaign_mid_stream`` is a failpoint halfway through a stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx

from engine import Budget, Engine, RetryPolicy, failpoints
from tests.agents.campaign_agent import fee, notify, pay, quote, reserve, ship

from .model_replies import Plan, plan_for, stream_lines
from .model_server import URL_ENV

engine = Engine.open()
COMMIT_QUESTION = "commit the batch?"
HUMAN_TOOLS: tuple[str, ...] = ()
TOOLS = {"pay": pay, "reserve": reserve, "ship": ship, "notify": notify}
RETRY = RetryPolicy(max_attempts=8, initial=0.01, maximum=0.05)
BUDGET = Budget(tokens=10_000_000)  # never reached: the count is kept across crashes
_asked: set[tuple[str, str]] = set()  # decisions this process asked the model for
_clients: list[httpx.Client] = []  # this process's (a fork makes its own)


def _url(path: str) -> str:
    return os.environ[URL_ENV] + path


def _client() -> httpx.Client:
    if not _clients:
        _clients.append(httpx.Client(timeout=60))
    return _clients[0]


def plan(run_id: str, name: str, op: str, cents: int) -> Plan:
    """The planning model call: a 429 raises ``httpx.HTTPStatusError`` (transient)."""
    _asked.add((run_id, name))
    body = {"run": run_id, "name": name, "op": op, "cents": cents}
    r = _client().post(_url("/v1/plan"), json=body)
    r.raise_for_status()
    return Plan.model_validate_json(r.content)


def summary(run_id: str, name: str, op: str, receipt: str) -> Iterator[str]:
    """The streamed summary, line by line as the server writes them."""
    _asked.add((run_id, name))
    body = {"run": run_id, "name": name, "op": op, "receipt": receipt}
    with _client().stream("POST", _url("/v1/stream"), json=body) as r:
        r.raise_for_status()
        for k, line in enumerate(r.iter_lines()):
            if k == 30:
                failpoints.hit("campaign_mid_stream")  # half a stream read, none recorded
            yield line + "\n"


def check(run_id: str, name: str, got: Any, want: Any) -> None:
    """Report ``got`` (what the engine gave, live or replayed) against ``want``."""
    ok = type(got) is type(want) and got == want
    body = {
        "run": run_id,
        "name": name,
        "replayed": (run_id, name) not in _asked,
        "ok": ok,
        "detail": "" if ok else f"{type(got).__name__} {got!r:.200}",
    }
    _client().post(_url("/v1/check"), json=body).raise_for_status()


@engine.agent(snapshot_every=7, budget=BUDGET)
def model_campaign(run: Any, order: str, ops: int, group: str, confirm: bool) -> dict[str, Any]:
    rid = run.run_id
    out: dict[str, Any] = {"fee": fee(group)["receipt"]}
    for i in range(ops):
        op = f"{order}-{i}"
        cents = quote(op)["cents"]
        name = f"plan-{i}"
        p = run.decide(name, plan, rid, name, op, cents, retry=RETRY)
        check(rid, name, p, plan_for(op, cents))
        tool = p.tool if isinstance(p, Plan) else dict(p)["tool"]  # a wrong type: counted
        receipt = TOOLS[tool](op)["receipt"]
        out[op] = receipt
        name = f"summary-{i}"
        text = "".join(run.stream(name, summary, rid, name, op, receipt))
        check(rid, name, text, "".join(stream_lines(op, receipt)))
        out[f"{op}:summary"] = len(text)
        if i % 4 == 3:
            run.checkpoint("batch")
    if confirm:
        out["confirmed"] = run.ask(COMMIT_QUESTION)
    return out
