"""engine.integrations.otel: a span per run execution and per durable call it did live
work for, checked with the SDK's in-memory exporter; a process SIGKILLed mid-run and
resumed in this one links its new execution's span to the killed one's; a replay
emits no new tool span. Agents: tests/agents/otel_agents.py."""

from __future__ import annotations

import ast
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import otel_agents
from agents.kit import python
from conftest import backends
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine import Engine, RetryPolicy
from engine.integrations.otel import span_context, traceparent


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(store_url: str, spans: InMemorySpanExporter) -> Iterator[Engine]:
    e = otel_agents.traced(store_url, spans)
    yield e
    e.close()


def _named(spans: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    """The finished spans by name (a tool defined in a test: by its last name)."""
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans.get_finished_spans():
        operation, _, what = s.name.partition(" ")
        out.setdefault(f"{operation} {what.rpartition('.')[2]}", []).append(s)
    return out


def _parent(s: ReadableSpan) -> int | None:
    return s.parent.span_id if s.parent else None


def _id(s: ReadableSpan) -> int:
    ctx = s.get_span_context()
    assert ctx is not None
    return ctx.span_id


@backends("sqlite", "postgres")
def test_an_agent_with_tools_a_decision_and_a_child_makes_a_tree_of_spans(
    traced: Engine, spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's execution is the root; its tools, decision and child run are children of
    it with the GenAI attributes; the child's own execution nests under the parent's."""
    monkeypatch.setenv("OTEL_DIR", str(tmp_path))
    r = traced.run(otel_agents.shop, order="o1")
    assert r.status == "completed", r
    named = _named(spans)
    (root,) = named["invoke_agent shop"]
    (child,) = [s for s in named["invoke_agent pack"] if "agentlog.resumed" in s.attributes]
    (spawn,) = [s for s in named["invoke_agent pack"] if "agentlog.child_run_id" in s.attributes]
    assert root.parent is None and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == r.run_id
    assert root.attributes["agentlog.run.status"] == "completed"
    charge = named["execute_tool charge"][0]
    assert charge.attributes["gen_ai.tool.name"] == "charge"
    assert charge.attributes["gen_ai.tool.call.id"] == f"{r.run_id}:3"
    assert (charge.attributes["agentlog.attempt"], charge.attributes["agentlog.uncertain"]) == (
        1,
        False,
    )
    plan = named["chat plan"][0]
    assert plan.attributes["gen_ai.operation.name"] == "chat"
    assert {_parent(charge), _parent(plan), _parent(spawn), _parent(child)} == {_id(root)}
    child_tools = [s for s in named["execute_tool price"] if _parent(s) == _id(child)]
    assert len(child_tools) == 1  # the child's own tool, under the child's execution
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {root.context.trace_id}
    assert child.attributes["agentlog.parent_run_id"] == r.run_id
    assert spawn.attributes["agentlog.child_run_id"] == child.attributes["agentlog.run_id"]


@backends("sqlite")
def test_retries_token_usage_and_a_final_failure_are_attributes(
    traced: Engine, spans: InMemorySpanExporter
) -> None:
    """A tool that fails twice then answers: one span, attempt 3, its failed attempts as
    span events; a decision's token usage in gen_ai.usage.*; a permanent failure's kind."""
    tries: list[int] = []
    fast = RetryPolicy(max_attempts=3, initial=0.0, jitter=False)

    @traced.tool(retry=fast)
    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("503")
        return "ok"

    @traced.tool
    def broken() -> str:
        raise ValueError("bad input")

    def model() -> dict[str, Any]:
        return {"text": "go", "usage": {"input_tokens": 12, "output_tokens": 5}}

    @traced.agent
    def agent(run: Any) -> str:
        flaky()
        run.decide("answer", model)
        return broken()

    r = traced.run(agent)
    assert r.status == "failed", r
    named = _named(spans)
    (ok,) = named["execute_tool flaky"]
    assert ok.attributes["agentlog.attempt"] == 3
    assert [e.attributes["agentlog.failure.kind"] for e in ok.events] == ["transient"] * 2
    (chat,) = named["chat answer"]
    usage = (
        chat.attributes["gen_ai.usage.input_tokens"],
        chat.attributes["gen_ai.usage.output_tokens"],
    )
    assert usage == (12, 5)
    (bad,) = named["execute_tool broken"]
    assert bad.status.status_code == trace.StatusCode.ERROR
    assert bad.attributes["agentlog.failure.kind"] == "permanent"
    (root,) = named["invoke_agent agent"]
    assert root.status.status_code == trace.StatusCode.ERROR
    assert root.attributes["gen_ai.usage.input_tokens"] == 12


@backends("sqlite")
def test_a_replay_emits_no_new_tool_spans(
    traced: Engine, spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answering a paused run re-executes its agent from the top: the calls its log holds
    replay and make no span; the new execution's span and the work after the answer do."""

    @traced.agent
    def asking(run: Any) -> str:
        otel_agents.price("hat")
        ok = run.ask("ship it?")
        return f"{ok} {otel_agents.price('box')}"

    r = traced.run(asking)
    assert r.status == "paused"
    before = [s.name for s in spans.get_finished_spans()]
    assert before.count("execute_tool price") == 1 and "wait person" in before
    spans.clear()
    done = traced.answer(r.run_id, "yes")
    assert done.status == "completed", done
    after = [s.name for s in spans.get_finished_spans()]
    assert sorted(after) == ["execute_tool price", "invoke_agent asking"]
    (box,) = _named(spans)["execute_tool price"]
    assert box.attributes["agentlog.call"] == 3  # hat (1) and the question (2) replayed


@pytest.mark.parametrize("how", ["run", "enqueue"])
@backends("sqlite")
def test_a_run_started_inside_a_span_is_traced_under_it(
    traced: Engine, spans: InMemorySpanExporter, how: str
) -> None:
    """The caller's current span (a request's) is the run's origin, noted right after
    agent_started: its execution is a child of that span, also when a worker (of any
    process) executes the run later, from its queue."""
    tracer = trace.get_tracer("test", tracer_provider=_provider(spans))

    @traced.agent
    def hello(run: Any) -> str:
        return "hi"

    with tracer.start_as_current_span("request") as request:
        run_id = traced.run(hello).run_id if how == "run" else traced.enqueue(hello).run_id
    if how == "enqueue":
        _work(traced, run_id)
    noted = traced.events(run_id)[1]
    assert noted.type == "trace_noted" and noted.data["origin"] is True
    assert noted.data["trace"] == traceparent(request.get_span_context())
    (run_span,) = _named(spans)["invoke_agent hello"]
    assert _parent(run_span) == request.get_span_context().span_id
    assert run_span.context.trace_id == request.get_span_context().trace_id


def _work(engine: Engine, run_id: str) -> None:
    """A worker of ``engine`` executes the queued run ``run_id`` to its end."""
    worker = engine.worker(concurrency=1, grace=5)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert engine.wait(run_id, timeout=60).status == "completed"
    finally:
        worker.stop()
        thread.join()


def test_a_malformed_trace_context_is_no_context() -> None:
    """A traceparent read from the log is untrusted: garbage gives no parent, not an error."""
    assert span_context("not a header") is None
    assert span_context(None) is None
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    found = span_context(good)
    assert found is not None and traceparent(found) == good


def test_an_untraced_engine_writes_no_trace_context(eng: Engine) -> None:
    """Without an observer the log is as before: no trace_noted."""

    @eng.agent
    def plain(run: Any) -> str:
        return "x"

    r = eng.run(plain)
    events = eng.events(r.run_id)
    assert [e.type for e in events] == ["agent_started", "agent_finished"]


def _provider(spans: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider


# --- a real SIGKILL mid-run, resumed in another process --------------------------------


@pytest.mark.parametrize("how", ["resume", "worker"])
@backends("sqlite", "postgres")
def test_a_resumed_execution_links_to_the_killed_one(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Killed after the charge ran, before its outcome was recorded: the resume (here, a
    new process: a person's resume, or a worker taking the dead owner's run over) makes a
    span linked to the killed execution's span, in the same trace; the charge found by
    its verifier is marked uncertain; replayed calls make no span."""
    monkeypatch.setenv("OTEL_DIR", str(tmp_path))
    rid = uuid.uuid4().hex
    env = {"OTEL_DIR": str(tmp_path), "AGENTLOG_FAILPOINTS": "after_tool:2"}
    p = python("-m", "tests.agents.otel_agents", store_url, rid, env=env)
    assert p.returncode == -9, p.stdout + p.stderr[-3000:]
    first = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    assert sorted(s["name"] for s in first) == ["chat plan", "execute_tool price"]
    killed = {s["parent"] for s in first}  # the killed execution's span: never exported
    assert len(killed) == 1

    spans = InMemorySpanExporter()
    e = otel_agents.traced(store_url, spans)
    try:
        if how == "resume":
            assert e.resume(rid).status == "completed"
        else:
            _work(e, rid)
    finally:
        e.close()
    named = _named(spans)
    (resumed,) = named["invoke_agent shop"]
    assert [(link.context.trace_id, link.context.span_id) for link in resumed.links] == [
        (first[0]["trace_id"], killed.pop())
    ]
    assert resumed.context.trace_id == first[0]["trace_id"]
    assert resumed.attributes["agentlog.resumed"] is True
    assert resumed.attributes["agentlog.execution"] == 2
    (charge,) = named["execute_tool charge"]
    assert charge.attributes["agentlog.uncertain"] is True
    assert charge.attributes["agentlog.outcome.source"] == "verified"
    assert "chat plan" not in named  # replayed from the log
    price = [s for s in named["execute_tool price"] if _parent(s) == _id(resumed)]
    assert price == []  # the parent's price replayed; the child's is under the child


def test_only_the_integration_imports_opentelemetry() -> None:
    """The core, the views and the CLI never import opentelemetry: engine.integrations.otel
    alone does (an engine without the extra installed runs as before)."""
    root = Path(__file__).resolve().parents[2]
    sources = [
        p for package in ("engine", "projections", "replay") for p in (root / package).rglob("*.py")
    ]
    importing = [
        p.relative_to(root).as_posix()
        for p in sources
        if any(m.partition(".")[0] == "opentelemetry" for m in _imported(p))
    ]
    assert importing == ["engine/integrations/otel.py"]


def _imported(path: Path) -> list[str]:
    """The modules ``path`` imports (absolute names; a relative import's as written)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append(node.module or "")
    return out
