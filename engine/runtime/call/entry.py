"""The opening of one durable tool call, up to its first decision: a pure ``open_call``
answers what the journal, a fork's parent and the ledger said; ``_open`` does the I/O.
    the journal has an outcome?   -> return it, or raise its failure (nothing runs)
    an intent with no outcome?    -> resolved: the ledger, the verifier, a same-key
                                     re-send or a person; never a fresh key
    a fork's parent made it?      -> take over the parent's effect (sends nothing)
    side effect?                  -> the key's ledger: its result, a wait for its holder,
                                     or its claim and tool_invoked in one commit
    then ``drive.drive``          -> attempts under the policy, the outcome appended
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import msgspec
from msgspec.structs import replace

from ... import events as ev
from ... import failpoints
from ...errors import ConcurrencyError
from ...kinds import Source
from ...log.effects import Effect, Outcome
from ...policy.failure import error_for
from ..defs.definitions import ToolDef, args_hash, hashed_args, normalize
from ..journal.callstate import (
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
from ..run import asked
from ..run.context import RunContext
from . import dryrun, forks, ledger, refresh
from .drive import drive
from .record import Call, record
from .record import claim as record_claim

LEDGER_WAIT_DEFAULT = 10.0
UNKNOWN = "the outcome of a sent request is unknown"
Opened = tuple[CallState, "Step"]

# --- observations: what the journal, a fork's parent and the ledger said ---------------


class Recorded(msgspec.Struct, frozen=True, gc=False):
    """The journal's entry at the call (None: none); ``ended_run``: its failure ended it."""

    entry: CallState | None
    ended_run: bool = False


class NoParent(msgspec.Struct, frozen=True, gc=False):
    """No effect of a parent (or of a replaced run) for this call to take over."""


class Parent(msgspec.Struct, frozen=True, gc=False):
    """The parent's ``effect`` to take over (``run``: a replaced run's, not a fork's)."""

    run: str | None
    effect: Effect


class LedgerCommitted(msgspec.Struct, frozen=True, gc=False):
    """The key's effect happened (``resolving``, here and below: for a recorded intent)."""

    result: Any
    resolving: bool = False


class KeyFree(msgspec.Struct, frozen=True, gc=False):
    """Nobody holds the key; a new claim's request goes out under ``sent_key``, if any."""

    version: int
    sent_key: str | None = None
    resolving: bool = False


class ClaimedByUs(msgspec.Struct, frozen=True, gc=False):
    """This call holds the key (``claim``, the stream at ``version``)."""

    claim: ev.EffectClaimed
    version: int
    sent_key: str | None = None
    resolving: bool = False


class ClaimedElsewhere(msgspec.Struct, frozen=True, gc=False):
    """Run ``holder`` holds the key, no outcome (still, once ``waited``), sent as ``sent_key``."""

    holder: str
    waited: bool = False
    sent_key: str | None = None


class Released(msgspec.Struct, frozen=True, gc=False):
    """The holder freed the key while this call waited."""


class LostRace(msgspec.Struct, frozen=True, gc=False):
    """Another claimer took the key's next version first."""


KeySeen = LedgerCommitted | KeyFree | ClaimedByUs | ClaimedElsewhere | Released | LostRace
Seen = Recorded | NoParent | Parent | KeySeen


# --- steps: what the opening does next --------------------------------------------------


class Replay(msgspec.Struct, frozen=True, gc=False):
    """Return the recorded ``value``; nothing runs."""

    value: Any


class Reraise(msgspec.Struct, frozen=True, gc=False):
    """Raise the recorded final failure, as it was raised live."""

    kind: str
    message: str


class Live(msgspec.Struct, frozen=True, gc=False):
    """Go live at the call, then ``then`` (``resolving`` a recorded intent: a result a
    person gave for it is checked first)."""

    then: Step
    resolving: bool = False


class Inherit(msgspec.Struct, frozen=True, gc=False):
    """Take the parent's matching effect, if any (observe what it was)."""


class ReadKey(msgspec.Struct, frozen=True, gc=False):
    """Read the ledger of the call's key (``resolving``: for a recorded intent)."""

    resolving: bool = False


class Wait(msgspec.Struct, frozen=True, gc=False):
    """Wait at most ``seconds`` for the key's holder to settle it."""

    seconds: float


class Send(msgspec.Struct, frozen=True, gc=False):
    """Commit the intent (with the key's claim at version ``claim``), then attempt."""

    claim: int | None = None


class Intend(msgspec.Struct, frozen=True, gc=False):
    """Write the intent (again, if one was written), then ``then``."""

    then: Step


class Reclaim(msgspec.Struct, frozen=True, gc=False):
    """Claim the free key at ``version`` for the recorded intent, then ``then``."""

    version: int
    then: Step


