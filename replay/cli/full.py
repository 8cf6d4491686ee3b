"""The whole ``agentlog`` command line: the Typer app with every command registered, for
whatever the quick path (``quick``) does not take, ``--help`` included."""

from __future__ import annotations

import copy
from typing import Any

import typer

from . import (
    commands,
    drilling,
    locking,
    projecting,
    reading,
    retention,
    scheduling,
    stats,
    tree,
    web,
    working,
)
from .app import app
from .exits import fail

__all__ = [
    "app",
    "commands",
    "drilling",
    "invoke",
    "locking",
    "projecting",
    "reading",
    "retention",
    "scheduling",
    "stats",
    "tree",
    "web",
    "working",
]

# The commands in this order (the help, the reference), whichever of these modules a
# process happened to import first (registration follows import order).
_ORDER = {
    m.__name__: n
    for n, m in enumerate(
        (
            commands,
            locking,
            projecting,
            reading,
            scheduling,
            stats,
            tree,
            working,
            retention,
            web,
            drilling,
        )
    )
}
app.registered_commands.sort(key=lambda c: _ORDER.get(getattr(c.callback, "__module__", ""), 99))

# Commands whose output has one form only: --json changes nothing there.
NO_JSON = frozenset({"demo", "export", "metrics", "ui"})
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def invoke(args: list[str], url: str) -> int:
    """Run ``args`` (``--url``/``--json`` hoisted to the front) through the Typer app; a
    usage error is one line on stderr (exit 2), the help is click's."""
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
        return fail(f"{e.format_message()}{hint}", url, getattr(e, "exit_code", 2))  # type: ignore[attr-defined]
    except typer.Abort:
        raise KeyboardInterrupt from None
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
