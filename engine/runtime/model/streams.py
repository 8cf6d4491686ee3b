"""``run.stream``: a model call whose answer arrives in chunks. The chunks reach the agent
live; the assembled value is recorded once the stream ends, or, when the agent stops
reading it (``break``), before the agent's next call or its return (one ``llm_decided``).
A replay yields it as one chunk (chunks the default assembly kept as a list, one by one,
as the chunk type the function declares), so code that joins what it receives gets the
same value. A crash, a pause or an error that ends the run mid-stream records nothing:
the resumed run calls the model again.
"""

from __future__ import annotations

import collections.abc
import inspect
import time
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ... import codec
from ...errors import UsageError
from ..run.context import caller, detached, detached_async
from .decisions import define, identify, record, replayed_value, split, started
from .streamfail import Attempts

if typing.TYPE_CHECKING:
    from ..run.context import RunContext

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
    d = identify(ctx, name, args, kwargs, None, fn)
    attempts = Attempts(ctx, d, define(name, fn, policies), args, kwargs)
    join = assemble or joined
    if _is_async(fn):
        return _async_chunks(attempts, join)
    return _chunks(attempts, join)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.isasyncgenfunction(fn)


def _chunks(at: Attempts, join: Assemble) -> Iterator[Any]:
    if at.opening() is None:
        yield from _replayed(at, join)
        return
    began = started(at.ctx, at.d)
    chunks = at.open_sync()
    stream = Open(at, join, began)
    while True:  # let go (GeneratorExit at a yield): recorded only if the agent goes on
        try:  # each step outside the run: a durable tool it calls is a plain call
            chunk = detached(next, chunks)
        except StopIteration:
            break
        except Exception as exc:
            stream.drop()
            at.broke(exc, stream.received)
        try:
            yield stream.took(chunk)
        except GeneratorExit:
            raise
        except BaseException:  # thrown in by its reader (gen.throw): abandoned
            stream.drop()
            raise
    stream.settle()


def _replayed(at: Attempts, join: Assemble) -> list[Any]:
    """What a replay yields: the recorded value as one chunk; with the default assembly,
    chunks it kept as a list (not text) one by one, as they came live, each as the type
    of chunk the stream function declares (``-> Iterator[Chunk]``)."""
    value = replayed_value(at.ctx, at.d)
    if join is not joined or not isinstance(value, list):
        return [value]
    kind = chunk_type(at.model.fn)
    return [codec.typed(c, kind, f"a chunk of stream {at.d.name!r}") for c in value]


def chunk_type(fn: Callable[..., Any]) -> Any:
    """The type of chunk ``fn`` declares it yields (None if it declares none)."""
    declared = codec.returns(fn)
    if typing.get_origin(declared) in _ITERATORS:
        args = typing.get_args(declared)
        return args[0] if args and args[0] is not Any else None
    return None


_ITERATORS = {
    collections.abc.Iterator,
    collections.abc.Iterable,
    collections.abc.Generator,
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
}


class Open:
    """A live stream: the chunks its reader took. Read to its end, it is recorded at
    once; let go (``break``, or an error the agent catches outside the loop), it is
    recorded before its reader's next call or when the agent returns
    (``RunContext.leave_streams``); never when the run fails or pauses instead, nor when
    its reader throws an error into it: a crash or an error that ends the run mid-stream
    records nothing final."""

    def __init__(self, at: Attempts, join: Assemble, began: float) -> None:
        self.at, self.join, self.began = at, join, began
        self.received: list[Any] = []
        self.owner = caller()
        self.done = False
        at.ctx.open_streams.append(self)

    def took(self, chunk: Any) -> Any:
        if self.done:  # the reader made another call mid-stream: it was recorded there
            self.at.misread(
                f"run.stream({self.at.d.name!r}) was read after the run's next durable "
                "call: read a stream to its end (or leave it) before making other calls"
            )
        self.received.append(chunk)
        return chunk

    def drop(self) -> None:
        """Nothing of it is recorded (it failed)."""
        if not self.done:
            self.done = True
            self.at.ctx.open_streams.remove(self)

    def settle(self) -> None:
        """Record what the reader took as the stream's value (once)."""
        if self.done:
            return
        self.drop()
        ctx = self.at.ctx
        if not ctx.ended:
            took = time.monotonic() - self.began
            record(ctx, self.at.d, self.join(self.received), took, self.at.attempt)


async def _async_chunks(at: Attempts, join: Assemble) -> AsyncIterator[Any]:
    if at.opening() is None:
        for chunk in _replayed(at, join):
            yield chunk
        return
    began = started(at.ctx, at.d)
    agen = await at.open_async()
    stream = Open(at, join, began)
    while True:
        try:  # each step outside the run, as in a decision
            chunk = await detached_async(agen.__anext__())
        except StopAsyncIteration:
            break
        except Exception as exc:
            stream.drop()
            at.broke(exc, stream.received)
        try:
            yield stream.took(chunk)
        except GeneratorExit:
            raise
        except BaseException:  # thrown in by its reader (agen.athrow): abandoned
            stream.drop()
            raise
    stream.settle()
