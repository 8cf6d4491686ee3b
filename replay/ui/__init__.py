"""The web UI (``agentlog ui``, ``pip install 'agentlog[ui]'``): ``app(engine)``, an ASGI app
of server-rendered pages over the read side the CLI uses: the runs board, a run's page
(timeline, tree, state, actions), diffs, stats, updated live by server-sent events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine._lazy import lazy_exports

if TYPE_CHECKING:
    from .server import app

_LAZY = {"app": ".server"}

__all__ = ["app"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
