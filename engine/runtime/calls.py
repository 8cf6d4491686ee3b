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
from typing import Any

from .. import events as ev
from .. import failpoints
from ..effects import Effect
from ..errors import ConcurrencyError, NonDeterminismError, Paused, ToolError, UsageError
from ..policy import error_for
from . import attempts, forks, ledger
from .context import RunContext, detached
from .defs import ToolDef, args_hash, normalize
from .journal import CallLog
from .outcomes import Call, intent, succeed

LEDGER_WAIT_DEFAULT = 10.0
AFFIRMATIVE = {"done", "yes", "y", "true", "1", "happened"}
NEGATIVE = {"not done", "no", "n", "false", "0", "not happened", "did not happen"}


def check_uncertain_answer(value: object) -> None:
    """A person settling an uncertain effect must say plainly whether it happened: any
    other answer would be taken as 'not done' and re-send an effect that may be done."""
    if str(value).strip().lower() not in AFFIRMATIVE | NEGATIVE:
        raise UsageError(
            f"answer {value!r} does not say whether the effect happened: "
            "answer 'done' or 'not done' (or abandon the run)"
        )


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
    ahash = args_hash(tool.name, named, ctx.hash_key)
    c = Call(ctx, tool, number, args, kwargs, named, ahash, loop=loop)
    # On replay too: the secrets of its arguments join the run's set, masked again later.
    c.shown = ctx.seen.mask_all(tool.redacted(named, ctx.seen))
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
            raise error_for(out.kind, f"{tool.name}: {out.message}")  # as it was raised live
        unsure = isinstance(out, ev.ToolFailed) and out.kind == "indeterminate"
        if entry.intent is not None and (out is None or unsure) and tool.side_effect:
            ctx.live(number, f"resolve uncertain {tool.name}")
            c.intent_written = True
            # The key the request went out under, even if the code now derives another.
            c.key = entry.intent.key or c.key
            c.parent_call = entry.intent.parent_call  # a fork's take-over stays one
            return _resolve_uncertain(c, entry)
        # else: the failure that ended the run; re-attempt it with a fresh intent
    ctx.live(number, f"tool {tool.name}")
    ctx.log.debug("tool_call", call=number, tool=tool.name, key=c.key)
    if tool.side_effect:
        parent = forks.inheritance(ctx).take(tool.name, c.ahash)
        if parent is not None:
            return _take_over(c, parent)
        found = _write_intent(c)
        if found is not None:
            return found
    return attempts.run(c, _uncertain)


def _take_over(c: Call, parent: Effect) -> Any:
    """A fork makes the side-effecting call its parent made after the fork position: it
    records the parent's outcome and sends nothing. An outcome the parent never learned
    is resolved under the parent's key (ledger, verifier, same-key re-send, or a person),
    never by a blind send under the fork's own key."""
    c.key, c.parent_call = parent.key or c.key, parent.call
    if parent.outcome == "committed":
        return succeed(c, parent.result, source="parent", intent=True)
    c.ctx.record(intent(c))
    c.intent_written = True
    return _resolve_uncertain(c, CallLog("tool", c.tool.name))


def _write_intent(c: Call) -> Any | None:
    """Commit the intent (claiming a business key with it). Returns a result when the
    ledger already holds this effect's outcome, so nothing may run."""
    if not c.business:
        c.ctx.record(intent(c))
        c.intent_written = True
        failpoints.hit("after_intent")
        return None
    assert c.key is not None
    store = c.ctx.store
    while True:
        state = ledger.read(store, c.key)
        ledger.check_args(state, c.key, c.ahash)
        if state.committed is not None:
            return succeed(c, state.committed.result, source="ledger", intent=True)
        if state.claim is not None and not state.owned_by(c.run_id, c.number):
            return _claimed_elsewhere(c, state)
        try:
            claim = ledger.claim_event(state, c.key, c.run_id, c.number, c.ahash)
            c.ctx.record(intent(c), extra=[claim])
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
        return succeed(c, settled.committed.result, source="ledger", intent=True)
    if settled.claim is None:
        return _write_intent(c)  # released meanwhile: claim it ourselves
    c.ctx.record(intent(c))
    c.intent_written = True
    holder = settled.claim.run_id
    reason = f"key {c.key!r} is held by run {holder}, whose outcome is unknown"
    if c.tool.verify is not None:
        found = detached(c.tool.verify, c.key)
        if found is not None:
            return succeed(c, found, source="verified")
    # The holder may still be executing: "not found yet" is no licence to send it too.
    # Only a re-send under the same key is safe (the service dedupes it); else ask.
    if c.tool.takes_key:
        return attempts.run(c, _uncertain)
    return _ask(c, reason)


def _resolve_uncertain(c: Call, entry: CallLog) -> Any:
    """A recorded intent with no outcome: find out whether the effect happened."""
    c.maybe_landed = True
    if c.business:
        assert c.key is not None
        state = ledger.read(c.ctx.store, c.key)
        if state.committed is not None:
            return succeed(c, state.committed.result, source="ledger")
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
            return succeed(c, entry.answer, source="human")
        # A person says it did not happen: send it again, same key, under a new intent,
        # so a crash during this re-send leaves the call uncertain (and asks again)
        # instead of replaying the answer into a blind second re-send.
        c.ctx.record(intent(c))
        failpoints.hit("after_intent")
        return attempts.run(c, _uncertain)
    return _uncertain(c, "the outcome of a sent request is unknown")


def _uncertain(c: Call, reason: str) -> Any:
    """Verify, or re-send with the same key, or pause for a person. Never a fresh key."""
    tool = c.tool
    if tool.verify is not None:
        assert c.key is not None
        found = detached(tool.verify, c.key)
        if found is not None:
            return succeed(c, found, source="verified")
        return attempts.run(c, _uncertain)
    if tool.takes_key:
        return attempts.run(c, _uncertain)
    return _ask(c, reason)


def _ask(c: Call, reason: str) -> Any:
    """Pause the run: a person says whether the effect happened."""
    tool = c.tool
    question = (
        f"Did {tool.name} (key {c.key}) take effect? {reason}. "
        "Answer 'done' or 'not done', or abandon the run."
    )
    c.ctx.request_answer(c.number, question, reason="uncertain")


__all__ = ["NonDeterminismError", "Paused", "ToolError", "call_tool"]
