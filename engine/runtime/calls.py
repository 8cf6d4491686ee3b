"""The path of one durable tool call, from the agent's call to its first decision.

    journal has an outcome?      -> check tool + arguments, return it (nothing runs)
    a fork's parent made it?     -> take over the parent's effect (sends nothing)
    side effect?                 -> claim the key + append tool_invoked, one commit
    then the driver              -> attempts under the policy, the outcome appended

An intent with no outcome is uncertain: it is resolved by the ledger, the tool's
verifier, a re-send with the same key, or a person; never by a fresh key. What happens
after the ledger is read is ``callstate.decide``'s; ``calldriver`` carries it out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from msgspec.structs import replace

from .. import events as ev
from .. import failpoints
from ..effects import Effect, Outcome
from ..errors import ConcurrencyError
from ..kinds import Source
from ..policy import error_for
from . import asked, forks, ledger
from .calldriver import drive
from .callstate import (
    ATTEMPT,
    CallState,
    Decision,
    Done,
    Held,
    Unsure,
    decide,
    evolve,
    resumed,
    retried,
)
from .context import RunContext
from .defs import ToolDef, args_hash, hashed_args, normalize
from .outcomes import Call, record

LEDGER_WAIT_DEFAULT = 10.0
Opening = tuple[CallState, Decision]


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
    bound = tool.bind(args, kwargs)
    named = normalize(bound, f"arguments of tool {tool.name}")
    ahash = _args_hash(ctx, tool, number, bound, named)
    # On replay too: the secrets of its arguments join the run's set, masked again later.
    shown = ctx.seen.mask_all(tool.redacted(named, ctx.seen))
    call = Call(ctx, tool, number, args, kwargs, ahash, shown, loop)
    key = None
    if tool.side_effect:
        key = str(tool.key(*args, **kwargs)) if tool.key else f"{ctx.run_id}:{number}"
    state = CallState("tool", tool.name, ahash, key=key)
    entry = ctx.recorded(number, "tool", tool.name, ahash)
    if entry is not None:
        out = entry.outcome
        if isinstance(out, ev.ToolSucceeded):
            return out.result
        if isinstance(out, ev.ToolFailed) and (ctx.journal.failed_call != number or out.landed):
            ctx.failed_call = number
            raise error_for(out.kind, f"{tool.name}: {out.message}")  # as it was raised live
        if entry.unresolved and tool.side_effect:
            if ctx.verify:  # engine.answer checking a result given for it
                asked.check_result(ctx.run_id, number, tool.name, tool.returns)
            ctx.live(number, f"resolve uncertain {tool.name}")
            return drive(call, *_resolve_uncertain(call, resumed(entry, key)))
        state = retried(entry, key)  # the failure that ended the run: re-attempt it
    ctx.live(number, f"tool {tool.name}")
    ctx.log.debug("tool_call", call=number, tool=tool.name, key=key)
    if not tool.side_effect:
        return drive(call, state, ATTEMPT)
    parent = forks.inheritance(ctx).take(tool.name, ahash)
    opening = _write_intent(call, state) if parent is None else _take_over(call, state, *parent)
    return drive(call, *opening)


def _args_hash(ctx: RunContext, tool: ToolDef, number: int, bound: Any, named: Any) -> str:
    """The call's argument hash, fences left out; a call recorded when fences were still
    hashed keeps the hash it was recorded (and its key claimed) with."""
    hashed = hashed_args(bound, named)
    ahash = args_hash(tool.name, hashed, ctx.hash_key)
    if hashed is not named and (entry := ctx.journal.calls.get(number)) is not None:
        legacy = args_hash(tool.name, named, ctx.hash_key)
        return legacy if entry.args_hash == legacy else ahash
    return ahash


def _take_over(call: Call, state: CallState, run: str | None, parent: Effect) -> Opening:
    """A fork makes the side-effecting call its parent made after the fork position (or a
    restart's new run one a run it replaces made: ``run``): it records the parent's
    outcome and sends nothing. An outcome the parent never learned
    is resolved under the parent's key (ledger, verifier, same-key re-send, or a person),
    never by a blind send under the fork's own key."""
    key, sent = parent.key or state.key, parent.sent_key
    state = replace(state, key=key, sent_key=sent, parent_call=parent.call, parent_run=run)
    if parent.outcome == Outcome.COMMITTED:
        return state, Done(parent.result, Source.PARENT, with_intent=True)
    state = record(call, state, with_intent=True)
    return _resolve_uncertain(call, replace(state, maybe_landed=True))


def _write_intent(call: Call, state: CallState) -> Opening:
    """Commit the intent (claiming a business key with it), then attempt; or the
    ledger's outcome when it already holds this effect's, so nothing may run."""
    if call.tool.key is None:
        state = record(call, state, with_intent=True)
        failpoints.hit("after_intent")
        return state, ATTEMPT
    key, store, run_id = state.key, call.ctx.store, call.ctx.run_id
    assert key is not None
    while True:
        held = ledger.read(store, key)
        ledger.check_args(held, key, call.ahash)
        if held.committed is not None:
            return state, Done(held.committed.result, Source.LEDGER, with_intent=True)
        if held.claim is not None and not held.owned_by(run_id, call.number):
            return _claimed_elsewhere(call, state, held)
        try:
            # A new claim after a compensated effect goes out under a new key version.
            sent = ledger.sent_key(key, held)
            state = replace(state, sent_key=sent)
            claim = ledger.claim_event(key, held.version, run_id, call.number, call.ahash, sent)
            state = record(call, state, extra=[claim], with_intent=True)
        except ConcurrencyError:
            if ledger.read(store, key).version == held.version:
                raise  # the run's own stream conflicted: another process runs it
            continue  # another claimer won the race; look at its claim
        state = evolve(state, claim.event, claim.position)
        failpoints.hit("after_intent")
        return state, ATTEMPT


def _claimed_elsewhere(call: Call, state: CallState, held: ledger.KeyState) -> Opening:
    """Another run holds the key: wait for its outcome (at most the tool's timeout)."""
    key, timeout = state.key, call.tool.timeout
    assert key is not None and held.claim is not None
    wait = timeout if isinstance(timeout, int | float) else LEDGER_WAIT_DEFAULT
    settled = ledger.wait_settled(call.ctx.store, key, float(wait))
    if settled.committed is not None:
        return state, Done(settled.committed.result, Source.LEDGER, with_intent=True)
    if settled.claim is None:
        return _write_intent(call, state)  # released meanwhile: claim it ourselves
    state = record(call, state, with_intent=True)
    holder = settled.claim.run_id
    reason = f"key {key!r} is held by run {holder}, whose outcome is unknown"
    return state, decide(call.tool, state, Held(reason))


def _resolve_uncertain(call: Call, state: CallState) -> Opening:
    """A recorded intent with no outcome: find out whether the effect happened."""
    if call.tool.key is not None:
        key, store = state.key, call.ctx.store
        assert key is not None
        held = ledger.read(store, key)
        if held.committed is not None:
            return state, Done(held.committed.result, Source.LEDGER)
        if held.claim is None:
            run_id, sent = call.ctx.run_id, state.sent_key
            claim = ledger.claim_event(key, held.version, run_id, call.number, call.ahash, sent)
            store.append([claim])
            state = evolve(state, claim.event, claim.position)
        elif held.owned_by(call.ctx.run_id, call.number):
            state = evolve(state, held.claim, held.version)
        else:
            return _claimed_elsewhere(call, state, held)
    return state, decide(call.tool, state, Unsure("the outcome of a sent request is unknown"))


__all__ = ["call_tool"]
