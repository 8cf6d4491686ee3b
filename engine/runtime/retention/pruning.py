"""``engine.prune`` and ``engine.storage``: the Engine's part of retention.

A prune takes whole trees of finished runs (:mod:`.trees`), records the business keys
past their TTL expired (:mod:`.keys`), archives each run first when asked (the export
format, :mod:`engine.log.exporting`), then deletes each run's rows in one transaction of
its own, leaves first (:class:`engine.store.prune.Pruner`). A kill at any point leaves
every run whole or gone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...kinds import PRUNABLE
from ...log.exporting import run_lines
from ...log.history import run_stream
from ...stats import span_seconds
from ...store import Recorded, RunRow, Store
from ...store.prune import Pruner, RunRows
from ..waits.mailbox import inbox_stream
from .keys import KeyFate, key_fate, keys_of, record_expiry
from .threads import as_finished
from .trees import check_statuses, select

if TYPE_CHECKING:
    from ..host.config import EngineConfig

__all__ = ["Retention"]


class Retention:
    """What an engine prunes and measures its store with."""

    config: EngineConfig

    if TYPE_CHECKING:

        @property
        def store(self) -> Store: ...

    def prune(
        self,
        older_than: float | str = "30d",
        status: str | Iterable[str] = PRUNABLE,
        archive: str | os.PathLike[str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete the finished runs last updated more than ``older_than`` ago (``"30d"``,
        seconds) of ``status``, whole trees at a time, each run in one transaction;
        with ``archive`` (a directory), each run is written there first as an export
        file (``RUN.jsonl``, what ``agentlog import`` reads). ``dry_run`` writes nothing.
        Returns ``{"runs", "bytes_freed", "skipped"}`` (counts) with the ids beside."""
        age = span_seconds(older_than, "older_than", zero=True)
        statuses = check_statuses(status)
        folder = None if archive is None else _folder(archive)
        now = self.config.wall()
        rows, stored = as_finished(self.store, self.store.runs())  # deleted threads: .threads
        job = _Prune(self.store, self.config.key_ttl, now, None if dry_run else folder)
        job.stored = stored
        report = job.run(select(rows, statuses, now - age), rows, dry_run)
        return {**report, "older_than": older_than}

    def storage(self) -> dict[str, Any]:
        """Bytes per run and per agent (events, snapshots, inbox and the blobs they point
        at), the store's total, and what ``prune()`` with its defaults would free."""
        pruner = Pruner(self.store)
        sizes, blobs = pruner.sizes(), pruner.blob_sizes()
        blobs_of = by_stream(pruner.pointers())
        runs: list[dict[str, Any]] = []
        agents: dict[str, dict[str, Any]] = {}
        for row in self.store.runs():
            own = (run_stream(row.run_id), inbox_stream(row.run_id))
            pointed = {b for s in own for b in blobs_of.get(s, ())}
            n = sum(sizes.get(s, 0) for s in own) + sum(blobs.get(b, 0) for b in pointed)
            runs.append(
                {"run_id": row.run_id, "agent": row.agent, "status": str(row.status), "bytes": n}
            )
            agent = agents.setdefault(row.agent, {"agent": row.agent, "runs": 0, "bytes": 0})
            agent["runs"] += 1
            agent["bytes"] += n
        runs.sort(key=lambda r: (-r["bytes"], r["run_id"]))
        would = self.prune(dry_run=True)
        return {
            "total_bytes": sum(sizes.values()) + sum(blobs.values()),
            "runs": runs,
            "agents": sorted(agents.values(), key=lambda a: (-a["bytes"], a["agent"])),
            "prune": {k: would[k] for k in ("older_than", "runs", "bytes_freed", "skipped")},
        }


def by_stream(pointers: dict[uuid.UUID, set[uuid.UUID]]) -> dict[uuid.UUID, set[uuid.UUID]]:
    """Stream -> the blobs it points at, from blob -> the streams that point at it."""
    found: dict[uuid.UUID, set[uuid.UUID]] = {}
    for blob, streams in pointers.items():
        for s in streams:
            found.setdefault(s, set()).add(blob)
    return found


def _folder(archive: str | os.PathLike[str]) -> Path:
    """The archive directory, made if missing; one clear error if it cannot be."""
    path = Path(archive)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"prune: cannot use {str(path)[:80]!r} as the archive directory: {e}"
        ) from None
    return path


