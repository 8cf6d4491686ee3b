"""What a run's page shows, read as the CLI reads it: the state (``state_doc``), the
timeline's story lines (``replay.timeline``) a page at a time and filtered by event type,
the tree of child runs, the forks, checkpoints and standing effects."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from engine.errors import AgentlogError
from engine.kinds import RunStatus
from engine.log.history import started
from engine.log.state import ForkOf, lineage_of
from engine.log.subtree import fork_effects

from .. import timeline
from ..output import state_doc
from .render import line

if TYPE_CHECKING:
    from engine import Engine, RunState
    from engine.log.effects import Effect
    from engine.runtime.run.tree import RunNode

PAGE = 500  # events a timeline page shows: a 20,000-event run opens at its last page
OVER = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED})


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
    over: bool


def forks(engine: Engine, run_id: str) -> list[tuple[str, int | None]]:
    """Runs forked from ``run_id`` and the position of each, oldest first (the store's
    children of a run are its child runs and its forks: ``agent_started`` tells)."""
    found: list[tuple[str, int | None]] = []
    for row in engine.store.children(run_id):
        lineage = lineage_of(started(engine.store, row.run_id))
        if isinstance(lineage, ForkOf):
            found.append((row.run_id, lineage.fork_position))
    return found


def read(engine: Engine, run_id: str, types: frozenset[str], page: int | None) -> RunPage:
    """The page of run ``run_id`` (an id or a unique prefix): ``types`` keeps only those
    event types (none: all); ``page`` counts from 1 (None: the last)."""
    rid = engine.resolve(run_id)
    state = engine.state(rid)
    found = list(timeline.events(engine, rid))
    story = list(timeline.story(found))
    tags = [str(r.event.__struct_config__.tag) for r in found]
    kept = [i for i, t in enumerate(tags) if not types or t in types]
    pages = max(1, -(-len(kept) // PAGE))
    number = pages if page is None else min(max(page, 1), pages)
    chosen = kept[(number - 1) * PAGE : number * PAGE]
    events = [Event(found[i].position, tags[i], line(story[i])) for i in chosen]
    marks = engine.checkpoints(rid, state.position)
    doc = state_doc(state, marks, started(engine.store, rid).input)
    return RunPage(
        state=state,
        doc=doc,
        events=events,
        summary=line(story[-1]),
        types=sorted(Counter(tags).items()),
        shown_types=types,
        page=number,
        pages=pages,
        tree=_tree(engine, rid),
        forks=forks(engine, rid),
        standing=fork_effects(engine.store, rid)[0] if state.parent_run_id else [],
        over=state.status in OVER,
    )


def _tree(engine: Engine, run_id: str) -> RunNode | None:
    """The run's tree of child runs, None when it has none (or a damaged one: the page
    shows the rest)."""
    try:
        node = engine.tree(run_id)
    except AgentlogError:
        return None
    return node if node.children else None
