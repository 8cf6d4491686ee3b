"""What a run's execution needs from the engine that hosts it, and nothing more.

The run context and the driver depend on this Protocol, not on ``Engine``: the engine
sits at the top of the runtime and imports them, never the other way round.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Executor
from typing import Protocol

from ...observe import Observers
from ...store import Store
from .config import EngineConfig
from .guards import Guards
from .keygate import KeyGate
from .leases import Leases
from .lockkeeper import LockKeeper
from .signals import Signals


class Host(Protocol):
    """An engine as a run sees it: its settings, its guards, the owner leases it
    holds, its owner id, and whether a store is still its open one."""

    @property
    def config(self) -> EngineConfig: ...

    @property
    def guards(self) -> Guards: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def owner(self) -> str: ...

    @property
    def key_gate(self) -> KeyGate:
        """The check that the host's replay key is the store's (once per store)."""
        ...

    def executor(self) -> Executor:
        """The thread pool the host's async durable calls run in."""
        ...

    def kept_open(self, store: Store) -> contextlib.AbstractContextManager[bool]:
        """Whether ``store`` is the host's open store; closing waits until the block ends."""
        ...

    @property
    def signals(self) -> Signals:
        """News, within this process, that runs changed (waiters wake at once)."""
        ...

    @property
    def lock_keeper(self) -> LockKeeper:
        """The heartbeat of the cross-agent locks this host's runs hold."""
        ...

    @property
    def observers(self) -> Observers:
        """Who watches the executions of the host's runs (engine.observe)."""
        ...

    def start(self, run_id: str) -> None:
        """Execute the recorded run ``run_id`` (a child just spawned, or one whose owner
        died) in a thread of its own; a run a live owner holds is left to it."""
        ...

    def wake(self, run_id: str) -> None:
        """Resume the waiting run ``run_id`` in a thread of its own, if what it waits on
        is due (a message it waits for was posted)."""
        ...
