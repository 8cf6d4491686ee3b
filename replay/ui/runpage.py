"""What a run's page shows, read as the CLI reads it: the state (``state_doc``), the
timeline's story lines (``replay.timeline``) a page at a time and filtered by event type,
the tree of child runs, the forks, checkpoints and standing effects."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from engine.errors import AgentlogError
from engine.kinds import FINAL, LIVE, RunStatus
from engine.log.history import checkpoint_refs, started
from engine.log.state import ForkOf, lineage_of
from engine.log.subtree import fork_effects, tree_effects

from .. import timeline
from ..forkdoc import fork_doc
from ..output import state_doc
from .render import line

if TYPE_CHECKING:
    from engine import Engine, RunState
    from engine.events import Positioned
    from engine.log.effects import Effect
    from engine.log.state import CheckpointRef
    from engine.runtime.run.tree import RunNode

PAGE = 500  # events a timeline page shows: a 20,000-event run opens at its last page


def offered(status: str, imported: bool = False) -> frozenset[str]:
    """The actions a run's page offers in ``status``: answer a paused run, approve a held
    one, resume a failed, live (its owner may be gone) or waiting one, abandon or send a
    message to any run not over for good, fork from any run; none for an imported run or
    a LangGraph thread (history no engine here executes: each action would be refused,
    naming ``adopt``)."""
    if imported:
        return frozenset()
    found = {"rewind"}
    if status == RunStatus.PAUSED:
        found.add("answer")
    if status == RunStatus.HELD:
        found.add("approve")
    if status == RunStatus.FAILED or status == RunStatus.WAITING or status in LIVE:
        found.add("resume")
    if status not in FINAL:
        found.update(("abandon", "send"))
    return frozenset(found)


@dataclass(frozen=True)
class Event:
    position: int
    type: str
    html: Markup


@dataclass(frozen=True)
class RunPage:
    state: RunState
    doc: dict[str, Any]
    events: list[Event]  # this page's, after the filter
    summary: Markup
    types: list[tuple[str, int]]  # every event type of the run, with its count
    shown_types: frozenset[str]
    page: int
    pages: int
    tree: RunNode | None
    forks: list[tuple[str, int | None]]
    standing: list[Effect]
    actions: frozenset[str]  # what :func:`offered` says for its status
    undoable: list[Effect]  # what an abandon would find standing, deepest first
    fork: dict[str, Any] | None  # a fork's edits, dry run and would-be effects (forkviews)


def forks(engine: Engine, run_id: str) -> list[tuple[str, int | None]]:
    """Runs forked from ``run_id`` and the position of each, oldest first (the store's
    children of a run are its child runs and its forks: ``agent_started`` tells)."""
    found: list[tuple[str, int | None]] = []
    for row in engine.store.children(run_id):
        lineage = lineage_of(started(engine.store, row.run_id))
        if isinstance(lineage, ForkOf):
            found.append((row.run_id, lineage.fork_position))
    return found


@dataclass(frozen=True)
class Told:
    """A run's events up to a position: each one's position and type, the events
    themselves (a page's lines are told from them: :func:`page_of`), its checkpoints, and
    the pages told so far, by filter and number."""

    positions: list[int]
    tags: list[str]
    events: list[Positioned]
    marks: list[CheckpointRef]
    pages: dict[tuple[frozenset[str], int, int], tuple[list[Event], Markup]] = field(
        default_factory=dict
    )


class Stories:
    """The last few runs' events, by run id and position: a log only grows, so the events
    of a run at a position are read once, then paged and filtered from here."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[str, int, float], Told] = OrderedDict()
        self._lock = threading.Lock()

    def told(self, engine: Engine, state: RunState) -> Told:
        key = (state.run_id, state.position, state.updated_at or 0.0)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        # read after the state: events the run added meanwhile wait for the next refresh
        rid = state.run_id
        found = [r for r in timeline.events(engine, rid) if r.position <= state.position]
        tags = [str(r.event.__struct_config__.tag) for r in found]
        # the checkpoints from the events read, not from a second read of the log
        told = Told([r.position for r in found], tags, found, checkpoint_refs(found))
        with self._lock:
            self._kept[key] = told
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return told


def read(
    engine: Engine, stories: Stories, run_id: str, types: frozenset[str], page: int | None
) -> RunPage:
    """The page of run ``run_id`` (an id or a unique prefix): ``types`` keeps only those
    event types (none: all); ``page`` counts from 1 (None: the last)."""
    rid = engine.resolve(run_id)
    state = engine.state(rid)
    told = stories.told(engine, state)
    kept = [i for i, t in enumerate(told.tags) if not types or t in types]
    pages = max(1, -(-len(kept) // PAGE))
    number = pages if page is None else min(max(page, 1), pages)
    events, summary = page_of(told, types, kept[(number - 1) * PAGE : number * PAGE])
    doc = state_doc(state, told.marks, started(engine.store, rid).input)
    return RunPage(
        state=state,
        doc=doc,
        events=events,
        summary=summary,
        types=sorted(Counter(told.tags).items()),
        shown_types=types,
        page=number,
        pages=pages,
        tree=_tree(engine, rid),
        forks=forks(engine, rid),
        standing=fork_effects(engine.store, rid)[0] if state.parent_run_id else [],
        actions=offered(state.status, state.imported),
        undoable=_undoable(engine, rid) if state.status not in FINAL else [],
        fork=fork_doc(engine.events(rid)) if state.parent_run_id else None,
    )


def page_of(told: Told, types: frozenset[str], chosen: list[int]) -> tuple[list[Event], Markup]:
    """The lines of the events at indexes ``chosen`` (a page) and the summary line, told
    once per page: the story walks every event, but only these are written out."""
    key = (types, chosen[0] if chosen else -1, len(chosen))
    if key in told.pages:
        return told.pages[key]
    wanted = {told.positions[i] for i in chosen}
    lines = list(timeline.story(told.events, wanted.__contains__))
    events = [
        Event(told.positions[i], told.tags[i], line(pieces))
        for i, pieces in zip(chosen, lines, strict=False)
    ]
    told.pages[key] = (events, line(lines[-1]))
    return told.pages[key]


def _undoable(engine: Engine, rid: str) -> list[Effect]:
    """The committed effects of the run (its own, not a fork's inherited ones) and of its
    children that are not undone: an abandon compensates those whose tool declares
    ``compensate=``, in reverse order, as ``abandon`` reports them."""
    inherited = started(engine.store, rid).inherited
    found = tree_effects(engine.store, rid, after=1 + inherited)
    return [fx for fx in found if fx.own and not fx.undone]


def _tree(engine: Engine, run_id: str) -> RunNode | None:
    """The run's tree of child runs, None when it has none (or a damaged one: the page
    shows the rest)."""
    try:
        node = engine.tree(run_id)
    except AgentlogError:
        return None
    return node if node.children else None
