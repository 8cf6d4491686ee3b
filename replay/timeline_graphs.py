"""The timeline's lines for a LangGraph thread's events (engine.integrations.langgraph):
its checkpoints (supersteps: step, source, namespace, the channels new at each, a tail
appended to a list), the writes of its tasks (an interrupt, a resume, an error shown as
such) and what was pruned or deleted. Channel values stay opaque bytes: never shown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import events as ev

from .output import Piece, plural

# LangGraph's special write channels, as a timeline names them.
_SPECIAL = {
    "__interrupt__": ("⏸ interrupt", "bold magenta"),
    "__resume__": ("▶ resume", "bold blue"),
    "__error__": ("✗ error", "bold red"),
}


def _where(ns: str) -> str:
    return f"  in {ns}" if ns else ""


def _checkpointed(e: ev.GraphCheckpointed, at: float) -> list[Piece]:
    step = "" if e.step is None else f" step {e.step}"
    source = f" ({e.source})" if e.source else ""
    new = ", ".join(v.channel + (" +tail" if v.base is not None else "") for v in e.values)
    return [
        (f"◆ checkpoint{step}{source}", "bold cyan"),
        (f" {e.checkpoint_id}", "dim"),
        _where(e.ns),
        (f"  new: {new}" if new else "  nothing new", "dim"),
    ]


def _written(e: ev.GraphWritten, at: float) -> list[Piece]:
    channels = [w.channel for w in e.writes]
    special = next((_SPECIAL[c] for c in channels if c in _SPECIAL), None)
    head: Piece = special if special is not None else ("✎ writes", "bold")
    task = e.task_path or e.task_id
    return [head, f" {', '.join(channels)}", (f"  task {task}{_where(e.ns)}", "dim")]


def _forgotten(e: ev.GraphForgotten, at: float) -> list[Piece]:
    if e.pruned:
        return [("✂ pruned", "bold yellow"), f" kept {plural(len(e.keep), 'checkpoint')}"]
    if e.runs:
        return [("✂ deleted", "bold yellow"), f" the checkpoints of runs {', '.join(e.runs)}"]
    return [("✂ deleted", "bold yellow"), " every checkpoint of the thread"]


Render = Callable[[Any, float], list[Piece]]

RENDER: dict[type[ev.Event], Render] = {
    ev.GraphCheckpointed: _checkpointed,
    ev.GraphWritten: _written,
    ev.GraphForgotten: _forgotten,
}
