"""Per durable step: agentlog against LangGraph's checkpointers and DBOS, same machine, same run.

A "step" is one tool call made durable. agentlog records a read-only call in one commit
and a side-effecting call in two (intent before, outcome after); a keyed one (the tool
takes the idempotency key) in one: its outcome rides with the next call's intent.
LangGraph checkpoints the whole graph state after every super-step (here: one node per
step, its state a growing list of small results, as a message history grows). DBOS records each
``@DBOS.step`` after it runs. Every figure is the median over ``--repeat`` runs of
``--steps`` steps; systems are measured back to back and in alternating order.

    pip install -e ".[bench]"          # langgraph + its savers, dbos
    python scripts/bench_steps.py --repeat 5 --steps 200

Competitors that are not installed are skipped, and the table says so.

The floors are measured in the same run (scripts/benchkit/raw_commits.py): one fsync'd
one-row ``sqlite3`` commit (WAL, ``synchronous=FULL``, an agentlog file), the rows one
keyed call commits (two events, the run-index upsert, the lease-epoch check: the engine's
SQL and payloads, no engine), one autocommit psycopg ``INSERT`` of one row, and the same
rows through the store's append function, raw. Each agentlog row is also given as a ratio
over the raw one-row commit, over the raw keyed-call rows and over LangGraph's step of
the same store.

    python scripts/bench_steps.py --profile --repeat 3 --steps 1000   # where the time goes

Model calls (``--models``, on by default): a recorded decision (``run.decide``) whose
function returns a 2 KB pydantic model, and a ``run.stream`` of a generator of 200
chunks, each against the bare call (the same function called directly, no engine, the
stream joined) measured in the same run, in alternating order; the ratio is recorded
over bare, the added cost is their difference.

    python scripts/bench_steps.py --repeat 5 --steps 200 --models-only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchkit import PG_URL, alternating, drop_schemas, write_table
from benchkit.model_calls import (
    MODEL_ROWS,
    REPLY,
    bare_runner,
    model_runner,
    model_table,
    timed_run,
)
from benchkit.raw_commits import raw_systems

Runner = Callable[[int], float]  # steps -> seconds


def agentlog_runner(
    url: str, side_effect: bool, keyed: bool = False, business: bool = False
) -> Runner:
    """``keyed``: the tool takes the idempotency key, so its outcome rides along with the
    next commit (one commit a step); without it, intent and outcome are two commits.
    ``business``: a keyed tool with a business key (its claim and commit in the ledger)."""
    from engine import Engine

    engine = Engine.open(url)
    tool: Callable[..., dict[str, int]]
    if business:

        @engine.tool(
            side_effect=True, name="bench_tool_business", key=lambda i, run: f"b:{run}:{i}"
        )
        def business_tool(i: int, run: str, *, idempotency_key: str) -> dict[str, int]:
            return {"i": i, "v": i * 2}

        tool = business_tool
    elif keyed:

        @engine.tool(side_effect=True, name="bench_tool_keyed")
        def keyed_tool(i: int, *, idempotency_key: str) -> dict[str, int]:
            return {"i": i, "v": i * 2}

        tool = keyed_tool
    else:

        @engine.tool(side_effect=side_effect, name=f"bench_tool_{side_effect}")
        def plain_tool(i: int) -> dict[str, int]:
            return {"i": i, "v": i * 2}

        tool = plain_tool

    @engine.agent(name=f"bench:steps_{side_effect}_{keyed}_{business}")
    def agent(run: Any, steps: int) -> int:
        extra = (run.run_id,) if business else ()
        history = []
        for i in range(steps):
            history.append(tool(i, *extra))
        return len(history)

    return timed_run(engine, agent)


def model_systems(stores: list[str], tmp: str, pg_url: str) -> dict[str, Runner | None]:
    """The model-call rows (agentlog per store) and their bare baselines."""
    if REPLY is None:
        return {name: None for name in MODEL_ROWS}
    systems: dict[str, Runner | None] = {}
    for store in stores:  # a tool call's cost on the same store, in the same run
        url = f"sqlite:///{tmp}/m.db" if store == "sqlite" else pg_url
        systems[f"agentlog {store} (read-only step)"] = agentlog_runner(url, False)
    for row, (bare, stream) in MODEL_ROWS.items():
        systems[bare] = bare_runner(stream)
        if "sqlite" in stores:
            systems[f"agentlog sqlite {row}"] = model_runner(f"sqlite:///{tmp}/m.db", stream)
        if "postgres" in stores:
            systems[f"agentlog postgres {row}"] = model_runner(pg_url, stream)
    return systems


def langgraph_runner(kind: str, path_or_url: str) -> Runner | None:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None
    from typing import TypedDict

    class State(TypedDict):
        i: int
        steps: int
        history: list[dict[str, int]]

    def node(state: State) -> dict[str, Any]:
        i = state["i"]
        return {"i": i + 1, "history": [*state["history"], {"i": i, "v": i * 2}]}

    builder = StateGraph(State)
    builder.add_node("tool", node)
    builder.add_edge(START, "tool")
    builder.add_conditional_edges("tool", lambda s: END if s["i"] >= s["steps"] else "tool")

    if kind.startswith("agentlog "):  # LangGraph on our log: AgentlogSaver on that store
        from engine import Engine
        from engine.integrations.langgraph import AgentlogSaver

        graph = builder.compile(checkpointer=AgentlogSaver(Engine.open(path_or_url)))
        return _graph_runner(graph)
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path_or_url, check_same_thread=False)
        saver: Any = SqliteSaver(conn)
    else:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        pg = psycopg.connect(path_or_url, autocommit=True, prepare_threshold=0)
        saver = PostgresSaver(pg)  # type: ignore[arg-type]
    saver.setup()
    return _graph_runner(builder.compile(checkpointer=saver))


def _graph_runner(graph: Any) -> Runner:
    def go(steps: int) -> float:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": steps + 10}
        started = time.perf_counter()
        out = graph.invoke({"i": 0, "steps": steps, "history": []}, config)
        elapsed = time.perf_counter() - started
        assert out["i"] == steps
        return elapsed

    return go


def dbos_runner(url: str) -> Runner | None:
    try:
        from dbos import DBOS
    except ImportError:
        return None
    DBOS(config={"name": "agentlog-bench", "system_database_url": url, "log_level": "ERROR"})

    @DBOS.step()
    def tool(i: int) -> dict[str, int]:
        return {"i": i, "v": i * 2}

    @DBOS.workflow()
    def workflow(steps: int) -> int:
        history = [tool(i) for i in range(steps)]
        return len(history)

    DBOS.launch()

    def go(steps: int) -> float:
        started = time.perf_counter()
        assert workflow(steps) == steps
        return time.perf_counter() - started

    return go


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument(
        "--dbos",
        default="sqlite",
        help="DBOS system database: sqlite or postgres "
        "(DBOS is a process singleton: one per run of this script)",
    )
    p.add_argument("--pg-url", default=PG_URL)
    p.add_argument("--out", help="also write the table (Markdown) to this file")
    p.add_argument(
        "--models",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure recorded model calls (decision, stream) against bare calls",
    )
    p.add_argument("--models-only", action="store_true", help="measure only the model-call rows")
    p.add_argument(
        "--profile",
        action="store_true",
        help="only the breakdown of one keyed call's time (benchkit.call_profile)",
    )
    return p.parse_args(argv)


def systems_of(args: argparse.Namespace, tmp: str, pg_url: str) -> dict[str, Runner | None]:
    """The systems to measure, in table order (None: not installed)."""
    pg_base = pg_url.split("?")[0]
    systems: dict[str, Runner | None] = {}
    stores = args.stores.split(",")
    if "sqlite" in stores:
        systems["agentlog sqlite (read-only step)"] = agentlog_runner(
            f"sqlite:///{tmp}/a.db", False
        )
        systems["agentlog sqlite (side-effect step)"] = agentlog_runner(
            f"sqlite:///{tmp}/a.db", True
        )
        systems["agentlog sqlite (side-effect step, keyed)"] = agentlog_runner(
            f"sqlite:///{tmp}/a.db", True, keyed=True
        )
        systems["agentlog sqlite (side-effect step, keyed, business key)"] = agentlog_runner(
            f"sqlite:///{tmp}/a.db", True, business=True
        )
        systems["langgraph SqliteSaver"] = langgraph_runner("sqlite", f"{tmp}/lg.db")
        systems["langgraph AgentlogSaver sqlite"] = langgraph_runner(
            "agentlog sqlite", f"sqlite:///{tmp}/lga.db"
        )
    if "postgres" in stores:
        systems["agentlog postgres (read-only step)"] = agentlog_runner(pg_url, False)
        systems["agentlog postgres (side-effect step)"] = agentlog_runner(pg_url, True)
        systems["agentlog postgres (side-effect step, keyed)"] = agentlog_runner(
            pg_url, True, keyed=True
        )
        systems["agentlog postgres (side-effect step, keyed, business key)"] = agentlog_runner(
            pg_url, True, business=True
        )
        systems["langgraph PostgresSaver"] = langgraph_runner("postgres", pg_base)
        systems["langgraph AgentlogSaver postgres"] = langgraph_runner("agentlog postgres", pg_url)
    systems.update(raw_systems(stores, tmp, pg_url))
    dbos_url = f"sqlite:///{tmp}/dbos.db" if args.dbos == "sqlite" else pg_base
    systems[f"dbos {args.dbos}"] = dbos_runner(dbos_url)
    return systems


def sample(live: dict[str, Runner], repeat: int, steps: int) -> dict[str, list[float]]:
    """Milliseconds per step of each system, ``repeat`` times, in alternating order."""
    for go in live.values():
        go(5)  # warm up: schemas, pools, imports
    samples: dict[str, list[float]] = {k: [] for k in live}
    for r in range(repeat):
        for name in alternating(list(live), r):
            samples[name].append(live[name](steps) / steps * 1000)
    return samples


RAW_ONE = "raw {} one-row commit"
RAW_ROWS = "raw {} keyed-call rows"
LANGGRAPH = {"sqlite": "langgraph SqliteSaver", "postgres": "langgraph PostgresSaver"}


def table(
    systems: dict[str, Runner | None], samples: dict[str, list[float]], repeat: int, steps: int
) -> list[str]:
    """The per-step table; each agentlog row also as a ratio over the raw commits and
    LangGraph's step of its store, measured in the same run."""
    lines = [
        f"Per durable step, ms (median of {repeat} runs x {steps} steps; "
        "2 cores, noisy). Command: `python scripts/bench_steps.py "
        f"--repeat {repeat} --steps {steps}`",
        "",
        "| system | ms/step | vs agentlog side-effect step (same store) "
        "| vs raw one-row commit | vs raw keyed-call rows | vs langgraph |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    med = {k: statistics.median(v) for k, v in samples.items()}

    def over(value: float, base: str) -> str:
        return f"{value / med[base]:.2f}x" if base in med else ""

    for name in systems:
        if name not in samples:
            lines.append(f"| {name} | not installed | | | | |")
            continue
        store = "postgres" if "postgres" in name.lower() else "sqlite"
        ratios = ["", "", "", ""]
        if name.startswith("agentlog"):
            ratios[1:] = [
                over(med[name], RAW_ONE.format(store)),
                over(med[name], RAW_ROWS.format(store)),
                over(med[name], LANGGRAPH[store]),
            ]
        elif name.startswith("raw") and name != RAW_ONE.format(store):
            ratios[1] = over(med[name], RAW_ONE.format(store))
        elif not name.startswith("raw"):
            ratios[0] = over(med[name], f"agentlog {store} (side-effect step)")
            if name.startswith("langgraph AgentlogSaver"):  # LangGraph on our log
                ratios[3] = over(med[name], LANGGRAPH[store])
        lines.append(f"| {name} | {med[name]:.3f} | " + " | ".join(ratios) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="agentlog-bench-steps-")
    schema = f"bench_steps_{uuid.uuid4().hex[:8]}"
    pg_base = args.pg_url.split("?")[0]
    pg_url = f"{pg_base}?schema={schema}"
    if args.profile:
        from benchkit.call_profile import profile_table

        lines = profile_table(pg_url, args.stores.split(","), args.steps, args.repeat)
        print("\n" + "\n".join(lines))
        if "postgres" in args.stores.split(","):
            drop_schemas(pg_base, [schema])
        return 0
    systems = {} if args.models_only else systems_of(args, tmp, pg_url)
    models = {}
    if args.models or args.models_only:
        found = model_systems(args.stores.split(","), tmp, pg_url)
        models = {k: v for k, v in found.items() if k not in systems}  # one step row each
    live = {k: v for k, v in {**systems, **models}.items() if v is not None}
    samples = sample(live, args.repeat, args.steps)
    lines = table(systems, samples, args.repeat, args.steps) if systems else []
    if models:
        lines += ([""] if lines else []) + model_table(samples, args.repeat, args.steps)
    print("\n" + "\n".join(lines))
    if args.out:
        write_table(args.out, "Per-step benchmark", __doc__, lines)
    if "postgres" in args.stores.split(","):
        drop_schemas(pg_base, [schema])
    return 0


if __name__ == "__main__":
    sys.exit(main())
