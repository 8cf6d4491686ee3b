"""The commands that move runs: demo, run, resume, recover, answer, abandon, rewind."""

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import UsageError
from engine.kinds import Effects, RunStatus

from ..output import exit_status, result_doc, worst
from ..targets import load_target
from . import args, bulk, forkviews, views
from .app import Run, Session, app, run_id_param, session
from .watching import recovered_doc, recovered_lines

if TYPE_CHECKING:
    from engine import RunResult

# --- running ---------------------------------------------------------------------------


@app.command()
def demo(ctx: typer.Context) -> int:
    """A bundled support-ticket agent: crashes mid-payment, resumes, rewinds, shows its log."""
    from .tour import tour

    return tour(session(ctx).url)


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="MODULE:AGENT", show_default=False)],
    input: Annotated[
        str, typer.Option("--input", "-i", help="The agent's keyword arguments as a JSON object.")
    ] = "{}",
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Use this run id (an existing run continues).",
            callback=run_id_param,
        ),
    ] = None,
) -> int:
    """Start MODULE:AGENT as a new run (MODULE is imported with the current directory first)."""
    s = session(ctx)
    kwargs = _json_object(input, "--input")
    agent = load_target(target)
    return s.result(s.engine.run(agent, run_id=run_id, **kwargs))


def _resume(s: Session, run: str) -> int:
    return s.result(s.engine.resume(run))


resume = app.command("resume")(
    bulk.command(
        "resume",
        _resume,
        __name__,
        """Continue a crashed or failed run from its log (a completed run just shows its
        result). With --status (and --yes): every run of that status, each outcome on a line.""",
    )
)


@app.command()
def recover(
    ctx: typer.Context,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Keep recovering, pass after pass, until Ctrl-C."),
    ] = False,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            metavar="SECONDS",
            help="With --watch: the pause between two passes (default 1).",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Resume every run whose owner died, and every waiting run that is due (its timer
    passed, its message came, its child moved); a run that cannot be resumed (a damaged
    log, changed code, an agent that no longer imports) is reported and the rest go on.

    A crashed run of an agent with resume="approve" is held instead (status held) until
    `agentlog approve RUN`.

    Exits with the worst of the runs' statuses, in this order: 1 unexpected error,
    2 could not be resumed, 4 failed or abandoned, 3 paused or held, 0 completed or
    waiting again (or nothing to do). With --watch it runs until SIGINT or SIGTERM and exits 0.
    """
    s = session(ctx)
    if watch:
        from .watching import watch as watch_recover

        return watch_recover(s, _interval(interval))
    if interval is not None:
        raise UsageError("--interval goes with --watch")
    results = s.engine.recover()
    if s.as_json:
        s.out.json([recovered_doc(r) for r in results])
    elif not results:
        s.out.line(("no runs needed recovery (no crashed run, no waiting run due)", "dim"))
    for r in results if not s.as_json else ():
        recovered_lines(s, r)
    return worst(_recover_status(r) for r in results)  # waiting again counts as done


def _interval(text: str | None) -> float:
    """--interval's seconds: a finite number above zero (default 1)."""
    if text is None:
        return 1.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"--interval takes seconds above zero, not {args.shown(text)}")
    return seconds


def _recover_status(r: "RunResult") -> int:
    if r.not_resumed == "held":
        return 3  # it waits for a person's approve, as a paused run for an answer
    if r.not_resumed is not None:
        return 1 if r.not_resumed == "unexpected" else 2
    if r.status == RunStatus.WAITING:
        return 0
    return exit_status(r.status)


@app.command()
def answer(
    ctx: typer.Context,
    run: Run,
    value: Annotated[str, typer.Argument(show_default=False)],
    json_value: Annotated[
        bool,
        typer.Option(
            "--json-value", help="Parse VALUE as JSON (to an uncertain effect: its result)."
        ),
    ] = False,
) -> int:
    """Answer the question a paused run waits on, and continue it. To "did the effect
    happen?": 'done', 'not done', or the result it had (--json-value)."""
    s = session(ctx)
    from engine import Given

    answer_value: Any = Given(args.json_value(value, "VALUE")) if json_value else value
    return s.result(s.engine.answer(run, answer_value))


@app.command()
def approve(ctx: typer.Context, run: Run) -> int:
    """Let a held run (crashed; its agent has resume="approve") continue: the approval
    (who, when) is recorded and the run resumes. Exit as `resume`; 2 if the run is
    unknown or not held."""
    s = session(ctx)
    return s.result(s.engine.approve(run))


