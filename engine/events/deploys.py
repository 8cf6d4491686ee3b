"""The events of deploys: a patch the code took (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from .base import Event


class PatchMarked(Event, frozen=True, tag="patch_marked"):
    """The run reached ``run.patched(name)`` live, with code that has the patch, after
    ``after`` durable calls: its replays take the patched path. A marker is not a call:
    a log without it at this point took the old path, and one no code asks for is inert."""

    name: str
    after: int = 0


AnyDeployEvent = PatchMarked

__all__ = ["PatchMarked"]
