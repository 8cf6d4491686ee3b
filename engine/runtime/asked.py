"""Typed answers: ``run.ask(question, returns=T)`` gives a person's answer back as ``T``,
live and on replay. ``engine.answer`` offers the answer to the paused run's replay first
(:func:`offering`): one that does not fit ``T`` is refused before anything is recorded."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from .. import codec
from ..errors import Paused, RunInterrupt, UsageError

# The answer engine.answer is about to record: (run id, ask call, value).
_offered: contextvars.ContextVar[tuple[str, int, Any] | None] = contextvars.ContextVar(
    "agentlog_offered_answer", default=None
)


class _Unfit(RunInterrupt):
    """The offered answer does not fit the type the question declares (agent code must
    not swallow it: it unwinds the checking replay to :func:`offering`)."""


def answered(value: Any, returns: Any, question: str) -> Any:
    """The recorded answer ``value`` to ``question`` as ``returns`` (None: as recorded);
    a recorded answer that no longer fits the declared type is a divergence."""
    return codec.typed(value, returns, f"the answer to {question!r}")


def paused(run_id: str, call: int, question: str, returns: Any, *, verify: bool) -> Paused:
    """The pause of run ``run_id``'s ``ask`` at ``call``, not answered yet. While
    ``engine.answer`` checks the answer it is about to record there (a ``verify`` replay,
    which writes nothing), an answer that does not fit ``returns`` stops it instead."""
    offered = _offered.get()
    if returns is not None and offered is not None and verify:
        rid, at, value = offered
        if (rid, at) == (run_id, call):
            try:
                codec.typed(value, returns, f"the answer to {question!r}", live=True)
            except UsageError as e:
                raise _Unfit(str(e)) from None
    return Paused(question)


@contextlib.contextmanager
def offering(run_id: str, call: int, value: Any) -> Iterator[None]:
    """Replays of ``run_id`` in the block check ``value`` as the answer to ``call``:
    UsageError (naming the declared type) when it does not fit."""
    token = _offered.set((run_id, call, value))
    try:
        yield
    except _Unfit as e:
        raise UsageError(str(e)) from None
    finally:
        _offered.reset(token)


__all__ = ["answered", "offering", "paused"]
