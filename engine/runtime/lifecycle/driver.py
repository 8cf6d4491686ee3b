"""The driver: executes an agent function against a run's log under a run context.

Run, resume, verify, answer and rewind all execute through :class:`Driver`; how a run is
found and loaded is the repository's (``runtime.repository``), so nothing here knows
which operation asked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from typing import Any

import msgspec

from ... import events as ev
from ... import observe
from ...errors import (
    DryRunStop,
    InvariantViolated,
    NonDeterminismError,
    OutcomeNotRecorded,
    Paused,
    StoreError,
    Suspended,
    ToolError,
)
from ...kinds import FINAL, FailureKind, RunStatus
from ...log.history import RunWriter, run_stream
from ...log.state import RunState, fold
from ...policy.failure import describe
from ...secrets import redact, run_key
from ...store import Recorded, Store
from ..call.refresh import RefreshDiverged, diverged
from ..defs.definitions import AgentDef, normalize
from ..host.leases import Drained, LeaseLost
from ..host.port import Host
from ..journal.recorded import Journal
from ..run.context import LogEnd, RunContext, _current
from ..run.repository import LoadedRun, RunRepository, result_of
from ..run.results import RunResult
from . import approval, recovery, watched
from .agentrun import AgentRun


class Driver:
    """Executes agents for one host (an engine): its config, guards, leases and owner."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def execute(self, run: LoadedRun, *, resumed: bool = False, verify: bool = False) -> RunResult:
        """Execute the loaded run's agent against its journal, from its recorded input; a
        resume whose refreshed reads made the code diverge is executed again without
        refreshing (``runtime.call.refresh``: nothing was written)."""
        head, refresh = run.started, True
        if resumed and run.state.status == RunStatus.FAILED and run.agent.recovery is not None:
            stuck = recovery.finish(run.agent, run.writer)  # a roll back a crash cut short
            if stuck is not None:
                return stuck
        while True:
            try:
                return self.drive(
                    run.agent,
                    run.writer,
                    run.journal,
                    head.input,
                    check=head.key_check,
                    resumed=resumed,
                    verify=verify,
                    refresh=refresh,
                )
            except RefreshDiverged as d:
                if not refresh:
                    raise
                log = observe.get(run_id=run.run_id, agent=run.agent.name)
                log.warning("refresh_dropped", calls=d.calls, divergence=str(d))
                refresh = False

    def drive(
        self,
        agent: AgentDef,
        writer: RunWriter,
        journal: Journal,
        input: dict[str, Any],
        *,
        check: str | None,
        resumed: bool = False,
        verify: bool = False,
        refresh: bool = True,
    ) -> RunResult:
        """Execute ``agent`` against ``journal`` (the run's recorded calls), whose arguments
        were hashed under the key that ``check`` names (a different key here is refused
        before anything replays); ``refresh`` False: no stale read is executed again. A
        run of an agent with ``recovery=`` that fails is recovered (``recovery``): each
        choice recorded, the agent executed again until it ends otherwise or gives up."""
        result = self._once(agent, writer, journal, input, check, resumed, verify, refresh)
        while result.status == RunStatus.FAILED and agent.recovery is not None and not verify:
            step = recovery.recover(agent, writer, result)
            if isinstance(step, RunResult):
                return step
            result = self._once(agent, writer, step, input, check, True, False, refresh)
        return result

    def _once(
        self,
        agent: AgentDef,
        writer: RunWriter,
        journal: Journal,
        input: dict[str, Any],
        check: str | None,
        resumed: bool,
        verify: bool,
        refresh: bool,
    ) -> RunResult:
        rid = writer.state.run_id
        # Before anything replays: the store's key (recorded unless verifying: no write).
        self.host.key_gate.check(writer.store, record=not verify)
        key = run_key(check, rid)
        ctx = AgentRun(
            self.host, writer, journal, agent, hash_key=key, resumed=resumed, verify=verify
        )
        if not refresh:
            ctx.refresh = None
        if not verify:  # a verification is not an execution: nothing is watched
            ctx.watch = watched.watch(self.host, agent.name, writer.state, resumed=resumed)
        redact(input, seen=ctx.seen)  # secret input (stored encrypted): masked
        token, written = _current.set(ctx), writer.state.position
        ended: tuple[str, str | None] = ("stopped", None)
        try:
            result = _outcome(ctx, input)
            ended = (result.status, result.error)
            return msgspec.structs.replace(result, parent_run_id=writer.state.parent_run_id)
        except NonDeterminismError as e:
            ended = ("diverged", str(e))
            raise diverged(ctx, e, written) from None
        finally:
            _current.reset(token)
            try:
                ctx.flush()  # e.g. interrupted by KeyboardInterrupt after an effect completed
            except (Exception, OutcomeNotRecorded) as e:  # uncertain: resolved on resume
                ctx.log.warning("deferred_outcome_not_recorded", error=str(e))
            ctx.end()
            ctx.watch.ended(*ended)

    def replays(self, store: Store, agent: AgentDef, run_id: str, events: list[ev.Event]) -> None:
        """Replay ``events`` (a fork's inherited prefix, a paused run's log) against the
        current code before writing anything: code that no longer matches raises
        NonDeterminismError, so nothing is written (no orphan fork, no recorded answer)."""
        head = events[0]
        assert isinstance(head, ev.AgentStarted)
        recorded = [Recorded(run_stream(run_id), i + 1, e) for i, e in enumerate(events)]
        state = fold([(r.position, r.event) for r in recorded], RunState(run_id=run_id))
        writer = RunWriter(store, state, wall=self.host.config.wall)
        journal = Journal.from_events(recorded)
        with contextlib.suppress(LogEnd):
            self.drive(agent, writer, journal, head.input, check=head.key_check, verify=True)


