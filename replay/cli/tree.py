"""``agentlog tree RUN``: a run and the child runs below it, one line each (run id, agent,
status, current step, what it waits on), drawn as a tree; ``--json`` gives the nested
document ``{"run_id", "agent", "status", "step", "waiting", "parent_run_id", "children"}``.
Forks are not children (``agentlog show`` lists a run's forks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from engine.errors import UsageError
from engine.log.state import ChildOf, ForkOf

from ..output import Piece, printable, rich_console
from . import args
from .app import Run, app, session
from .views import status_piece

if TYPE_CHECKING:
    from rich.text import Text

    from engine.runtime.run.tree import RunNode

    from .app import Session


def node_pieces(node: RunNode) -> list[Piece]:
    """One node's line: id, agent, status, then its step and what it waits on."""
    out: list[Piece] = [(node.run_id, "bold"), f"  {node.agent}  ", status_piece(node.status)]
    if node.step:
        out.append(("  step ", "dim"))
        out.append(node.step)
    if node.waiting:
        out.append(("  waiting: ", "dim"))
        out.append((node.waiting, "yellow"))
    if node.truncated:
        out.append(("  (deeper runs not shown: `agentlog tree " + node.run_id + "`)", "dim"))
    return out


def root_pieces(node: RunNode) -> list[Piece]:
    """The root's line; a root that is itself a child, or a fork, says whose."""
    out = node_pieces(node)
    match node.lineage:
        case ForkOf(parent_run_id=parent, fork_position=at):
            out.append((f"  (fork of {parent} at {at})", "cyan"))
        case ChildOf(parent_run_id=parent):
            out.append((f"  (child of {parent})", "cyan"))
    return out


def _text(pieces: list[Piece]) -> Text:
    """Pieces as a rich Text, every recorded string escaped (``printable``)."""
    from rich.text import Text

    text = Text()
    for p in pieces:
        if isinstance(p, str):
            text.append(printable(p))
        else:
            text.append(printable(p[0]), style=p[1].strip() or None)
    return text


def render(s: Session, top: RunNode) -> None:
    """The tree drawn with rich (styled on a terminal, plain guides elsewhere), built
    without recursion however deep it is."""
    from rich.tree import Tree

    console = rich_console(s.out, 1000)
    drawn = Tree(_text(root_pieces(top)))
    stack = [(drawn, top)]
    while stack:
        branch, node = stack.pop()
        for child in node.children:
            stack.append((branch.add(_text(node_pieces(child))), child))
    console.print(drawn, soft_wrap=True)


@app.command("tree")
def tree_cmd(
    ctx: typer.Context,
    run: Run,
    depth: Annotated[
        str | None,
        typer.Option(metavar="N", help="Levels of children shown below RUN (default 100)."),
    ] = None,
) -> int:
    """A run's tree: the run and its child runs, each with its status, current step and
    the question or event it waits on (forks are not children)."""
    s = session(ctx)
    levels = args.count(depth, "--depth")
    if levels is not None and not 1 <= levels <= 100:
        raise UsageError(f"--depth must be from 1 to 100, not {levels}")
    found = s.catalog.tree(run) if levels is None else s.catalog.tree(run, levels)
    if s.as_json:
        s.out.json(found)
    else:
        render(s, found)
    return 0
