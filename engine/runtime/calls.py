"""The path of one durable tool call.

    journal has an outcome?      -> check tool + arguments, return it (nothing runs)
    side effect?                 -> claim the key + append tool_invoked, one commit
    run under the policy         -> each failed attempt an event, backoff with jitter
    append the outcome           -> tool_succeeded / tool_failed (+ the ledger's outcome)

An intent with no outcome is uncertain: it is resolved by the ledger, the tool's
verifier, a re-send with the same key, or a person; never by a fresh key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any

from .. import events as ev
from .. import failpoints
from ..errors import ConcurrencyError, NonDeterminismError, Paused, RunInterrupt, ToolError
from ..policy import classify, describe, error_for
from ..store import Append
from . import ledger
from .context import RunContext
from .defs import ToolDef, args_hash, normalize
from .journal import CallLog

LEDGER_WAIT_DEFAULT = 10.0
AFFIRMATIVE = {"done", "yes", "y", "true", "1", "happened"}
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="agentlog-tool")


@dataclass
class Call:
    """One tool call in flight: who, what, under which key, how far it got."""

    ctx: RunContext
    tool: ToolDef
    number: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    named: dict[str, Any]
    ahash: str
    key: str | None = None
    business: bool = False
    attempts: int = 0
    intent_written: bool = False
    claim_version: int = 0  # the ledger version of our claim (business keys)
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def run_id(self) -> str:
        return self.ctx.run_id


def call_tool(
    ctx: RunContext,
    tool: ToolDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    number: int | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Any:
    """Make a durable call of ``tool`` inside the run ``ctx``.

    An async tool's call identity is taken when it is awaited (``number``), and its
    coroutine runs on the caller's ``loop`` while this thread records and retries.
    """
    number = ctx.next_call() if number is None else number
    named = normalize(tool.bind(args, kwargs), f"arguments of tool {tool.name}")
    c = Call(ctx, tool, number, args, kwargs, named, args_hash(tool.name, named), loop=loop)
    if tool.side_effect:
        c.business = tool.key is not None
        c.key = str(tool.key(*args, **kwargs)) if tool.key else f"{ctx.run_id}:{number}"
    entry = ctx.recorded(number, "tool", tool.name, c.ahash)
    if entry is not None:
        c.attempts = entry.attempts
        out = entry.outcome
        if isinstance(out, ev.ToolSucceeded):
            return out.result
        if isinstance(out, ev.ToolFailed) and ctx.journal.failed_call != number:
            ctx.failed_call = number
            raise error_for(out.kind, out.message)
        if entry.intent is not None and out is None and tool.side_effect:
            ctx.live(number, f"resolve uncertain {tool.name}")
            c.intent_written = True
            return _resolve_uncertain(c, entry)
        # else: the failure that ended the run; re-attempt it with a fresh intent
    ctx.live(number, f"tool {tool.name}")
    ctx.log.debug("tool_call", call=number, tool=tool.name, key=c.key)
    if tool.side_effect:
        found = _write_intent(c)
        if found is not None:
            return found
    return _attempts(c)


def _intent(c: Call) -> ev.ToolInvoked:
    return ev.ToolInvoked(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        args=c.tool.redacted(c.named),
        args_hash=c.ahash,
        key=c.key,
        side_effect=c.tool.side_effect,
    )


def _write_intent(c: Call) -> Any | None:
    """Commit the intent (claiming a business key with it). Returns a result when the
    ledger already holds this effect's outcome, so nothing may run."""
    if not c.business:
        c.ctx.record(_intent(c))
        c.intent_written = True
        failpoints.hit("after_intent")
        return None
    assert c.key is not None
    store = c.ctx.store
    while True:
        state = ledger.read(store, c.key)
        ledger.check_args(state, c.key, c.ahash)
        if state.committed is not None:
            return _succeed(c, state.committed.result, source="ledger", intent=True)
        if state.claim is not None and not state.owned_by(c.run_id, c.number):
            return _claimed_elsewhere(c, state)
        try:
            claim = ledger.claim_event(state, c.key, c.run_id, c.number, c.ahash)
            c.ctx.record(_intent(c), extra=[claim])
        except ConcurrencyError:
            if ledger.read(store, c.key).version == state.version:
                raise  # the run's own stream conflicted: another process runs it
            continue  # another claimer won the race; look at its claim
        c.claim_version, c.intent_written = claim.position, True
        failpoints.hit("after_intent")
        return None


def _claimed_elsewhere(c: Call, state: ledger.KeyState) -> Any:
    """Another run holds the key: wait for its outcome (at most the tool's timeout)."""
    assert c.key is not None and state.claim is not None
    wait = c.tool.timeout if isinstance(c.tool.timeout, int | float) else LEDGER_WAIT_DEFAULT
    settled = ledger.wait_settled(c.ctx.store, c.key, float(wait))
    if settled.committed is not None:
        return _succeed(c, settled.committed.result, source="ledger", intent=True)
    if settled.claim is None:
        return _write_intent(c)  # released meanwhile: claim it ourselves
    c.ctx.record(_intent(c))
    c.intent_written = True
    holder = settled.claim.run_id
    return _uncertain(c, f"key {c.key!r} is held by run {holder}, whose outcome is unknown")


