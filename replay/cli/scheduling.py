"""``agentlog schedule``, ``schedules`` and ``unschedule``: the runs the workers start on
their own, one per tick (run id ``NAME@<tick>``).

``schedules --json`` writes a list of ``{"name", "agent", "cron", "every", "queue",
"catch_up", "input", "next_tick", "last_run", "created_at"}`` by name: times ISO-8601
UTC, ``input`` with secret-named fields redacted, ``last_run`` the run id of the latest
tick a worker enqueued (null before the first).
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from engine.errors import UsageError

from ..output import clock
from ..targets import load_target
from . import args, listing
from .app import app, session
from .commands import _json_object
from .listing import schedule_doc


def _every(value: str | None) -> int | None:
    if value is None:
        return None
    seconds = args.count(value, "--every")
    if not seconds:
        raise UsageError("--every is a whole number of seconds above 0")
    return seconds


@app.command("schedule")
def schedule_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
    target: Annotated[str, typer.Argument(metavar="MODULE:AGENT", show_default=False)],
    cron: Annotated[
        str | None, typer.Option("--cron", help="Five cron fields, in UTC: '0 2 * * *'.")
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="Every S seconds (at multiples of S).")
    ] = None,
    input: Annotated[
        str, typer.Option("--input", "-i", help="The agent's keyword arguments as a JSON object.")
    ] = "{}",
    queue: Annotated[str, typer.Option("--queue", help="The queue its runs go to.")] = "default",
    catch_up: Annotated[
        bool, typer.Option("--catch-up", help="Start every tick missed while no worker ran.")
    ] = False,
) -> int:
    """Start MODULE:AGENT on the workers once per tick of --cron or --every (run id
    NAME@<tick>); defining NAME again replaces it."""
    s = session(ctx)
    kwargs = _json_object(input, "--input")
    agent = load_target(target)
    found = s.engine.schedule(
        name, agent, cron=cron, every=_every(every), queue=queue, catch_up=catch_up, **kwargs
    )
    now = time.time()
    if s.as_json:
        s.out.json(schedule_doc(found, now))
    else:
        s.out.line(
            ("scheduled ", "dim"),
            (found.name, "bold"),
            f": {found.cadence.describe()}, next tick {clock(found.next_tick(now), date=True)}",
        )
    return 0


@app.command("schedules")
def schedules_cmd(ctx: typer.Context) -> int:
    """The schedules: name, cadence, next tick, the last tick's run and the agent."""
    return listing.schedules(session(ctx))


@app.command("unschedule")
def unschedule_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
) -> int:
    """Remove the schedule NAME (the runs it started stay)."""
    from engine.runtime.schedules.define import check_name

    check_name(name)  # before the store is opened: a name no schedule can have
    s = session(ctx)
    s.engine.unschedule(name)
    if not s.as_json:
        s.out.line(("unscheduled ", "dim"), (name, "bold"))
    else:
        s.out.json({"unscheduled": name})
    return 0
