"""The events of forks with edits and dry runs (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from typing import Any

import msgspec

from .base import Event


class Edit(msgspec.Struct, frozen=True):
    """One value a fork changed in what it inherited: the ``kind`` (``decision``,
    ``answer`` or ``tool``) and ``name`` of the call at ``call`` (recorded at ``position``),
    with keyed hashes of the parent's value and of the one set (never the values: the
    edited event itself holds the new one, redacted as any recorded value)."""

    kind: str
    name: str
    call: int
    position: int
    old_hash: str = ""
    new_hash: str = ""


class ForkEdited(Event, frozen=True, tag="fork_edited"):
    """The fork's inherited prefix was edited before it continued (``engine.rewind(...,
    set=..., answer=...)``): what was changed, and ``by`` whom (user@host, or the caller's
    ``by=``)."""

    edits: list[Edit] = []
    by: str = ""


class DryRunStarted(Event, frozen=True, tag="dry_run_started"):
    """The run is a dry run (a fork rewound with ``dry_run=True``, or a child a dry run
    spawned): it calls no side-effecting tool. Written with its first events."""


class WouldSend(Event, frozen=True, tag="would_send"):
    """A dry-run fork reached a side-effecting call and sent nothing: what it would have
    sent (``args`` as the store keeps a tool's arguments: redacted) under ``key``. The
    call's recorded outcome for replay: ``result``, the parent's recorded result of its
    same call (``parent_call``) after the fork point, else None, or the fork stopped here
    (``stopped``)."""

    call: int
    tool: str
    args: dict[str, Any] = {}
    args_hash: str = ""
    key: str | None = None
    stopped: bool = False
    result: Any = None
    parent_call: int | None = None


class DryRunEnded(Event, frozen=True, tag="dry_run_ended"):
    """A dry-run fork ended (status ``dry_run``): its agent returned ``output``, or it
    stopped at call ``stopped_at`` (a would-be effect whose result it cannot make up, or
    a child that stopped), ``error`` saying so."""

    output: Any = None
    stopped_at: int | None = None
    error: str | None = None


AnyForkEvent = ForkEdited | DryRunStarted | WouldSend | DryRunEnded

__all__ = ["DryRunEnded", "DryRunStarted", "Edit", "ForkEdited", "WouldSend"]
