"""The views: each one small module with a pure fold (see :mod:`projections.fold`)."""

from __future__ import annotations

from typing import Any

from ..fold import Projection
from . import recovery, runs, timeline, tools


def all_views() -> list[Projection[Any]]:
    """One of each view, in the order ``projections status`` lists them."""
    return [runs.View(), tools.View(), recovery.View(), timeline.View()]
