"""A tool call in flight and how its events are written: intent, outcome, the ledger's
commit or release with it, and the tool's own stream (breaker transitions, late results).

Each writer takes the call's ``CallState`` and returns it evolved by what it wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn

import msgspec
from msgspec.structs import replace

from ... import events as ev
from ... import failpoints
from ...errors import StoreError, UsageError
from ...kinds import FailureKind, Source
from ...policy.failure import error_for
from ...store import Append, Store, codec, stream_id
from ..defs.definitions import ToolDef, normalize
from ..journal.callstate import CallState, Settlement, evolve, releases, settle
from ..run.context import RunContext
from . import ledger


class Call(msgspec.Struct, frozen=True):
    """What is called: the run, the tool, the call identity and its arguments."""

    ctx: RunContext
    tool: ToolDef
    number: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ahash: str
    shown: dict[str, Any]  # the arguments as recorded (redacted)
    loop: asyncio.AbstractEventLoop | None = None  # an async tool's: the agent's loop
    # A decision's outcome writer (runtime.decisions): decided(value, duration, attempt).
    decided: Callable[[Any, float, int], Any] | None = None
    # A decision's fallbacks (``@engine.model(fallback=[...])``), tried when its transient
    # failure is final (retries spent, or its breaker open): (answered, recorded value).
    fallback: Callable[[], tuple[bool, Any]] | None = None


def intent(call: Call, state: CallState) -> ev.ToolInvoked:
    return ev.ToolInvoked(
        at=call.ctx.config.wall(),
        call=call.number,
        tool=call.tool.name,
        args=call.shown,
        args_hash=call.ahash,
        key=state.key,
        side_effect=call.tool.side_effect,
        parent_call=state.parent_call,
        parent_run=state.parent_run,
        sent_key=state.sent_key,
    )


def record(
    call: Call,
    state: CallState,
    *events: ev.Event,
    extra: list[Append] | None = None,
    with_intent: bool | None = None,
) -> CallState:
    """Append ``events`` in one commit, preceded by the intent if asked, or by default if
    none was written yet (a read-only tool's); the state with the intent written."""
    written = _append(call, state, events, extra, with_intent)
    return state if written is None else evolve(state, written)


def _append(
    call: Call,
    state: CallState,
    events: tuple[ev.Event, ...],
    extra: list[Append] | None,
    with_intent: bool | None,
) -> ev.ToolInvoked | None:
    """``record`` for the call's last write (no state after it): the intent if written."""
    written = None
    if with_intent is None:  # a decision has no intent: no effect to be unsure of
        with_intent = state.intent is None and not call.tool.decision
    if with_intent:
        written = intent(call, state)
        events = (written, *events)
    call.ctx.record(*events, extra=extra or ())
    return written


def succeed(
    call: Call,
    state: CallState,
    result: Any,
    source: Source,
    *,
    duration: float = 0.0,
    with_intent: bool = False,
) -> Any:
    """Write the call's outcome ``result`` (settling its key, or deferred) and return it
    as a replay will give it."""
    tool, ctx = call.tool, call.ctx
    if call.decided is not None:
        return call.decided(result, duration, max(state.attempts, 1))
    try:
        # Secret-named entries are redacted live too: the agent sees what a replay gives it.
        value = tool.redacted(normalize(result, f"result of tool {tool.name}"), ctx.seen)
    except (UsageError, RecursionError) as e:
        _unkeepable(call, state, str(e) if isinstance(e, UsageError) else "nested too deep")
    done = ev.ToolSucceeded(
        at=call.ctx.config.wall(),
        call=call.number,
        tool=tool.name,
        result=value,
        attempt=max(state.attempts, 1),
        duration=duration,
        source=source,
    )
    # A refreshed read rides with the run's next commit, after the replay (call.refresh).
    refreshed = source == Source.REFRESHED
    how = (
        Settlement.DEFER
        if refreshed
        else settle(tool, state, source, defer=ctx.config.defer_outcomes)
    )
    deferred = how in (Settlement.DEFER, Settlement.DEFER_COMMIT)
    size = codec.kept(done, held=deferred)  # encoded once: the append takes these bytes
    if size > ctx.store.max_payload:
        codec.let_go([done])
        _unkeepable(call, state, f"{size} bytes, over the {ctx.store.max_payload}-byte cap")
    extra = _ledger_rows(call, state, how, value, source)
    if deferred:
        # A crash before the next commit leaves the call uncertain: it resolves itself.
        ctx.defer(done, extra)
    else:
        _outcome(call, state, done, extra, with_intent or state.intent is None)
    failpoints.hit("after_outcome")
    ctx.log.info("tool_succeeded", call=call.number, tool=tool.name, key=state.key, source=source)
    return value


def claim(call: Call, state: CallState, version: int) -> Append:
    """The claim of the call's key, whose stream is at ``version``, dated by the engine's
    wall clock (its request goes out under ``state.sent_key`` when the key has one)."""
    assert state.key is not None
    at = call.ctx.config.wall()
    run_id, number = call.ctx.run_id, call.number
    return ledger.claim_event(state.key, version, run_id, number, call.ahash, state.sent_key, at=at)


def _ledger_rows(
    call: Call, state: CallState, how: Settlement, value: Any, source: Source
) -> list[Append]:
    """The key's commit (or release: the degraded path is not the effect) that ``how``
    writes with the outcome; none for an outcome that leaves the ledger as it is."""
    if how in (Settlement.RECORD, Settlement.DEFER):
        return []
    assert state.key is not None
    key, version, run_id, at = state.key, state.claim, call.ctx.run_id, call.ctx.config.wall()
    if how is Settlement.RELEASE:
        return [ledger.release_event(key, version, run_id, call.number, source, at=at)]
    return [ledger.commit_event(key, version, run_id, call.number, value, at=at)]


def fail(
    call: Call,
    state: CallState,
    kind: FailureKind,
    message: str,
    failed: ev.ToolFailed | None,
    *,
    landed: bool = False,
) -> None:
    """Write the call's final failure (its last failed attempt's evidence with it),
    freeing its key unless the effect may have happened (``landed``: it did)."""
    ctx = call.ctx
    evidence = failed.evidence if failed else {}
    if call.tool.decision:  # usage the failed decision reported: evidence, not another's
        used = ctx.take_usage()
        if used:
            evidence = {**evidence, "usage": msgspec.structs.asdict(used)}
    final = ev.ToolFailed(
        at=ctx.config.wall(),
        call=call.number,
        tool=call.tool.name,
        kind=kind,
        message=message,
        error_type=failed.error_type if failed else "",
        attempt=max(state.attempts, 1),
        final=True,
        duration=failed.duration if failed else 0.0,
        evidence=evidence,
        decision=call.tool.decision,
        args_hash=call.ahash if call.tool.decision else "",
        landed=landed,
    )
    extra: list[Append] = []
    if releases(state, kind):
        assert state.key is not None
        at = final.at
        extra.append(
            ledger.release_event(state.key, state.claim, ctx.run_id, call.number, kind, at=at)
        )
    _outcome(call, state, final, extra, None)
    ctx.failed_call = call.number
    ctx.log.info("tool_failed", call=call.number, tool=call.tool.name, kind=kind, key=state.key)


def _outcome(
    call: Call, state: CallState, out: ev.Event, extra: list[Append], with_intent: bool | None
) -> None:
    """Write the call's outcome. A store failure here, after the tool ran, stops the run
    (``OutcomeNotRecorded``, which agent code cannot retry past): the call stays uncertain
    in the log, and its resume resolves it instead of sending it again blind."""
    try:
        _append(call, state, (out,), extra, with_intent)
    except StoreError as e:
        what = f"the outcome of {call.tool.name} (call {call.number}) was not recorded: {e}"
        raise call.ctx.stop(what) from e


def _unkeepable(call: Call, state: CallState, why: str) -> NoReturn:
    """The tool ran but its result cannot be kept (too large, nested too deep): a final
    failure settles the call (the effect happened, so its key stays held), and the run
    fails at it once; nothing is sent again for it."""
    message = f"result cannot be recorded ({why}); the effect happened, its result is lost"
    kind = FailureKind.PERMANENT
    fail(call, replace(state, maybe_landed=True), kind, message, None, landed=True)
    raise error_for(kind, f"{call.tool.name}: {message}")


def tool_stream_append(store: Store, tool: str, event: ev.Event) -> bool:
    """Append ``event`` to the tool's own stream (breaker transitions, late results);
    other processes write it too, so a conflict re-reads its end. False if it failed."""
    sid = stream_id("tool:" + tool)
    for _ in range(5):
        try:
            store.append([Append(sid, store.last_position(sid) + 1, event)])
            return True
        except Exception:  # a lost evidence record must not fail the call
            continue
    return False
