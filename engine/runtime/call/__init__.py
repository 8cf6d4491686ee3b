"""One durable tool call: entry, driver, policies, invocation, record, ledger, forks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .drive import drive
    from .entry import call_tool
    from .forks import Inheritance

__all__ = ["Inheritance", "call_tool", "drive"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"Inheritance": ".forks", "call_tool": ".entry", "drive": ".drive"}
)
