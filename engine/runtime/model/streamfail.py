"""A stream's attempts under its policies (``run.stream(..., retry=, classify=)``).

A stream that fails before its first chunk (a 429 as it opens, a refused connection) is
retried as a decision is: the failed attempt is a ``tool_failed`` marked ``decision``, the
retry a ``retry_scheduled``, under the run's retry budgets. One that fails after chunks
reached the agent is not retried (the agent has seen them): it fails for good, the
partial text and the chunk count kept as evidence in its final ``tool_failed``, and a
replay raises the same error at the same call.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from ... import events as ev
from ...errors import UsageError
from ...kinds import FailureKind
from ...policy.failure import classify, error_for
from ..call import policies
from ..call.evidence import RESPONSE_LIMIT, failed_attempt
from ..call.record import Call, fail
from ..journal.callstate import CallState, Failed, Retry, decide, evolve
from ..run.context import detached, detached_async
from .decisions import DecisionDef, Identity, resumed_state

if TYPE_CHECKING:
    from ..run.context import RunContext


PERMANENT = FailureKind.PERMANENT


class Attempts:
    """The attempts of one stream, ``d``, calling ``model.fn(*args, **kwargs)``."""

    def __init__(
        self,
        ctx: RunContext,
        d: Identity,
        model: DecisionDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.ctx, self.d, self.model = ctx, d, model
        self.call = Call(ctx, model, d.call, args, kwargs, d.ahash, {})
        self.state = CallState("decide", d.name, d.ahash)
        self.since = 0.0

    @property
    def attempt(self) -> int:
        return max(self.state.attempts, 1)

    def opening(self) -> CallState | None:
        """Where the attempts start; None when the stream's value is recorded (a
        recorded final failure is raised again, unless it ended the run)."""
        state = resumed_state(self.ctx, self.d)
        if state is not None:
            self.state, self.since = state, self.ctx.guards.clock()
        return state

    def _make(self) -> Any:
        return detached(self.model.fn, *self.call.args, **self.call.kwargs)

    def open_sync(self) -> Iterator[Any]:
        """The stream, its first chunk taken (retried under the policy until it comes)."""
        while True:
            self.state = self.state.attempted()
            try:
                chunks = iter(self._make())
                first = detached(next, chunks)
            except StopIteration:
                return iter(())
            except Exception as exc:
                self.retry_or_fail(exc)
                continue
            return itertools.chain((first,), chunks)

    async def open_async(self) -> Any:
        """The async stream, its first chunk taken as :meth:`open_sync` takes it (the
        backoff waited out in the engine's pool, not on the agent's loop)."""
        loop = asyncio.get_running_loop()
        while True:
            self.state = self.state.attempted()
            agen = self._make()
            try:
                first = await detached_async(agen.__anext__())
            except StopAsyncIteration:
                return _Prefetched((), agen)
            except Exception as exc:
                await loop.run_in_executor(self.ctx.host.executor(), self.retry_or_fail, exc)
                continue
            return _Prefetched((first,), agen)

    def retry_or_fail(self, exc: Exception) -> None:
        """The stream failed before its first chunk: record the attempt and wait out
        the backoff, or fail for good (raised)."""
        failed, then = self._failure(exc, {})
        if isinstance(then, Retry) and policies.budget(self.call) is None:
            self.state = policies.wait_retry(self.call, self.state, failed)
            return
        self._fail(failed, exc)

    def broke(self, exc: Exception, received: list[Any]) -> NoReturn:
        """The stream failed after ``received`` reached the agent: fail for good."""
        kept: dict[str, Any] = {"chunks": len(received)}
        if received and all(isinstance(c, str) for c in received):
            kept["partial"] = self.ctx.seen.mask("".join(received)[:RESPONSE_LIMIT])
        failed, _ = self._failure(exc, kept)
        self._fail(failed, exc)

    def misread(self, message: str) -> NoReturn:
        """The agent read on after the stream was recorded (it made another call while
        reading): the stream fails for good, so a resume, reading it again, fails at the
        same place instead of going on with what was recorded."""
        fail(self.call, self.state, PERMANENT, message, None)
        raise UsageError(message)

    def _failure(self, exc: Exception, kept: dict[str, Any]) -> tuple[ev.ToolFailed, Any]:
        kind = classify(exc, side_effect=False, hook=self.model.classify)
        failed = failed_attempt(self.call, self.state, exc, kind, 0.0)
        if kept:
            failed = msgspec.structs.replace(failed, evidence={**failed.evidence, **kept})
        self.state = evolve(self.state, failed)
        elapsed = self.ctx.guards.clock() - self.since
        return failed, decide(self.model, self.state, Failed(kind, failed.message, elapsed))

    def _fail(self, failed: ev.ToolFailed, exc: Exception) -> NoReturn:
        fail(self.call, self.state, failed.kind, failed.message, failed)
        raise error_for(failed.kind, f"{self.model.name}: {failed.message}") from exc


class _Prefetched:
    """An async stream whose first chunk was taken: it comes first, then the rest."""

    def __init__(self, first: tuple[Any, ...], rest: AsyncIterator[Any]) -> None:
        self.first, self.rest = list(first), rest

    def __anext__(self) -> Any:
        if self.first:
            return _ready(self.first.pop())
        return self.rest.__anext__()


async def _ready(value: Any) -> Any:
    return value


__all__ = ["Attempts"]
