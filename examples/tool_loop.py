"""The shape most agents have: a model that answers with tool calls (OpenAI chat-completions
messages), the tools run durably, their results appended as ``role: "tool"`` messages,
and round again until the model answers without tool calls.

    python examples/tool_loop.py             # a SQLite file in a temporary directory
    AGENTLOG_URL=postgresql://... python examples/tool_loop.py

The model here is scripted (deterministic, no network, no key); the comment above
``chat`` says how to put a real client in its place. ``chat`` is an ``@engine.model``:
every model turn is a recorded decision, retried under its policy (the script's first
request gets a 429 once), and a resumed run does not ask the model again for a turn it
already has. The
refund is a side effect under a business key (``refund:ORDER``), sent to an outside
"payments service" (a file with a line per request it receives), so a crash anywhere,
even between the request and its record, ends with one refund.

``python examples/tool_loop.py RUN_ID ORDER`` names the run and the order. Kill it while
it runs (SIGKILL), then ``agentlog resume RUN_ID`` (same ``AGENTLOG_URL``,
``TOOL_LOOP_PAYMENTS`` and ``TOOL_LOOP_CALLS``) finishes it. tests/test_tool_loop.py does
that. ``TOOL_LOOP_GATE=DIR`` makes the model's last turn (or, with
``TOOL_LOOP_GATE_AT=refund``, the refund once sent) create ``DIR/reached`` and wait for
``DIR/go`` (where a test kills it).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _store import engine_for

from engine import Permanent, RetryPolicy

engine = engine_for("tool_loop", TOOL_LOOP_PAYMENTS="payments.log", TOOL_LOOP_CALLS="calls.log")
MAX_TURNS = 8


def _file(variable: str, default: str) -> Path:
    return Path(os.environ.get(variable) or default)


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:  # one line a write, appended whole
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _gate(point: str) -> None:
    """Stop at ``point`` ("refund": the request sent, its outcome not yet recorded;
    "answer": the model's last turn) when the test that kills the process asks."""
    gate = os.environ.get("TOOL_LOOP_GATE")
    if gate and os.environ.get("TOOL_LOOP_GATE_AT", "answer") == point:
        Path(gate, "reached").touch()
        deadline = time.monotonic() + 300
        while not Path(gate, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


# --- the outside world: an order book and a payments service --------------------------

ORDERS = {"o-17": {"customer": "c-9", "cents": 1250}, "o-18": {"customer": "c-9", "cents": 990}}


def refunded(key: str) -> dict[str, Any] | None:
    """The payments service's record of the refund under ``key`` (the verifier of a
    refund whose outcome a crash left uncertain), or None if it never arrived."""
    for line in _lines(_file("TOOL_LOOP_PAYMENTS", "payments.log")):
        got = json.loads(line)
        if got["key"] == key:
            return got
    return None


@engine.tool
def lookup_order(order_id: str) -> dict[str, Any]:
    if order_id not in ORDERS:
        raise Permanent(f"no order {order_id}")
    return {"order_id": order_id, **ORDERS[order_id]}


@engine.tool(side_effect=True, key=lambda order_id, cents: f"refund:{order_id}", verify=refunded)
def issue_refund(order_id: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
    # A real payments API takes ``idempotency_key`` as its Idempotency-Key header. This
    # one writes a line for every request it receives: a duplicate would show.
    receipt = {"key": idempotency_key, "order_id": order_id, "cents": cents}
    _append(_file("TOOL_LOOP_PAYMENTS", "payments.log"), json.dumps(receipt))
    _gate("refund")
    return receipt


@engine.tool
def get_balance(customer: str) -> dict[str, Any]:
    """The customer's store credit: 2500 cents plus the refunds of their orders."""
    mine = {o for o, order in ORDERS.items() if order["customer"] == customer}
    receipts = [json.loads(line) for line in _lines(_file("TOOL_LOOP_PAYMENTS", "payments.log"))]
    cents = 2500 + sum(r["cents"] for r in receipts if r["order_id"] in mine)
    return {"customer": customer, "cents": cents}


TOOLS = {t.__name__: t for t in (lookup_order, issue_refund, get_balance)}


def _schema(name: str, **params: str) -> dict[str, Any]:
    props = {p: {"type": t} for p, t in params.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": props}},
    }


# What a real model is told of the tools (the request's ``tools=``).
SCHEMAS = [
    _schema("lookup_order", order_id="string"),
    _schema("issue_refund", order_id="string", cents="integer"),
    _schema("get_balance", customer="string"),
]


# --- the model -------------------------------------------------------------------------
# A real client instead of the script (pip install openai; OPENAI_API_KEY set): the same
# decorator, this body.
#
#     from openai import OpenAI
#     client = OpenAI(max_retries=0)  # the decision's RetryPolicy retries 429s and 5xx
#
#     @engine.model(retry=RetryPolicy(max_attempts=5), timeout=60)
#     def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
#         resp = client.chat.completions.create(
#             model="gpt-4o-mini", messages=messages, tools=SCHEMAS
#         )
#         return resp.model_dump(exclude_none=True)
#
# Each call inside a run is a recorded decision (``llm_decided``, with the response's
# ``usage`` as its tokens); a resumed run gets the response back from the log and does
# not call the model for that turn again. (Returning the SDK's response itself, declared
# ``-> ChatCompletion``, works as well: engine.codec records a pydantic model and gives
# it back as one; append ``resp.choices[0].message.model_dump(exclude_none=True)``.)


def _tool_call(id: str, name: str, **arguments: Any) -> dict[str, Any]:
    fn = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": id, "type": "function", "function": fn}


def _results(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool results the messages hold, by tool call id."""
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


def _response(turn: int, messages: list[dict[str, Any]], message: dict[str, Any]) -> Any:
    """``message`` as a chat completion (the shape ``resp.model_dump()`` gives)."""
    done = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "finish_reason": done}
    used = {"prompt_tokens": 30 * len(messages), "completion_tokens": 25}
    return {"id": f"chatcmpl-{turn}", "choices": [choice], "usage": used}


def _rate_limited(counted: Path) -> None:
    """The scripted model's first request is refused once with HTTP 429, as a busy API
    refuses it (the error a real client raises: ``httpx.HTTPStatusError``)."""
    try:
        import httpx  # installed with any model SDK (openai, anthropic)
    except ImportError:
        return
    if any(line.endswith("429") for line in _lines(counted)):
        return
    _append(counted, "turn 1: 429")
    request = httpx.Request("POST", "https://api.example.com/v1/chat/completions")
    response = httpx.Response(429, request=request, headers={"retry-after": "0"})
    raise httpx.HTTPStatusError("429 Too Many Requests", request=request, response=response)


@engine.model(retry=RetryPolicy(max_attempts=5))
def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: the turn follows from the messages so far. Every request is
    counted outside the log (``TOOL_LOOP_CALLS``), so a test sees what was asked twice."""
    turn = 1 + sum(m["role"] == "assistant" for m in messages)
    counted = _file("TOOL_LOOP_CALLS", "calls.log")
    if turn == 1:
        _rate_limited(counted)
    _append(counted, f"turn {turn}")
    results = _results(messages)
    if turn == 1:
        order = next(w for w in messages[-1]["content"].split() if w.startswith("o-"))
        calls = [_tool_call("call_1", "lookup_order", order_id=order)]
        return _response(turn, messages, {"role": "assistant", "tool_calls": calls})
    if turn == 2:
        order = results["call_1"]
        calls = [
            _tool_call("call_2", "issue_refund", order_id=order["order_id"], cents=order["cents"]),
            _tool_call("call_3", "get_balance", customer=order["customer"]),
        ]
        return _response(turn, messages, {"role": "assistant", "tool_calls": calls})
    _gate("answer")
    refund, balance = results["call_2"], results["call_3"]
    text = (
        f"Refunded {refund['cents'] / 100:.2f} for order {refund['order_id']}; "
        f"your store credit is now {balance['cents'] / 100:.2f}."
    )
    return _response(turn, messages, {"role": "assistant", "content": text})


# --- the agent -------------------------------------------------------------------------


def run_tool(call: dict[str, Any]) -> dict[str, Any]:
    """One tool call of the model, made durably; its result as a ``tool`` message."""
    fn = TOOLS.get(call["function"]["name"])
    if fn is None:
        result: Any = {"error": f"no tool named {call['function']['name']!r}"}
    else:
        result = fn(**json.loads(call["function"]["arguments"]))
    return {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}


@engine.agent
def assistant(run: Any, question: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent. Use the tools."},
        {"role": "user", "content": question},
    ]
    for turn in range(1, MAX_TURNS + 1):
        resp = chat(messages)  # a recorded decision: the model is asked once per turn
        reply = resp["choices"][0]["message"]
        messages.append(reply)
        if not reply.get("tool_calls"):
            return {"answer": reply["content"], "turns": turn}
        for call in reply["tool_calls"]:
            messages.append(run_tool(call))
    raise Permanent(f"no answer after {MAX_TURNS} model turns")


def main() -> int:
    run_id = sys.argv[1] if len(sys.argv) > 1 else None  # [RUN_ID [ORDER]]
    order = sys.argv[2] if len(sys.argv) > 2 else "o-17"
    question = f"Please refund order {order} and tell me my store credit."
    result = engine.run(assistant, run_id=run_id, question=question)
    print(f"tool_loop {result.run_id}: {result.status}")
    for e in engine.events(result.run_id):
        if e.type in ("llm_decided", "tool_succeeded", "tool_failed", "retry_scheduled"):
            print(f"  {e.type:15} {e.data.get('name') or e.data.get('tool')}")
    print(result.output["answer"] if result.output else result.error)
    engine.close()
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
