"""The trace context an execution notes in its log (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from .base import Event

# --- run lifecycle ---------------------------------------------------------------------


class TraceNoted(Event, frozen=True, tag="trace_noted"):
    """The trace context (W3C ``traceparent``) of the execution that wrote it, riding
    with that execution's first commit; written only when an observer traces the engine
    (``engine.integrations.otel``). A resumed execution's span links to the last one
    noted. ``origin``: the context the run was started under instead (the caller's span,
    a parent run's execution), written right after ``agent_started``. Not a fact of the
    run's work: re-execution passes over it."""

    trace: str  # W3C traceparent: 00-<trace id>-<span id>-<flags>
    origin: bool = False  # the run's starting context, not an execution's span
