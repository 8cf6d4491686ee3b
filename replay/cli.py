"""``agentlog``: run, inspect, resume, rewind, export and verify agent runs.

``--url`` and ``--json`` are accepted before or after the command name. Exit status:
0 done, 3 paused for a human, 4 failed or abandoned, 2 bad usage or bad input (one line
on stderr, no traceback), 1 anything unexpected. The CLI imports every layer; nothing
imports the CLI.
"""

import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn

import typer

from engine import Engine, RunResult
from engine.errors import AgentlogError, UsageError
from engine.runtime.defs import AgentDef
from engine.runtime.leases import alive

from . import context as context_mod
from . import diff as diff_mod
from . import timeline as timeline_mod
from . import transfer, views
from .output import Out, checkpoint_docs, exit_status, result_doc, run_doc, state_doc, when

STATUSES = ("new", "running", "paused", "completed", "failed", "abandoned")
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)

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


def _session(ctx: typer.Context) -> Session:
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


# --- running ---------------------------------------------------------------------------


@app.command()
def demo(ctx: typer.Context) -> int:
    """A bundled support-ticket agent: crashes mid-payment, resumes, rewinds, shows its log."""
    from .tour import tour

    return tour(_session(ctx).url)


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="MODULE:AGENT", show_default=False)],
    input: Annotated[
        str, typer.Option("--input", "-i", help="The agent's keyword arguments as a JSON object.")
    ] = "{}",
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Use this run id (an existing run continues).")
    ] = None,
) -> int:
    """Start MODULE:AGENT as a new run (MODULE is imported with the current directory first)."""
    s = _session(ctx)
    kwargs = _json_object(input, "--input")
    agent = load_target(target)
    return s.result(s.engine.run(agent, run_id=run_id, **kwargs))


@app.command()
def resume(ctx: typer.Context, run: Run) -> int:
    """Continue a crashed or failed run from its log (a completed run just shows its result)."""
    s = _session(ctx)
    return s.result(s.engine.resume(run))


@app.command()
def recover(ctx: typer.Context) -> int:
    """Resume every run whose owner died."""
    s = _session(ctx)
    results = s.engine.recover()
    if s.as_json:
        s.out.json([result_doc(r) for r in results])
    elif not results:
        s.out.line(("no runs needed recovery (no running run has a dead owner)", "dim"))
    for r in results if not s.as_json else ():
        s.out.lines(views.result_rows(r))
    return max((exit_status(r.status) for r in results), default=0)


@app.command()
def answer(
    ctx: typer.Context,
    run: Run,
    value: Annotated[str, typer.Argument(show_default=False)],
    json_value: Annotated[bool, typer.Option("--json-value", help="Parse VALUE as JSON.")] = False,
) -> int:
    """Answer the question a paused run waits on, and continue it."""
    s = _session(ctx)
    answer_value: Any = value
    if json_value:
        try:
            answer_value = json.loads(value)
        except ValueError as e:
            raise UsageError(f"VALUE is not valid JSON ({e})") from None
    return s.result(s.engine.answer(run, answer_value))


@app.command()
def abandon(ctx: typer.Context, run: Run) -> int:
    """Stop a run for good, running its compensations in reverse order."""
    s = _session(ctx)
    return s.result(s.engine.abandon(run))


@app.command()
def rewind(
    ctx: typer.Context,
    run: Run,
    to: Annotated[
        str,
        typer.Option("--to", help="A checkpoint name or a position (as timeline shows it)."),
    ],
) -> int:
    """Fork a new run from a checkpoint or position of RUN and continue it."""
    s = _session(ctx)
    parent = s.engine.resolve(run)
    r = s.engine.rewind(parent, to)
    if not s.as_json:
        s.out.line("fork ", (r.run_id, "bold cyan"), f" of {parent} at {to!r}")
    return s.result(r)


# --- reading ---------------------------------------------------------------------------


