"""Durable timers. (Placeholder of the session's first phase.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import RunContext


def sleep(ctx: RunContext, seconds: float) -> None:
    raise NotImplementedError
