"""``engine.stats()`` on every store, its ``since`` forms and refusals, the contract's
JSON shape, and the two renderings of the same figures: tables and Prometheus text."""

from __future__ import annotations

import io
import json
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from conftest import all_backends, backends
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from test_cli_kit import agentlog

from engine import Engine, Permanent
from engine.errors import UsageError
from engine.stats import ActionStats, RecoveryStats, RunCounts, Stats, ToolStats, since_epoch
from projections.stats import iso_utc
from replay.cli import metrics, stats_tables

NUMBER = (int, float)
NULLABLE_NUMBER = (int, float, type(None))
# The contract (CONTRACT.md "Operator views"): each key and the JSON types it may hold.
CONTRACT_RUNS = {"total": (int,), "by_status": (dict,)}
CONTRACT_TOOL = {
    "tool": (str,),
    "calls": (int,),
    "failures": (dict,),
    "retries": (int,),
    "p50_ms": NULLABLE_NUMBER,
    "p95_ms": NULLABLE_NUMBER,
    "breaker": (str,),
}
CONTRACT_RECOVERY = {
    "crashes": (int,),
    "recovered": (int,),
    "recovery_success_rate": NULLABLE_NUMBER,
    "mean_time_to_recover_s": NULLABLE_NUMBER,
    "mean_lost_calls_per_crash": NULLABLE_NUMBER,
    "mean_checkpoint_save_ms": NULLABLE_NUMBER,
    "failure_rate": NULLABLE_NUMBER,
    "compensations": (int,),
    "compensations_failed": (int,),
}


def check_contract(doc: dict[str, Any]) -> None:
    """Every key of the contract is there, holding a value of its JSON type."""
    assert isinstance(doc["since"], str | None)
    for key, types in CONTRACT_RUNS.items():
        assert isinstance(doc["runs"][key], types), ("runs", key)
    assert all(isinstance(k, str) and type(n) is int for k, n in doc["runs"]["by_status"].items())
    assert isinstance(doc["tools"], list)
    for tool in doc["tools"]:
        for key, types in CONTRACT_TOOL.items():
            assert isinstance(tool[key], types), ("tool", key)
            assert not isinstance(tool[key], bool), ("tool", key)
        assert all(isinstance(k, str) and type(n) is int for k, n in tool["failures"].items())
    for key, types in CONTRACT_RECOVERY.items():
        assert isinstance(doc["recovery"][key], types), ("recovery", key)
        assert not isinstance(doc["recovery"][key], bool), ("recovery", key)


def as_json(stats: Stats) -> dict[str, Any]:
    """The document ``stats --json`` prints (the same encoder)."""
    doc: dict[str, Any] = json.loads(msgspec.json.encode(stats))
    return doc


def full() -> Stats:
    """Figures with every field set, two tools, one with no latency yet."""
    return Stats(
        since="2026-11-30T15:00:00Z",
        runs=RunCounts(5, {"completed": 3, "failed": 1, "paused": 1}),
        tools=[
            ToolStats(
                "charge",
                calls=40,
                failures={"transient": 2, "permanent": 1},
                retries=6,
                p50_ms=120.0,
                p95_ms=480.0,
                p99_ms=900.0,
                breaker="open",
            ),
            ToolStats("lookup", calls=3),
        ],
        recovery=RecoveryStats(
            crashes=4,
            recovered=3,
            crashed_runs=3,
            recovery_success_rate=0.75,
            mean_time_to_recover_s=12.5,
            mean_lost_calls_per_crash=1.5,
            mean_checkpoint_save_ms=2.0,
            failure_rate=0.25,
            compensations=2,
            compensations_failed=1,
            actions={"retry": ActionStats(4, 3, 0.75), "ask": ActionStats(1, 0, 0.0)},
        ),
        agent="shop:checkout",
    )


def scenario(eng: Engine) -> dict[str, str]:
    """Two completed runs, one failed, one paused, of three agents; their agents' names."""

    @eng.tool
    def greet(name: str) -> str:
        return f"hello {name}"

    @eng.tool
    def broken() -> None:
        raise Permanent("no permission")

    @eng.agent
    def hello(run: Any, name: str) -> str:
        return greet(name)

    @eng.agent
    def failing(run: Any) -> None:
        broken()

    @eng.agent
    def asker(run: Any) -> Any:
        return run.ask("approve?")

    assert eng.run(hello, name="a").status == "completed"
    assert eng.run(hello, name="b").status == "completed"
    assert eng.run(failing).status == "failed"
    assert eng.run(asker).status == "paused"
    return {"hello": hello.name, "failing": failing.name, "asker": asker.name}


# --- engine.stats on every store ---------------------------------------------------------


@all_backends
def test_engine_stats_counts_runs_by_status_and_by_agent(eng: Engine) -> None:
    names = scenario(eng)
    everything = eng.stats()
    assert everything.since is None and everything.agent is None
    assert everything.runs == RunCounts(4, {"completed": 2, "failed": 1, "paused": 1})
    one = eng.stats(agent=names["hello"])
    assert one.agent == names["hello"]
    assert one.runs == RunCounts(2, {"completed": 2})
    assert eng.stats(agent="nobody:here").runs == RunCounts()
    check_contract(as_json(everything))


