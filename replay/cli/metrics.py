"""The operator's figures for Prometheus, with the official ``prometheus_client`` (the
optional ``agentlog[metrics]`` extra): ``agentlog stats --prometheus`` prints them once in
the text exposition format, ``agentlog metrics serve`` answers every scrape afresh.

Counts over all time are counters (``_total``); means, rates and percentiles are gauges,
in base units (seconds, ratios). With ``--since`` the counts are of a window that slides
with each scrape and may go down, which a counter must never do: they are gauges then,
named without ``_total`` (``agentlog_tool_calls``). A figure the period has no data for
(a mean of nothing) is left out rather than exported as 0. Label values (tool names,
failure kinds, statuses) go through :func:`printable` as every terminal line does: a
control character shows as ``\\x1b``, never reaches a terminal.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from engine import observe
from engine.errors import UsageError

from ..output import printable

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from engine.stats import Objectives, RecoveryStats, Stats, ToolStats

INSTALL = "pip install 'agentlog[metrics]'"
BREAKER_STATES = ("closed", "open", "half_open")
# (field of RecoveryStats, metric name, help, scale to base units); counts then gauges
_RECOVERY_COUNTS = (
    ("crashes", "agentlog_crashes", "Resumes after an owner died mid-run (a run may crash twice)."),
    ("recovered", "agentlog_recovered", "Crashed runs that went on to complete."),
    ("compensations", "agentlog_compensations", "Compensations run."),
    ("compensations_failed", "agentlog_compensations_failed", "Compensations that failed."),
)
_RECOVERY_GAUGES = (
    (
        "recovery_success_rate",
        "agentlog_recovery_success_ratio",
        "Recovered / crashed runs that have ended.",
        1.0,
    ),
    (
        "mean_time_to_recover_s",
        "agentlog_time_to_recover_seconds",
        "Mean time from a crash to running again (RTO).",
        1.0,
    ),
    (
        "mean_lost_calls_per_crash",
        "agentlog_lost_calls_per_crash",
        "Mean calls in flight at a crash (committed intents, no outcome) (RPO).",
        1.0,
    ),
    (
        "mean_checkpoint_save_ms",
        "agentlog_checkpoint_save_seconds",
        "Mean checkpoint save time.",
        1e-3,
    ),
    ("failure_rate", "agentlog_run_failure_ratio", "Failed runs / ended runs.", 1.0),
)


def _client() -> Any:
    """The ``prometheus_client`` module, or a one-line usage error naming the extra."""
    try:
        import prometheus_client
    except ImportError:
        raise UsageError(f"Prometheus output needs prometheus_client: {INSTALL}") from None
    return prometheus_client


class StatsCollector:
    """A ``prometheus_client`` collector whose every collection computes the figures
    afresh with ``compute`` (``engine.stats`` bound to its period and agent)."""

    def __init__(self, compute: Callable[[], Stats]) -> None:
        self.compute = compute

    def collect(self) -> Iterator[Any]:
        return families(self.compute())


def families(stats: Stats) -> Iterator[Any]:
    """The metric families of ``stats``: counts as counters over all time, as gauges over
    a ``since`` window."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    count = CounterMetricFamily if stats.since is None else GaugeMetricFamily

    runs = GaugeMetricFamily(
        "agentlog_runs", "Runs started in the period, by status.", labels=["status"]
    )
    for status, n in sorted(stats.runs.by_status.items()):
        runs.add_metric([printable(status)], n)
    yield runs
    yield from _tool_families(stats.tools, count)
    yield from _recovery_families(stats.recovery, count)
    yield from _objective_families(stats.objectives)


def _tool_families(tools: list[ToolStats], count: Any) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily, StateSetMetricFamily

    calls = count("agentlog_tool_calls", "Durable tool calls.", labels=["tool"])
    retries = count("agentlog_tool_retries", "Retries.", labels=["tool"])
    failures = count(
        "agentlog_tool_failures", "Calls that failed for good, by kind.", labels=["tool", "kind"]
    )
    latency = GaugeMetricFamily(
        "agentlog_tool_latency_seconds",
        "Attempt latency percentiles.",
        labels=["tool", "quantile"],
    )
    breaker = StateSetMetricFamily(
        "agentlog_tool_breaker", "The breaker's last recorded state.", labels=["tool"]
    )
    for t in tools:
        tool = printable(t.tool)
        calls.add_metric([tool], t.calls)
        retries.add_metric([tool], t.retries)
        for kind, n in sorted(t.failures.items()):
            failures.add_metric([tool, printable(kind)], n)
        for quantile, ms in (("0.5", t.p50_ms), ("0.95", t.p95_ms), ("0.99", t.p99_ms)):
            if ms is not None:
                latency.add_metric([tool, quantile], ms / 1000)
        state = printable(t.breaker)
        states = dict.fromkeys((*BREAKER_STATES, state), False)
        states[state] = True
        breaker.add_metric([tool], states)
    yield from (calls, retries, failures, latency, breaker)


