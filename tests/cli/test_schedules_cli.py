"""``agentlog schedule``, ``schedules [--json]`` and ``unschedule`` in a real subprocess on
SQLite and PostgreSQL: a round trip (define, list with the next tick, redefine, remove),
secret input never shown, and one clear line for every bad argument."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import backends
from eventsourcing.cipher import AESCipher
from test_cli_kit import Workdir, clean_env, one_line_error

from engine.polling import poll_until
from engine.store.cipher import CIPHER_ENV

ROOT = Path(__file__).resolve().parent.parent.parent

AGENTS = """
from engine import Engine

engine = Engine.open()


@engine.agent
def report(run, team="ops", api_key=""):
    return team
"""
REPORT = "sched_agents:report"


def workdir(tmp_path: Path, url: str) -> Workdir:
    (tmp_path / "sched_agents.py").write_text(AGENTS)
    return Workdir(tmp_path, url)


@backends("sqlite", "postgres")
def test_schedule_list_redefine_and_unschedule(tmp_path: Path, store_url: str) -> None:
    w = workdir(tmp_path, store_url)
    r = w.ok("schedule", "nightly", REPORT, "--cron", "0 2 * * *", "--input", '{"team": "x"}')
    assert r.out.startswith("scheduled nightly: cron '0 2 * * *', next tick ")
    w.ok("schedule", "often", REPORT, "--every", "30", "--queue", "reports", "--catch-up")
    docs = w.ok("schedules", "--json").json()
    assert [d["name"] for d in docs] == ["nightly", "often"]
    nightly, often = docs
    assert nightly["agent"] == REPORT and nightly["cron"] == "0 2 * * *"
    assert nightly["input"] == {"team": "x"} and nightly["last_run"] is None
    assert nightly["next_tick"].endswith("T02:00:00Z")
    assert (often["every"], often["queue"], often["catch_up"]) == (30, "reports", True)
    text = w.ok("schedules").out
    assert "NEXT TICK" in text and "every 30s" in text and REPORT in text
    w.ok("schedule", "nightly", REPORT, "--every", "60")
    assert w.ok("schedules", "--json").json()[0]["every"] == 60
    assert w.ok("unschedule", "nightly").out.strip() == "unscheduled nightly"
    assert [d["name"] for d in w.ok("schedules", "--json").json()] == ["often"]
    one_line_error(w.cli("unschedule", "nightly"), "no schedule named 'nightly'")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["schedule", "a@b", REPORT, "--every", "5"], "not a schedule name"),
        (["schedule", "x", REPORT, "--every", "0"], "--every is a whole number"),
        (["schedule", "x", REPORT, "--every", "soon"], "--every"),
        (["schedule", "x", REPORT], "give one"),
        (["schedule", "x", REPORT, "--every", "5", "--cron", "* * * * *"], "give one"),
        (["schedule", "x", REPORT, "--cron", "61 * * * *"], "Bad minute"),
        (["schedule", "x", REPORT, "--every", "5", "--input", "[1]"], "JSON object"),
        (["schedule", "x", REPORT, "--every", "5", "--input", '{"tem": 1}'], "does not fit"),
        (["schedule", "x", "sched_agents:nope", "--every", "5"], "has no agent"),
        (["schedule", "x", REPORT, "--every", "5", "-i", '{"api_key": "sk-9"}'], "secret"),
        (["unschedule", "a b"], "not a schedule name"),
    ],
)
def test_a_bad_argument_is_one_line_and_stores_nothing(
    tmp_path: Path, argv: list[str], needle: str
) -> None:
    w = workdir(tmp_path, f"sqlite:///{tmp_path}/agentlog.db")
    r = w.cli(*argv)
    one_line_error(r, needle)
    assert "sk-9" not in r.err
    listed = w.cli("schedules", "--json")
    assert listed.code != 0 or listed.json() == []


def test_secret_input_of_an_encrypted_store_is_never_shown(tmp_path: Path) -> None:
    w = workdir(tmp_path, f"sqlite:///{tmp_path}/agentlog.db")
    env = {CIPHER_ENV: AESCipher.create_key(32)}
    r = w.cli("schedule", "x", REPORT, "--every", "5", "-i", '{"api_key": "sk-9"}', env=env)
    assert r.code == 0, r
    listed = w.cli("schedules", "--json", env=env)
    assert listed.code == 0 and "sk-9" not in listed.out + r.out
    assert listed.json()[0]["input"]["api_key"] != "sk-9"


def test_agentlog_worker_starts_each_tick_and_schedules_shows_the_last_run(
    tmp_path: Path,
) -> None:
    """``agentlog worker`` fires an ``--every 1`` schedule: its tick runs complete, and
    ``schedules`` names the latest as the last run; SIGTERM drains it (exit 0)."""
    url = f"sqlite:///{tmp_path}/agentlog.db"
    w = workdir(tmp_path, url)
    w.ok("schedule", "beat", REPORT, "--every", "1", "-i", '{"team": "t"}')
    worker = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", "worker", "--url", url, "--import", "sched_agents"],
        cwd=tmp_path,
        env=clean_env({"PYTHONPATH": str(ROOT)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        last = poll_until(lambda: w.ok("schedules", "--json").json()[0]["last_run"], 60.0)
        assert last is not None and last.startswith("beat@") and last.endswith("Z")
        done = w.ok("wait", last, "--timeout", "60", "--json").json()
        assert (done["status"], done["output"]) == ("completed", "t")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
