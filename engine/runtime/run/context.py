"""The run context (the base of the ``run`` agents receive) and its call sequence.

Every durable call takes the next call identity; re-executed, a recorded one returns its
outcome and one that does not match the log raises ``NonDeterminismError`` before any
write. A resumed run's first write carries ``agent_resumed``."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from ... import events as ev
from ... import observe
from ...errors import NonDeterminismError, OutcomeNotRecorded, Paused, RunInterrupt, StoreError
from ...kinds import SETTLED, Asked, RunStatus
from ...log.history import RunWriter
from ...log.waiting import Person
from ...policy import budget
from ...secrets import Seen
from ...store import Append, RunRow
from ..defs.definitions import AgentDef
from ..host.port import Host
from ..journal.callstate import CallState
from ..journal.recorded import Journal
from . import asked
from .deferred import Deferred

_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "agentlog_run", default=None
)
# Set while a run's tool body (or decision) runs detached: its calls are covered by the
# outcome recorded for that call, so they are outside the run but not outside every run.
_covered: contextvars.ContextVar[bool] = contextvars.ContextVar("agentlog_covered", default=False)


def caller() -> object:
    """Who makes a call: the asyncio task running, else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        task = None
    return task if task is not None else threading.get_ident()


def current() -> RunContext | None:
    """The run executing in this thread or task, if any."""
    return _current.get()


def covered() -> bool:
    """Whether this call is made by a run's detached tool body or decision (see
    :func:`detached`), as opposed to code outside any run."""
    return _covered.get()


