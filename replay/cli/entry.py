"""``agentlog``: run, inspect, resume, rewind, export and verify agent runs.

``--url`` and ``--json`` are accepted before or after the command name. Exit status:
0 done, 3 paused for a human, 4 failed or abandoned, 2 bad usage or bad input (one line
on stderr, no traceback), 1 anything unexpected. The CLI imports every layer; nothing
imports the CLI.

A reading command written in a form the quick path knows exactly (``quick``) runs without
loading Typer; everything else, ``--help`` and every malformed line included, goes to the
Typer app (``full``), so both give the same output and exit status.
"""

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from engine import observe
from engine._lazy import lazy_exports
from engine.errors import AgentlogError

from . import quick
from .args import check_argv
from .exits import fail, guarded

if TYPE_CHECKING:
    from .full import NO_JSON, app
    from .full import _command as _command  # the store-modes test builds the group

__all__ = ["NO_JSON", "app", "hoist", "main", "run_cli"]

# The Typer app (every command registered) and its click group load on first access: the
# quick path never imports Typer.
__getattr__, __dir__ = lazy_exports(
    __name__, {name: "replay.cli.full" for name in ("NO_JSON", "_command", "app")}
)


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


def run_cli(argv: list[str]) -> int:
    """Run the CLI on ``argv`` (without the program name); returns the exit status."""
    args = hoist(argv)
    url = _url_of(args)
    try:
        check_argv(argv)
    except AgentlogError as e:
        return fail(str(e), "", 2)
    work: Callable[[], int] | None = quick.plan(args)
    if work is None:
        from . import full

        work = functools.partial(full.invoke, args, url)
    return guarded(work, url)


def main() -> NoReturn:
    """The ``agentlog`` console script: the one place agentlog configures logging."""
    observe.configure()
    sys.exit(run_cli(sys.argv[1:]))


if __name__ == "__main__":
    main()
