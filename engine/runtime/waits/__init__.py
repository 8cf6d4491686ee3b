"""What a run waits on: timers, messages, locks, and which suspended runs are due."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .mailbox import Inbox

__all__ = ["Inbox"]

__getattr__, __dir__ = lazy_exports(__name__, {"Inbox": ".mailbox"})
