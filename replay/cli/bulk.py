"""``agentlog resume|abandon|verify --status S [--agent A] [--since T] --yes``: one of
these commands over every run a filter of the run index picks (``Catalog.find``), newest
first, each run's outcome on a line and a count at the end.

Without ``--yes`` nothing is done: the count and the run ids are printed and the command
exits 2 asking for ``--yes`` (a preview that exited 0 would read as done to a script).
With ``--yes`` it exits 0 when every run ended well (resume: completed; abandon:
abandoned; verify: the code agrees with its log), else with the worst of the runs' own
statuses: 1 unexpected, 2 refused (or diverged), 4 failed, 3 paused or waiting. No run
matching is exit 0. ``--json`` writes ``{"action", "count", "runs": [...], "done"}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import AgentlogError, UsageError
from engine.kinds import RunStatus

from ..output import exit_status, plural, printable, result_doc, worst
from . import args
from .app import MaybeRun, session
from .session import STATUSES
from .views import status_piece

if TYPE_CHECKING:
    from engine import RunResult

    from .session import Session

Status = Annotated[
    str | None,
    typer.Option(
        "--status", metavar="S", help="Every run of this status (with --yes), not one RUN."
    ),
]
Agent = Annotated[
    str | None, typer.Option(metavar="A", help="With --status: only this agent's runs.")
]
Since = Annotated[
    str | None,
    typer.Option(metavar="T", help="With --status: only runs started at or after T (24h, ISO)."),
]
Yes = Annotated[
    bool, typer.Option("--yes", help="With --status: do it (without: only list the runs).")
]


def command(
    action: str, one: Callable[[Session, str], int], module: str, doc: str
) -> Callable[..., int]:
    """The Typer command ``action [RUN] [--status S [--agent A] [--since T] --yes]``: ``one``
    for RUN, :func:`over` for ``--status`` (``module``: where it is declared, which orders
    the help)."""

    def bulk_command(
        ctx: typer.Context,
        run: MaybeRun = None,
        status: Status = None,
        agent: Agent = None,
        since: Since = None,
        yes: Yes = False,
    ) -> int:
        s = session(ctx)
        rid = one_run(run, status, agent, since, yes)
        if rid is None:
            assert status is not None  # (one_run refuses neither)
            return over(s, action, status, agent, since, yes)
        return one(s, rid)

    bulk_command.__doc__, bulk_command.__module__ = doc, module
    bulk_command.__name__ = bulk_command.__qualname__ = action
    return bulk_command


def one_run(
    run: str | None, status: str | None, agent: str | None, since: str | None, yes: bool
) -> str | None:
    """The one run the command names (None: the runs ``--status`` picks), once the
    command line names exactly one of them."""
    if run is not None and status is not None:
        raise UsageError("give RUN or --status, not both")
    if status is None and (agent is not None or since is not None or yes):
        raise UsageError("--agent, --since and --yes go with --status")
    if run is None and status is None:
        raise UsageError("missing RUN (or --status S for every run of a status)")
    return run


def _resume(s: Session, rid: str) -> tuple[int, dict[str, Any]]:
    r = s.engine.resume(rid)
    return exit_status(r.status), _doc(r)


def _abandon(s: Session, rid: str) -> tuple[int, dict[str, Any]]:
    r = s.engine.abandon(rid)
    return (0 if r.status == RunStatus.ABANDONED else exit_status(r.status)), _doc(r)


def _verify(s: Session, rid: str) -> tuple[int, dict[str, Any]]:
    r = s.engine.verify(rid)  # a divergence raises: refused, exit 2
    return 0, {**_doc(r), "agrees": True}


def _doc(r: RunResult) -> dict[str, Any]:
    return {**result_doc(r), "refused": None}


def _refused(run_id: str, why: str) -> dict[str, Any]:
    """A run the action could not be done to, as ``--json`` lists it: why, in ``refused``."""
    doc = dict.fromkeys(("status", "output", "error", "waiting"))
    return {"run_id": run_id, **doc, "refused": why}


# Each action: its work on one run, its verb and what a run that ended well is, in words.
ACTIONS: dict[str, tuple[Callable[[Session, str], tuple[int, dict[str, Any]]], str, str]] = {
    "resume": (_resume, "resume", "completed"),
    "abandon": (_abandon, "abandon", "abandoned"),
    "verify": (_verify, "verify", "agree with their log"),
}


def over(
    s: Session, action: str, status: str, agent: str | None, since: str | None, yes: bool
) -> int:
    """Do ``action`` to every run the filter picks (with ``yes``), or list them (without)."""
    if status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}, not {status!r}")
    bound = args.moment(since, "--since", time.time())
    picked = [r.run_id for r in s.catalog.find(status, args.agent_name(agent), bound)]
    verb = ACTIONS[action][1]
    what = _filter_words(status, agent, since)
    if not picked or not yes:
        if s.as_json:
            s.out.json({"action": action, "count": len(picked), "run_ids": picked, "done": False})
        elif not picked:
            s.out.line((f"no runs match {what}: nothing to {verb}", "dim"))
        else:
            s.out.line(f"would {verb} {plural(len(picked), 'run')} ({what}):")
            s.out.lines([[printable(rid)] for rid in picked])
        if picked:
            raise UsageError(f"add --yes to {verb} these {plural(len(picked), 'run')}")
        return 0
    return _each(s, action, picked, what, status)


def _each(s: Session, action: str, picked: list[str], what: str, status: str) -> int:
    """``action`` on each run in turn; a run that cannot be acted on is reported and the
    rest go on. A run whose status moved on since the listing (resumed, answered or
    abandoned meanwhile) is left alone. Ctrl-C stops between two runs, as inside one:
    what was done, the run it was at and those left are still reported (exit 130)."""
    work, verb, well = ACTIONS[action]
    codes: list[int] = []
    docs: list[dict[str, Any]] = []
    if not s.as_json:
        s.out.line(f"{verb} {plural(len(picked), 'run')} ({what}):")
    for rid in picked:
        try:
            code, doc = _unless_moved(s, rid, status) or work(s, rid)
        except AgentlogError as e:
            code, doc = 2, _refused(rid, str(e) or type(e).__name__)
        except KeyboardInterrupt:
            _interrupted(s, action, picked, docs, rid)
            raise
        except Exception as e:  # one run's bug must not stop the others
            code, doc = 1, _refused(rid, f"unexpected {e!r}"[:300])
        codes.append(code)
        docs.append(doc)
        if not s.as_json:
            s.out.line(*_outcome_line(doc, code))
    ok = codes.count(0)
    if s.as_json:
        s.out.json({"action": action, "count": len(picked), "runs": docs, "done": True})
    else:
        s.out.line(f"{verb}: {plural(len(picked), 'run')}, {ok} {well}, {len(picked) - ok} not")
    return worst(codes)


def _interrupted(
    s: Session, action: str, picked: list[str], docs: list[dict[str, Any]], at: str
) -> None:
    """The report of a bulk stopped by Ctrl-C while at run ``at`` (its outcome unknown)."""
    left = picked[len(docs) + 1 :]
    if s.as_json:
        doc = {"action": action, "count": len(picked), "runs": docs, "done": False}
        s.out.json({**doc, "interrupted": at, "left": left})
        return
    s.out.line(("interrupted ", "red"), f"at {printable(at)} (its outcome unknown):")
    s.out.line(f"{len(docs)} done, {plural(len(left), 'run')} not started")
    s.out.lines([[printable(rid)] for rid in left])


def _unless_moved(s: Session, rid: str, status: str) -> tuple[int, dict[str, Any]] | None:
    """A refusal if the run is no longer of ``status`` (read from its log, just before the
    action), None if it still is."""
    now = str(s.engine.state(rid).status)
    if now == status:
        return None
    return 2, _refused(rid, f"now {now}, not {status} as when listed: left alone")


def _outcome_line(doc: dict[str, Any], code: int) -> list[Any]:
    mark = ("✓ ", "green") if code == 0 else ("✗ ", "red")
    line: list[Any] = [mark, f"{printable(doc['run_id']):<32}  "]
    if doc["refused"] is not None:
        return [*line, ("refused: ", "red"), printable(doc["refused"])[:300]]
    line.append(status_piece(str(doc["status"])))
    if doc.get("error"):
        line.append(f"  {printable(str(doc['error']))[:200]}")
    return line


def _filter_words(status: str, agent: str | None, since: str | None) -> str:
    words = f"status {status}"
    if agent is not None:
        words += f", agent {printable(agent)}"
    if since is not None:
        words += f", started since {printable(since)}"
    return words
