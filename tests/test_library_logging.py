"""agentlog behaves as a library: importing or running the engine never configures logging
(only the CLI does), and importing ``engine`` or starting the CLI's ``runs`` loads none of
the heavy modules it does not use."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from test_cli_kit import clean_env, make_workdir, sqlite_url

from engine.store import open_store

# An agent whose run logs at info (a retry, a failed tool, a failed run).
AGENT = """
from engine import Engine, Permanent, RetryPolicy, Transient

engine = Engine.open("memory://")
attempts = []


@engine.tool(name="lib_flaky", retry=RetryPolicy(max_attempts=3, initial=0.01, jitter=False))
def flaky() -> str:
    attempts.append(1)
    if len(attempts) == 1:
        raise Transient("blip")
    return "ok"


@engine.tool(name="lib_broken")
def broken() -> str:
    raise Permanent("no permission")


@engine.agent(name="tests:lib_agent")
def agent(run):
    flaky()
    return broken()
"""


@dataclass
class AppLogs:
    """What an application configured: structlog events into ``events``, stdlib to ``text``."""

    events: list[dict[str, Any]] = field(default_factory=list)
    text: io.StringIO = field(default_factory=io.StringIO)


@pytest.fixture
def app_logs() -> Iterator[AppLogs]:
    """The application's own structlog and stdlib configuration, restored afterwards."""
    saved, was_configured = structlog.get_config(), structlog.is_configured()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    logs = AppLogs()

    def to_list(_logger: Any, method: str, event_dict: dict[str, Any]) -> Any:
        logs.events.append({**event_dict, "method": method})
        raise structlog.DropEvent

    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, to_list],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(logs.text)
    handler.setFormatter(logging.Formatter("app|%(name)s|%(levelname)s|%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield logs
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        structlog.reset_defaults()
        if was_configured:
            structlog.configure(**saved)


def _stdlib_state() -> tuple[Any, ...]:
    root, ours = logging.getLogger(), logging.getLogger("agentlog")
    return (root.handlers[:], root.level, ours.handlers[:], ours.level, ours.propagate)


def test_an_applications_structlog_and_logging_survive_engine_run(app_logs: AppLogs) -> None:
    """After engine.run (a retry, a failing tool, a failed run), structlog's configuration
    and the stdlib's handlers and levels are exactly the application's; its own lines come
    out its way, and the engine's lines went through the application's processors."""
    before_config, before_stdlib = structlog.get_config(), _stdlib_state()
    structlog.get_logger("app").info("app_before")
    logging.getLogger("app").info("std before")
    namespace: dict[str, Any] = {}
    exec(AGENT, namespace)
    r = namespace["engine"].run(namespace["agent"])
    assert r.status == "failed" and "no permission" in (r.error or "")
    structlog.get_logger("app").info("app_after")
    logging.getLogger("app").info("std after")

    assert structlog.get_config() == before_config
    assert _stdlib_state() == before_stdlib
    events = [e["event"] for e in app_logs.events]
    assert events[0] == "app_before" and events[-1] == "app_after"
    ours = {e["event"]: e for e in app_logs.events if e.get("run_id") == r.run_id}
    assert {"tool_retry", "tool_failed", "run_failed"} <= set(ours)
    assert app_logs.text.getvalue().splitlines() == [
        "app|app|INFO|std before",
        "app|app|INFO|std after",
    ]


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )


APP_WITHOUT_STRUCTLOG = """
import json, logging, sys
{setup}
import structlog
import agents
r = agents.engine.run(agents.agent)
print(json.dumps({{"status": r.status, "run_id": r.run_id,
                   "structlog_configured": structlog.is_configured()}}))
"""


def test_without_structlog_config_engine_lines_follow_the_stdlib_setup(tmp_path: Path) -> None:
    """An application that configures only stdlib logging gets the engine's lines through
    the ``agentlog`` logger, in its own format; nothing reaches stdout and structlog stays
    unconfigured."""
    (tmp_path / "agents.py").write_text(AGENT)
    setup = (
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO, "
        "format='%(name)s|%(levelname)s|%(message)s')"
    )
    p = _python(APP_WITHOUT_STRUCTLOG.format(setup=setup), tmp_path)
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.splitlines()  # only the application's own output
    doc = json.loads(line)
    assert doc["status"] == "failed" and doc["structlog_configured"] is False
    assert f"agentlog|INFO|event=tool_retry run_id={doc['run_id']}" in p.stderr
    assert "agentlog|INFO|event=run_failed" in p.stderr


def test_with_no_logging_setup_only_warnings_reach_stderr(tmp_path: Path) -> None:
    """With no logging configured at all, Python's last-resort handler shows the engine's
    warnings (a reused tool name) on stderr and none of its info lines."""
    reuse = "\n\n@engine.tool(name='lib_flaky')\ndef other() -> str:\n    return 'x'\n"
    (tmp_path / "agents.py").write_text(AGENT + reuse)
    p = _python(APP_WITHOUT_STRUCTLOG.format(setup=""), tmp_path)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1
    assert "event=tool_name_reused" in p.stderr
    assert "tool_retry" not in p.stderr and "run_failed" not in p.stderr


def test_the_cli_configures_logging_from_the_environment(tmp_path: Path) -> None:
    """``agentlog`` (and only it) renders the engine's lines: JSON at the level asked for."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    env = {"AGENTLOG_LOG": "json", "AGENTLOG_LOG_LEVEL": "info"}
    r = work.cli("run", "agents:failing", "--json", env=env)
    assert r.code == 4, r
    lines = [json.loads(ln) for ln in r.err.splitlines()]
    run_id = r.json()["run_id"]
    assert {"tool_failed", "run_failed"} <= {ln["event"] for ln in lines if ln["run_id"] == run_id}
    assert all(ln["level"] in ("info", "warning", "error") for ln in lines)


def _loaded(code: str, modules: list[str], cwd: Path) -> list[str]:
    """Which of ``modules`` are loaded after ``code`` runs in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint('loaded:', *(m for m in {modules!r} if m in sys.modules))"
    p = _python(textwrap.dedent(probe), cwd)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()[-1].split()[1:]


HEAVY = ["asyncio", "structlog", "rich", "pydantic", "psycopg", "engine.runtime.engine"]


def test_importing_engine_loads_no_runtime_store_or_logging_library(tmp_path: Path) -> None:
    """``import engine`` costs the errors only; everything else loads on first use."""
    assert _loaded("import engine", [*HEAVY, "eventsourcing", "typer"], tmp_path) == []
    assert _loaded("from engine import Engine", ["engine.runtime.engine"], tmp_path) == [
        "engine.runtime.engine"
    ]


def test_the_cli_runs_path_loads_no_runtime_nor_rich(tmp_path: Path) -> None:
    """``agentlog runs`` on an empty store, and ``agentlog --help``, load neither the
    runtime (asyncio) nor structlog, rich or pydantic."""
    url = sqlite_url(tmp_path)
    open_store(url).close()
    runs = f"from replay.cli import run_cli\nassert run_cli(['runs', '--url', {url!r}]) == 0"
    assert _loaded(runs, HEAVY, tmp_path) == []
    usage = "from replay.cli import run_cli\nassert run_cli(['--help']) == 0"
    assert _loaded(usage, [*HEAVY, "eventsourcing"], tmp_path) == []
