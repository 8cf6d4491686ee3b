"""``agentlog schedule``, ``schedules`` and ``unschedule``: the runs the workers start on
their own, one per tick (run id ``NAME@<tick>``).

``schedules --json`` writes a list of ``{"name", "agent", "cron", "every", "queue",
"catch_up", "input", "next_tick", "last_run", "created_at"}`` by name: times ISO-8601
UTC, ``input`` with secret-named fields redacted, ``last_run`` the run id of the latest
tick a worker enqueued (null before the first).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import UsageError
from engine.secrets import redact

from ..output import Piece, clock, when
from . import args
from .app import app, session
from .commands import _json_object, load_target

if TYPE_CHECKING:
    from engine.runtime.schedules.define import Schedule


def schedule_doc(s: Schedule, now: float) -> dict[str, Any]:
    """A schedule as ``schedules --json`` (and ``schedule --json``) writes it."""
    return {
        "name": s.name,
        "agent": s.agent,
        "cron": s.cadence.cron,
        "every": s.cadence.every,
        "queue": s.queue,
        "catch_up": s.catch_up,
        "input": redact(s.input),
        "next_tick": when(s.next_tick(now)),
        "last_run": s.last_run,
        "created_at": when(s.created_at),
    }


def schedule_rows(found: list[Schedule], now: float, store: str) -> list[list[Piece]]:
    """The text lines of ``schedules``: a header, then one line a schedule."""
    if not found:
        return [[(f"no schedules in {store}", "dim")]]
    header = f"{'NAME':<24}  {'CADENCE':<18}  {'NEXT TICK (UTC)':<19}  {'LAST RUN':<45}  AGENT"
    rows: list[list[Piece]] = [[(header, "bold")]]
    for s in found:
        cadence = s.cadence.cron if s.cadence.cron is not None else f"every {s.cadence.every}s"
        rows.append(
            [
                (f"{s.name:<24}  ", "bold"),
                f"{cadence:<18}  ",
                (f"{clock(s.next_tick(now), date=True):<19}  ", "cyan"),
                f"{s.last_run or '-':<45}  ",
                s.agent,
            ]
        )
    return rows


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
    from engine.runtime.schedules.define import listed

    s = session(ctx)
    found = listed(s.catalog.store)  # no engine: listing loads none of the runtime
    now = time.time()
    if s.as_json:
        s.out.json([schedule_doc(x, now) for x in found])
    else:
        s.out.lines(schedule_rows(found, now, s.store_name))
    return 0


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
