"""The ``agentlog`` application object: the Typer app, its global options and the
session every command shares (store URL, output mode, a lazily opened engine)."""

from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from engine import Engine, RunResult
from engine.runtime.leases import alive

from . import views
from .output import Out, exit_status, result_doc, when

STATUSES = ("new", "running", "paused", "completed", "failed", "abandoned")

app = typer.Typer(
    name="agentlog",
    help="Durable agent runs from an event log: run, inspect, resume, rewind, verify.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@dataclass
class Session:
    """What every command shares: the store URL, the output mode, a lazily opened engine."""

    url: str | None = None
    as_json: bool = False
    out: Out = field(default_factory=Out)
    _engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine.open(self.url)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()

    def result(self, r: RunResult) -> int:
        if self.as_json:
            self.out.json(result_doc(r))
        else:
            self.out.lines(views.result_rows(r))
        return exit_status(r.status)

    def owner(self, run_id: str) -> dict[str, Any] | None:
        """Who holds the run's lease, and whether that process is still alive."""
        lease = self.engine.store.lease(run_id)
        if lease is None:
            return None
        holder, until = lease
        return {"owner": holder, "lease_until": when(until), "alive": alive(holder)}

    def children(self, run_id: str) -> list[tuple[str, int | None]]:
        """Runs forked from ``run_id`` and the position each was forked at."""
        kids = [r.run_id for r in self.engine.runs() if r.parent_run_id == run_id]
        return [(k, self.engine.state(k).fork_position) for k in reversed(kids)]


def session(ctx: typer.Context) -> Session:
    s = ctx.find_root().obj
    assert isinstance(s, Session)
    return s


Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Store URL (default $AGENTLOG_URL, else sqlite:///./agentlog.db).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
Run = Annotated[
    str,
    typer.Argument(metavar="RUN", help="A run id or a unique prefix of one.", show_default=False),
]


@app.callback()
def _root(ctx: typer.Context, url: Url = None, as_json: AsJson = False) -> None:
    """agentlog: an event-sourced engine that makes AI-agent runs survive failure."""
    session = Session(url=url, as_json=as_json)
    ctx.obj = session
    ctx.call_on_close(session.close)
