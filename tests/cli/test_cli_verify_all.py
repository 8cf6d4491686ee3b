"""``agentlog verify --all [--agent A] [--status S]`` on SQLite files and PostgreSQL: exit
2 naming each run the current code no longer replays, one a line (or the report as
--json); exit 0 once the change is guarded by ``run.patched``. Bad usage exits 2 with one
line; ``verify RUN`` is as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import backends

from engine import Engine
from replay.cli.entry import run_cli
from tests.agents import deploy_agents as deploy

STORES = backends("sqlite", "postgres")


@pytest.fixture
def paused(store_url: str) -> Iterator[list[str]]:
    """Two runs of the v1 code paused on their question, and one finished."""
    deploy.CODE = "v1"
    e = Engine.open(store_url)
    try:
        ids = [e.run(deploy.support, run_id=f"r{i}", order=f"o{i}").run_id for i in range(2)]
        e.answer(e.run(deploy.support, run_id="done", order="d").run_id, "yes")
    finally:
        e.close()
    yield ids
    deploy.CODE = "v1"


@STORES
def test_verify_all_exits_2_naming_each_divergent_run_then_0_once_patched(
    store_url: str, paused: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    deploy.CODE = "bad"
    agent = "tests.agents.deploy_agents:support"
    assert run_cli(["verify", "--all", "--agent", agent, "--url", store_url]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("run.patched" in line for line in lines)
    assert sorted(line.split()[2].rstrip(":") for line in lines) == paused
    assert run_cli(["verify", "--all", "--status", "completed", "--json", "--url", store_url]) == 2
    [report] = json.loads(capsys.readouterr().out)
    assert report["run_id"] == "done" and "call 2" in report["divergence"]
    assert run_cli(["verify", "--all", "--agent", "nowhere:else", "--url", store_url]) == 0
    capsys.readouterr()
    deploy.CODE = "v2"
    assert run_cli(["verify", "--all", "--json", "--url", store_url]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert run_cli(["verify", "r0", "--url", store_url]) == 0
    assert deploy.CALLS == {}  # nothing executed


@pytest.mark.parametrize(
    "argv",
    [
        ["verify"],
        ["verify", "r0", "--all"],
        ["verify", "r0", "--status", "paused"],
        ["verify", "--all", "--status", "nonsense"],
    ],
)
def test_verify_all_bad_usage_exits_2_with_one_line(
    store_url: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli([*argv, "--url", store_url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
