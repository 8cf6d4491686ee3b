"""The ``agentlog`` application object: the Typer app, its global options, and the
session every command shares (``session.Session``) found from a command's context."""

from __future__ import annotations

from typing import Annotated

import typer

from . import args
from .session import CREATES_STORE, STATUSES, Session

__all__ = [
    "CREATES_STORE",
    "STATUSES",
    "MaybeRun",
    "Run",
    "Session",
    "app",
    "run_id_param",
    "session",
]

app = typer.Typer(
    name="agentlog",
    help="Durable agent runs from an event log: run, inspect, resume, rewind, verify.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no rich import, no "<bool>" type column
    context_settings={"max_content_width": 100},
)


def run_id_param(param: typer.CallbackParam, value: str | None) -> str | None:
    """:func:`args.run_id` as the callback of a ``RUN`` argument or a ``--run-id`` option."""
    name = param.opts[0] if param.param_type_name == "option" else "RUN"
    return args.run_id(value, name)


def session(ctx: typer.Context) -> Session:
    s = ctx.find_root().obj
    assert isinstance(s, Session)
    return s


Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar="URL",
        help="Store URL (default $AGENTLOG_URL, else sqlite:///./agentlog.db).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
Run = Annotated[
    str,
    typer.Argument(
        metavar="RUN",
        help="A run id or a unique prefix of one.",
        show_default=False,
        callback=run_id_param,
    ),
]


@app.callback()
def _root(ctx: typer.Context, url: Url = None, as_json: AsJson = False) -> None:
    """agentlog: an event-sourced engine that makes AI-agent runs survive failure."""
    session = Session(url=url, as_json=as_json, create=ctx.invoked_subcommand in CREATES_STORE)
    ctx.obj = session
    ctx.call_on_close(session.close)


MaybeRun = Annotated[  # RUN, or a filter of many runs instead (``bulk``)
    str | None,
    typer.Argument(
        metavar="[RUN]",
        help="A run id or a unique prefix of one (or --status: many runs).",
        show_default=False,
        callback=run_id_param,
    ),
]
