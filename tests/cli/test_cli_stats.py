"""``agentlog stats`` and ``agentlog metrics serve`` in real subprocesses: the tables,
``--json``, ``--prometheus`` (and without its extra), bad arguments, an empty store, and
a live scrape over HTTP."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_cli_kit as kit
from prometheus_client.parser import text_string_to_metric_families
from test_cli_kit import Workdir, agentlog, clean_env, make_workdir, one_line_error, sqlite_url

from engine.store import open_store


def _four_runs(tmp_path: Path) -> Workdir:
    """A store with two completed runs of agents:hello, one failed, one paused."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.run_id("agents:hello", code=0)
    work.run_id("agents:hello", "--input", '{"name": "b"}', code=0)
    work.run_id("agents:failing", code=4)
    work.run_id("agents:asker", code=3)
    return work


@pytest.fixture
def w(tmp_path: Path) -> Workdir:
    """The four runs, for a test that adds runs of its own."""
    return _four_runs(tmp_path)


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Workdir:
    """The four runs, made once for the tests that only read them."""
    return _four_runs(tmp_path_factory.mktemp("stats"))


def runs_by_status(text: str) -> dict[str, float]:
    return {
        s.labels["status"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "agentlog_runs"
    }


def test_stats_prints_tables_of_runs_tools_and_recovery(seen: Workdir) -> None:
    r = seen.ok("stats")
    rows = {ln.split()[0]: ln.split()[1:] for ln in r.out.splitlines() if ln.split()}
    assert rows["completed"] == ["2"] and rows["failed"] == ["1"] and rows["paused"] == ["1"]
    assert rows["total"] == ["4"]
    assert "recovery" in rows and "crashes" in rows and "all time, all agents" in r.out
    assert "\x1b[" not in r.out  # not a terminal: no styles


def test_stats_json_filters_by_agent_and_since(seen: Workdir) -> None:
    doc = seen.ok("stats", "--json").json()
    assert doc["runs"] == {"total": 4, "by_status": {"completed": 2, "failed": 1, "paused": 1}}
    assert doc["since"] is None and doc["agent"] is None
    hello = seen.ok("stats", "--agent", "agents:hello", "--json").json()
    assert hello["runs"] == {"total": 2, "by_status": {"completed": 2}}
    assert hello["agent"] == "agents:hello"
    recent = seen.ok("--json", "stats", "--since", "1h").json()
    assert recent["runs"]["total"] == 4 and recent["since"].endswith("Z")
    future = seen.ok("stats", "--since", "2999-01-01T00:00:00Z", "--json").json()
    assert future["runs"] == {"total": 0, "by_status": {}}


RETRIER = """
import json
from pathlib import Path

from engine import Engine, RetryPolicy, Transient

engine = Engine.open()


@engine.tool(retry=RetryPolicy(max_attempts=3, initial=0.01, jitter=False))
def quote() -> str:
    counter = Path("executions.json")
    n = json.loads(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(json.dumps(n))
    if n <= 2:
        raise Transient("503 service unavailable")
    return "ok"


@engine.agent
def quoter(run):
    return quote()
"""


def test_stats_json_counts_every_failed_attempt_apart_from_final_failures(w: Workdir) -> None:
    """A call retried after two 503s and then answered: ``attempt_failures`` is
    ``{"transient": 2}`` while ``failures`` (calls that failed for good) is ``{}``."""
    (w.path / "retrier.py").write_text(RETRIER)
    w.run_id("retrier:quoter", code=0)
    assert (w.path / "executions.json").read_text() == "3"
    (row,) = [t for t in w.ok("stats", "--json").json()["tools"] if t["tool"].endswith("quote")]
    assert (row["attempt_failures"], row["failures"]) == ({"transient": 2}, {})
    assert (row["calls"], row["attempts"], row["retries"]) == (1, 3, 2)
    broken = [t for t in w.ok("stats", "--json").json()["tools"] if t["tool"].endswith("broken")]
    assert broken[0]["attempt_failures"] == broken[0]["failures"] == {"permanent": 1}


def test_stats_prometheus_prints_the_same_figures(seen: Workdir) -> None:
    r = seen.ok("stats", "--prometheus")
    assert runs_by_status(r.out) == {"completed": 2, "failed": 1, "paused": 1}
    assert "# TYPE agentlog_crashes_total counter" in r.out
    only = seen.ok("stats", "--prometheus", "--agent", "agents:failing")
    assert runs_by_status(only.out) == {"failed": 1}


def types(text: str) -> dict[str, str]:
    """Each metric family's name and type, from the exposition's ``# TYPE`` lines."""
    return dict(ln.split()[2:4] for ln in text.splitlines() if ln.startswith("# TYPE "))


def test_prometheus_counts_are_gauges_over_a_since_window(seen: Workdir) -> None:
    """All-time counts are counters; over a --since window (which slides and may go down)
    the same counts are gauges without ``_total``, for stats and metrics serve alike."""
    every = types(seen.ok("stats", "--prometheus").out)
    counts = ("agentlog_tool_calls", "agentlog_tool_failures", "agentlog_crashes")
    assert all(every[f"{name}_total"] == "counter" for name in counts), every
    window = seen.ok("stats", "--prometheus", "--since", "1h").out
    assert all(types(window)[name] == "gauge" for name in counts), window
    assert "counter" not in types(window).values() and "_total" not in window
    calls = {
        s.labels["tool"]: s.value
        for family in text_string_to_metric_families(window)
        for s in family.samples
        if s.name == "agentlog_tool_calls"
    }
    assert calls == {"greet": 2, "broken": 1}


@pytest.mark.parametrize("url", ["memory://", "sqlite:///no/such/store.db"])
def test_prometheus_without_the_extra_names_it_in_one_line(tmp_path: Path, url: str) -> None:
    """The missing extra is what is said, before any store is opened."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"  # as if it were not installed
        "from replay.cli import run_cli\n"
        f"sys.exit(run_cli(['stats', '--prometheus', '--url', {url!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True
    )
    assert proc.returncode == 2, proc
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "pip install 'agentlog[metrics]'" in err, err
    assert proc.stdout == b""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--since", "3x"], "since"),
        (["--since", "yesterday"], "since"),
        (["--since", "99999999999999h"], "since"),
        (["--since", "-1h"], "since"),
        (["--agent", "hello"], "--agent"),
        (["--agent", ":hello"], "--agent"),
        (["--agent", "a:b\x1b[2J"], "--agent"),
        (["--agent", "m:" + "x" * 400], "--agent"),
        (["--json", "--prometheus"], "choose one"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(seen: Workdir, argv: list[str], needle: str) -> None:
    r = seen.cli("stats", *argv)
    one_line_error(r, needle)
    assert r.out == "" and "\x1b[2J" not in r.err


def test_an_empty_store_gives_zeros(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path, "empty.db")
    open_store(url).close()
    doc = agentlog("stats", "--json", "--url", url, cwd=tmp_path)
    assert doc.code == 0 and doc.json()["runs"] == {"total": 0, "by_status": {}}
    assert doc.json()["tools"] == [] and doc.json()["recovery"]["crashes"] == 0
    text = agentlog("stats", "--url", "memory://", cwd=tmp_path)
    assert text.code == 0 and "no tool calls in the period" in text.out
    default = agentlog("stats", cwd=tmp_path)  # the default store, not created yet
    assert default.code == 0 and "total" in default.out
    assert not (tmp_path / "agentlog.db").exists()  # stats creates no store


@contextlib.contextmanager
def serving(work: Workdir) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``agentlog metrics serve`` on a free port in a real process: it and its URL; on
    leaving, Ctrl-C must stop it with status 130."""
    args = ("metrics", "serve", "--port", "0")
    with kit.serving(work, *args, says="serving metrics on http://127.0.0.1:", stopped=130) as (
        proc,
        line,
    ):
        yield proc, line.split()[3]


def test_metrics_serve_answers_each_scrape_afresh(w: Workdir) -> None:
    with serving(w) as (_proc, url):
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert reply.status == 200
            first = reply.read().decode()
        assert runs_by_status(first) == {"completed": 2, "failed": 1, "paused": 1}
        w.run_id("agents:hello", code=0)  # another process writes; the next scrape sees it
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert runs_by_status(reply.read().decode())["completed"] == 3


def test_metrics_serve_refuses_a_bad_port_and_a_bad_since(seen: Workdir) -> None:
    one_line_error(seen.cli("metrics", "serve", "--port", "70000"), "--port")
    one_line_error(seen.cli("metrics", "serve", "--since", "later"), "since")


def test_metrics_serve_help_lists_url_and_no_json(tmp_path: Path) -> None:
    page = agentlog("metrics", "serve", "--help", cwd=tmp_path)
    assert page.code == 0 and "--url URL" in page.out and "--port" in page.out
    assert "--json" not in page.out  # one line and an HTTP endpoint: no JSON form


EVIL = '"[bold red]evil[/]\\x1b[31mRED\\x1b]0;pwned\\x07"'  # as Python source


def evil_store(tmp_path: Path) -> Workdir:
    """A store whose one run called a tool named with escape sequences (it failed)."""
    (tmp_path / "evil.py").write_text(
        "from engine import Engine, Permanent\n"
        "engine = Engine.open()\n"
        f"@engine.tool(name={EVIL})\n"
        "def t() -> int:\n"
        "    raise Permanent('x')\n"
        "@engine.agent\n"
        "def a(run) -> int:\n"
        "    return t()\n"
    )
    work = make_workdir(tmp_path, sqlite_url(tmp_path, "evil.db"))
    work.run_id("evil:a", code=4)
    return work


def assert_labels_escaped(text: str) -> None:
    """No control character in the exposition; the tool label reads as ``printable`` shows it."""
    assert not any(c in text for c in "\x1b\x07"), repr(text)
    tools = {
        s.labels["tool"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "agentlog_tool_calls_total"
    }
    assert tools == {"[bold red]evil[/]\\x1b[31mRED\\x1b]0;pwned\\x07"}


def test_prometheus_labels_escape_control_characters(tmp_path: Path) -> None:
    r = evil_store(tmp_path).ok("stats", "--prometheus")
    assert_labels_escaped(r.out)


def _get(url: str) -> tuple[int, str]:
    """A real HTTP GET: the status and the body, an error status included."""
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_serve_answers_a_failed_scrape_500_logs_one_line_and_goes_on(
    tmp_path: Path,
) -> None:
    """While the store cannot be read (its log table renamed away) each scrape is answered
    500 and logged as one line naming the error, with no traceback; once it can be read
    again the same server answers 200. Label values are escaped as in stats --prometheus."""
    work = evil_store(tmp_path)
    with serving(work) as (proc, url):
        code, body = _get(url)
        assert code == 200
        assert_labels_escaped(body)
        with sqlite3.connect(tmp_path / "evil.db") as db:
            db.execute("alter table agentlog_events rename to away")
        assert [_get(url)[0] for _ in range(2)] == [500, 500]
        with sqlite3.connect(tmp_path / "evil.db") as db:
            db.execute("alter table away rename to agentlog_events")
        assert _get(url)[0] == 200
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert len(lines) == 2, err  # one line per failed scrape
    assert all("metrics scrape failed" in ln and "no such table" in ln for ln in lines), err


def test_a_failed_scrape_is_described_with_the_password_masked() -> None:
    from engine.errors import StoreError
    from replay.cli.stats import _described

    url = "postgresql://u:s3cretPW@db.example:5432/agentlog"
    said = _described(StoreError(f"{url}: connection refused for s3cretPW\x1b[2J"), url)
    assert "s3cretPW" not in said and "connection refused" in said and "\x1b" not in said
    assert _described(ValueError("bad"), url) == "unexpected ValueError: bad"