def _recovery_families(recovery: RecoveryStats, count: Any) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    for field, name, doc in _RECOVERY_COUNTS:
        yield count(name, doc, value=getattr(recovery, field))
    for field, name, doc, scale in _RECOVERY_GAUGES:
        value = getattr(recovery, field)
        family = GaugeMetricFamily(name, doc)
        if value is not None:
            family.add_metric([], value * scale)
        yield family
    chosen = count(
        "agentlog_recovery_decisions", "Graded recovery's choices, by action.", labels=["action"]
    )
    mended = count(
        "agentlog_recovery_decisions_recovered",
        "Of those, choices after which the run completed with no other recovery.",
        labels=["action"],
    )
    for action, a in recovery.actions.items():
        chosen.add_metric([printable(action)], a.decided)
        mended.add_metric([printable(action)], a.recovered)
    yield from (chosen, mended)


# (metric name, help, the figures of Objectives by quantile label)
_OBJECTIVES = (
    ("agentlog_rpo_target_calls", "The agent's rpo= target in calls.", {"": "rpo_target_calls"}),
    ("agentlog_rpo_target_seconds", "The agent's rpo= target in seconds.", {"": "rpo_target_s"}),
    (
        "agentlog_rpo_replayed_calls",
        "Calls a recovery folded again past the newest snapshot (RPO).",
        {"0.5": "rpo_calls_median", "1": "rpo_calls_max"},
    ),
    (
        "agentlog_rpo_replayed_seconds",
        "Seconds of recorded work a recovery folded again past the newest snapshot (RPO).",
        {"0.5": "rpo_s_median", "1": "rpo_s_max"},
    ),
    (
        "agentlog_rto_seconds",
        "A crash's resume, from its start to its first commit (RTO).",
        {"0.5": "rto_s_median", "0.95": "rto_s_p95"},
    ),
)


def _objective_families(objectives: list[Objectives]) -> Iterator[Any]:
    """Per agent (``Stats.objectives``); a figure with no sample is left out."""
    from prometheus_client.core import GaugeMetricFamily

    for name, doc, fields in _OBJECTIVES:
        quantiles = "" not in fields
        family = GaugeMetricFamily(name, doc, labels=["agent", "quantile"][: 1 + quantiles])
        for o in objectives:
            for quantile, field in fields.items():
                value = getattr(o, field)
                if value is not None:
                    labels = [printable(o.agent), quantile][: 1 + quantiles]
                    family.add_metric(labels, float(value))
        yield family


def registry(compute: Callable[[], Stats]) -> CollectorRegistry:
    """A fresh registry holding only agentlog's figures (no process or platform metrics)."""
    client = _client()
    found: CollectorRegistry = client.CollectorRegistry(auto_describe=False)
    found.register(StatsCollector(compute))
    return found


def exposition(stats: Stats) -> str:
    """``stats`` in the Prometheus text exposition format."""
    client = _client()
    text: bytes = client.generate_latest(registry(lambda: stats))
    return text.decode()


def serve(
    compute: Callable[[], Stats], port: int, addr: str, describe: Callable[[Exception], str]
) -> Any:
    """Answer ``GET /metrics`` on ``addr:port`` from a background thread, computing the
    figures on each scrape; returns the server (``shutdown()`` stops it). A scrape that
    fails is answered 500 and logged as one line (``describe`` words the error); the
    server goes on answering."""
    from prometheus_client.exposition import ThreadingWSGIServer

    client = _client()
    app = _guarded(client.make_wsgi_app(registry(compute)), describe)
    try:
        family, _, _, _, where = socket.getaddrinfo(
            addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
        server: Any = make_server(str(where[0]), port, app, server_class, handler_class=_Quiet)
    except OSError as e:
        raise UsageError(f"cannot listen on {addr}:{port}: {e.strerror or e}") from None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Quiet(WSGIRequestHandler):
    """A request handler that logs no request (the exposition server's own habit)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


def _guarded(app: Any, describe: Callable[[Exception], str]) -> Any:
    """``app``, answering a scrape whose figures cannot be computed with 500 and one log
    line (not a traceback); the exposition app computes before it starts its answer."""
    log = observe.get()

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        try:
            return app(environ, start_response)
        except Exception as e:
            log.error("metrics scrape failed", error=describe(e))
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"agentlog: the figures could not be computed; see the server's log\n"]

    return guarded