@app.command()
def runs(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option("--status", help=f"Only this status: {', '.join(STATUSES)}.")
    ] = None,
) -> int:
    """Runs in the store, newest first."""
    s = _session(ctx)
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}, not {status!r}")
    found = s.engine.runs(status)
    if s.as_json:
        s.out.json_stream(run_doc(r) for r in found)
    else:
        s.out.lines(views.run_rows(found, s.engine.store.name))
    return 0


@app.command()
def show(ctx: typer.Context, run: Run) -> int:
    """A run's summary and current state."""
    s = _session(ctx)
    state = s.engine.state(run)
    children = s.children(state.run_id)
    owner = s.owner(state.run_id) if state.status == "running" else None
    if s.as_json:
        doc = state_doc(state)
        doc["branches"] = [{"run_id": c, "fork_position": at} for c, at in children]
        doc["owner"] = owner
        s.out.json(doc)
    else:
        s.out.lines(views.state_rows(state, children))
        if state.status == "running":
            s.out.lines([views.owner_row(owner)])
    return 0


@app.command()
def timeline(ctx: typer.Context, run: Run) -> int:
    """Every event with its time, duration, attempts, failures, checkpoints and lineage."""
    s = _session(ctx)
    rid = s.engine.resolve(run)
    events = timeline_mod.views(s.engine, rid)
    if s.as_json:
        s.out.json_stream(timeline_mod.json_rows(events))
        return 0
    state = s.engine.state(rid)
    s.out.lines(timeline_mod.header(state, s.children(rid)))
    s.out.lines(timeline_mod.story(events))
    return 0


@app.command()
def checkpoints(ctx: typer.Context, run: Run) -> int:
    """A run's named checkpoints."""
    s = _session(ctx)
    state = s.engine.state(run)
    if s.as_json:
        s.out.json(checkpoint_docs(state))
    else:
        s.out.lines(views.checkpoint_rows(state))
    return 0


@app.command()
def state(
    ctx: typer.Context,
    run: Run,
    at: Annotated[
        str | None, typer.Option("--at", help="A position or a checkpoint name (default: latest).")
    ] = None,
) -> int:
    """The folded state of a run at a position, a checkpoint, or now."""
    s = _session(ctx)
    folded = s.engine.state(run, at=at)
    if s.as_json:
        s.out.json(state_doc(folded))
    else:
        s.out.lines(views.state_rows(folded))
    return 0


@app.command()
def context(ctx: typer.Context, run: Run) -> int:
    """The recovery context for an LLM resuming the run, as prompt-ready text."""
    s = _session(ctx)
    rid = s.engine.resolve(run)
    folded = s.engine.state(rid)
    text = context_mod.recovery_context(folded, timeline_mod.views(s.engine, rid))
    if s.as_json:
        s.out.json({"run_id": rid, "status": folded.status, "context": text})
    else:
        s.out.stream.write(text)
    return 0


@app.command()
def diff(
    ctx: typer.Context,
    left: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
    right: Annotated[str, typer.Argument(metavar="RUN[@AT]", show_default=False)],
) -> int:
    """What differs between two runs, or two positions of one (AT: a position or checkpoint)."""
    s = _session(ctx)
    doc = diff_mod.compare(diff_mod.side(s.engine, left), diff_mod.side(s.engine, right))
    if s.as_json:
        s.out.json(doc)
    else:
        s.out.lines(diff_mod.render(doc))
    return 0


@app.command()
def verify(ctx: typer.Context, run: Run) -> int:
    """Replay the log against the current code; exit 2 naming the first call that diverges."""
    s = _session(ctx)
    rid = s.engine.resolve(run)
    r = s.engine.verify(rid)
    if s.as_json:
        s.out.json({"run_id": rid, "status": r.status, "agrees": True})
    else:
        s.out.line(("✓ ", "green"), f"run {rid}: the code agrees with its log ({r.status})")
    return 0


