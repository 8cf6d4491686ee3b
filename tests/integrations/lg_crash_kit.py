"""A LangGraph graph whose node posts to a counting service, run one stage per process.

    python lg_crash_kit.py SAVER URL THREAD STAGE SERVICE

``SAVER`` is ``agentlog`` (AgentlogSaver, the post an ``@engine.tool(side_effect=True)``
called from a durable node) or ``sqlite`` (LangGraph's SqliteSaver, the post a plain
call, as in LangGraph #8039). ``STAGE``: ``start`` runs to the node ``ask``'s
``interrupt()``; ``resume`` answers it, and with ``KILL_AFTER_SEND=1`` the process kills
itself with SIGKILL right after the post reached the service (before anything recorded
it); ``continue`` re-invokes the thread after that crash. The service is a file: one line
per post received, with its key. The last stage prints the graph's final state as JSON.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class State(TypedDict, total=False):
    order: str
    approved: str
    receipts: Annotated[list[str], operator.add]


def service_posts(service: Path) -> list[str]:
    """The posts the counting service received, one key each."""
    return service.read_text().split() if service.exists() else []


def send(service: Path, key: str) -> str:
    """Post to the counting service (appended and fsync'd), then maybe die of SIGKILL."""
    with service.open("a") as f:
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
    if os.environ.get("KILL_AFTER_SEND") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"receipt:{key}"


def ask(state: State) -> dict[str, Any]:
    return {"approved": interrupt(f"charge {state['order']}?")}


def build(saver_kind: str, url: str, service: Path) -> tuple[Any, Any]:
    """The compiled graph and what to close after it."""
    builder = StateGraph(State)
    builder.add_node("ask", ask)
    if saver_kind == "agentlog":
        from engine import Engine
        from engine.integrations.langgraph import AgentlogSaver, durable_node

        engine = Engine.open(url)

        @engine.tool(side_effect=True, verify=lambda key: _found(service, key))
        def post(order: str, *, idempotency_key: str) -> str:
            return send(service, idempotency_key)

        def charge(state: State) -> dict[str, Any]:
            return {"receipts": [post(state["order"])]}

        builder.add_node("charge", durable_node(engine, charge, name="charge"))
        saver: Any = AgentlogSaver(engine, name="crash")
        closing: Any = engine
    else:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        def charge(state: State) -> dict[str, Any]:
            return {"receipts": [send(service, "plain:" + state["order"])]}

        builder.add_node("charge", charge)
        closing = sqlite3.connect(url, check_same_thread=False)
        saver = SqliteSaver(closing)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "charge")
    builder.add_edge("charge", END)
    return builder.compile(checkpointer=saver), closing


def _found(service: Path, key: str) -> str | None:
    return f"receipt:{key}" if key in service_posts(service) else None


def main(saver_kind: str, url: str, thread: str, stage: str, service: str) -> None:
    graph, closing = build(saver_kind, url, Path(service))
    config: Any = {"configurable": {"thread_id": thread}}
    if stage == "start":
        graph.invoke({"order": "o-1", "receipts": []}, config, durability="sync")
    elif stage == "resume":
        graph.invoke(Command(resume="yes"), config, durability="sync")
    else:
        graph.invoke(None, config, durability="sync")
    print(json.dumps(graph.get_state(config).values))
    closing.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
