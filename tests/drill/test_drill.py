"""``agentlog drill`` (replay.drill): rounds of an agent killed at failpoints and recovered
in fresh processes, their effects counted against a sandbox's own books."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from replay.drill import Options, drill
from tests.conftest import backends, drop_schema, schema_of

pytestmark = pytest.mark.processes
CARELESS = "tests.agents.drill_agents:careless"
CAREFUL = "tests.agents.drill_agents:careful"
TEAM = "tests.agents.drill_agents:team"


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_SANDBOX", str(tmp_path))
    return tmp_path


def _killing(
    target: str, input: dict[str, object], seed: int, *points: str, **more: object
) -> Options:
    """A drill of ``target`` killing only at ``points`` (no timer: the choices are the seed's)."""
    return Options(target, input, seed=seed, timer_share=0.0, failpoints=points, **more)  # type: ignore[arg-type]


def _lines(box: Path, name: str) -> list[str]:
    path = box / name
    return path.read_text().splitlines() if path.exists() else []


def test_a_tool_that_ignores_its_key_without_a_verifier_shows_its_duplicates(
    sandbox: Path,
) -> None:
    """Every kill after the mail went out makes the drill send it again (it cannot tell):
    the duplicates equal the hand count of the sandbox's mail, one more per kill."""
    report = drill(_killing(CARELESS, {"to": "a@b"}, 7, "after_tool", kills=3))
    mails = _lines(sandbox, "mail")
    assert report.kills == report.recoveries == report.kills_at["after_tool"] >= 1
    # one mail per run (the reference and each drilled run), one more per kill
    assert len(mails) == 1 + report.runs + report.kills
    assert report.duplicated_effects == report.kills
    assert report.lost_effects == 0 and report.final_state_mismatches == 0
    assert report.tools_without_verifier == ["send_mail"]
    assert not report.clean


@backends("sqlite", "postgres")
def test_a_keyed_verified_tool_shows_no_duplicates_and_loses_nothing(
    sandbox: Path, store_url: str
) -> None:
    """Kills before and after the payment, on both stores: the verifier finds a payment
    that landed, so nothing is sent twice, every run ends as the reference did."""
    pg = store_url.startswith("postgres")
    points = ("after_intent", "after_tool", "after_outcome")
    options = _killing(
        CAREFUL, {"order": "o1"}, 11, *points, kills=4, store=store_url if pg else None
    )
    try:
        report = drill(options)
    finally:
        if pg:
            for name in ["ref", *map(str, range(20))]:
                drop_schema(f"{schema_of(store_url)}_11_{name}")
    payments = _lines(sandbox, "payments")
    assert report.kills == report.recoveries >= 4
    assert report.duplicated_effects == 0 and report.lost_effects == 0
    assert report.final_state_mismatches == 0 and report.clean
    assert len(payments) == len(set(payments)) == 1 + report.runs  # one per run, none twice
    assert report.statuses == {"completed": report.runs}
    assert report.tools_without_verifier == []
    assert report.rto_s.median is not None and report.rto_s.p95 is not None


def test_injected_faults_and_a_stub_are_recovered_from(sandbox: Path) -> None:
    """An indeterminate failure after sending (verified), latency, and a stubbed tool that
    never reaches the sandbox: no damage; stub and faults are counted in the same books."""
    faults = {"fail": {"charge": "indeterminate"}, "latency": {"price": 0.01}}
    report = drill(_killing(CAREFUL, {"order": "o2"}, 3, "after_tool", kills=1, **faults))
    assert report.clean and report.kills == 1
    stubbed = drill(_killing(CARELESS, {"to": "x"}, 5, "after_tool", kills=1, stub=("send_mail",)))
    assert _lines(sandbox, "mail") == []  # stubbed: nothing sent to the sandbox
    assert stubbed.duplicated_effects == stubbed.kills == 1


def test_the_command_prints_the_report_and_refuses_bad_input(sandbox: Path) -> None:
    """``--json`` is the report (exit 1: damage); an unknown tool or kind is exit 2."""
    import json
    import os
    import sys

    env = {**os.environ, "DRILL_SANDBOX": str(sandbox)}
    base = [sys.executable, "-m", "replay", "drill", CARELESS, "--input", '{"to": "q"}']
    run = subprocess.run(
        [*base, "--kills", "1", "--seed", "2", "--timer-share", "0", "--failpoints",
         "after_tool", "--json"], capture_output=True, text=True, env=env,
    )  # fmt: skip
    doc = json.loads(run.stdout)
    assert run.returncode == 1, run.stderr
    assert set(doc) >= {"runs", "kills", "recoveries", "duplicated_effects", "lost_effects",
                        "final_state_mismatches", "rto_s", "tools_without_verifier"}  # fmt: skip
    assert set(doc["rto_s"]) == {"median", "p95"} and doc["duplicated_effects"] == 1
    for bad in (["--stub", "nope"], ["--fail", "send_mail=sometimes"], ["--latency", "x"]):
        r = subprocess.run([*base, *bad], capture_output=True, text=True, env=env)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr


def test_a_tree_of_runs_is_drilled_whole(sandbox: Path) -> None:
    """Kills land in a parent whose children charge: every child's payment once per
    run, none lost, none twice."""
    report = drill(_killing(TEAM, {"orders": ["a", "b"]}, 3, "after_tool", "after_intent", kills=2))
    payments = _lines(sandbox, "payments")
    assert report.kills == report.recoveries >= 2 and report.clean
    assert len(payments) == len(set(payments)) == 2 * (1 + report.runs)
