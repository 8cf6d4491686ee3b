"""LangGraph #8039 on our log: a graph asks (``interrupt()``), is resumed in another
process, and that process is SIGKILLed inside the node right after its post reached a
counting service. Re-invoked from a third process, the node runs again: with LangGraph's
SqliteSaver and a plain call the post repeats; with AgentlogSaver and a durable node
calling an ``@engine.tool(side_effect=True)`` it happened once, and the thread's run shows
its checkpoints and the interrupt in ``agentlog timeline``. (One round per store here;
``scripts/langgraph_crash.py`` runs 50.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import backends
from lg_crash_kit import service_posts

from replay.cli.entry import run_cli

KIT = Path(__file__).with_name("lg_crash_kit.py")


def crash_round(saver: str, url: str, thread: str, service: Path) -> dict[str, Any]:
    """start (to the interrupt), resume killed after the post, continue: the final state."""

    def stage(name: str, kill: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KILL_AFTER_SEND": "1" if kill else "0"}
        argv = [sys.executable, str(KIT), saver, url, thread, name, str(service)]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    started = stage("start")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout.splitlines()[-1])["receipts"] == []
    killed = stage("resume", kill=True)
    assert killed.returncode == -9, killed.stderr
    assert len(service_posts(service)) == 1  # the post went out before the kill
    done = stage("continue")
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return state


@backends("sqlite", "postgres")
def test_a_node_killed_after_its_post_does_not_post_again(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """AgentlogSaver + a durable node: one post, the graph completes with its receipt."""
    service = tmp_path / "service.txt"
    state = crash_round("agentlog", store_url, "order-1", service)
    posts = service_posts(service)
    assert len(posts) == 1, posts
    assert state["approved"] == "yes"
    assert state["receipts"] == [f"receipt:{posts[0]}"]
    capsys.readouterr()
    assert run_cli(["timeline", "lg:order-1", "--url", store_url]) == 0
    out = capsys.readouterr().out
    assert "langgraph:crash" in out
    assert out.count("◆ checkpoint") >= 3
    assert "⏸ interrupt" in out and "▶ resume" in out


def test_langgraphs_own_sqlite_saver_posts_again(tmp_path: Path) -> None:
    """The same crash with SqliteSaver and a plain call: the post repeats (#8039)."""
    service = tmp_path / "service.txt"
    state = crash_round("sqlite", str(tmp_path / "lg.sqlite"), "order-1", service)
    assert service_posts(service) == ["plain:o-1", "plain:o-1"]
    assert state["receipts"] == ["receipt:plain:o-1"]
