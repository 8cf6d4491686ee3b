"""The tools view: per agent, tool and hour, what its calls did; per tool, its breaker.

Rows (column ``kind``):

- ``window``: one (agent, tool, hour) with its counts (:class:`Counts`). An hour keyed by
  its start (epoch seconds) is fine enough for ``--since 24h`` and coarse enough that a
  busy tool writes a few dozen rows a day; latency summaries merge across windows, so
  any period's percentiles come out of its hours.
- ``breaker``: one tool's circuit (its own stream names no agent): last state, when it
  changed, transitions so far. ``circuit``: (tool, hour) transitions, agent "".
- ``run``: a live run's open calls (intent, no success yet), which the fold needs to tell
  a re-intent from a new call, a side effect from a read, and which calls are uncertain.
  Deleted when the run completes; at abandonment it becomes ``abandoned`` (agent, hour)
  with the uncertain calls it left, per tool, or goes if it left none.

Every event is counted in the hour of its own ``at``; latencies are the recorded
``duration`` of attempts (never a clock). A fork's copy of its parent's events is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from msgspec.structs import replace

from engine import events as ev
from engine.kinds import Asked, CircuitState, Source
from engine.log.effects import doubt_after, is_uncertain
from engine.stats import ToolStats
from engine.store import Store
from engine.store.ports import Column, ColumnValue, ViewQuery

from ..fold import Envelope, Projection, RowDecoder
from ..latency import Latency
from ..runner import Runner

WINDOW = 3600  # seconds: one hour
WINDOW_ROW, BREAKER_ROW, CIRCUIT_ROW = "window", "breaker", "circuit"
RUN_ROW, ABANDONED_ROW = "run", "abandoned"
BREAKER_EVENTS = (ev.CircuitClosed, ev.CircuitOpened, ev.CircuitHalfOpened)  # CircuitState's order
STATES = dict(zip(BREAKER_EVENTS, CircuitState, strict=True))  # the state each event records
# How an uncertain call's success says it was resolved, by the outcome's source.
RESOLVED: dict[str, str] = {
    Source.VERIFIED: "verified",
    Source.HUMAN: "human",
    Source.EXECUTED: "resent",  # the same key sent again (or a person said "not done")
    Source.LEDGER: "ledger",  # another run committed the same key
}


def window_of(at: float) -> int:
    """The start of the hour ``at`` falls in."""
    return int(at // WINDOW) * WINDOW


class Counts(msgspec.Struct, frozen=True, omit_defaults=True):
    """One (agent, tool, hour): its calls and what came of them."""

    calls: int = 0  # distinct durable calls (first intents)
    attempts: int = 0  # executions of the tool (failed or not)
    failures: dict[str, int] = {}  # final failures by kind
    retries: int = 0
    fallbacks: int = 0
    effects_sent: int = 0  # attempts of side-effecting calls
    deduplicated: int = 0  # answered by the ledger, not sent again
    reused: int = 0  # a fork taking over its parent's effect
    uncertain: dict[str, int] = {}  # resolution -> uncertain calls resolved that way
    transitions: int = 0  # breaker transitions (circuit rows)
    latency: Latency = Latency()
    attempt_failures: dict[str, int] = {}  # failed attempts (retried or not) by kind


class Breaker(msgspec.Struct, frozen=True):
    state: CircuitState = CircuitState.CLOSED
    changed_at: float = 0.0
    transitions: int = 0


class Note(msgspec.Struct, frozen=True, omit_defaults=True):
    """An open call of a run: its tool, whether it sends an effect, whether its outcome
    was ever in doubt, whether its last intent failed for good."""

    tool: str
    side_effect: bool = False
    uncertain: bool = False
    failed: bool = False

    @property
    def in_doubt(self) -> bool:
        """What :func:`engine.log.effects.uncertain` calls uncertain: a side effect with no
        outcome, or failed after an attempt that may have landed."""
        done, landed = self.failed, self.uncertain  # a success closes the note
        return self.side_effect and is_uncertain(answered=done, failed=done, maybe_landed=landed)


class Calls(msgspec.Struct, frozen=True, omit_defaults=True):
    open: dict[int, Note] = {}
    abandoned: dict[str, int] = {}  # tool -> calls left uncertain by the abandonment


class Row(msgspec.Struct, frozen=True, omit_defaults=True):
    kind: str
    agent: str = ""
    tool: str = ""
    window_start: int = 0  # the hour's start, epoch seconds ("window" is reserved in SQL)
    counts: Counts | None = None
    breaker: Breaker | None = None
    calls: Calls | None = None


def _key(*parts: str | int) -> str:
    """A row key no agent or tool name can make ambiguous (names may hold ':')."""
    return msgspec.json.encode(parts).decode()


def _bump(d: Mapping[str, int], key: str) -> dict[str, int]:
    out = dict(d)
    out[key] = out.get(key, 0) + 1
    return out


class View(Projection[Row]):
    name = "tools"
    # 2: latency buckets from 1 µs; 3: decisions' attempts apart; 4: attempt_failures;
    # 5: a call whose result could not be recorded (landed) is settled, not in doubt
    version = "5"
    row = Row
    columns = (Column("kind"), Column("agent"), Column("tool"), Column("window_start", "int"))

    def keys(self, env: Envelope) -> Sequence[str]:
        e = env.event
        if env.copied:
            return ()
        if env.run is None:
            if isinstance(e, ev.CircuitOpened | ev.CircuitHalfOpened | ev.CircuitClosed):
                return (_key(BREAKER_ROW, e.tool), _key(CIRCUIT_ROW, e.tool, window_of(e.at)))
            return ()
        run = _key(RUN_ROW, str(env.stream))
        if isinstance(e, ev.ToolFailed | ev.RetryScheduled) and e.decision:
            return ()  # a decision's attempt (a model call), not a tool's
        if isinstance(e, ev.ToolInvoked | ev.ToolSucceeded | ev.ToolFailed):
            return (run, _key(WINDOW_ROW, env.run.agent, e.tool, window_of(e.at)))
        if isinstance(e, ev.RetryScheduled):
            return (_key(WINDOW_ROW, env.run.agent, e.tool, window_of(e.at)),)
        if isinstance(e, ev.AgentResumed | ev.AgentAbandoned | ev.AgentFinished):
            return (run,)
        if isinstance(e, ev.HumanInputRequested) and e.reason == Asked.UNCERTAIN:
            return (run,)
        return ()

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        e = env.event
        if isinstance(e, ev.CircuitOpened | ev.CircuitHalfOpened | ev.CircuitClosed):
            return _circuit(rows, e)
        run_key = _key(RUN_ROW, str(env.stream))
        run = rows.get(run_key)
        calls = run.calls if run is not None and run.calls is not None else Calls()
        if isinstance(e, ev.RetryScheduled):
            ((key, row),) = rows.items()
            counts = _counts(row)
            return {key: _window(env, e.tool, replace(counts, retries=counts.retries + 1))}
        if isinstance(e, ev.ToolInvoked | ev.ToolSucceeded | ev.ToolFailed):
            key = next(k for k in rows if k != run_key)
            calls, counts = _tool_event(calls, _counts(rows[key]), e)
            return {run_key: _run(env, calls), key: _window(env, e.tool, counts)}
        if run is None:  # no open calls: nothing to forget or doubt
            return {}
        if isinstance(e, ev.AgentFinished):
            return {run_key: None}
        if isinstance(e, ev.AgentAbandoned):
            return {run_key: _abandoned(env, calls)}
        return {run_key: _run(env, _doubt(calls, e))}


def _counts(row: Row | None) -> Counts:
    return row.counts if row is not None and row.counts is not None else Counts()


def _window(env: Envelope, tool: str, counts: Counts) -> Row:
    assert env.run is not None
    return Row(WINDOW_ROW, env.run.agent, tool, window_of(env.event.at), counts=counts)


def _run(env: Envelope, calls: Calls) -> Row:
    assert env.run is not None
    return Row(RUN_ROW, env.run.agent, calls=calls)


def _circuit(
    rows: Mapping[str, Row | None], e: ev.CircuitOpened | ev.CircuitHalfOpened | ev.CircuitClosed
) -> dict[str, Row | None]:
    state, tool, at = STATES[type(e)], e.tool, e.at
    out: dict[str, Row | None] = {}
    for key, row in rows.items():
        if key == _key(BREAKER_ROW, tool):
            was = row.breaker if row is not None and row.breaker is not None else Breaker()
            out[key] = Row(BREAKER_ROW, "", tool, breaker=Breaker(state, at, was.transitions + 1))
        else:
            counts = _counts(row)
            counts = replace(counts, transitions=counts.transitions + 1)
            out[key] = Row(CIRCUIT_ROW, "", tool, window_of(at), counts=counts)
    return out


def _tool_event(
    calls: Calls, counts: Counts, e: ev.ToolInvoked | ev.ToolSucceeded | ev.ToolFailed
) -> tuple[Calls, Counts]:
    open_ = dict(calls.open)
    note = open_.get(e.call)
    if isinstance(e, ev.ToolInvoked):
        if note is None:
            counts = replace(counts, calls=counts.calls + 1)
        # A fork taking its parent's effect over is in doubt until it learns the outcome
        # (recorded with the intent when the parent knew it).
        uncertain = (note is not None and note.uncertain) or e.parent_call is not None
        open_[e.call] = Note(e.tool, e.side_effect, uncertain)
        return replace(calls, open=open_), counts
    note = note or Note(e.tool)
    if isinstance(e, ev.ToolSucceeded):
        open_.pop(e.call, None)
        return replace(calls, open=open_), _succeeded(counts, note, e)
    attempt = not e.final or e.error_type != ""  # a final failure may carry the last attempt
    if attempt:
        counts = _attempted(counts, note, e.duration)
        counts = replace(counts, attempt_failures=_bump(counts.attempt_failures, e.kind))
    if note.side_effect:
        note = replace(note, uncertain=doubt_after(note.uncertain, e))
    if e.final:
        counts = replace(counts, failures=_bump(counts.failures, e.kind))
        # Only the last final failure can get a fresh intent (a resume re-attempts the
        # failure that ended the run); earlier ones stay only while still in doubt.
        open_ = {c: n for c, n in open_.items() if not n.failed or n.uncertain}
        note = replace(note, failed=True)
    open_[e.call] = note
    return replace(calls, open=open_), counts


def _attempted(counts: Counts, note: Note, duration: float) -> Counts:
    return replace(
        counts,
        attempts=counts.attempts + 1,
        effects_sent=counts.effects_sent + (1 if note.side_effect else 0),
        latency=counts.latency.add(duration),
    )


def _succeeded(counts: Counts, note: Note, e: ev.ToolSucceeded) -> Counts:
    source = e.source
    if source == Source.EXECUTED:
        counts = _attempted(counts, note, e.duration)
    elif source == Source.FALLBACK:
        counts = replace(counts, fallbacks=counts.fallbacks + 1)
    elif source == Source.LEDGER:
        counts = replace(counts, deduplicated=counts.deduplicated + 1)
    elif source == Source.PARENT:
        counts = replace(counts, reused=counts.reused + 1)
    # A verifier or a person is only ever asked about an outcome in doubt; a re-send or
    # the ledger resolve one only if the call was in doubt before.
    resolved = RESOLVED.get(source)
    if resolved is not None and (note.uncertain or source in (Source.VERIFIED, Source.HUMAN)):
        counts = replace(counts, uncertain=_bump(counts.uncertain, resolved))
    return counts


def _doubt(calls: Calls, e: ev.Event) -> Calls:
    """A resume puts every open side effect's outcome in doubt; a question about one
    (reason "uncertain") does too."""
    if isinstance(e, ev.AgentResumed):
        open_ = {
            c: replace(n, uncertain=True) if n.side_effect and not n.failed else n
            for c, n in calls.open.items()
        }
        return replace(calls, open=open_)
    if isinstance(e, ev.HumanInputRequested) and e.call in calls.open:
        open_ = dict(calls.open)
        open_[e.call] = replace(open_[e.call], uncertain=True)
        return replace(calls, open=open_)
    return calls


def _abandoned(env: Envelope, calls: Calls) -> Row | None:
    assert env.run is not None
    left: dict[str, int] = {}
    for note in calls.open.values():
        if note.in_doubt:
            left = _bump(left, note.tool)
    if not left:
        return None
    return Row(
        ABANDONED_ROW, env.run.agent, "", window_of(env.event.at), calls=Calls(abandoned=left)
    )


# --- reading it --------------------------------------------------------------------------


class _Sum:
    """One tool's rows added up (a mutable accumulator, local to a summary)."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.abandoned = 0

    def add(self, c: Counts) -> None:
        s = self.counts
        self.counts = Counts(
            **{f: _plus(getattr(s, f), getattr(c, f)) for f in Counts.__struct_fields__}
        )


