"""The agentlog command line: the Typer app and its commands (main, the entry point)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine._lazy import lazy_exports

if TYPE_CHECKING:
    from .entry import main, run_cli

__all__ = ["main", "run_cli"]

__getattr__, __dir__ = lazy_exports(__name__, {"main": ".entry", "run_cli": ".entry"})
