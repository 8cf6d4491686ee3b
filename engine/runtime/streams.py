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
from .decisions import Identity, identify, record, replayed_value, started

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
    identity is taken now, not at the first chunk."""
    if assemble is not None and not callable(assemble):
        raise UsageError(f"run.stream({name!r}): assemble= must be a function of the chunks")
    d = identify(ctx, name, args, kwargs, None)
    join = assemble or joined
    if _is_async(fn):
        return _async_chunks(ctx, d, fn, args, kwargs, join)
    return _chunks(ctx, d, fn, args, kwargs, join)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.isasyncgenfunction(fn)


def _chunks(
    ctx: RunContext,
    d: Identity,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    join: Assemble,
) -> Iterator[Any]:
    if d.replayed:
        yield from _replayed(ctx, d, join)
        return
    began = started(ctx, d)
    received: list[Any] = []
    chunks = iter(detached(fn, *args, **kwargs))
    try:
        while True:
            try:  # each step outside the run: a durable tool it calls is a plain call
                chunk = detached(next, chunks)
            except StopIteration:
                break
            received.append(chunk)
            yield chunk
    except GeneratorExit:
        _stopped_early(ctx, d, join(received), began)
        raise
    record(ctx, d, join(received), time.monotonic() - began)


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


async def _async_chunks(
    ctx: RunContext,
    d: Identity,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    join: Assemble,
) -> AsyncIterator[Any]:
    if d.replayed:
        for chunk in _replayed(ctx, d, join):
            yield chunk
        return
    began = started(ctx, d)
    received: list[Any] = []
    try:
        async for chunk in _detached_agen(fn, args, kwargs):
            received.append(chunk)
            yield chunk
    except GeneratorExit:
        _stopped_early(ctx, d, join(received), began)
        raise
    record(ctx, d, join(received), time.monotonic() - began)


async def _detached_agen(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> AsyncIterator[Any]:
    """The async generator ``fn(*args, **kwargs)``, each step taken outside the run (a
    durable tool it calls is a plain call, as in a decision)."""
    agen = detached(fn, *args, **kwargs)
    while True:
        try:
            chunk = await detached_async(agen.__anext__())
        except StopAsyncIteration:
            return
        yield chunk
