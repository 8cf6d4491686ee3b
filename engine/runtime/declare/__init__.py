"""The decorators and what they make: an engine's durable tools, models and agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .decorators import Declaring
    from .wrappers import ModelOptions, ToolOptions

__all__ = ["Declaring", "ModelOptions", "ToolOptions"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"Declaring": ".decorators", "ModelOptions": ".wrappers", "ToolOptions": ".wrappers"}
)
