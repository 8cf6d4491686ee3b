"""LangGraph on agentlog against LangGraph's own savers, same machine, same run.

A graph loops ``--steps`` supersteps (``durability="sync"``), each appending one ~100-byte
message to an ``add_messages`` history. Per saver: ms per step, the bytes its tables hold
after half and all the steps (linear growth: the second is about twice the first; a
saver that stores the whole history every step grows about four times), and the time of
one ``get_state_history`` over the thread. SqliteSaver and PostgresSaver store the whole
list each step; "+ DeltaChannel" is LangGraph's own delta channel on SqliteSaver;
AgentlogSaver stores the appended tail (the graph unchanged).

    pip install -e ".[bench]"
    python scripts/bench_langgraph.py --steps 600 --out docs/bench_langgraph.md
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import PG_URL

from engine import Engine
from engine.integrations.langgraph import AgentlogSaver, thread_run_id
from engine.log.history import read_events, run_stream
from engine.store.codec import encode_event

TEXT = "m" * 90  # with its step number, ~100 bytes of content per message


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int
    steps: int


def _delta_add(state: list[AnyMessage], writes: Any) -> list[AnyMessage]:
    for w in writes:
        state = add_messages(state, w)
    return state


class DeltaChat(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_delta_add)]
    n: int
    steps: int


def build(saver: Any, delta: bool = False) -> Any:
    def turn(state: Any) -> dict[str, Any]:
        n = state["n"]
        message = HumanMessage(content=f"{n:06d}:{TEXT}", id=f"m{n}")
        return {"messages": [message], "n": n + 1}

    builder = StateGraph(DeltaChat if delta else Chat)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_conditional_edges("turn", lambda s: END if s["n"] >= s["steps"] else "turn")
    return builder.compile(checkpointer=saver)


def sqlite_bytes(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) "
        "FROM checkpoints) + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes)"
    ).fetchone()
    return int(row[0])


def postgres_bytes(conn: Any) -> int:
    row = conn.execute(
        "SELECT (SELECT COALESCE(SUM(octet_length(checkpoint::text) + "
        "octet_length(metadata::text)), 0) FROM checkpoints) + (SELECT "
        "COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_blobs) + (SELECT "
        "COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_writes)"
    ).fetchone()
    return int(row[0])


def agentlog_bytes(engine: Engine, thread: str) -> int:
    """The encoded events of the thread's run and its snapshots' payloads."""
    rid = thread_run_id(thread)
    events = sum(len(encode_event(r.event)[1]) for r in read_events(engine.store, rid))
    return events + sum(len(s.payload) for s in engine.store.snapshots(run_stream(rid), None))


READ = """
import sys, time
from engine import Engine
from engine.integrations.langgraph import AgentlogSaver
url, thread, how = sys.argv[1:4]
eng = Engine.open(url)
saver, config = AgentlogSaver(eng), {"configurable": {"thread_id": thread}}
eng.store.runs()  # the connection opened and the schema checked: not the read's cost
plain, read = eng.store.read, []
eng.store.read = lambda *a, **k: read.append(len(found := plain(*a, **k))) or found
began = time.perf_counter()
tup = saver.get_tuple(config) if how == "get_tuple" else next(iter(saver.list(config, limit=1)))
ms = (time.perf_counter() - began) * 1000
print(ms, len(tup.checkpoint["channel_values"]["messages"]), sum(read))
"""


def fresh_reads(url: str, steps: int, rounds: int = 3) -> dict[str, float]:
    """A thread of ``steps`` steps, then the newest checkpoint read in fresh processes:
    ``get_tuple`` (snapshot and tail) and ``list(limit=1)`` (the whole stream folded);
    the median ms of ``rounds`` processes each."""
    eng = Engine.open(url)
    thread = uuid.uuid4().hex
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": steps * 2 + 10}
    build(AgentlogSaver(eng)).invoke({"messages": [], "n": 0, "steps": steps}, config)
    stored = agentlog_bytes(eng, thread)
    eng.close()
    out: dict[str, float] = {"bytes": stored}
    for how in ("get_tuple", "list"):
        times = []
        for _ in range(rounds):
            done = subprocess.run(
                [sys.executable, "-c", READ, url, thread, how],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            ms, n, events = done.stdout.split()
            assert int(n) == steps, (n, steps)
            times.append(float(ms))
        out[how], out[how + "_events"] = statistics.median(times), int(events)
    return out


Measure = tuple[Any, Callable[[str], int], Callable[[], None]]  # graph, bytes(thread), close


def savers(tmp: str, pg: str | None) -> dict[str, Measure]:
    out: dict[str, Measure] = {}
    from langgraph.checkpoint.sqlite import SqliteSaver

    for name, delta in (("SqliteSaver", False), ("SqliteSaver + DeltaChannel", True)):
        conn = sqlite3.connect(f"{tmp}/{uuid.uuid4().hex}.sqlite", check_same_thread=False)
        s = SqliteSaver(conn)
        s.setup()
        out[name] = (build(s, delta), lambda t, c=conn: sqlite_bytes(c), conn.close)
    eng = Engine.open(f"sqlite:///{tmp}/agentlog.db")
    out["AgentlogSaver sqlite"] = (
        build(AgentlogSaver(eng)),
        lambda t, e=eng: agentlog_bytes(e, t),
        eng.close,
    )
    if pg:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        schema = f"lgbench_{uuid.uuid4().hex[:8]}"
        pconn = psycopg.connect(pg.split("?")[0], autocommit=True, prepare_threshold=0)
        pconn.execute(f'CREATE SCHEMA "{schema}"')
        pconn.execute(f'SET search_path TO "{schema}"')
        ps = PostgresSaver(pconn)  # type: ignore[arg-type]
        ps.setup()
        out["PostgresSaver"] = (build(ps), lambda t, c=pconn: postgres_bytes(c), pconn.close)
        peng = Engine.open(f"{pg.split('?')[0]}?schema=al_{schema}")
        out["AgentlogSaver postgres"] = (
            build(AgentlogSaver(peng)),
            lambda t, e=peng: agentlog_bytes(e, t),
            peng.close,
        )
    return out


def measure(graph: Any, stored: Callable[[str], int], steps: int) -> dict[str, float]:
    """ms/step over the whole run, the bytes at half and at all of it, history ms."""
    thread = uuid.uuid4().hex
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": steps * 2 + 10}
    half = steps // 2
    began = time.perf_counter()
    graph.invoke({"messages": [], "n": 0, "steps": half}, config, durability="sync")
    first = time.perf_counter() - began
    at_half = stored(thread)
    began = time.perf_counter()
    graph.invoke({"steps": steps}, config, durability="sync")
    second = time.perf_counter() - began
    at_end = stored(thread)
    state = graph.get_state(config).values
    assert len(state["messages"]) == steps, len(state["messages"])
    began = time.perf_counter()
    history = sum(1 for _ in graph.get_state_history(config))
    return {
        "ms_step": (first + second) / steps * 1000,
        "bytes_half": at_half,
        "bytes": at_end,
        "history_ms": (time.perf_counter() - began) * 1000,
        "checkpoints": history,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--pg-url", default=PG_URL, help="'' to skip PostgreSQL")
    p.add_argument("--out", help="also write the table (Markdown) to this file")
    p.add_argument(
        "--fresh", help="instead: fresh-process reads of threads of these steps (100,1000)"
    )
    args = p.parse_args()
    if args.fresh:
        return fresh_main([int(n) for n in args.fresh.split(",")], args.pg_url or None)
    with tempfile.TemporaryDirectory() as tmp:
        found = savers(tmp, args.pg_url or None)
        rows = {}
        for name, (graph, stored, close) in found.items():
            rows[name] = measure(graph, stored, args.steps)
            close()
    lines = [
        f'A graph of {args.steps} supersteps, `durability="sync"`, each appending a '
        "~100-byte message (`add_messages`). Command: "
        f"`python scripts/bench_langgraph.py --steps {args.steps}` (2 cores, shared, noisy).",
        "",
        f"| saver | ms/step | bytes at {args.steps // 2} steps | bytes at {args.steps} "
        "| growth (x, half to all) | get_state_history ms | checkpoints |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['ms_step']:.2f} | {r['bytes_half']:,} | {r['bytes']:,} | "
            f"{r['bytes'] / max(1, r['bytes_half']):.2f} | {r['history_ms']:.1f} | "
            f"{r['checkpoints']:.0f} |"
        )
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


def fresh_main(sizes: list[int], pg: str | None) -> None:
    """The fresh-process read table, per agentlog store and thread length."""
    lines = [
        "| store | steps | bytes (events + snapshots) | get_tuple ms, fresh process "
        "| events it read | list(limit=1) ms (whole fold) | events it read |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{tmp}/fresh.db"}
        if pg:
            urls["postgres"] = f"{pg.split('?')[0]}?schema=lgfresh_{uuid.uuid4().hex[:8]}"
        for name, url in urls.items():
            for steps in sizes:
                r = fresh_reads(url, steps)
                lines.append(
                    f"| {name} | {steps} | {r['bytes']:,.0f} | {r['get_tuple']:.1f} "
                    f"| {r['get_tuple_events']:.0f} | {r['list']:.1f} | {r['list_events']:.0f} |"
                )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