@all_backends
def test_engine_stats_since_as_a_span_a_timedelta_a_datetime_and_an_epoch(eng: Engine) -> None:
    scenario(eng)
    now = time.time()
    hour_ago = datetime.fromtimestamp(now - 3600, tz=UTC)
    for since in ("24h", "1h30m", timedelta(hours=1), hour_ago, now - 3600, int(now - 3600)):
        found = eng.stats(since=since)
        assert found.runs.total == 4, since
        assert found.since is not None and found.since.endswith("Z")
        bound = datetime.fromisoformat(found.since).timestamp()
        assert now - 2 * 86400 < bound < now, since
    later = datetime.fromtimestamp(now + 3600, tz=UTC)
    for since in (later, now + 3600, later.isoformat()):
        assert eng.stats(since=since).runs == RunCounts(), since
    assert eng.stats(since=hour_ago).since == hour_ago.isoformat().replace("+00:00", "Z")


@backends("sqlite", "postgres")
def test_engine_stats_equals_stats_json_from_the_cli(
    eng: Engine, store_url: str, tmp_path: Any
) -> None:
    """The Python result and ``agentlog stats --json`` (another process) are one document."""
    names = scenario(eng)
    for extra, kwargs in (
        ((), {}),
        (("--since", "2020-01-01T00:00:00+00:00"), {"since": "2020-01-01T00:00:00+00:00"}),
        (("--agent", names["failing"]), {"agent": names["failing"]}),
    ):
        r = agentlog("stats", "--json", "--url", store_url, *extra, cwd=tmp_path)
        assert r.code == 0, r
        assert json.loads(r.out) == as_json(eng.stats(**kwargs)), extra


@pytest.mark.parametrize(
    "since",
    [
        "3x",
        "",
        "-5h",
        "24h; drop table",
        "24h\nsecond line",
        "\u0663h",  # an Arabic-Indic three: a Unicode digit, not an ASCII one
        "tomorrow",
        math.nan,
        1e300,
        True,
        "99999999999999999999h",
        timedelta(days=10**8),
        datetime(1, 1, 1, tzinfo=UTC) - timedelta(0),
    ],
)
def test_a_since_that_is_not_a_time_is_one_clear_usage_error(since: Any) -> None:
    if isinstance(since, datetime):  # year 1 at +14:00 is before the first instant UTC names
        from datetime import timezone

        since = since.replace(tzinfo=timezone(timedelta(hours=14)))
    with pytest.raises(UsageError) as caught:
        since_epoch(since, time.time())
    message = str(caught.value)
    assert message.startswith("since: ") and "\n" not in message and len(message) < 200


def test_engine_stats_refuses_a_bad_since_before_reading(eng: Engine) -> None:
    with pytest.raises(UsageError, match="since"):
        eng.stats(since="soon")


def test_since_is_reported_as_iso_utc() -> None:
    assert iso_utc(None) is None
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(1.5) == "1970-01-01T00:00:01.500000Z"
    assert since_epoch("2026-12-01T12:00:00+02:00", 0) == iso_epoch("2026-12-01T10:00:00Z")
    assert since_epoch("90m", 10_000.0) == 10_000.0 - 5400


def iso_epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# --- the contract's shape -----------------------------------------------------------------


def test_every_contract_key_is_present_with_its_json_type() -> None:
    doc = as_json(full())
    check_contract(doc)
    assert doc["tools"][0]["failures"] == {"transient": 2, "permanent": 1}
    assert doc["tools"][1]["p50_ms"] is None
    empty = as_json(Stats(None, RunCounts(), [], RecoveryStats()))
    check_contract(empty)
    assert empty["runs"] == {"total": 0, "by_status": {}}


# --- tables -------------------------------------------------------------------------------


def printed(stats: Stats) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, no_color=True, highlight=False)
    for part in stats_tables.render(stats, "sqlite:///x.db"):
        console.print(part)
    return buffer.getvalue()


def test_tables_show_runs_tools_and_recovery() -> None:
    text = printed(full())
    assert "sqlite:///x.db: since 2026-11-30T15:00:00Z, agent shop:checkout" in text
    assert [ln.split() for ln in text.splitlines() if ln.split()[:1] == ["completed"]] == [
        ["completed", "3"]
    ]
    charge = next(ln for ln in text.splitlines() if ln.strip().startswith("charge"))
    assert "permanent 1, transient 2" in charge and "120 ms" in charge and "open" in charge
    assert stats_tables.latency_bar(120.0, 480.0, 480.0) in charge
    assert "75.0%" in text and "12.50 s" in text and "25.0%" in text
    figures = {
        ln.rsplit(None, 1)[0].strip(): ln.split()[-1] for ln in text.splitlines() if ln.strip()
    }
    assert figures["crashes (resumes after an owner died mid-run)"] == "4"
    assert figures["runs that crashed"] == "3"  # a run may crash twice
    assert figures["recovered (crashed runs that completed)"] == "3"