class _Prune:
    """One prune: the store's sizes and blob pointers read once, then tree by tree."""

    def __init__(self, store: Store, ttl: float | None, now: float, folder: Path | None) -> None:
        self.store, self.ttl, self.now, self.folder = store, ttl, now, folder
        self.pruner = Pruner(store)
        self.sizes = self.pruner.sizes()
        self.blob_sizes = self.pruner.blob_sizes()
        self.pointers = self.pruner.pointers()
        self.blobs_of = by_stream(self.pointers)
        self.gone: set[uuid.UUID] = set()  # streams deleted (a dry run: would be)
        self.pruned: list[str] = []
        self.skipped: list[dict[str, str]] = []
        self.expired = 0
        self.freed = 0
        self.stored: dict[str, str] = {}  # run id -> its row's status, where shown otherwise

    def run(self, selection: Any, rows: Sequence[RunRow], dry_run: bool) -> dict[str, Any]:
        self.present = {r.run_id for r in rows}
        self.dry_run = dry_run
        for rid, why in selection.skipped:
            self.skipped.append({"run_id": rid, "reason": why})
        for tree in selection.trees:
            self._tree(tree)
        return {
            "runs": len(self.pruned),
            "bytes_freed": self.freed,
            "skipped": len(self.skipped),
            "run_ids": self.pruned,
            "skipped_runs": self.skipped,
            "keys_expired": self.expired,
            "dry_run": dry_run,
        }

    def _skip(self, tree: Sequence[RunRow], why: str) -> None:
        self.skipped += [{"run_id": r.run_id, "reason": why} for r in tree]

    def _tree(self, tree: list[RunRow]) -> None:
        """Prune one tree, leaves first; a run that moved keeps it and its ancestors."""
        ids = {r.run_id for r in tree}
        if any(k.run_id not in ids for r in tree for k in self.store.children(r.run_id)):
            return self._skip(tree, "a run of its tree was forked since the prune began")
        logs = {r.run_id: self.store.read(run_stream(r.run_id)) for r in tree}
        fates = self._fates(logs)
        busy = [f for f in fates.values() if f.fate == "busy"]
        if busy:
            return self._skip(tree, f"business key {busy[0].key!r} has an effect in flight")
        doomed = [  # the expired keys no run left claims: their streams go with the root
            (f.stream, self.store.last_position(f.stream))
            for f in fates.values()
            if f.fate == "expired" and all(c in ids or c not in self.present for c in f.claimers)
        ]
        for i, row in enumerate(tree):
            keys = doomed if i == len(tree) - 1 else []
            if not self._one(row, logs[row.run_id], keys):
                return self._skip(tree[i:], "it changed while being pruned")
        return None

    def _fates(self, logs: dict[str, list[Recorded]]) -> dict[str, KeyFate]:
        """Each key the tree's runs claimed, its expiry recorded if it is past its TTL."""
        fates: dict[str, KeyFate] = {}
        for recorded in logs.values():
            for key in keys_of(r.event for r in recorded) - fates.keys():
                fate = key_fate(self.store, key, self.ttl, self.now)
                if fate.expire is not None and not self.dry_run:
                    if not record_expiry(self.store, fate):
                        fate = key_fate(self.store, key, self.ttl, self.now)  # used again
                    elif fate.fate == "expired":
                        self.expired += 1
                fates[key] = fate
        return fates

    def _one(
        self, row: RunRow, recorded: list[Recorded], keys: list[tuple[uuid.UUID, int]]
    ) -> bool:
        """Archive (if asked) and delete one run (and ``keys``, ledger streams at their
        last positions); False if it or a key moved since it was read."""
        rid = row.run_id
        streams = (run_stream(rid), inbox_stream(rid), *(k for k, _ in keys))
        mine = set(streams)
        pointed = {b for s in streams for b in self.blobs_of.get(s, ())}
        blobs = tuple(  # the blobs only this run's streams and those gone point at
            b for b in pointed if all(s in mine or s in self.gone for s in self.pointers[b])
        )
        position = recorded[-1].position if recorded else 0
        if not self.dry_run:
            if self.folder is not None and position:
                _archive(self.store, rid, self.folder)
            status = self.stored.get(rid, row.status)
            rows = RunRows(rid, streams[0], position, (status,), streams, blobs, tuple(keys))
            if not self.pruner.delete(rows, self.now):
                return False
        self.gone.update(mine, blobs)
        self.freed += sum(self.sizes.get(s, 0) for s in streams)
        self.freed += sum(self.blob_sizes.get(b, 0) for b in blobs)
        self.pruned.append(rid)
        self.present.discard(rid)  # a key it claimed may go with the next tree's runs
        return True


def _archive(store: Store, run_id: str, folder: Path) -> None:
    """Write the run's export file (``RUN.jsonl``) whole and synced before it is deleted."""
    final = folder / f"{run_id}.jsonl"
    part = folder / f".{run_id}.jsonl.part"
    try:
        with open(part, "wb") as f:
            for line in run_lines(store, run_id):
                f.write(line)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, final)
    except OSError as e:
        raise UsageError(
            f"prune: cannot write the archive of run {run_id} in {str(folder)[:80]!r} ({e}); "
            "it and the runs after it were not pruned"
        ) from None