class Begin(msgspec.Struct, frozen=True, gc=False):
    """Hand the call to its driver with the first ``decision``."""

    decision: Decision


Step = Replay | Reraise | Live | Inherit | ReadKey | Wait | Send | Intend | Reclaim | Begin
INHERIT, READ, READ_RESOLVING, SEND = Inherit(), ReadKey(), ReadKey(resolving=True), Send()
NO_PARENT = NoParent()
START_READ_ONLY, START_EFFECT = Live(Begin(ATTEMPT)), Live(INHERIT)
PREPARED = (Live, Intend, Reclaim)  # steps whose I/O comes before their ``then``


def open_call(tool: ToolDef, state: CallState, seen: Seen) -> Opened:
    """What the opening of ``state`` (a call of ``tool``) does after ``seen``, with what state."""
    match seen:
        case Recorded():
            return _recorded(tool, state, seen)
        case NoParent():
            return state, SEND if tool.key is None else READ
        case Parent() if seen.effect.outcome == Outcome.COMMITTED:
            done = Done(seen.effect.result, Source.PARENT, with_intent=True)
            return _inherited(state, seen), Begin(done)
        case Parent():  # the parent never learned the outcome: resolve it under its key
            state = replace(_inherited(state, seen), maybe_landed=True)
            return state, Intend(_resolving(tool, state))
        case _:
            return _ledger(tool, state, seen)


def _recorded(tool: ToolDef, state: CallState, seen: Recorded) -> Opened:
    entry = seen.entry
    if entry is None:
        return state, START_EFFECT if tool.side_effect else START_READ_ONLY
    out = entry.outcome
    if isinstance(out, ev.ToolSucceeded):
        return state, Replay(out.result)
    if isinstance(out, ev.ToolFailed) and (not seen.ended_run or out.landed):
        return state, Reraise(out.kind, f"{tool.name}: {out.message}")
    if entry.unresolved and tool.side_effect:
        state = resumed(entry, state.key)
        return state, Live(_resolving(tool, state), resolving=True)
    state = retried(entry, state.key)  # the failure that ended the run: re-attempt it
    return state, START_EFFECT if tool.side_effect else START_READ_ONLY


def _inherited(state: CallState, seen: Parent) -> CallState:
    """The call takes over the parent's effect, under the parent's key."""
    fx = seen.effect
    key = fx.key or state.key
    return replace(state, key=key, sent_key=fx.sent_key, parent_call=fx.call, parent_run=seen.run)


def _resolving(tool: ToolDef, state: CallState) -> Step:
    """A recorded intent with no outcome: the ledger first, if the tool has a key."""
    return READ_RESOLVING if tool.key is not None else Begin(decide(tool, state, Unsure(UNKNOWN)))


def _ledger(tool: ToolDef, state: CallState, seen: KeySeen) -> Opened:
    match seen:
        case LedgerCommitted():
            return state, Begin(Done(seen.result, Source.LEDGER, with_intent=not seen.resolving))
        case KeyFree(resolving=False) | ClaimedByUs(resolving=False):
            return replace(state, sent_key=seen.sent_key), Send(seen.version)
        case KeyFree():  # a recorded intent's claim, freed or never made: claim it now
            return state, Reclaim(seen.version, Begin(decide(tool, state, Unsure(UNKNOWN))))
        case ClaimedByUs():
            state = evolve(state, seen.claim, seen.version)
            return state, Begin(decide(tool, state, Unsure(UNKNOWN)))
        case ClaimedElsewhere(waited=False):
            wait = tool.timeout if isinstance(tool.timeout, int | float) else LEDGER_WAIT_DEFAULT
            return state, Wait(float(wait))
        case ClaimedElsewhere():  # a re-send (a verifier's look) goes as the holder's did
            reason = f"key {state.key!r} is held by run {seen.holder}, whose outcome is unknown"
            state = replace(state, sent_key=seen.sent_key)
            return state, Intend(Begin(decide(tool, state, Held(reason))))
        case Released() | LostRace():  # the key moved: look again (claim it if free)
            return state, READ


