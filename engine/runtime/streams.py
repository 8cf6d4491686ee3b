"""``run.stream``: a model call whose answer arrives in chunks. The chunks reach the agent
live; the assembled value is recorded once the stream ends, or once the agent stops
reading it (one ``llm_decided``), and a replay yields it as one chunk (chunks the default
assembly kept as a list, one by one), so code that joins what it receives gets the same
value. A crash mid-stream records nothing: the resumed run calls the model again.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .context import detached, detached_async
from .decisions import Identity, define, identify, record, replayed_value, split, started
from .streamfail import Attempts

if TYPE_CHECKING:
    from .context import RunContext

Assemble = Callable[[list[Any]], Any]


def joined(chunks: list[Any]) -> Any:
    """The default assembly: text chunks joined, bytes concatenated, else the list."""
    if all(isinstance(c, str) for c in chunks):
        return "".join(chunks)
    if chunks and all(isinstance(c, bytes) for c in chunks):
        return b"".join(chunks)
    return list(chunks)


def stream(
    ctx: RunContext,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    assemble: Assemble | None,
) -> Iterator[Any] | AsyncIterator[Any]:
    """The chunks of ``fn(*args, **kwargs)`` (a generator or an async generator, or a
    function returning an iterable) as they come, recorded once assembled. The call's
    identity is taken now, not at the first chunk; ``retry=`` and ``classify=`` in
    ``kwargs`` are its policies (``streamfail``)."""
    if assemble is not None and not callable(assemble):
        raise UsageError(f"run.stream({name!r}): assemble= must be a function of the chunks")
    policies, kwargs = split(kwargs)
    unsupported = sorted(set(policies) - {"retry", "classify"})
    if unsupported:
        raise UsageError(f"run.stream({name!r}) takes retry= and classify=, not {unsupported[0]}=")
    d = identify(ctx, name, args, kwargs, None)
    attempts = Attempts(ctx, d, define(name, fn, policies), args, kwargs)
    join = assemble or joined
    if _is_async(fn):
        return _async_chunks(attempts, join)
    return _chunks(attempts, join)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.isasyncgenfunction(fn)


def _chunks(at: Attempts, join: Assemble) -> Iterator[Any]:
    ctx, d = at.ctx, at.d
    if at.opening() is None:
        yield from _replayed(ctx, d, join)
        return
    began = started(ctx, d)
    received: list[Any] = []
    chunks = at.open_sync()
    try:
        while True:
            try:  # each step outside the run: a durable tool it calls is a plain call
                chunk = detached(next, chunks)
            except StopIteration:
                break
            except Exception as exc:
                at.broke(exc, received)
            received.append(chunk)
            yield chunk
    except GeneratorExit:
        _stopped_early(ctx, d, join(received), began)
        raise
    record(ctx, d, join(received), time.monotonic() - began, at.attempt)


def _replayed(ctx: RunContext, d: Identity, join: Assemble) -> list[Any]:
    """What a replay yields: the recorded value as one chunk; with the default assembly,
    chunks it kept as a list (not text) one by one, as they came live."""
    value = replayed_value(ctx, d)
    return list(value) if join is joined and isinstance(value, list) else [value]


def _stopped_early(ctx: RunContext, d: Identity, value: Any, began: float) -> None:
    """The agent stopped reading before the stream ended (``break``): what it received
    is the decision, recorded so a replay gives the same and calls no model (unless the
    run's execution is over by the time the stream is closed)."""
    if not ctx.ended:
        record(ctx, d, value, time.monotonic() - began)


async def _async_chunks(at: Attempts, join: Assemble) -> AsyncIterator[Any]:
    ctx, d = at.ctx, at.d
    if at.opening() is None:
        for chunk in _replayed(ctx, d, join):
            yield chunk
        return
    began = started(ctx, d)
    received: list[Any] = []
    agen = await at.open_async()
    try:
        while True:
            try:  # each step outside the run, as in a decision
                chunk = await detached_async(agen.__anext__())
            except StopAsyncIteration:
                break
            except Exception as exc:
                at.broke(exc, received)
            received.append(chunk)
            yield chunk
    except GeneratorExit:
        _stopped_early(ctx, d, join(received), began)
        raise
    record(ctx, d, join(received), time.monotonic() - began, at.attempt)
