"""``recover`` wakes due waiting runs, and ``agentlog recover --watch`` keeps doing it
until SIGINT or SIGTERM (exit 0), in a real process, for a message posted by another
process; the one-shot form keeps its exit-status contract (a run waiting again is not
an error) and refuses a bad ``--interval``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from engine import Engine
from engine.runtime.host.config import EngineConfig
from tests.agents import mailbox_agents as agents
from tests.agents.kit import ROOT, python, wait_until
from tests.conftest import backends

STORES = backends("sqlite", "postgres")

POST = """
import sys
from engine import events as ev
from engine.runtime.waits.mailbox import inbox_stream
from engine.store import Append, open_store
store = open_store(sys.argv[1])
message = ev.MessagePosted(at=ev.now(), message_id="ext:" + sys.argv[3], from_run_id="ext",
                           topic="go", value=sys.argv[3])
inbox = inbox_stream(sys.argv[2])
store.append([Append(inbox, store.last_position(inbox) + 1, message)])
"""


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(inline_wait=0.05))
    yield e
    e.close()


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replay", "--url", url, *args],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _watch(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replay", "--url", url, "recover", "--watch", *args],
        cwd=str(ROOT),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _stop(p: subprocess.Popen[str], sig: int) -> tuple[int, str, str]:
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err


@STORES
def test_recover_watch_wakes_a_run_when_another_process_posts_its_message(
    store_url: str, eng: Engine
) -> None:
    r = eng.run(agents.receiver)
    assert r.status == "waiting"
    watcher = _watch(store_url, "--interval", "0.2")
    try:
        time.sleep(0.5)  # a pass or two with nothing due
        assert eng.state(r.run_id).status == "waiting"
        posted = python("-c", POST, store_url, r.run_id, "hello")
        assert posted.returncode == 0, posted.stderr[-2000:]
        wait_until(lambda: eng.state(r.run_id).status == "completed", "the watcher", 60)
    finally:
        code, out, err = _stop(watcher, signal.SIGINT)
    assert code == 0, err[-2000:]
    assert eng.state(r.run_id).output == ["hello"]
    assert r.run_id in out and "completed" in out
    [resumed] = [e for e in eng.events(r.run_id) if e.type == "agent_resumed"]
    assert resumed.data["owner"].split(":")[1] == str(watcher.pid)  # the watcher woke it


def test_recover_watch_stops_cleanly_on_sigterm_with_json_lines(store_url: str) -> None:
    eng = Engine(store_url, config=EngineConfig(inline_wait=0.05))
    r = eng.run(agents.sleeper, seconds=1.5)
    assert r.status == "waiting"
    eng.close()
    watcher = _watch(store_url, "--interval", "0.1", "--json")
    eng = Engine(store_url)
    try:
        wait_until(lambda: eng.state(r.run_id).status == "completed", "the watcher", 60)
    finally:
        code, out, err = _stop(watcher, signal.SIGTERM)
        eng.close()
    assert code == 0, err[-2000:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert any(r.run_id in line and '"completed"' in line for line in lines), out


def test_one_shot_recover_counts_a_run_waiting_again_as_done(store_url: str, eng: Engine) -> None:
    first = eng.run(agents.receiver, n=2)
    eng.run(agents.sender, to=first.run_id)  # wakes it in this process: it waits again
    wait_until(lambda: len(eng.events(first.run_id)) > 3, "the first receive")
    wait_until(lambda: eng.state(first.run_id).status == "waiting", "it waits again")
    p = python("-c", POST, store_url, first.run_id, "second")
    assert p.returncode == 0, p.stderr
    p = _cli(store_url, "recover")
    assert p.returncode == 0, p.stdout + p.stderr
    assert first.run_id in p.stdout
    p = _cli(store_url, "recover")
    assert p.returncode == 0 and "no runs needed recovery" in p.stdout, p.stdout


@pytest.mark.parametrize("args", [["--interval", "0"], ["--interval", "nan"], ["--interval", "x"]])
def test_a_bad_interval_is_one_line_and_exit_2(store_url: str, args: list[str]) -> None:
    p = _cli(store_url, "recover", "--watch", *args)
    assert p.returncode == 2 and "--interval" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_an_interval_without_watch_is_refused(store_url: str) -> None:
    p = _cli(store_url, "recover", "--interval", "1")
    assert p.returncode == 2 and "--watch" in p.stderr, p.stderr