def call_tool(
    ctx: RunContext,
    tool: ToolDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    number: int | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Any:
    """A durable call of ``tool`` in the run ``ctx`` (an async tool's identity taken when
    awaited: ``number``, run on the caller's ``loop``); a stale read runs again (refresh)."""
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
    if dryrun.dry(ctx.writer.state.dry_run, tool, entry):  # a dry run's: nothing is sent
        return dryrun.would_send(call, state, entry)
    if entry is not None and refresh.stale(ctx, tool, entry):
        return refresh.refreshed(call, state, entry)
    return _open(call, state, Recorded(entry, ctx.journal.failed_call == number))


def _args_hash(ctx: RunContext, tool: ToolDef, number: int, bound: Any, named: Any) -> str:
    """The call's argument hash, fences left out (as recorded, if recorded with them)."""
    hashed = hashed_args(bound, named)
    ahash = args_hash(tool.name, hashed, ctx.hash_key)
    if hashed is not named and (entry := ctx.journal.calls.get(number)) is not None:
        legacy = args_hash(tool.name, named, ctx.hash_key)
        return legacy if entry.args_hash == legacy else ahash
    return ahash


# --- the opening's driver: the I/O each step names, and what it observed ---------------


def _open(call: Call, state: CallState, seen: Seen) -> Any:
    """Do each step's I/O and let ``open_call`` answer what it saw, up to the driver."""
    while True:
        state, step = open_call(call.tool, state, seen)
        while isinstance(step, PREPARED):
            state, step = _prepare(call, state, step)
        match step:
            case Begin():
                return drive(call, state, step.decision)
            case Replay():
                return step.value
            case Reraise():
                call.ctx.failed_call = call.number
                raise error_for(step.kind, step.message)  # as it was raised live
            case Send():
                state, lost = _send(call, state, step.claim)
                if lost is None:
                    failpoints.hit("after_intent")
                    return drive(call, state, ATTEMPT)
                seen = lost
            case Inherit():
                seen = _parent(call)
            case ReadKey():
                seen = _key_seen(call, state, step.resolving)
            case Wait():  # the run's own deferred commit of the key is written meanwhile
                key, ctx = str(state.key), call.ctx
                mine = functools.partial(ctx.flush, ledger.stream_of(key))
                seen = _settled(ledger.wait_settled(ctx.store, key, step.seconds, first=mine))


def _prepare(call: Call, state: CallState, step: Live | Intend | Reclaim) -> Opened:
    """The I/O before a step's ``then``: going live, the intent, a recorded intent's claim."""
    ctx, tool, number = call.ctx, call.tool, call.number
    match step:
        case Live(resolving=False):
            ctx.live(number, f"tool {tool.name}")
            ctx.log.debug("tool_call", call=number, tool=tool.name, key=state.key)
        case Live():
            if ctx.verify:  # engine.answer checking a result given for it
                asked.check_result(ctx.run_id, number, tool.name, tool.returns)
            ctx.live(number, f"resolve uncertain {tool.name}")
        case Intend():
            state = record(call, state, with_intent=True)
        case Reclaim():
            assert state.key is not None
            claim = record_claim(call, state, step.version)
            ctx.record(extra=[claim])  # fenced, as every write of the run
            state = evolve(state, claim.event, claim.position)
    return state, step.then


def _send(call: Call, state: CallState, version: int | None) -> tuple[CallState, LostRace | None]:
    """Commit the intent, with the key's claim at ``version`` when given."""
    if version is None:
        return record(call, state, with_intent=True), None
    key, ctx = state.key, call.ctx
    assert key is not None
    claim = record_claim(call, state, version)
    try:
        state = record(call, state, extra=[claim], with_intent=True)
    except ConcurrencyError:
        if ledger.read(ctx.store, key).version == version:
            raise  # the run's own stream conflicted: another process runs it
        return state, LostRace()
    return evolve(state, claim.event, claim.position), None


def _parent(call: Call) -> NoParent | Parent:
    """The parent's effect this call takes over (a fork's, or a replaced run's)."""
    taken = forks.inheritance(call.ctx).take(call.tool.name, call.ahash)
    return NO_PARENT if taken is None else Parent(*taken)


def _key_seen(call: Call, state: CallState, resolving: bool) -> KeySeen:
    """What the ledger says of the call's key (another effect's is refused: Permanent)."""
    key, run_id = state.key, call.ctx.run_id
    assert key is not None
    call.ctx.flush(ledger.stream_of(key))  # this run's deferred commit of the key
    held = ledger.read(call.ctx.store, key)
    claim = held.claim
    if not resolving:
        ledger.check_args(held, key, call.ahash)  # the key names another effect: Permanent
    if held.committed is not None:
        return LedgerCommitted(held.committed.result, resolving)
    if claim is not None and not held.owned_by(run_id, call.number):
        return ClaimedElsewhere(claim.run_id)
    sent = ledger.sent_key(key, held)
    if claim is not None:
        return ClaimedByUs(claim, held.version, sent, resolving)
    return KeyFree(held.version, sent, resolving)


def _settled(held: ledger.KeyState) -> LedgerCommitted | Released | ClaimedElsewhere:
    """What the ledger says once the wait for another holder is over."""
    if held.committed is not None:
        return LedgerCommitted(held.committed.result)
    if held.claim is None:
        return Released()
    return ClaimedElsewhere(held.claim.run_id, waited=True, sent_key=held.claim.sent_key)


__all__ = ["call_tool", "open_call"]