def _plus(a: Any, b: Any) -> Any:
    """Two figures of one field of :class:`Counts` added up (counts, maps of counts, latencies)."""
    if isinstance(a, Latency):
        return a.merge(b)
    return _added(a, b) if isinstance(a, dict) else a + b


def _added(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, n in b.items():
        out[k] = out.get(k, 0) + n
    return out


_DECODE = RowDecoder(View.name, Row)


def _rows(
    store: Store, kind: str, since: float | None, agent: str | None, tool: str | None = None
) -> list[Row]:
    equal: dict[str, ColumnValue] = {"kind": kind}
    if agent is not None:
        equal["agent"] = agent
    if tool is not None:
        equal["tool"] = tool
    at_least = {} if since is None else {"window_start": float(window_of(since))}
    query = ViewQuery(equal=equal, at_least=at_least, descending=False)
    return [_DECODE(body) for body in store.views.query(View.table(), query)]


def summarize(
    store: Store, since: float | None, agent: str | None, *, catch_up: bool = True
) -> list[ToolStats]:
    """Each tool's figures over the hours from the one ``since`` falls in (all time if
    None), for ``agent``'s runs (all if None); the view is brought up to date first
    (unless the caller just did)."""
    if catch_up:
        Runner(store, [View()]).catch_up([View.name])
    sums: dict[str, _Sum] = {}
    for row in _rows(store, WINDOW_ROW, since, agent):
        sums.setdefault(row.tool, _Sum()).add(_counts(row))
    for row in _rows(store, ABANDONED_ROW, since, agent):
        for tool, n in (row.calls.abandoned if row.calls else {}).items():
            sums.setdefault(tool, _Sum()).abandoned += n
    # Breakers belong to the tool, whichever agent's calls moved them.
    transitions: dict[str, int] = {}
    for row in _rows(store, CIRCUIT_ROW, since, None):
        if agent is None or row.tool in sums:
            transitions[row.tool] = transitions.get(row.tool, 0) + _counts(row).transitions
            sums.setdefault(row.tool, _Sum())
    breakers = {r.tool: r.breaker for r in _rows(store, BREAKER_ROW, None, None) if r.breaker}
    return [
        _stats(tool, s, transitions.get(tool, 0), breakers.get(tool))
        for tool, s in sorted(sums.items())
    ]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _stats(tool: str, s: _Sum, transitions: int, breaker: Breaker | None) -> ToolStats:
    c, lat = s.counts, s.counts.latency
    uncertain = _added(c.uncertain, {"abandoned": s.abandoned} if s.abandoned else {})
    return ToolStats(
        tool=tool,
        calls=c.calls,
        failures=dict(sorted(c.failures.items())),
        retries=c.retries,
        p50_ms=_ms(lat.quantile(0.50)),
        p95_ms=_ms(lat.quantile(0.95)),
        breaker=breaker.state if breaker else CircuitState.CLOSED,
        p99_ms=_ms(lat.quantile(0.99)),
        mean_ms=_ms(lat.mean),
        stdev_ms=_ms(lat.stdev),
        fallbacks=c.fallbacks,
        breaker_transitions=transitions,
        effects_sent=c.effects_sent,
        effects_deduplicated=c.deduplicated,
        uncertain=dict(sorted(uncertain.items())),
        attempts=c.attempts,
        effects_reused=c.reused,
        attempt_failures=dict(sorted(c.attempt_failures.items())),
    )
