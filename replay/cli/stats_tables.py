"""``agentlog stats`` for people: runs, tools and recovery as rich tables.

Every recorded text (tool names, failure kinds, statuses, the agent) goes in as a plain
``Text`` escaped by :func:`printable`, never as markup, so a tool named ``[red]x`` or one
holding an escape sequence shows as written and cannot restyle or move the terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..output import printable, seconds

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from engine.stats import Objectives, RecoveryStats, RunCounts, Stats, ToolStats

BAR = 12  # the latency bar's width, in characters
FULL, PART, EMPTY = "█", "▒", "·"
_BREAKER_STYLE = {"closed": "green", "open": "bold red", "half_open": "yellow"}


def latency_bar(p50: float | None, p95: float | None, top: float, width: int = BAR) -> str:
    """A tool's latency as a tiny bar on a scale shared by every tool (``top``: the
    slowest p95): solid to p50, shaded on to p95. A latency above 0 shows at least one
    cell, so a fast tool is not mistaken for one without data (which shows blank), and
    a p95 above the p50 one shaded cell at least, so a spread is never hidden."""
    if p50 is None or p95 is None or top <= 0:
        return ""
    solid = _cells(p50, top, width)
    shaded = max(solid + (p95 > p50), _cells(p95, top, width))
    shaded = min(shaded, width)
    return FULL * solid + PART * (shaded - solid) + EMPTY * (width - shaded)


def _cells(value: float, top: float, width: int) -> int:
    if value <= 0:
        return 0
    return max(1, min(width, round(value / top * width)))


def milliseconds(ms: float | None) -> str:
    return "-" if ms is None else seconds(ms / 1000)


def percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1%}"


def mean(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _text(value: str, style: str = "") -> RenderableType:
    from rich.text import Text

    return Text(printable(value), style=style)


def _table(title: str, *columns: str) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    return table


def runs_table(runs: RunCounts) -> Table:
    table = _table("runs", "status", "runs")
    for status, n in sorted(runs.by_status.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(_text(status), str(n))
    table.add_row(_text("total", "bold"), _text(str(runs.total), "bold"))
    return table


def tools_period(stats: Stats) -> str:
    """Whence the tool figures count: the start of the hour ``since`` falls in (the tools
    view counts by the hour, so it may reach before ``since``); "" for all time."""
    if stats.tools_since is None:
        return ""
    day, _, clock = stats.tools_since.partition("T")
    return f"since {day} {clock[:5]}Z (hourly windows)"


def tools_table(tools: list[ToolStats], period: str = "") -> Table:
    table = _table(
        f"tools {period}".strip(),
        *("tool", "calls", "failures", "retries", "p50", "p95", "latency", "breaker"),
    )
    top = max((t.p95_ms or 0.0 for t in tools), default=0.0)
    for t in sorted(tools, key=lambda t: (-t.calls, t.tool)):
        failed = ", ".join(f"{kind} {n}" for kind, n in sorted(t.failures.items()))
        table.add_row(
            _text(t.tool, "bold"),
            str(t.calls),
            _text(failed or "-", "red" if failed else "dim"),
            str(t.retries),
            milliseconds(t.p50_ms),
            milliseconds(t.p95_ms),
            _text(latency_bar(t.p50_ms, t.p95_ms, top), "cyan"),
            _text(t.breaker, _BREAKER_STYLE.get(t.breaker, "")),
        )
    return table


def recovery_table(r: RecoveryStats) -> Table:
    table = _table("recovery", "figure", "value")
    rows = [
        ("crashes (resumes after an owner died mid-run)", str(r.crashes)),
        ("runs that crashed", str(r.crashed_runs)),
        ("recovered (crashed runs that completed)", str(r.recovered)),
        ("recovery success rate", percent(r.recovery_success_rate)),
        ("mean time to recover (RTO)", seconds(r.mean_time_to_recover_s)),
        ("mean calls lost per crash (RPO)", mean(r.mean_lost_calls_per_crash)),
        ("mean checkpoint save", milliseconds(r.mean_checkpoint_save_ms)),
        ("run failure rate", percent(r.failure_rate)),
        ("compensations", str(r.compensations)),
        ("compensations failed", str(r.compensations_failed)),
    ]
    for action, a in r.actions.items():  # graded recovery (@engine.agent(recovery=...))
        rows.append((f"recovery by {action}: recovered / chosen", f"{a.recovered} / {a.decided}"))
    for label, value in rows:
        table.add_row(label, value)
    return table


def _spread(middle: float | None, top: float | None, timed: bool = False) -> str:
    """``median / max`` (or p95; ``timed``: as durations), "-" with no sample."""
    if middle is None or top is None:
        return "-"
    if timed:
        return f"{seconds(middle)} / {seconds(top)}"
    return f"{middle:g} / {top:g}"


def objectives_table(objectives: list[Objectives]) -> Table:
    """Per agent: its RPO target, the work recoveries folded again past the newest
    snapshot (at crashes and unsettled heads: median / max), its crashes' RTO (resume
    start to first commit) and down time (last event before the crash to the resume)."""
    table = _table(
        "recovery objectives (median / max; rto and down: median / p95)",
        *("agent", "rpo target", "met", "samples", "calls", "events", "work", "rto", "down"),
    )
    table.columns[0].overflow = "fold"  # a long agent name wraps, never cut
    for o in objectives:
        met = "-" if o.rpo_met is None else ("yes" if o.rpo_met else "NO")
        table.add_row(
            _text(o.agent, "bold"),
            _text(o.rpo_target or "-", "" if o.rpo_target else "dim"),
            _text(met, {"yes": "green", "NO": "bold red"}.get(met, "dim")),
            str(o.rpo_samples),
            _spread(o.rpo_calls_median, o.rpo_calls_max),
            _spread(o.rpo_events_median, o.rpo_events_max),
            _spread(o.rpo_s_median, o.rpo_s_max, timed=True),
            _spread(o.rto_s_median, o.rto_s_p95, timed=True),
            _spread(o.down_s_median, o.down_s_p95, timed=True),
        )
    return table


def heading(stats: Stats, store: str) -> RenderableType:
    period = f"since {stats.since}" if stats.since else "all time"
    who = f"agent {stats.agent}" if stats.agent else "all agents"
    return _text(f"{store}: {period}, {who}", "bold")


def render(stats: Stats, store: str) -> list[RenderableType]:
    """The heading and the three tables (a line in place of an empty tools table), then
    the recovery objectives of the agents that have any."""
    period = tools_period(stats)
    tools: RenderableType = (
        tools_table(stats.tools, period)
        if stats.tools
        else _text(f"no tool calls {period or 'in the period'}", "dim")
    )
    parts = [heading(stats, store), runs_table(stats.runs), tools, recovery_table(stats.recovery)]
    return parts + ([objectives_table(stats.objectives)] if stats.objectives else [])