def _resolve_uncertain(c: Call, entry: CallLog) -> Any:
    """A recorded intent with no outcome: find out whether the effect happened."""
    if c.business:
        assert c.key is not None
        state = ledger.read(c.ctx.store, c.key)
        if state.committed is not None:
            return _succeed(c, state.committed.result, source="ledger")
        if state.claim is None:
            claim = ledger.claim_event(state, c.key, c.run_id, c.number, c.ahash)
            c.ctx.store.append([claim])
            c.claim_version = claim.position
        elif state.owned_by(c.run_id, c.number):
            c.claim_version = state.version
        else:
            return _claimed_elsewhere(c, state)
    if entry.asked:
        if not entry.completed:
            raise Paused(f"waiting for a person to say whether {c.tool.name} took effect")
        if str(entry.answer).strip().lower() in AFFIRMATIVE:
            return _succeed(c, entry.answer, source="human")
        # A person says it did not happen: send it again, same key, under a new intent,
        # so a crash during this re-send leaves the call uncertain (and asks again)
        # instead of replaying the answer into a blind second re-send.
        c.ctx.record(_intent(c))
        failpoints.hit("after_intent")
        return _attempts(c)
    return _uncertain(c, "the outcome of a sent request is unknown")


def _uncertain(c: Call, reason: str) -> Any:
    """Verify, or re-send with the same key, or pause for a person. Never a fresh key."""
    tool = c.tool
    if tool.verify is not None:
        assert c.key is not None
        found = tool.verify(c.key)
        if found is not None:
            return _succeed(c, found, source="verified")
        return _attempts(c)
    if tool.takes_key:
        return _attempts(c)
    question = (
        f"Did {tool.name} (key {c.key}) take effect? {reason}. "
        "Answer 'done' or 'not done', or abandon the run."
    )
    c.ctx.record(
        ev.HumanInputRequested(at=ev.now(), call=c.number, question=question, reason="uncertain")
    )
    raise Paused(question)


def _attempts(c: Call) -> Any:
    """Run the tool under its retry policy until it succeeds or fails for good."""
    tool, policy = c.tool, c.tool.retry
    first = time.monotonic()
    while True:
        c.attempts += 1
        started = time.monotonic()
        try:
            result = _invoke(c)
        except RunInterrupt:
            raise
        except Exception as exc:
            kind = classify(exc, side_effect=tool.side_effect, hook=tool.classify)
            message = describe(exc)
            elapsed = time.monotonic() - first
            failed = ev.ToolFailed(
                at=ev.now(),
                call=c.number,
                tool=tool.name,
                kind=kind,
                message=message,
                error_type=type(exc).__name__,
                attempt=c.attempts,
                final=False,
                duration=time.monotonic() - started,
            )
            if kind == "indeterminate" and tool.side_effect:
                _record(c, failed)
                return _uncertain(c, message)
            more = c.attempts < policy.max_attempts and (
                policy.max_elapsed is None or elapsed < policy.max_elapsed
            )
            if kind == "transient" and more:
                delay = policy.delay(c.attempts)
                retry = ev.RetryScheduled(
                    at=ev.now(),
                    call=c.number,
                    tool=tool.name,
                    attempt=c.attempts + 1,
                    delay=delay,
                    kind=kind,
                )
                _record(c, failed, retry)
                c.ctx.log.info("tool_retry", call=c.number, tool=tool.name, delay=delay)
                time.sleep(delay)
                continue
            final = ev.ToolFailed(**{**_fields(failed), "final": True})
            extra = []
            if c.business and c.claim_version:
                assert c.key is not None
                state = ledger.KeyState(c.claim_version, None, None)
                extra.append(ledger.release_event(state, c.key, c.run_id, c.number, kind))
            _record(c, final, extra=extra)
            c.ctx.failed_call = c.number
            c.ctx.log.info("tool_failed", call=c.number, tool=tool.name, kind=kind, key=c.key)
            raise error_for(kind, f"{tool.name}: {message}") from exc
        failpoints.hit("after_tool")
        return _succeed(c, result, source="executed", duration=time.monotonic() - started)


def _invoke(c: Call) -> Any:
    kwargs = dict(c.kwargs)
    if c.tool.takes_key:
        kwargs["idempotency_key"] = c.key
    timeout = c.tool.timeout
    seconds = float(timeout) if isinstance(timeout, int | float) else None
    future: concurrent.futures.Future[Any]
    if c.tool.is_async:
        if c.loop is None:
            return asyncio.run(c.tool.fn(*c.args, **kwargs))  # an async tool in a sync agent
        future = asyncio.run_coroutine_threadsafe(c.tool.fn(*c.args, **kwargs), c.loop)
    elif seconds is None:
        return c.tool.fn(*c.args, **kwargs)
    else:
        future = _pool.submit(c.tool.fn, *c.args, **kwargs)
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no result within {timeout} s") from None


def _succeed(
    c: Call, result: Any, *, source: str, intent: bool = False, duration: float = 0.0
) -> Any:
    value = normalize(result, f"result of tool {c.tool.name}")
    done = ev.ToolSucceeded(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        result=value,
        attempt=max(c.attempts, 1),
        duration=duration,
        source=source,
    )
    extra: list[Append] = []
    if c.business and c.claim_version and source != "ledger":
        assert c.key is not None
        state = ledger.KeyState(c.claim_version, None, None)
        extra.append(ledger.commit_event(state, c.key, c.run_id, c.number, value))
    _record(c, done, extra=extra, with_intent=intent or not c.intent_written)
    failpoints.hit("after_outcome")
    c.ctx.log.info("tool_succeeded", call=c.number, tool=c.tool.name, key=c.key, source=source)
    return value


def _record(
    c: Call, *events: ev.Event, extra: list[Append] | None = None, with_intent: bool | None = None
) -> None:
    """Append ``events``, preceded by the intent if it was not written yet (read-only tools)."""
    if with_intent is None:
        with_intent = not c.intent_written
    if with_intent:
        events = (_intent(c), *events)
        c.intent_written = True
    c.ctx.record(*events, extra=extra or ())


def _fields(e: ev.Event) -> dict[str, Any]:
    return {f: getattr(e, f) for f in e.__struct_fields__}


__all__ = ["NonDeterminismError", "Paused", "ToolError", "call_tool"]
