"""OpenTelemetry traces of an engine's runs: ``instrument(engine)`` (``agentlog[otel]``).

A span per execution of a run (``invoke_agent <agent>``) and, under it, a span per durable
call that execution did live work for (``execute_tool <tool>``, ``chat <decision>`` for a
decision or a model stream, ``invoke_agent <child>`` for a child run, ``wait <reason>``,
``step <name>``), made from the events it committed, at their recorded times, with the
GenAI semantic conventions' attributes where they apply. A replayed call commits nothing,
so it makes no span. Each execution notes its span's context in the log (``trace_noted``):
a resumed execution's span links to the last one's (one that crashed), and is a child of
the context the run was started under, as a child run's executions are children of the
execution that spawned it, in whichever process or worker executes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import events as ev
from ..kinds import FailureKind, RunStatus, Source
from ..observe import Execution
from ..runtime.engine import Engine
from ..runtime.model.decisions import NOW

__all__ = ["Tracing", "instrument"]

_PROPAGATOR = TraceContextTextMapPropagator()
# Outcomes that settled a call whose first send was in doubt (found, not executed again).
_RESOLVED = frozenset({Source.VERIFIED, Source.LEDGER, Source.HUMAN})
_NS = 1_000_000_000


def instrument(engine: Engine, tracer_provider: Any = None) -> Tracing:
    """Trace ``engine``'s run executions with ``tracer_provider`` (default: the global
    one); returns the observer added to ``engine.observers``."""
    tracing = Tracing(trace.get_tracer("agentlog", tracer_provider=tracer_provider))
    engine.observers.add(tracing)
    return tracing


def traceparent(context: SpanContext) -> str:
    """The W3C ``traceparent`` header value of ``context``."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def span_context(header: str | None) -> SpanContext | None:
    """The span context a ``traceparent`` value names; None if absent or malformed."""
    if not header:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": header})).get_span_context()
    return found if found.is_valid else None


def short(agent: str) -> str:
    """An agent's name without its module (``module:qualname`` -> its last part)."""
    return agent.rpartition(":")[2].rpartition(".")[2] or agent


