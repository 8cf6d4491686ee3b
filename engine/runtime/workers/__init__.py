"""Work handed to workers: enqueue and run handles, waiting from any process, messages
from outside a run, queue limits, and the worker that keeps every run moving."""

from __future__ import annotations

from ..._lazy import lazy_exports

_LAZY = {
    "RunHandle": ".handles",
    "Worker": ".worker",
    "Working": ".face",
}

__all__ = ["RunHandle", "Worker", "Working"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
