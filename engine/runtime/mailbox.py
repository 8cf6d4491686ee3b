"""Durable messages between runs. (Placeholder of the session's first phase.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..state import RunState
    from ..store import Store
    from .context import RunContext


def send(ctx: RunContext, to: str, topic: str, value: Any) -> None:
    raise NotImplementedError


def recv(ctx: RunContext, topic: str, timeout: float | None) -> Any:
    raise NotImplementedError


def message_due(store: Store, state: RunState) -> bool:
    """Whether a message the waiting run ``state`` waits for is in its inbox."""
    return False
