"""Which runs an export file holds, checked line by line: one run (``agentlog export``),
or a run tree (``export --tree``): the run and its descendants, parents first, each run's
events in order and together, every line naming the tree's root in ``tree``.

In a tree file ``index`` counts lines over the whole file and ``total`` is the file's line
count, while ``position`` is the event's place in its own run; in a one-run file the
three agree as they always have (and no line has ``tree``). Every failure is
``CorruptData`` naming the line."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import events as ev
from engine.errors import CorruptData, UsageError
from engine.events import Event
from engine.log.history import check_run_id, run_stream
from engine.log.runcheck import RunCheck
from engine.log.state import ChildOf, lineage_of
from engine.store import Append

from .lines import Line


@dataclass
class FileRuns:
    """The runs of an export file so far, in file order, as its lines are read."""

    run_id: str  # the file's run (a tree's root)
    total: int
    tree: bool
    runs: dict[str, list[Event]] = field(default_factory=dict)

    @classmethod
    def first(cls, line: Line, where: str) -> FileRuns:
        if line.tree is not None and line.tree != line.run_id:
            raise CorruptData(f"{where}: a tree export begins with its root run, not another")
        return cls(line.run_id, line.total, line.tree is not None)

    def add(self, n: int, line: Line, event: Event, where: str) -> None:
        """Line ``n`` of the file, its event decoded: in its place, of a run of this file."""
        if line.total != self.total or line.tree != (self.run_id if self.tree else None):
            raise CorruptData(f"{where}: belongs to another export (run or total differs)")
        if line.index != n:
            raise CorruptData(f"{where}: holds line {line.index}, expected {n} (reordered)")
        if not self.tree and line.run_id != self.run_id:
            raise CorruptData(f"{where}: belongs to another export (run or total differs)")
        events = self.runs.get(line.run_id)
        if events is not None and line.run_id != self._last:
            raise CorruptData(f"{where}: run {line.run_id} comes back after another run's lines")
        if events is None:
            try:
                check_run_id(line.run_id)
            except UsageError as e:
                raise CorruptData(f"{where}: {e}") from None
            events = self.runs[line.run_id] = []
        if line.position != len(events) + 1:
            raise CorruptData(
                f"{where}: holds event {line.position} of run {line.run_id}, "
                f"expected {len(events) + 1} (reordered)"
            )
        events.append(event)

    @property
    def _last(self) -> str | None:
        return next(reversed(self.runs), None)

    def check(self, source: str) -> None:
        """After the last line: each run a log some run could have written and, in a tree,
        each run below the root the child of a run before it."""
        for run_id, events in self.runs.items():
            try:
                RunCheck(run_id)(
                    [Append(run_stream(run_id), i, e) for i, e in enumerate(events, 1)]
                )
            except CorruptData as bad:
                raise CorruptData(f"{source}: {bad}; nothing imported") from None
        seen: set[str] = set()
        for run_id, events in self.runs.items():
            head = events[0]  # RunCheck: an agent_started
            lineage = lineage_of(head) if isinstance(head, ev.AgentStarted) else None
            if seen and not (isinstance(lineage, ChildOf) and lineage.parent_run_id in seen):
                raise CorruptData(
                    f"{source}: run {run_id} is not a child run of a run before it in the "
                    "tree; nothing imported"
                )
            seen.add(run_id)
