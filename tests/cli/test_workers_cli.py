"""``agentlog enqueue``, ``worker``, ``workers``, ``wait`` and ``send`` in real processes:
a run enqueued by one process is executed by a worker process, a message sent by a third
reaches it, ``wait`` exits as ``run`` does, SIGTERM drains the worker (exit 0), and a
worker whose replay key is not the store's refuses to start."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from conftest import backends
from test_cli_kit import Workdir, clean_env, one_line_error

from engine.polling import poll_until

AGENTS = """
from engine import Engine

engine = Engine.open()


@engine.agent
def waiter(run, order: str):
    got = run.recv("paid", timeout=120)
    return {"order": order, "paid": got}


@engine.agent
def sinks(run):
    raise ValueError("the order is gone")
"""


def workdir(tmp_path: Path, url: str) -> Workdir:
    (tmp_path / "work_agents.py").write_text(AGENTS)
    return Workdir(tmp_path, url)


def start_worker(w: Workdir, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "replay.cli", "worker", "--import", "work_agents"]
    cmd += ["--lease-ttl", "3", "--grace", "5", "--url", w.url]
    return subprocess.Popen(
        cmd,
        cwd=w.path,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@backends("sqlite", "postgres")
def test_enqueue_worker_send_wait_and_drain(tmp_path: Path, store_url: str) -> None:
    w = workdir(tmp_path, store_url)
    rid = w.ok(
        "enqueue", "work_agents:waiter", "--input", '{"order": "o-1"}', "--run-id", "o-1"
    ).out.strip()
    assert rid == "o-1"
    assert w.ok("enqueue", "work_agents:waiter", "--run-id", "o-1", "--json").json() == {
        "run_id": "o-1",
        "status": "queued",
    }  # the same id again: that run
    assert w.cli("wait", "o-1", "--timeout", "0.2").code == 3  # nobody runs it yet
    bad = w.ok("enqueue", "work_agents:sinks").out.strip()
    proc = start_worker(w)
    try:
        listed = poll_until(lambda: w.ok("workers", "--json").json() or proc.poll() is not None, 60)
        assert listed and proc.poll() is None, proc.communicate(timeout=10)
        live = w.ok("workers", "--json").json()
        assert live[0]["pid"] == proc.pid and live[0]["queues"] == ["default"]
        assert poll_until(lambda: '"waiting"' in w.ok("show", "o-1", "--json").out, 60)
        w.ok("send", "o-1", "paid", '{"amount": 12}', "--json-value")
        done = w.cli("wait", "o-1", "--timeout", "60", "--json")
        assert done.code == 0, done
        assert done.json()["output"] == {"order": "o-1", "paid": {"amount": 12}}
        assert w.cli("wait", bad, "--timeout", "60").code == 4  # failed, as `run` exits
        one_line_error(w.cli("wait", "no-such-run"), "no-such-run")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err  # drained: nothing was busy
    assert w.ok("workers", "--json").json() == []  # it said goodbye


@backends("sqlite")
def test_a_worker_with_another_replay_key_refuses_to_start(tmp_path: Path, store_url: str) -> None:
    w = workdir(tmp_path, store_url)
    mine = {"AGENTLOG_SECRET_KEY": "k" * 43}
    r = w.cli("enqueue", "work_agents:waiter", "--input", '{"order": "o-2"}', env=mine)
    assert r.code == 0, r
    assert w.cli("recover", env=mine).code == 0  # records the store's key fingerprint
    proc = start_worker(w, env={"AGENTLOG_SECRET_KEY": "z" * 43})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "AGENTLOG_SECRET_KEY" in err and "k" * 43 not in err and "z" * 43 not in err
    assert "Traceback" not in err
