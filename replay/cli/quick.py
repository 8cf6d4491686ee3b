"""The quick path: the reading commands (and the locks and schedules listings) run without
loading Typer and the other commands' modules (some 50 ms of a 140 ms ``agentlog runs``).
It takes only a command line it can read exactly as the Typer app would: a known command,
known long options each given once, the right count of arguments, no value that looks like
an option. Anything else (``--help``, a short option, a typo, a missing argument) is not
its to judge: ``plan`` returns None and the Typer app (``full``) answers, with its own
messages. The work itself is the same function either way (``reads``, ``listing``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import args, listing, reads, sizes
from .session import Session


@dataclass(frozen=True)
class Shape:
    """A command as the quick path takes it: its arguments in order, its options (the
    long name -> the keyword of ``body``), and the work."""

    body: Callable[..., int]
    arguments: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)


# The option names of ``runs``, each its keyword with underscores as dashes.
_RUNS_OPTIONS = (
    *("status", "agent", "since", "until", "parent", "limit", "offset"),
    *("version", "key", "input-contains"),
)
SHAPES = {
    "runs": Shape(reads.runs, (), {f"--{o}": o.replace("-", "_") for o in _RUNS_OPTIONS}),
    "show": Shape(reads.show, ("run",)),
    "timeline": Shape(reads.timeline, ("run",)),
    "checkpoints": Shape(reads.checkpoints, ("run",)),
    "state": Shape(reads.state, ("run",), {"--at": "at"}),
    "context": Shape(reads.context, ("run",), {"--max-tokens": "max_tokens"}),
    "blob": Shape(reads.blob, ("blob_id",)),
    "diff": Shape(reads.diff, ("left", "right")),
    "export": Shape(reads.export, ("run",), {"--output": "output"}),
    "locks": Shape(listing.locks),
    "schedules": Shape(listing.schedules),
    "storage": Shape(sizes.storage),
}
# Values the Typer app checks as run ids as it parses them (the RUN callback), by the
# name its error gives them.
RUN_IDS = {"run": "RUN", "parent": "--parent"}


def plan(hoisted: list[str]) -> Callable[[], int] | None:
    """The command ``hoisted`` (``--url``/``--json`` at the front, as ``entry.hoist``
    leaves them) names, ready to run; None when the Typer app must read it."""
    front = _globals(hoisted)
    if front is None:
        return None
    url, as_json, rest = front
    if not rest or rest[0] not in SHAPES:
        return None
    shape = SHAPES[rest[0]]
    given = _arguments(shape, rest[1:])
    if given is None:
        return None

    def work() -> int:
        for name, label in RUN_IDS.items():
            if name in given:
                args.run_id(given[name], label)
        s = Session(url=url, as_json=as_json)
        try:
            return shape.body(s, **given)
        finally:
            s.close()

    return work


def _globals(hoisted: list[str]) -> tuple[str | None, bool, list[str]] | None:
    """``--url`` and ``--json`` from the front, each at most once, and what follows."""
    url: str | None = None
    as_json = False
    i = 0
    while i < len(hoisted):
        a = hoisted[i]
        if a == "--json" and not as_json:
            as_json = True
        elif a == "--url" and url is None and i + 1 < len(hoisted):
            url = hoisted[i + 1]
            i += 1
        elif a.startswith("--url=") and url is None:
            url = a[len("--url=") :]
        elif a.startswith("--"):
            return None  # a second --url or --json, or another global: the Typer app's
        else:
            break
        i += 1
    if url is not None and url.startswith("-"):
        return None
    return url, as_json, hoisted[i:]


def _arguments(shape: Shape, words: list[str]) -> dict[str, Any] | None:
    """The keywords of ``shape.body`` the words give, or None when they are not exactly
    the command's arguments and options (each option once, its value not option-like)."""
    given: dict[str, Any] = {}
    positional: list[str] = []
    waiting: str | None = None
    for word in words:
        if waiting is not None:
            if word.startswith("-"):
                return None
            given[waiting], waiting = word, None
        elif word.startswith("-"):
            name, eq, value = word.partition("=")
            key = shape.options.get(name)
            if key is None or key in given:
                return None
            if eq:
                given[key] = value
            else:
                waiting = key
        else:
            positional.append(word)
    if waiting is not None or len(positional) != len(shape.arguments):
        return None
    given.update(zip(shape.arguments, positional, strict=True))
    return given
