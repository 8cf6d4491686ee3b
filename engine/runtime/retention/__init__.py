"""Retention: prune old finished runs (archived first if asked), expire business keys
past their TTL, and report what the store holds (``engine.prune``, ``engine.storage``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .pruning import Retention

__all__ = ["Retention"]

__getattr__, __dir__ = lazy_exports(__name__, {"Retention": ".pruning"})