def _abandon(s: Session, run: str) -> int:
    r = s.engine.abandon(run)
    if s.as_json:
        s.out.json({**result_doc(r), **views.effects_docs(r)})
        return exit_status(r.status)
    code = s.result(r)
    s.out.lines(views.compensated_rows(r.compensated, "undone by this abandon"))
    s.out.lines(views.standing_rows(r.standing, "not undone by this abandon"))
    return code


abandon = app.command("abandon")(
    bulk.command(
        "abandon",
        _abandon,
        __name__,
        """Stop a run for good, running its compensations in reverse order. With --status
        (and --yes): every run of that status; exit 0 when each was abandoned.""",
    )
)


ToOption = Annotated[
    str | None,
    typer.Option(
        "--to",
        help="A checkpoint name or a position (as timeline shows it); with --answer, "
        "by default the run's last question.",
    ),
]
EffectsOption = Annotated[
    str,
    typer.Option(
        "--effects",
        metavar="reuse|compensate|resend",
        help="The parent's side effects after the target: reuse them when the fork makes "
        "the same call (default), compensate them first, or resend them.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="NAME=JSON",
        help="Replace an inherited value: a decision, a question's answer or a read-only "
        "tool's result, by name (NAME@POSITION when recorded more than once).",
    ),
]
AnswerOption = Annotated[
    str | None, typer.Option("--answer", help="Fork at the question with this answer.")
]
JsonAnswer = Annotated[bool, typer.Option("--json-value", help="Parse --answer's VALUE as JSON.")]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Call no side-effecting tool: record what it would send.")
]
ByOption = Annotated[str | None, typer.Option("--by", help="Who edits (default user@host).")]


@app.command()
def rewind(
    ctx: typer.Context,
    run: Run,
    to: ToOption = None,
    effects: EffectsOption = Effects.REUSE.value,
    sets: SetOption = None,
    answer: AnswerOption = None,
    json_value: JsonAnswer = False,
    dry_run: DryRunOption = False,
    by: ByOption = None,
) -> int:
    """Fork a new run from a checkpoint or position of RUN and continue it (with edits,
    another answer, or as a dry run: docs/guides/forks.md)."""
    s = session(ctx)
    if to is None and answer is None:
        raise UsageError("rewind needs --to POSITION|NAME (or --answer VALUE: at the question)")
    args.position(to, "--to")
    values = args.assignments(sets or [], "--set")
    given = (
        None if answer is None else args.json_value(answer, "--answer") if json_value else answer
    )
    parent = s.engine.resolve(run)
    r = s.engine.rewind(
        parent, to, effects=effects, set=values, answer=given, dry_run=dry_run, by=by
    )
    fork = forkviews.fork_doc(s.engine.events(r.run_id))
    if s.as_json:
        s.out.json(
            {
                **result_doc(r),
                "standing": views.standing_docs(r.standing),
                "compensated": views.standing_docs(r.compensated),
                "reused": views.standing_docs(r.reused),
                **fork,
            }
        )
        return exit_status(r.status)
    at = "its last question" if to is None else repr(to)
    s.out.line("fork ", (r.run_id, "bold cyan"), f" of {parent} at {at} (effects: {effects})")
    s.out.lines(forkviews.fork_rows(fork))
    code = s.result(r)
    s.out.lines(views.compensated_rows(r.compensated, "undone before the fork"))
    s.out.lines(views.reused_rows(r.reused))
    s.out.lines(views.standing_rows(r.standing, views.FORK_STANDING))
    return code


@app.command()
def adopt(
    ctx: typer.Context,
    run: Run,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="MODULE:AGENT",
            help="The agent that runs it from now on (default: the one the run names).",
        ),
    ] = None,
) -> int:
    """Take on an imported run: record who adopted it and which agent runs it; until then
    it is history only (resume, answer, abandon, rewind and verify refuse it)."""
    s = session(ctx)
    r = s.engine.adopt(run, agent)
    state = s.engine.state(r.run_id)
    if s.as_json:
        s.out.json({**result_doc(r), "agent": state.agent})
    else:
        s.out.line("adopted run ", (r.run_id, "bold"), " ", views.status_piece(r.status))
        s.out.line(f"runs as {state.agent}")
    return 0


def _json_object(text: str, what: str) -> dict[str, Any]:
    value = args.json_value(text, what)
    if not isinstance(value, dict):
        raise UsageError(f"{what} must be a JSON object of keyword arguments")
    return value