def _outcome(ctx: RunContext, input: dict[str, Any]) -> RunResult:
    """Execute the agent of ``ctx`` on ``input``: how this execution of the run ended. One
    that could not record what a tool did stops, recording nothing more (not even its
    end, however agent code handled it): the run stays running, for a resume."""
    try:
        return _executed(ctx, input)
    except OutcomeNotRecorded as stop:
        ctx.log.error("run_stopped", reason=str(stop))
        return RunResult(ctx.run_id, RunStatus.RUNNING, error=str(stop))


def _executed(ctx: RunContext, input: dict[str, Any]) -> RunResult:
    rid = ctx.run_id
    try:
        output = ctx.agent.fn(ctx, **input)
        if asyncio.iscoroutine(output):
            output = _run_async(_settled(ctx, output))
        ctx.leave_streams(everyone=True)  # streams left unread to their end: recorded now
        ctx.finish_check()
        return _finished(ctx, output)
    except Paused as p:
        return RunResult(rid, RunStatus.PAUSED, error=None, waiting=ctx.paused(p.reason))
    except DryRunStop as halt:  # a dry run's would-be effect (or child) it cannot go past
        return _dry_ended(ctx, None, halt)
    except Suspended as s:  # what it waits on is recorded (run_waiting) before it stops
        waiting = ctx.writer.state.waiting if not ctx.verify else s.reason
        return RunResult(rid, RunStatus.WAITING, waiting=waiting)
    except Drained as drained:  # its finished calls are recorded (the deferred too)
        ctx.log.info("run_stopped", reason=str(drained))
        return RunResult(rid, RunStatus.RUNNING, error=str(drained))
    except LeaseLost as lost:
        ctx.keep_deferred()  # refused if a new owner took it: it resolves them from the log
        ctx.log.error("run_stopped", reason=str(lost))
        return RunResult(rid, RunStatus.RUNNING, error=str(lost))
    except StoreError as lost:  # the store failed under the engine: not the agent's failure
        stop = ctx.stop(f"the store failed under it: {lost}")
        ctx.log.error("run_stopped", reason=str(stop))
        return RunResult(rid, RunStatus.RUNNING, error=str(stop))
    except Exception as e:
        return _failed(ctx, e)


def _finished(ctx: RunContext, output: Any) -> RunResult:
    """The agent returned: record its output (unless only verifying, or already done)."""
    rid, state = ctx.run_id, ctx.writer.state
    if ctx.verify:
        return RunResult(rid, RunStatus.COMPLETED, normalize(output, "the agent's output"))
    if state.status == RunStatus.COMPLETED:
        return result_of(state)
    # Secret-named entries of the output are redacted as a tool's result is.
    shown = redact(normalize(output, "agent output"), seen=ctx.seen)
    if state.dry_run:
        return _dry_ended(ctx, shown, None)
    ctx.record(ev.AgentFinished(at=ctx.config.wall(), output=shown))
    ctx.log.info("run_completed")
    return RunResult(rid, RunStatus.COMPLETED, ctx.writer.state.output)


def _dry_ended(ctx: RunContext, output: Any, stop: DryRunStop | None) -> RunResult:
    """A dry-run fork ended (status ``dry_run``): its agent returned ``output``, or it
    stopped at a would-be effect it cannot go past (``stop``)."""
    error = None if stop is None else ctx.seen.mask(stop.reason)
    if not ctx.verify:
        call = None if stop is None else stop.call
        ctx.record(
            ev.DryRunEnded(at=ctx.config.wall(), output=output, stopped_at=call, error=error)
        )
        ctx.log.info("dry_run_ended", stopped_at=call)
    return RunResult(ctx.run_id, RunStatus.DRY_RUN, output, error=error)