class Tracing:
    """The engine observer that makes the spans (``engine.observe.Observer``)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def context(self) -> str | None:
        current = trace.get_current_span().get_span_context()
        return traceparent(current) if current.is_valid else None

    def execution(self, execution: Execution) -> ExecutionSpan:
        return ExecutionSpan(self.tracer, execution)


class ExecutionSpan:
    """One execution's span, current in its thread while it runs, and its calls' spans."""

    def __init__(self, tracer: trace.Tracer, execution: Execution) -> None:
        self.tracer, self.execution = tracer, execution
        origin = span_context(execution.origin)
        parent = trace.set_span_in_context(NonRecordingSpan(origin)) if origin else None
        previous = span_context(execution.previous)
        links = [Link(previous, {"agentlog.link": "previous_execution"})] if previous else []
        name = short(execution.agent)
        self.span = tracer.start_span(
            f"invoke_agent {name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                "gen_ai.agent.id": execution.agent,
                "gen_ai.conversation.id": execution.run_id,
                "agentlog.run_id": execution.run_id,
                "agentlog.execution": execution.number,
                "agentlog.resumed": execution.resumed,
                **({"agentlog.parent_run_id": p} if (p := execution.parent_run_id) else {}),
            },
        )
        self.trace: str | None = traceparent(self.span.get_span_context())
        self._inside = trace.set_span_in_context(self.span)
        self._token = otel_context.attach(self._inside)
        self._failed: dict[int, list[ev.ToolFailed]] = {}  # attempts failed, by call
        self._invoked: set[int] = set()
        self.tokens = [0, 0]

    def recorded(self, events: Sequence[Any]) -> None:
        for e in events:
            make = _SPANS.get(type(e))
            if make is not None:
                make(self, e)

    def ended(self, status: str, error: str | None) -> None:
        span = self.span
        span.set_attribute("agentlog.run.status", str(status))
        span.set_attribute("gen_ai.usage.input_tokens", self.tokens[0])
        span.set_attribute("gen_ai.usage.output_tokens", self.tokens[1])
        if status in (RunStatus.FAILED, "diverged"):
            span.set_status(StatusCode.ERROR, error)
        elif error:  # stopped mid-way (lease lost, store failed, drained): resumed later
            span.set_attribute("agentlog.stopped", error)
        span.end()
        otel_context.detach(self._token)

    # --- the spans of the calls -----------------------------------------------------

    def call_span(self, name: str, e: ev.Event, duration: float, **attributes: Any) -> Span:
        """A finished span of ``name`` under the execution, ending at ``e``'s time."""
        start = e.at - max(duration, 0.0)
        span = self.tracer.start_span(
            name,
            context=self._inside,
            kind=SpanKind.INTERNAL,
            start_time=int(start * _NS),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        return span

    def attempts(self, span: Span, call: int) -> None:
        """Add the failed attempts of ``call`` before its outcome as span events."""
        for f in self._failed.pop(call, []):
            span.add_event(
                "attempt_failed",
                {"agentlog.attempt": f.attempt, "agentlog.failure.kind": str(f.kind)},
                timestamp=int(f.at * _NS),
            )

    def started_at(self, call: int, e: ev.Event, duration: float) -> float:
        """When ``call`` began: its first failed attempt, else its outcome's start."""
        first = self._failed.get(call)
        return min(first[0].at - first[0].duration, e.at - duration) if first else e.at - duration


def _succeeded(x: ExecutionSpan, e: ev.ToolSucceeded) -> None:
    uncertain = e.call in x.execution.pending or e.source in _RESOLVED
    span = _tool_span(x, e, False, uncertain, {"agentlog.outcome.source": str(e.source)})
    span.end(end_time=int(e.at * _NS))


def _failed(x: ExecutionSpan, e: ev.ToolFailed) -> None:
    if not e.final:  # one attempt: an event of the call's span, once it is settled
        x._failed.setdefault(e.call, []).append(e)
        return
    uncertain = e.call in x.execution.pending or e.kind == FailureKind.INDETERMINATE
    kind = {"agentlog.failure.kind": str(e.kind), "error.type": e.error_type or str(e.kind)}
    span = _tool_span(x, e, e.decision, uncertain, kind)
    span.set_status(StatusCode.ERROR, e.message)
    span.end(end_time=int(e.at * _NS))


def _tool_span(
    x: ExecutionSpan,
    e: ev.ToolSucceeded | ev.ToolFailed,
    decision: bool,
    uncertain: bool,
    more: dict[str, Any],
) -> Span:
    """The span of a tool's call (or a decision's failure), its failed attempts in it."""
    span = x.call_span(
        f"chat {e.tool}" if decision else f"execute_tool {e.tool}",
        e,
        e.at - x.started_at(e.call, e, e.duration),
        **{
            "gen_ai.operation.name": "chat" if decision else "execute_tool",
            "gen_ai.tool.name": None if decision else e.tool,
            "gen_ai.tool.call.id": f"{x.execution.run_id}:{e.call}",
            "agentlog.call": e.call,
            "agentlog.attempt": e.attempt,
            "agentlog.uncertain": uncertain,
            **more,
        },
    )
    x.attempts(span, e.call)
    return span


def _decided(x: ExecutionSpan, e: ev.LlmDecided) -> None:
    if e.name == NOW:  # the clock read once: a decision, not a model call
        return
    x.tokens[0] += e.tokens_in
    x.tokens[1] += e.tokens_out
    span = x.call_span(
        f"chat {e.name}",
        e,
        e.at - x.started_at(e.call, e, e.duration),
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": e.tokens_in,
            "gen_ai.usage.output_tokens": e.tokens_out,
            "agentlog.decision": e.name,
            "agentlog.call": e.call,
            "agentlog.attempt": e.attempt,
            "agentlog.cost": e.cost,
        },
    )
    x.attempts(span, e.call)
    span.end(end_time=int(e.at * _NS))


def _spawned(x: ExecutionSpan, e: ev.ChildSpawned) -> None:
    name = short(e.agent)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "agentlog.call": e.call,
        "agentlog.child_run_id": e.child_run_id,
    }
    x.call_span(f"invoke_agent {name}", e, 0.0, **attributes).end(end_time=int(e.at * _NS))


def _waiting(x: ExecutionSpan, e: ev.RunWaiting) -> None:
    attributes = {
        "agentlog.call": e.call,
        "agentlog.wait.reason": str(e.reason),
        "agentlog.wait.until": e.until,
        "agentlog.wait.topic": e.topic,
        "agentlog.child_run_id": e.child_run_id,
    }
    x.call_span(f"wait {e.reason}", e, 0.0, **attributes).end(end_time=int(e.at * _NS))


def _asked(x: ExecutionSpan, e: ev.HumanInputRequested) -> None:
    attributes = {"agentlog.call": e.call, "agentlog.wait.reason": str(e.reason)}
    x.call_span("wait person", e, 0.0, **attributes).end(end_time=int(e.at * _NS))


def _step(x: ExecutionSpan, e: ev.StepCompleted) -> None:
    span = x.call_span(f"step {e.name}", e, e.duration, **{"agentlog.call": e.call})
    span.end(end_time=int(e.at * _NS))


_SPANS: dict[type[ev.Event], Callable[[ExecutionSpan, Any], None]] = {
    ev.ToolSucceeded: _succeeded,
    ev.ToolFailed: _failed,
    ev.LlmDecided: _decided,
    ev.ChildSpawned: _spawned,
    ev.RunWaiting: _waiting,
    ev.HumanInputRequested: _asked,
    ev.StepCompleted: _step,
}
