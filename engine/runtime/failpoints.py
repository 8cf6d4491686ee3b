"""Failpoints live in :mod:`engine.failpoints` (the history layer hits ``in_snapshot``);
this name stays importable for callers of the runtime."""

from ..failpoints import hit, reset

__all__ = ["hit", "reset"]
