"""Which runs a prune may take, decided over the run index alone: whole trees (a run,
its children and forks, theirs, ...) whose every run is finished, of a chosen status and
older than the cutoff. A tree with one run still running, paused, queued or waiting, or
one run kept, is kept whole: no child loses its parent, no fork what it inherits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import msgspec

from ...errors import UsageError
from ...kinds import SETTLED, RunStatus
from ...store import RunRow

__all__ = ["Selection", "check_statuses", "select"]


class Selection(msgspec.Struct, frozen=True):
    """Trees to prune (each leaves first, its root last) and the runs kept that the
    filter chose, each with why."""

    trees: list[list[RunRow]]
    skipped: list[tuple[str, str]]  # (run_id, reason)


def check_statuses(status: str | Iterable[str]) -> tuple[str, ...]:
    """The statuses a prune may take: finished ones only (completed, failed, abandoned)."""
    given = (status,) if isinstance(status, str) else tuple(status)
    if not given:
        raise UsageError("prune: name at least one status (completed, failed, abandoned)")
    for s in given:
        if s not in SETTLED:
            allowed = ", ".join(sorted(SETTLED))
            raise UsageError(f"prune: status {str(s)[:40]!r} cannot be pruned (only {allowed})")
    return tuple(sorted({RunStatus(s) for s in given}))


def select(rows: Sequence[RunRow], statuses: Sequence[str], cutoff: float) -> Selection:
    """The trees of ``rows`` whose every run has one of ``statuses`` and was last updated
    before ``cutoff``; the chosen runs of the other trees, with why they stay."""
    by_id = {r.run_id: r for r in rows}
    kids: dict[str, list[RunRow]] = defaultdict(list)
    roots = []
    for r in rows:
        if r.parent_run_id is not None and r.parent_run_id in by_id:
            kids[r.parent_run_id].append(r)
        else:
            roots.append(r)  # a root, or a run whose parent is gone
    trees: list[list[RunRow]] = []
    skipped: list[tuple[str, str]] = []
    for root in roots:
        tree = _walk(root, kids)
        chosen = [r for r in tree if r.status in statuses and r.updated_at < cutoff]
        if not chosen:
            continue
        if len(chosen) == len(tree):
            trees.append(tree[::-1])  # leaves first: a crash leaves no orphan behind
            continue
        why = _why(tree, chosen)
        skipped += [(r.run_id, why) for r in chosen]
    return Selection(trees, skipped)


def _walk(root: RunRow, kids: dict[str, list[RunRow]]) -> list[RunRow]:
    """``root`` and its descendants, parents before children (no recursion)."""
    order, todo, seen = [], [root], {root.run_id}
    while todo:
        r = todo.pop()
        order.append(r)
        for k in kids.get(r.run_id, ()):
            if k.run_id not in seen:  # a loop in a damaged index ends here
                seen.add(k.run_id)
                todo.append(k)
    return order


def _why(tree: list[RunRow], chosen: list[RunRow]) -> str:
    taken = {r.run_id for r in chosen}
    other = next(r for r in tree if r.run_id not in taken)
    if other.status not in SETTLED:
        return f"run {other.run_id} of its tree is {other.status}"
    return f"run {other.run_id} of its tree is kept ({other.status}, newer or not chosen)"
