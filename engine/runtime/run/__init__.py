"""One run: its context, answers, results, catalog and tree, adoption, and loading."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .asked import Given
    from .catalog import Catalog
    from .context import RunContext
    from .repository import LoadedRun, RunRepository
    from .results import EventView, RunResult, RunSummary
    from .tree import RunNode

__all__ = [
    "Catalog",
    "EventView",
    "Given",
    "LoadedRun",
    "RunContext",
    "RunNode",
    "RunRepository",
    "RunResult",
    "RunSummary",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Catalog": ".catalog",
        "EventView": ".results",
        "Given": ".asked",
        "LoadedRun": ".repository",
        "RunContext": ".context",
        "RunNode": ".tree",
        "RunRepository": ".repository",
        "RunResult": ".results",
        "RunSummary": ".results",
    },
)
