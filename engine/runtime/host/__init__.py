"""Hosting runs: settings, owner leases, lock keeper, news and guards (the Host port)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import EngineConfig
    from .guards import Guards
    from .leases import LeaseLost, Leases
    from .lockkeeper import LockKeeper
    from .port import Host
    from .signals import Signals

__all__ = ["EngineConfig", "Guards", "Host", "LeaseLost", "Leases", "LockKeeper", "Signals"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "EngineConfig": ".config",
        "Guards": ".guards",
        "Host": ".port",
        "LeaseLost": ".leases",
        "Leases": ".leases",
        "LockKeeper": ".lockkeeper",
        "Signals": ".signals",
    },
)
