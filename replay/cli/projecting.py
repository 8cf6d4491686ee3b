"""``agentlog projections status|rebuild|follow``: where each view stands in the log,
building views again from scratch (a progress bar on stderr when it is a terminal), and
keeping them current as the log grows."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.errors import UsageError

from .app import Session, app, session

if TYPE_CHECKING:
    from projections import Runner, ViewStatus
    from projections.runner import Progress

projections = typer.Typer(
    help="The views of the whole log: their place in it, rebuilding them, following it.",
    no_args_is_help=True,
)
app.add_typer(projections, name="projections")


def _runner(s: Session) -> Runner:
    from projections import Runner
    from projections.views import all_views

    return Runner(s.catalog.store, all_views())


def _doc(v: ViewStatus) -> dict[str, Any]:
    import msgspec

    return msgspec.structs.asdict(v)


def _show(s: Session, found: list[ViewStatus]) -> None:
    if s.as_json:
        s.out.json([_doc(v) for v in found])
        return
    width = max([len(v.name) for v in found] + [4])
    s.out.line((f"{'view':<{width}}  position      head       lag  version", "bold"))
    for v in found:
        note = ("", "") if v.current else ("  (rebuilt on next catch-up)", "yellow")
        s.out.line(
            f"{v.name:<{width}}  {v.position:>8}  {v.head:>8}  {v.lag:>8}  {v.version or '-'}",
            note,
        )


@projections.command()
def status(ctx: typer.Context) -> int:
    """Each view's position, the log's head, the lag between, and the view's version."""
    s = session(ctx)
    _show(s, _runner(s).status())
    return 0


@projections.command()
def rebuild(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(metavar="[NAME]", help="One view (default: all).", show_default=False),
    ] = None,
) -> int:
    """Empty views and fold the whole log into them again."""
    s = session(ctx)
    runner = _runner(s)
    if name is not None and name not in runner.views:
        known = ", ".join(runner.views)
        raise UsageError(f"no view named {name!r} (views: {known})")
    with _progress() as progress:
        runner.rebuild(*([name] if name is not None else []), progress=progress)
    _show(s, [v for v in runner.status() if name is None or v.name == name])
    return 0


@projections.command()
def follow(ctx: typer.Context) -> int:
    """Keep every view current: catch up, then wait for new events (LISTEN/NOTIFY on
    PostgreSQL, polling on SQLite) and catch up again, until interrupted (Ctrl-C)."""
    import threading

    s = session(ctx)
    runner = _runner(s)
    print(f"following {s.catalog.store.name}: Ctrl-C stops", file=sys.stderr, flush=True)
    runner.follow(threading.Event())
    return 0


@contextmanager
def _progress() -> Iterator[Progress | None]:
    """A rich progress bar on stderr, one line a view, when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    tasks: dict[str, Any] = {}

    def show(view: str, position: int, head: int) -> None:
        if view not in tasks:
            tasks[view] = bar.add_task(f"rebuild {view}", total=head)
        bar.update(tasks[view], completed=position, total=head)

    with bar:
        yield show
