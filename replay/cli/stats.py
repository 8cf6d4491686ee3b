"""The operator's figures across runs: ``agentlog stats`` (tables, ``--json``,
``--prometheus``) and ``agentlog metrics serve`` (a Prometheus scrape endpoint)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated

import typer

from engine.errors import AgentlogError, UsageError

from ..output import printable
from . import args
from .app import Session, app, session

if TYPE_CHECKING:
    from engine.stats import Stats

metrics_app = typer.Typer(
    name="metrics",
    help="Expose the figures of `agentlog stats` to Prometheus.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(metrics_app)

Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="WHEN",
        help="Only runs started since WHEN (tools: calls from the hour WHEN falls in): a "
        "span back from now (24h, 90m, 7d, 1h30m) or an ISO-8601 time (default: all).",
        show_default=False,
    ),
]
Agent = Annotated[
    str | None,
    typer.Option(
        "--agent",
        metavar="MODULE:AGENT",
        help="Only runs of this agent (default: all).",
        show_default=False,
    ),
]


def _compute(s: Session, since: str | None, agent: str | None) -> Stats:
    return s.catalog.stats(since=since, agent=args.agent_name(agent))


@app.command("stats")
def stats_cmd(
    ctx: typer.Context,
    since: Since = None,
    agent: Agent = None,
    prometheus: Annotated[
        bool,
        typer.Option(
            "--prometheus",
            help="Prometheus text exposition format (needs agentlog[metrics]).",
        ),
    ] = False,
) -> int:
    """Runs by status, tools (calls, failures, retries, latency, breaker) and recovery
    (crashes, RTO, RPO, failure rate, compensations) across runs."""
    s = session(ctx)
    if prometheus and s.as_json:
        raise UsageError("--json and --prometheus are two formats: choose one")
    if prometheus:
        from .metrics import _client

        _client()  # the missing extra is named before any store is opened
    figures = _compute(s, since, agent)
    if s.as_json:
        s.out.json(figures)
    elif prometheus:
        from .metrics import exposition

        s.out.write(exposition(figures))
    else:
        _print_tables(s, figures)
    return 0


def _print_tables(s: Session, figures: Stats) -> None:
    from ..output import rich_console
    from .stats_tables import render

    console = rich_console(s.out, 120)
    for part in render(figures, s.store_name):
        console.print(part)


def _described(e: Exception, url: str | None) -> str:
    """A failed scrape's error as the CLI would say it, on one line, any password masked."""
    from engine.store.url import default_url, scrub

    text = str(e) if isinstance(e, AgentlogError) else f"unexpected {type(e).__name__}: {e}"
    return printable(scrub(text or type(e).__name__, url or default_url())[:500])


@metrics_app.command("serve")
def serve_cmd(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free one).")
    ] = 9464,
    addr: Annotated[
        str, typer.Option("--addr", help="Address to listen on.", show_default=True)
    ] = "127.0.0.1",
    since: Since = None,
    agent: Agent = None,
) -> int:
    """Serve the figures of `agentlog stats` at http://ADDR:PORT/metrics, computed
    afresh on each scrape, until interrupted."""
    from .metrics import serve

    s = session(ctx)
    agent = args.agent_name(agent)
    _compute(s, since, agent)  # a bad store, --since or --agent fails now, not per scrape
    lock = threading.Lock()  # one store, one scrape at a time

    def compute() -> Stats:
        with lock:
            return _compute(s, since, agent)

    server = serve(compute, port, addr, lambda e: _described(e, s.url))
    host, bound = server.server_address[:2]
    s.out.line(f"serving metrics on http://{host}:{bound}/metrics (Ctrl-C stops)")
    s.out.stream.flush()
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
    return 0
