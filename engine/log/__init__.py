"""The event log: a run's history read and written, its state and effects folded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .effects import Effect
    from .history import RunLog, RunWriter
    from .state import RunState

__all__ = ["Effect", "RunLog", "RunState", "RunWriter"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"Effect": ".effects", "RunLog": ".history", "RunState": ".state", "RunWriter": ".history"},
)