def _failed(ctx: RunContext, e: Exception) -> RunResult:
    """The agent raised: record the failure (unless only verifying); a divergence is
    raised, never recorded."""
    ctx.check_diverged()  # agent code swallowed or wrapped a divergence: no record
    if isinstance(e, NonDeterminismError):
        raise e
    message = ctx.seen.mask(describe(e))
    if ctx.verify:
        return RunResult(ctx.run_id, RunStatus.FAILED, error=message)
    kind = e.kind if isinstance(e, ToolError) else FailureKind.PERMANENT
    evidence = getattr(e, "evidence", None) if isinstance(e, InvariantViolated) else None
    at = ctx.config.wall()
    ctx.record(
        ev.AgentFailed(
            at=at, error=message, kind=kind, call=ctx.failed_call, evidence=evidence or {}
        )
    )
    ctx.log.info("run_failed", error=message)
    return RunResult(ctx.run_id, RunStatus.FAILED, error=message)


def resume(runs: RunRepository, driver: Driver, run_id: str) -> RunResult:
    """Continue a crashed, failed or answered run from its log (a finished one executes
    nothing and returns its recorded result)."""
    rid = runs.resolve(run_id)
    with runs.held(rid):
        run = runs.load(rid, "be resumed")  # finished or not, an imported run is history
        if run.state.status in FINAL:
            return result_of(run.state)
        if run.state.status == RunStatus.QUEUED:  # a person starts it before any worker
            return _dequeued(runs, driver, run)
        return driver.execute(run, resumed=True)


def start(runs: RunRepository, driver: Driver, run_id: str, owner: str = "") -> RunResult:
    """Execute a recorded run that has not ended: a child just spawned (its log holds
    only ``agent_started``: no resume is recorded), one a supervisor restarted (its
    restart wrote the resume marker), or one whose owner (``owner``) died: a crash, held
    instead when its agent resumes on approval (``approval``)."""
    with runs.held(run_id):
        run = runs.load(run_id, "be started")
        if run.state.status in FINAL or run.state.status == RunStatus.HELD:
            return result_of(run.state)  # ended, or held for approval (only approve goes on)
        if run.state.status == RunStatus.QUEUED:
            return _dequeued(runs, driver, run)
        # A run whose log ends in a resume marker (a supervisor's restart) has one; a
        # child that holds only its start (and its trace context, its dry_run_started) is new.
        last = run.recorded[-1].event
        marked = isinstance(last, ev.AgentResumed)
        fresh = isinstance(last, ev.AgentStarted | ev.DryRunStarted) or (
            isinstance(last, ev.TraceNoted) and bool(last.origin)
        )
        crashed = run.state.position > 1 and not marked and not fresh
        running = run.state.status == RunStatus.RUNNING
        if crashed and running and approval.needs_approval(run.agent, run.state):
            return approval.hold(run, owner)
        return driver.execute(run, resumed=crashed)


def _dequeued(runs: RunRepository, driver: Driver, run: LoadedRun) -> RunResult:
    """Start the queued run ``run`` (its lease held): ``run_dequeued`` names who took it,
    then its agent executes from the start."""
    run.agent  # noqa: B018  (an agent that does not import leaves the run queued)
    run.writer.append(ev.RunDequeued(at=run.writer.wall(), owner=runs.leases.owner))
    return driver.execute(run)


def verify(runs: RunRepository, driver: Driver, run_id: str) -> RunResult:
    """Re-execute the run's agent against its log with every live call forbidden; raises
    NonDeterminismError naming the first call that diverges. Writes nothing."""
    run = runs.load(runs.resolve(run_id), "be verified")
    try:
        driver.execute(run, verify=True)
    except LogEnd as end:
        if run.state.status == RunStatus.COMPLETED:  # its log is the whole run
            raise NonDeterminismError(
                f"run {run.run_id} completed, but the code now goes on past its log: {end}"
            ) from None
    return result_of(run.state)


def _run_async(coro: Any) -> Any:
    """Run an async agent to its end on a loop of its own. Called from inside a running
    loop (a notebook, an async caller of the sync ``run``), that loop's thread cannot
    host a second one: the agent's loop runs in a worker thread (with this thread's
    context: the run) while this thread blocks, as any sync call does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentlog-agent") as pool:
        return pool.submit(context.run, asyncio.run, coro).result()


async def _settled(ctx: RunContext, agent: Any) -> Any:
    """Await an async agent; however it ends, the durable calls it left in flight (the
    siblings of a failed or paused ``gather``) finish and are recorded first: the loop's
    shutdown would cancel them midway, and an effect may already have been sent."""
    try:
        return await agent
    finally:
        while ctx.in_flight:
            await asyncio.wait(list(ctx.in_flight))