def test_no_tool_calls_is_said_in_a_line() -> None:
    text = printed(Stats(None, RunCounts(), [], RecoveryStats()))
    assert "no tool calls in the period" in text and "all time, all agents" in text


def test_the_tools_table_says_from_which_hour_it_counts() -> None:
    """Tool figures are of whole hours: the tools table's title (or the line saying there
    were no calls) names the hour they start at; all time says nothing more."""
    hourly = msgspec.structs.replace(full(), tools_since="2026-11-30T15:00:00Z")
    assert "tools since 2026-11-30 15:00Z (hourly windows)" in printed(hourly)
    assert "(hourly windows)" not in printed(msgspec.structs.replace(hourly, tools_since=None))
    none = Stats("2026-11-30T15:20:00Z", RunCounts(), [], RecoveryStats(), None, hourly.tools_since)
    assert "no tool calls since 2026-11-30 15:00Z (hourly windows)" in printed(none)


def test_recorded_names_are_shown_as_written_never_as_markup_or_controls() -> None:
    hostile = ToolStats("[bold red]x[/]\x1b[2J", calls=1, failures={"\x1b]0;pwn\x07": 1})
    text = printed(Stats(None, RunCounts(1, {"[blink]s": 1}), [hostile], RecoveryStats()))
    assert "[bold red]x[/]\\x1b[2J" in text and "[blink]s" in text
    assert "\x1b" not in text and "\x07" not in text


def test_latency_bar_is_scaled_to_the_slowest_tool() -> None:
    bar = stats_tables.latency_bar
    assert bar(50.0, 100.0, 100.0, width=10) == "█████▒▒▒▒▒"
    assert bar(10.0, 20.0, 200.0, width=10) == "█▒········"
    assert bar(0.001, 0.001, 1000.0, width=4) == "█···"  # fast, not missing
    assert bar(10.0, 10.5, 200.0, width=4) == "█▒··"  # a spread, however small, shows
    assert bar(100.0, 101.0, 100.0, width=4) == "████"
    assert bar(0.0, 0.0, 10.0, width=4) == "····"
    assert bar(None, None, 10.0) == ""
    assert bar(5.0, 9.0, 0.0) == ""


# --- Prometheus ---------------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_prometheus_text_holds_the_same_figures() -> None:
    found = samples(metrics.exposition(msgspec.structs.replace(full(), since=None)))
    assert found[("agentlog_runs", (("status", "completed"),))] == 3
    assert found[("agentlog_tool_calls_total", (("tool", "charge"),))] == 40
    assert found[("agentlog_tool_retries_total", (("tool", "charge"),))] == 6
    failures = (("kind", "transient"), ("tool", "charge"))
    assert found[("agentlog_tool_failures_total", failures)] == 2
    p95 = (("quantile", "0.95"), ("tool", "charge"))
    assert found[("agentlog_tool_latency_seconds", p95)] == pytest.approx(0.48)
    assert not any(
        k[0] == "agentlog_tool_latency_seconds" and ("tool", "lookup") in k[1] for k in found
    )
    state = (("agentlog_tool_breaker", "open"), ("tool", "charge"))
    assert found[("agentlog_tool_breaker", state)] == 1
    closed = (("agentlog_tool_breaker", "closed"), ("tool", "charge"))
    assert found[("agentlog_tool_breaker", closed)] == 0
    assert found[("agentlog_crashes_total", ())] == 4
    assert found[("agentlog_compensations_failed_total", ())] == 1
    assert found[("agentlog_recovery_success_ratio", ())] == 0.75
    assert found[("agentlog_time_to_recover_seconds", ())] == 12.5
    assert found[("agentlog_checkpoint_save_seconds", ())] == pytest.approx(0.002)
    assert found[("agentlog_run_failure_ratio", ())] == 0.25
    assert found[("agentlog_recovery_decisions_total", (("action", "retry"),))] == 4
    assert found[("agentlog_recovery_decisions_recovered_total", (("action", "retry"),))] == 3


def test_prometheus_leaves_out_a_mean_of_nothing() -> None:
    found = samples(metrics.exposition(Stats(None, RunCounts(), [], RecoveryStats())))
    assert found[("agentlog_crashes_total", ())] == 0
    assert ("agentlog_time_to_recover_seconds", ()) not in found
    assert ("agentlog_recovery_success_ratio", ()) not in found


def test_the_provider_is_the_installed_entry_point_and_its_absence_is_one_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """engine.stats finds projections.stats through the agentlog.views entry point (no
    import of projections in engine/); with no provider installed it is a UsageError."""
    import importlib.metadata

    import engine.stats as figures
    import projections.stats

    assert figures.source.__wrapped__() is projections.stats.stats
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])
    with pytest.raises(UsageError, match="no provider of stats is installed"):
        figures.source.__wrapped__()
