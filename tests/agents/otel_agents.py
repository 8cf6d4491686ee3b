"""Agents traced by engine.integrations.otel, for tests that SIGKILL their process. The
``charge`` tool is a side effect that appends its key to ``$OTEL_DIR/charges``, which its
verifier reads: a kill after it ran (``AGENTLOG_FAILPOINTS=after_tool:2``) leaves its
call uncertain, found by the verifier on resume.

``python -m tests.agents.otel_agents URL RUN_ID`` starts ``shop`` with every finished span
written as one JSON line to ``$OTEL_DIR/spans.jsonl`` (a killed process keeps what it
wrote); a resumer finds the agent through the import path the run recorded.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from engine import Engine
from engine.integrations.otel import instrument

registry = Engine.open("memory://")  # defines the agents and their tools; runs use their own


def _charges() -> Path:
    return Path(os.environ["OTEL_DIR"]) / "charges"


@registry.tool
def price(item: str) -> int:
    return len(item)


def _charged(key: str) -> Any:
    """The verifier: the receipt if the charge landed, else None."""
    done = _charges().read_text().split() if _charges().exists() else []
    return f"receipt-{key}" if key in done else None


@registry.tool(side_effect=True, key=lambda order: f"charge:{order}", verify=_charged)
def charge(order: str) -> str:
    with _charges().open("a") as f:
        f.write(f"charge:{order}\n")
    return f"receipt-charge:{order}"


def _plan(order: str) -> str:
    return f"charge {order}"


@registry.agent
def pack(run: Any, order: str) -> str:
    return f"packed {order} at {price(order)}"


@registry.agent
def shop(run: Any, order: str) -> str:
    cost = price(order)
    run.decide("plan", _plan, order)
    receipt = charge(order)
    packed = run.call(pack, order=order)
    return f"{receipt} {cost} {packed}"


class JsonLines(SpanExporter):
    """Each finished span as a JSON line (name, ids, parent, links, attributes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as f:
            for s in spans:
                f.write(json.dumps(as_dict(s)) + "\n")
        return SpanExportResult.SUCCESS


def as_dict(s: ReadableSpan) -> dict[str, Any]:
    ctx, parent = s.get_span_context(), s.parent
    return {
        "name": s.name,
        "trace_id": ctx.trace_id if ctx else 0,
        "span_id": ctx.span_id if ctx else 0,
        "parent": parent.span_id if parent else None,
        "links": [[link.context.trace_id, link.context.span_id] for link in s.links],
        "attributes": dict(s.attributes or {}),
    }


def traced(url: str, exporter: SpanExporter) -> Engine:
    """An engine on ``url`` traced into ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Engine.open(url)
    instrument(engine, provider)
    return engine


if __name__ == "__main__":
    url, run_id = sys.argv[1:3]
    e = traced(url, JsonLines(Path(os.environ["OTEL_DIR"]) / "spans.jsonl"))
    r = e.run(shop, run_id=run_id, order="o1")
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
