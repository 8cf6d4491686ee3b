"""The session every ``agentlog`` command shares (store URL, output mode, a lazily opened
engine) and what decides it. No Typer here: the quick path (``replay.cli.quick``) builds a
session too."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.kinds import LineageKind, RunStatus
from engine.log.state import ForkOf, lineage_of

from ..output import Out, exit_status, result_doc, when
from . import views

if TYPE_CHECKING:
    from engine import Engine, RunResult
    from engine.runtime.run.catalog import Catalog

STATUSES = tuple(s.value for s in RunStatus)
# Only these commands create a store; every other one opens an existing store or none.
CREATES_STORE = frozenset({"run", "demo", "import", "enqueue", "worker", "schedule"})


@dataclass
class Session:
    """What every command shares: the store URL, the output mode, and the store opened on
    first use (as a light catalog, or as a whole engine once a command needs one)."""

    url: str | None = None
    as_json: bool = False
    create: bool = False
    out: Out = field(default_factory=Out)
    _catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        """The store's run index without the runtime: what ``runs`` needs, quick to load."""
        if self._catalog is None:
            from engine.runtime.run.catalog import Catalog

            self._catalog = Catalog(self._reading_url(), create=self.create)
        return self._catalog

    @property
    def engine(self) -> Engine:
        from engine import Engine

        if not isinstance(self._catalog, Engine):
            opened = self._catalog.store if self._catalog is not None else None
            self._catalog = Engine(self._reading_url(), opened, create=self.create)
        return self._catalog

    @property
    def store_name(self) -> str:
        """The store as the user named it (a default store not created yet says so)."""
        if self._reading_url() == "memory://" and self.url is None:
            from engine.store.url import DEFAULT_URL

            return f"{DEFAULT_URL} (not created yet)"
        name: str = self.catalog.store.name
        return name

    def _reading_url(self) -> str | None:
        """The URL a command opens. The default store (no --url, no $AGENTLOG_URL) not
        created yet is a new, empty store to a command that creates nothing: an empty
        in-memory one stands in (a typo'd --url still says "no store at")."""
        if self.create or self.url or os.environ.get("AGENTLOG_URL"):
            return self.url
        from engine.store.url import DEFAULT_URL

        path = DEFAULT_URL.removeprefix("sqlite:///")
        return self.url if os.path.exists(path) else "memory://"

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def result(self, r: RunResult) -> int:
        if self.as_json:
            self.out.json(result_doc(r))
        else:
            self.out.lines(views.result_rows(r, self.failure(r)))
        return exit_status(r.status)

    def failure(self, r: RunResult) -> tuple[str, int | None] | None:
        """A failed run's failure kind and the call that failed (None: the agent's own
        code), from its last ``agent_failed``; None for a run that did not fail."""
        if r.status != RunStatus.FAILED:
            return None
        failed = [e.data for e in self.catalog.events(r.run_id) if e.type == "agent_failed"]
        return (failed[-1]["kind"], failed[-1]["call"]) if failed else None

    def owner(self, run_id: str) -> dict[str, Any] | None:
        """Who holds the run's lease, and whether that process is still alive."""
        from engine.runtime.host.leases import alive

        lease = self.catalog.store.lease(run_id)
        if lease is None:
            return None
        holder, until = lease
        return {"owner": holder, "lease_until": when(until), "alive": alive(holder)}

    def forks(self, run_id: str) -> list[tuple[str, int | None]]:
        """Runs forked from ``run_id`` and the position each was forked at, oldest first
        (its child runs name it as their parent too: ``agentlog tree`` shows those)."""
        from engine.log.history import started

        store = self.catalog.store
        found: list[tuple[str, int | None]] = []
        for row in store.children(run_id):
            if row.lineage in (LineageKind.ROOT, LineageKind.CHILD):
                continue  # the index says it is no fork: its start is not read
            fork = lineage_of(started(store, row.run_id))
            if isinstance(fork, ForkOf):
                found.append((row.run_id, fork.fork_position))
        return found
