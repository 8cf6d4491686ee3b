"""A store opened on first use, and its run index: which runs exist, which run an id names.

``Engine`` extends it with running. On its own it loads none of the runtime, which keeps
the CLI's reading commands quick to start (the reads of one run, ``state``, ``checkpoints``
and ``events``, are here for that); ``create=False`` opens only a store that
already exists (a missing SQLite file is refused, nothing is created).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import msgspec
from msgspec.structs import replace

from ... import stats as figures
from ...errors import AgentlogError, RunNotFound, UsageError
from ...events import AgentStarted
from ...kinds import LineageKind
from ...log import fitted
from ...log.claims import KeyClaim, claims
from ...log.history import check_run_id, checkpoints, read_events, started, state_at
from ...log.state import CheckpointRef, RunState, lineage_kind, lineage_of
from ...store import Store, open_store
from ...store.base import BlobRef
from .results import EventView, RunSummary
from .search import RunQuery, select
from .tree import MAX_DEPTH, RunNode
from .tree import tree as run_tree


def with_lineage(store: Store, summary: RunSummary) -> RunSummary:
    """``summary`` with its lineage: the index's, else its run's ``agent_started``'s (a
    row an older agentlog wrote, until the run's next commit writes it; None if that
    start cannot be read)."""
    if summary.lineage is not None or summary.unreadable:
        return summary
    if summary.parent_run_id is None:
        return replace(summary, lineage=LineageKind.ROOT)
    try:
        found = lineage_kind(lineage_of(started(store, summary.run_id)))
    except AgentlogError:
        return summary
    return replace(summary, lineage=found)


class Catalog:
    """The store named by ``url`` (opened on first use) and the runs it holds."""

    def __init__(
        self, url: str | None = None, store: Store | None = None, *, create: bool = True
    ) -> None:
        self.url = url
        self.create = create
        self._store = store
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        """The store, opened on first use (with ``create``, its schema created if needed)."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store = open_store(self.url, create=self.create)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def resolve(self, run_id: str) -> str:
        """The full id of the run ``run_id`` names (an id or a unique prefix)."""
        if not run_id:
            raise RunNotFound("no run id given")
        check_run_id(run_id, "run id or prefix")
        found = self.store.run_ids(run_id)
        if run_id in found:
            return run_id
        if len(found) == 1:
            return found[0]
        if not found:
            raise RunNotFound(f"no run matches {run_id!r}")
        raise RunNotFound(f"{run_id!r} is ambiguous: it matches {', '.join(found[:3])}, ...")

    def runs(self, status: str | None = None) -> list[RunSummary]:
        """Summaries of runs, newest first (a damaged index row as an unreadable one),
        each with its lineage (an older agentlog's row: read from its run's start)."""
        store = self.store
        return [with_lineage(store, RunSummary.of(r)) for r in store.runs(status)]

    def find(
        self,
        status: str | None = None,
        agent: str | None = None,
        since: float | str | dt.datetime | dt.timedelta | None = None,
        input_contains: str | None = None,
    ) -> list[RunSummary]:
        """Summaries of the runs of ``status``, of ``agent`` (``module:qualname``), started
        at or after ``since`` (as :meth:`stats`), whose input (secrets redacted) holds the
        text ``input_contains``; newest first. None: any."""
        bound = figures.since_epoch(since, time.time())
        rows = select(self.store, RunQuery(status, agent, bound, input_contains))
        return [RunSummary.of(r) for r in rows]

    def key_claims(self, key: str) -> list[KeyClaim]:
        """Which runs claimed the business key ``key`` (a tool's idempotency key), oldest
        first, each with how its claim ended (pending, committed, released, compensated)."""
        return claims(self.store, key)

    def state(self, run_id: str, at: int | str | None = None) -> RunState:
        """The folded state at a position, a checkpoint name, or the latest."""
        return state_at(self.store, self.resolve(run_id), at)

    def checkpoints(self, run_id: str, upto: int | None = None) -> list[CheckpointRef]:
        """The run's named checkpoints (up to position ``upto``) in log order, each
        occurrence of a repeated name included; read from the log, not kept in state."""
        return checkpoints(self.store, self.resolve(run_id), upto)

    def events(self, run_id: str) -> list[EventView]:
        """The run's recorded events, in order."""
        return [EventView.of(r) for r in read_events(self.store, self.resolve(run_id))]

    def context(self, run_id: str, max_tokens: int | None = None) -> str:
        """The recovery context of a run as prompt text, fitted to ``max_tokens``
        (:mod:`engine.log.fitted`; large values stored as blobs, see :meth:`blob`)."""
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise UsageError(f"max_tokens must be a whole number above 0, not {max_tokens!r}")
        rid = self.resolve(run_id)
        records = read_events(self.store, rid)
        given = next((r.event.input for r in records if isinstance(r.event, AgentStarted)), {})
        head = fitted.header(self.state(rid), given)
        return fitted.fit(head, fitted.items(records, self._keep), max_tokens)

    def _keep(self, data: bytes) -> str | None:
        try:
            ref = self.store.put_blob(data)
        except AgentlogError:  # a read-only store: the summary points to the log instead
            return None
        return f"{ref.sha256}.{ref.size}"

    def blob(self, blob_id: str) -> Any:
        """The value a recovery context's summary stored as blob ``blob_id``."""
        sha, _, size = blob_id.strip().partition(".")
        if not (sha.isalnum() and sha.isascii() and size.isdigit() and len(size) < 19):
            raise UsageError(f"{blob_id!r} is not a blob id (HEX.SIZE, as a context shows it)")
        return msgspec.json.decode(self.store.get_blob(BlobRef(sha, int(size))))

    def tree(self, run_id: str, depth: int = MAX_DEPTH) -> RunNode:
        """The run tree of ``run_id`` (an id or a unique prefix): the run and the child
        runs below it (forks are not children), each with its status, current step and
        what it waits on, down to ``depth`` levels. A forged parent chain that loops is
        ``CorruptData``."""
        return run_tree(self.store, self.resolve(run_id), depth)

    def stats(
        self,
        since: float | str | dt.datetime | dt.timedelta | None = None,
        agent: str | None = None,
    ) -> figures.Stats:
        """The operator's figures over runs started since ``since`` (an epoch, a datetime,
        a span such as ``"24h"``; None: all), of one ``agent`` (``module:qualname``) or all:
        runs by status, tools, recovery. Brings the views up to date first."""
        bound = figures.since_epoch(since, time.time())
        return figures.source()(self.store, bound, agent)
