"""The commands of work handed to workers: enqueue, worker, workers, wait, send."""

from __future__ import annotations

import math
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import UsageError

from ..output import when
from ..targets import cwd_first, load_target
from . import args
from .app import Run, app, run_id_param, session

if TYPE_CHECKING:
    from engine import Worker


def _seconds(text: str | None, what: str, *, zero: bool = False) -> float | None:
    """``text`` as finite seconds above 0 (or at least 0 with ``zero``), None if absent."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        least = "0 or more" if zero else "above 0"
        raise UsageError(f"{what} takes seconds {least}, not {args.shown(text)}")
    return seconds


@app.command()
def enqueue(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="MODULE:AGENT", show_default=False)],
    input: Annotated[
        str, typer.Option("--input", "-i", help="The agent's keyword arguments as a JSON object.")
    ] = "{}",
    queue: Annotated[str, typer.Option("--queue", help="The queue it waits in.")] = "default",
    priority: Annotated[int, typer.Option("--priority", help="Higher is claimed first.")] = 0,
    partition: Annotated[
        str | None,
        typer.Option("--partition", help="Its partition key (per_partition limits)."),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Use this run id (enqueued before: that run, nothing new).",
            callback=run_id_param,
        ),
    ] = None,
) -> int:
    """Record a run of MODULE:AGENT as queued for a worker; prints its run id."""
    s = session(ctx)
    kwargs = args.json_value(input, "--input")
    if not isinstance(kwargs, dict):
        raise UsageError("--input must be a JSON object of keyword arguments")
    agent = load_target(target)
    h = s.engine.enqueue(
        agent, queue=queue, priority=priority, partition=partition, run_id=run_id, **kwargs
    )
    if s.as_json:
        s.out.json({"run_id": h.run_id, "status": h.status()})
    else:
        s.out.write(h.run_id + "\n")
    return 0


@app.command()
def wait(
    ctx: typer.Context,
    run: Run,
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", metavar="SECONDS", help="Give up after this long (exit 3)."),
    ] = None,
) -> int:
    """Wait until RUN is finished or waits for a person; exit as `run` does (0 completed,
    3 paused, 4 failed or abandoned; 3 also when --timeout passes first)."""
    s = session(ctx)
    seconds = _seconds(timeout, "--timeout", zero=True)
    try:
        r = s.engine.wait(run, seconds)
    except TimeoutError as e:
        if s.as_json:
            s.out.json({"run_id": s.engine.resolve(run), "timed_out": True, "error": str(e)})
        else:
            s.out.line((str(e), "yellow"))
        return 3
    return s.result(r)


@app.command()
def send(
    ctx: typer.Context,
    run: Run,
    topic: Annotated[str, typer.Argument(show_default=False)],
    value: Annotated[str, typer.Argument(show_default=False)],
    json_value: Annotated[bool, typer.Option("--json-value", help="Parse VALUE as JSON.")] = False,
) -> int:
    """Post VALUE on TOPIC to RUN from outside any run: delivered once to its run.recv(TOPIC)."""
    s = session(ctx)
    message: Any = args.json_value(value, "VALUE") if json_value else value
    rid = s.engine.resolve(run)
    s.engine.send(rid, topic, message)
    if s.as_json:
        s.out.json({"run_id": rid, "topic": topic, "sent": True})
    else:
        s.out.line(f"sent {topic!r} to ", (rid, "bold"))
    return 0


@app.command()
def workers(ctx: typer.Context) -> int:
    """The live workers: id, host, pid, queues, runs held, last heartbeat."""
    s = session(ctx)
    rows = s.engine.workers()
    if s.as_json:
        s.out.json(
            [
                {
                    "id": w.id,
                    "host": w.host,
                    "pid": w.pid,
                    "queues": list(w.queues),
                    "runs": w.runs,
                    "started_at": when(w.started_at),
                    "last_heartbeat": when(w.heartbeat_at),
                }
                for w in rows
            ]
        )
        return 0
    if not rows:
        s.out.line(("no live workers", "dim"))
    for w in rows:
        s.out.line(
            (w.id, "bold"),
            f"  {w.host} pid {w.pid}  queues {','.join(w.queues)}  runs {w.runs}",
            (f"  beat {when(w.heartbeat_at)}", "dim"),
        )
    return 0


Queues = Annotated[
    list[str] | None,
    typer.Option("--queue", "-q", help="A queue to serve (repeat; default: default)."),
]
Imports = Annotated[
    list[str] | None,
    typer.Option("--import", metavar="MODULE", help="Import MODULE first (repeat): its agents."),
]


@app.command()
def worker(
    ctx: typer.Context,
    queue: Queues = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Runs at once.")] = 4,
    imports: Imports = None,
    grace: Annotated[
        str, typer.Option("--grace", metavar="SECONDS", help="Drain patience on SIGTERM.")
    ] = "30",
    lease_ttl: Annotated[
        str | None,
        typer.Option(
            "--lease-ttl",
            metavar="SECONDS",
            help="Its runs' lease (default $AGENTLOG_LEASE_TTL, else 30).",
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(metavar="V", help="Take only runs whose agent recorded version= V."),
    ] = None,
) -> int:
    """Execute queued runs, take over the runs of dead owners and resume due runs, until
    SIGTERM or SIGINT: then drain (claim nothing more, let calls finish up to --grace,
    release the rest) and exit 0; a second signal stops at once."""
    s = session(ctx)
    ttl = _seconds(lease_ttl, "--lease-ttl")
    patience = _seconds(grace, "--grace", zero=True)
    for name in imports or ():
        _import(name)
    if ttl is not None:
        from engine import Engine, EngineConfig

        s._catalog = Engine(s.url, create=True, config=EngineConfig(lease_ttl=ttl))
    w = s.engine.worker(tuple(queue or ("default",)), concurrency, patience or 0.0, version)
    if not s.as_json:
        of = "" if version is None else f" (version {version})"
        s.out.line("worker ", (w.id, "bold"), f" serves {', '.join(w.queues)}{of}; Ctrl-C drains")
        sys.stdout.flush()
    with _signals(w):
        clean = w.run()
    if not clean:  # a call still busy after the grace: its thread is left behind
        sys.stdout.flush()
        os._exit(1)
    return 0


def _import(name: str) -> None:
    import importlib

    cwd_first()
    try:
        importlib.import_module(name)
    except Exception as e:
        raise UsageError(f"--import {name}: {type(e).__name__}: {e}") from None


class _signals:
    """SIGTERM / SIGINT drain the worker; a second one stops it at once."""

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.seen = 0
        self.before: dict[int, Any] = {}

    def __enter__(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.before[sig] = signal.signal(sig, self.on_signal)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.before.items():
            signal.signal(sig, handler)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.seen += 1
        if self.seen > 1:
            sys.stderr.write("agentlog: stopped at once\n")
            os._exit(130)
        self.w.stop()


__all__ = ["enqueue", "send", "wait", "worker", "workers"]