# --- moving runs between stores --------------------------------------------------------


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    run: Run,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
) -> int:
    """The run's events as JSON Lines, one event a line, hash-chained."""
    s = _session(ctx)
    lines = transfer.export_lines(s.engine, run)
    if output is None:
        sys.stdout.flush()
        for line in lines:
            sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        return 0
    with open(output, "wb") as f:
        for line in lines:
            f.write(line)
    return 0


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="An export file, or - for stdin.")],
) -> int:
    """Import an exported run; refuses a corrupt or conflicting file whole."""
    s = _session(ctx)
    if file == "-":
        data, source = sys.stdin.buffer.read(), "stdin"
    else:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"cannot read {file}: {e.strerror}") from None
        source = file
    run_id, written = transfer.import_run(s.engine, data, source)
    events = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if s.as_json:
        s.out.json({"run_id": run_id, "imported": written, "events": events})
    elif written:
        s.out.line(("imported ", "green"), f"run {run_id} ({events} events)")
    else:
        s.out.line(("already present: ", "dim"), f"run {run_id} has this history; nothing to do")
    return 0


# --- helpers ---------------------------------------------------------------------------


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{what} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{what} must be a JSON object of keyword arguments")
    return value


def load_target(target: str) -> Any:
    """The agent named ``module:qualname``, importing the module with the cwd first."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise UsageError(f"expected MODULE:AGENT, got {target!r}")
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise UsageError(f"no module named {module_name!r} (looked in {cwd} first)") from None
        raise UsageError(f"importing {module_name} failed: {e}") from None
    except Exception as e:
        raise UsageError(f"importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"module {module_name} has no agent {qualname!r}")
    if not isinstance(obj, AgentDef) and not callable(obj):
        raise UsageError(f"{target} is not an agent (decorate it with @engine.agent)")
    return obj


def hoist(args: list[str]) -> list[str]:
    """Move ``--url URL``/``--url=URL`` and ``--json`` to the front, wherever they appear."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a == "--json":
            front.append(a)
        elif a == "--url" and i + 1 < len(args):
            front += [a, args[i + 1]]
            i += 1
        elif a.startswith("--url="):
            front.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


def _url_of(args: list[str]) -> str:
    for i, a in enumerate(args):
        if a == "--url" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--url="):
            return a[len("--url=") :]
    return os.environ.get("AGENTLOG_URL", "")


def _fail(message: str, url: str, code: int) -> int:
    """One clear line (three at most) on stderr, any password masked."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(url).password if "://" in url else None
    except ValueError:
        password = None
    if password:
        message = message.replace(password, "***")
    lines = [ln for ln in message.strip().splitlines() if ln.strip()][:3] or ["failed"]
    lines[0] = f"agentlog: error: {lines[0]}"
    sys.stderr.write("\n".join(ln[:500] for ln in lines) + "\n")
    return code


def run_cli(argv: list[str]) -> int:
    """Run the CLI on ``argv`` (without the program name); returns the exit status."""
    args = hoist(argv)
    url = _url_of(args)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=args, prog_name="agentlog", standalone_mode=False)
    except _ClickException as e:
        if not e.format_message():  # type: ignore[attr-defined]
            return int(getattr(e, "exit_code", 2))  # no arguments: the help was shown
        hint = ""
        usage_ctx = getattr(e, "ctx", None)
        if usage_ctx is not None:
            hint = f" (see: {usage_ctx.command_path} --help)"
        return _fail(f"{e.format_message()}{hint}", url, getattr(e, "exit_code", 2))  # type: ignore[attr-defined]
    except AgentlogError as e:
        return _fail(str(e) or type(e).__name__, url, 2)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("agentlog: interrupted\n")
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except Exception as e:
        if os.environ.get("AGENTLOG_DEBUG"):
            traceback.print_exc()
        return _fail(
            f"unexpected {type(e).__name__}: {e}\n(set AGENTLOG_DEBUG=1 to see the traceback)",
            url,
            1,
        )
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    return rv if isinstance(rv, int) else 0


def _quiet_stdout() -> None:
    """The reader went away (``| head``): stop writing without a second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main() -> NoReturn:
    """The ``agentlog`` console script."""
    sys.exit(run_cli(sys.argv[1:]))


if __name__ == "__main__":
    main()
