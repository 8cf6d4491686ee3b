"""``agentlog``: run, inspect, resume, rewind, export and verify agent runs.

``--url`` and ``--json`` are accepted before or after the command name. Exit status:
0 done, 3 paused for a human, 4 failed or abandoned, 2 bad usage or bad input (one line
on stderr, no traceback), 1 anything unexpected. The CLI imports every layer; nothing
imports the CLI.
"""

import copy
import os
import sys
import traceback
from typing import Any, NoReturn

import typer

from engine import observe
from engine.errors import AgentlogError

from ..output import printable, quiet_stdout
from . import commands, locking, projecting, reading, scheduling, stats, tree, working
from .app import app
from .args import check_argv

__all__ = [
    "app",
    "commands",
    "locking",
    "main",
    "projecting",
    "reading",
    "run_cli",
    "scheduling",
    "stats",
    "tree",
    "working",
]

# Commands whose output has one form only: --json changes nothing there.
NO_JSON = frozenset({"demo", "export", "metrics"})
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
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


def _fail(message: str, url: str, code: int) -> int:
    """One clear line (three at most) on stderr, any password masked."""
    from engine.store.url import scrub

    message = scrub(message, url)
    # split on newlines only: a CR or another break inside a line is escaped, not obeyed
    lines = [ln for ln in message.strip().split("\n") if ln.strip()][:3] or ["failed"]
    lines[0] = f"agentlog: error: {lines[0]}"
    sys.stderr.write("\n".join(printable(ln[:500]) for ln in lines) + "\n")
    return code


def run_cli(argv: list[str]) -> int:
    """Run the CLI on ``argv`` (without the program name); returns the exit status."""
    args = hoist(argv)
    url = _url_of(args)
    try:
        check_argv(argv)
    except AgentlogError as e:
        return _fail(str(e), "", 2)
    command = _command()
    try:
        rv = command.main(args=args, prog_name="agentlog", standalone_mode=False)
    except _ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # click >= 8.2: the help, on stderr
            e.show()  # type: ignore[attr-defined]
            return int(getattr(e, "exit_code", 2))
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
    except BrokenPipeError:  # written past Out (the demo's panels): the reader took enough
        quiet_stdout()
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
        quiet_stdout()
    return rv if isinstance(rv, int) else 0


def _command() -> Any:
    """The click command of ``app``; each sub-command also lists (and accepts) the global
    options its help should show: ``--url`` everywhere, ``--json`` where it means something."""
    group = typer.main.get_command(app)
    shared = [p for p in group.params if p.name in ("url", "as_json")]
    for name, sub in group.commands.items():  # type: ignore[attr-defined]
        _share(sub, [o for o in shared if not (o.name == "as_json" and name in NO_JSON)])
    return group


def _share(command: Any, options: list[Any]) -> None:
    """List ``options`` in ``command``'s help (and accept them there), and in the help of
    each command of a group (``metrics serve``)."""
    if command.help and not command.short_help:  # listed whole, wrapped, not cut at "..."
        command.short_help = command.help.split("\n\n")[0]
    for option in options:
        local = copy.copy(option)
        local.expose_value = False  # hoist() hands the value to the root command
        command.params.append(local)
    for child in getattr(command, "commands", {}).values():
        _share(child, options)


def main() -> NoReturn:
    """The ``agentlog`` console script: the one place agentlog configures logging."""
    observe.configure()
    sys.exit(run_cli(sys.argv[1:]))


if __name__ == "__main__":
    main()
