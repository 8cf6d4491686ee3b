"""The events of a LangGraph thread kept on our log (re-exported by :mod:`engine.events`).

A thread is a run: its checkpoints, their pending writes and what was pruned or deleted
are events of the run's stream. Channel values stay opaque: LangGraph's serializer gives
``(kind, bytes)`` and the bytes ride inside the event as they are.
"""

from __future__ import annotations

import msgspec

from .base import Event

# The agent of a thread's run, langgraph:<the saver's name> (not exported with the events).
THREAD_AGENT = "langgraph:"

# A channel's version, as LangGraph numbers it (int by default, str for some savers).
Version = str | int | float


class GraphValue(msgspec.Struct, frozen=True, omit_defaults=True):
    """``channel``'s value at ``version``, typed by LangGraph's serializer (``kind``,
    ``data``). With ``base``: a list that extends the value at version ``base`` by the
    items ``data`` holds (a message history stored as its appended tail)."""

    channel: str
    version: Version
    kind: str
    data: bytes = b""
    base: Version | None = None


class GraphCheckpointed(Event, frozen=True, tag="graph_checkpointed"):
    """A checkpoint of namespace ``ns`` (the checkpoint without its channel values, and
    its metadata, both typed bytes) and the channel values new at it (``values``)."""

    ns: str
    checkpoint_id: str
    kind: str
    checkpoint: bytes
    metadata_kind: str
    metadata: bytes
    parent_id: str | None = None
    values: list[GraphValue] = []
    run: str | None = None  # the LangGraph run that wrote it (metadata "run_id")
    step: int | None = None  # metadata "step" and "source", for timelines
    source: str | None = None


class GraphWrite(msgspec.Struct, frozen=True):
    """One pending write of a task: ``channel``, its index and its typed value."""

    channel: str
    idx: int
    kind: str
    data: bytes


class GraphWritten(Event, frozen=True, tag="graph_written"):
    """Task ``task_id``'s pending writes on checkpoint ``checkpoint_id`` of ``ns``."""

    ns: str
    checkpoint_id: str
    task_id: str
    writes: list[GraphWrite]
    task_path: str = ""


class GraphKept(msgspec.Struct, frozen=True):
    """A checkpoint a prune keeps."""

    ns: str
    checkpoint_id: str


class GraphForgotten(Event, frozen=True, tag="graph_forgotten"):
    """Checkpoints the thread no longer has: all of them (``delete_thread``); those of
    the LangGraph runs ``runs``; or, ``pruned``, all but ``keep``."""

    runs: list[str] = []
    pruned: bool = False
    keep: list[GraphKept] = []


AnyGraphEvent = GraphCheckpointed | GraphWritten | GraphForgotten

__all__ = [
    "AnyGraphEvent",
    "GraphCheckpointed",
    "GraphForgotten",
    "GraphKept",
    "GraphValue",
    "GraphWrite",
    "GraphWritten",
]