def detached(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` (a tool's body, a decision, a verifier) outside the run: a durable tool
    it calls is a plain call, covered by the outcome recorded for the call that ran it,
    which a replay returns without calling ``fn`` (so the call numbers stay aligned)."""
    token, inside = _current.set(None), _covered.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _covered.reset(inside)
        _current.reset(token)


async def detached_async(awaitable: Any) -> Any:
    """Await ``awaitable`` outside the run, as :func:`detached` calls a function."""
    token, inside = _current.set(None), _covered.set(True)
    try:
        return await awaitable
    finally:
        _covered.reset(inside)
        _current.reset(token)


class LogEnd(RunInterrupt):
    """Verification reached the end of the log with code and log in agreement."""


class RunContext:
    """What an agent's ``run`` parameter is: durable decisions, steps, checkpoints, questions."""

    def __init__(
        self,
        host: Host,
        writer: RunWriter,
        journal: Journal,
        agent: AgentDef,
        *,
        hash_key: bytes,
        resumed: bool = False,
        verify: bool = False,
    ) -> None:
        self.host = host  # the engine running it: leases, owner, whether its store is open
        self.config = host.config
        self.guards = host.guards  # breakers, budgets, latencies: the engine's
        self.hash_key = hash_key  # the run's replay key (engine.secrets.run_key)
        self.seen = Seen()  # secrets it has seen: masked in its messages, evidence, logs
        self.watch: observe.Watch = observe.UNWATCHED  # who observes it (engine.observe)
        self.writer = writer
        self.journal = journal
        self.agent = agent
        self.verify = verify
        self._resume_marker = resumed
        # Continuing the run (not verifying): the reads it refreshed (runtime.call.refresh).
        self.refresh: list[int] | None = [] if resumed and not verify else None
        # When this execution took the run up again (the resume marker's time, not its
        # first write's: a crash's time to recover is not stretched by the work redone).
        self._resumed_at = self.config.wall()
        # Self-resolving outcomes ride with the next commit: one commit a step (deferred).
        self.pending = Deferred(self.flush)
        # Questions waiting for a person (the journal's, then this execution's).
        self.unanswered: dict[int, ev.HumanInputRequested] = dict(journal.unanswered)
        # Async tool calls not finished yet: an async agent's run ends only after them.
        self.in_flight: set[asyncio.Future[Any]] = set()
        # A fork's parent effects it may take over (runtime.forks), read on first need.
        self.inheritance: Any = None
        self.inheritance_lock = threading.Lock()
        self._calls = 0
        self.patches: dict[str, bool] = {}  # run.patched's answers in this execution
        self.failed_call: int | None = None  # the call whose failure is propagating
        # Once code and log disagree, every later step raises it again (even if swallowed).
        self.diverged: NonDeterminismError | None = None
        # Once what a tool did could not be recorded, every write raises it again.
        self.stopped: OutcomeNotRecorded | None = None
        self._lock = threading.RLock()
        # This execution is over: what finishes later (a tool timed out) may not write.
        self.ended = False
        self.log = observe.get(run_id=writer.state.run_id, agent=agent.name).masking(self.seen)
        # What ``run.usage`` reported inside a decision not recorded yet.
        self._usage = budget.NONE
        # Live streams (runtime.streams); one its reader let go is recorded before that
        # reader's next call, or when the agent returns: never when it fails or pauses.
        self.open_streams: list[Any] = []

    def add_usage(self, used: budget.Usage) -> None:
        """Usage reported inside a decision: recorded with the next decision recorded."""
        with self._lock:
            self._usage = self._usage + used

    def take_usage(self) -> budget.Usage:
        with self._lock:
            used, self._usage = self._usage, budget.NONE
            return used

    @property
    def run_id(self) -> str:
        return self.writer.state.run_id

    @property
    def store(self) -> Any:
        return self.writer.store

    def kept_open(self) -> contextlib.AbstractContextManager[bool]:
        """Whether the run's store is still open; its engine's ``close`` waits until the
        block ends (a thread outliving its run, such as a late tool result, writes safely)."""
        return self.host.kept_open(self.store)

    # --- recording ---------------------------------------------------------------

    def keep_deferred(self) -> None:
        """Stopped (``LeaseLost``): the outcomes deferred are written, fenced (refused if
        another owner took the run; a stop of this engine's is not), then dropped."""
        with contextlib.suppress(StoreError, RunInterrupt), self._lock:
            if self.pending.events and self.stopped is None and not self.verify:
                self._commit((), (), ())
        self.pending.clear()

    def leave_streams(self, everyone: bool = False) -> None:
        """Record the streams this caller (``everyone``: any caller) stopped reading."""
        me = caller()
        for s in list(self.open_streams):
            if everyone or s.owner == me:
                s.settle()

    @property
    def calls(self) -> int:
        """How many durable calls this execution has made so far."""
        return self._calls

    def next_call(self) -> int:
        if self.open_streams:
            self.leave_streams()
        with self._lock:
            self._calls += 1
            self.failed_call = None
            return self._calls

    def live(self, call: int, what: str) -> None:
        """About to do live work at ``call``: stop here when only verifying, or when this
        owner lost the run's lease (or could not record what a tool did)."""
        self.check_diverged()
        self.check_stopped()
        self.host.leases.check(self.run_id, live=True)
        if self.verify:
            raise LogEnd(f"log ends before call {call} ({what})")

    def record(
        self, *events: ev.Event, extra: Sequence[Append] = (), rows: Sequence[RunRow] = ()
    ) -> None:
        """Append ``events`` in one commit (with the resume marker on the first write;
        ``extra`` and ``rows``: other streams' events and other runs' index rows)."""
        self.check_diverged()
        self.check_stopped()
        self.host.leases.check(self.run_id)
        with self._lock:
            self._commit(events, extra, rows)

    def _commit(self, events: Sequence[ev.Event], extra: Sequence[Append], rows: Any) -> None:
        """``record``'s commit, under the run's lock: the deferred outcomes, then ``events``."""
        marker = self._resume_marker
        pending = self.pending
        batch = tuple(map(self.seen.scrub, (*pending.events, *events)))
        if pending.rows:
            extra = (*pending.rows, *extra)
        if marker:
            batch = (self.writer.resumed(self._resumed_at, self.host.owner), *batch)
        try:
            self.writer.append(*batch, extra=extra, measure=True, rows=rows)
        except StoreError as err:
            self.host.leases.refused(self.run_id, err)  # another owner took the run
            if not pending.events:
                raise  # nothing a tool did was lost: an ordinary store error
            lost = pending.lost()
            raise self.stop(f"the outcome of {lost} was not recorded: {err}") from err
        self._resume_marker = False
        pending.clear()
        asked.note(self.unanswered, batch)
        self.log.debug("recorded", position=self.writer.state.position, events=len(batch))

    def check_stopped(self) -> None:
        if self.stopped is not None:
            raise OutcomeNotRecorded(str(self.stopped))

    def stop(self, message: str) -> OutcomeNotRecorded:
        """What a tool did could not be recorded: this execution stops and writes nothing
        more; the intents in the log leave those calls uncertain for its resume."""
        with self._lock:
            self.stopped = OutcomeNotRecorded(
                f"run {self.run_id} stopped: {message}; it stays running and its resume "
                "resolves the call as uncertain"
            )
            self.pending.clear()
            return self.stopped

    def end(self) -> None:
        """This execution of the run is over (it finished, paused, failed or stopped)."""
        with self._lock:
            self.ended = True

    def record_while_running(self, event: ev.Event) -> bool:
        """Record ``event`` if this execution still runs the run; False (nothing written)
        once it ended, finished, paused or failed (checked under the append's lock)."""
        with self._lock:
            if self.ended or self.verify or self.writer.state.status != RunStatus.RUNNING:
                return False
            self.record(event)
            return True

    def record_unless_over(self, event: ev.Event) -> bool:
        """Record ``event`` unless this execution is over (False: nothing written); unlike
        :meth:`record_while_running`, a run resumed from a pause, wait or failure records
        (a parent's wait for its child, which may outlive its run)."""
        with self._lock:
            over = self.writer.state.status in SETTLED and not self._resume_marker
            if self.ended or self.verify or over:
                return False
            self.record(event)
            return True

    def defer(self, event: ev.Event, extra: Sequence[Append] = ()) -> None:
        """Record ``event`` (and ``extra``: its key's commit) with the next commit."""
        with self._lock:
            self.pending.add(event, extra)

    def flush(self, stream: uuid.UUID | None = None) -> None:
        """Commit the deferred outcomes (``stream``: those with a row in it, others' too)."""
        with self._lock:
            due = self.pending.events and (stream is None or self.pending.touches(stream))
            if due and not self.verify and self.stopped is None:
                self.record()
        self.pending.flush_others(stream)

    def recorded(self, call: int, kind: str, name: str, ahash: str = "") -> CallState | None:
        """The log's entry at ``call``, checked against what the code does now."""
        self.check_diverged()
        self.diverged = self.journal.mismatch(self.run_id, call, kind, name, ahash)
        if self.diverged is not None:
            raise self.diverged
        return self.journal.calls.get(call)

    def check_diverged(self) -> None:
        """Raise the divergence found earlier in this execution, if any."""
        if self.diverged is not None:
            raise NonDeterminismError(str(self.diverged))

    def finish_check(self) -> None:
        """Code returned: every call the log recorded must have been reached."""
        self.check_diverged()
        if self.journal.last_call > self._calls:
            entry = self.journal.calls.get(self._calls + 1)
            what = entry.describe() if entry else "more calls"
            self.diverged = NonDeterminismError(
                f"run {self.run_id}: the code finished after call {self._calls} but the log "
                f"recorded {what} at call {self._calls + 1}"
            )
            raise self.diverged

    # --- the public run API ------------------------------------------------------

    def plan(self, steps: Sequence[str]) -> None:
        """Record the pending work that timelines and the recovery context show."""
        call = self.next_call()
        steps = [str(s) for s in steps]
        if self.recorded(call, "plan", ",".join(steps)) is not None:
            return
        self.live(call, "plan")
        self.record(ev.PlanCreated(at=self.config.wall(), call=call, steps=steps))

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A named stretch of work: ``step_started`` and ``step_completed`` around it."""
        call = self.next_call()
        entry = self.recorded(call, "step", name)
        if entry is None:
            self.live(call, f"step {name!r}")
            self.record(ev.StepStarted(at=self.config.wall(), call=call, name=name))
        began = self.writer.state.started_at or 0.0  # a fork's inherited step began earlier
        started = self.config.wall() if entry is None else max(entry.started_at, began)
        yield
        if entry is None or not entry.completed:
            self.live(call, f"complete step {name!r}")
            now = self.config.wall()
            self.record(ev.StepCompleted(at=now, call=call, name=name, duration=now - started))

    def checkpoint(self, name: str) -> None:
        """A named cursor position; a snapshot is stored with it."""
        call = self.next_call()
        if self.recorded(call, "checkpoint", name) is not None:
            return
        self.live(call, f"checkpoint {name!r}")
        self.record(ev.Checkpoint(at=self.config.wall(), call=call, name=name))

    def ask(self, question: str, *, returns: Any = None) -> Any:
        """Pause the run until a person answers; the answer (as ``returns``) is returned."""
        call = self.next_call()
        entry = self.recorded(call, "ask", question)
        if entry is not None and entry.completed:
            return asked.answered(entry.answer, returns, question)
        if entry is None:
            self.live(call, f"ask {question!r}")
            self.request_answer(call, question)
        raise asked.paused(self.run_id, call, question, returns, verify=self.verify)

    # --- waiting for a person --------------------------------------------------------

    def request_answer(self, call: int, question: str, reason: Asked = Asked.QUESTION) -> NoReturn:
        """Record ``question`` for a person and pause. One question waits at a time: while
        another call's question is unanswered (a sibling in a ``gather``), this one is not
        recorded; it is asked again once that one is answered."""
        with self._lock:
            waiting = self._waiting_on()
            if waiting is None or waiting.call == call:
                self.record(
                    ev.HumanInputRequested(
                        at=self.config.wall(), call=call, question=question, reason=reason
                    )
                )
                waiting = None
        raise Paused(question if waiting is None else waiting.question)

    def _waiting_on(self) -> ev.HumanInputRequested | None:
        return next(reversed(self.unanswered.values()), None)

    def paused(self, reason: str) -> str:
        """The run stops to wait for a person: the question it waits on, recorded again when
        the log's state no longer shows it (it was asked in an earlier execution and this
        one has written since, or answered another question), so ``answer`` reaches it."""
        with self._lock:
            waiting = self._waiting_on()
            if waiting is None or self.verify:
                return reason
            state = self.writer.state
            if state.status != RunStatus.PAUSED or state.waits_on != Person(waiting.question):
                self.record(
                    ev.HumanInputRequested(
                        at=self.config.wall(),
                        call=waiting.call,
                        question=waiting.question,
                        reason=waiting.reason,
                    )
                )
            return waiting.question
