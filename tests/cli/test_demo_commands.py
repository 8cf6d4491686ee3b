"""The commands ``agentlog demo`` suggests, run as printed, never charge an order twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from test_cli_kit import clean_env

BIN = Path(sys.executable).parent


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it (redirections, quotes) with the real console script."""
    env = clean_env({"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    return subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _suggested(printed: str) -> list[str]:
    """The commands the demo prints to try next, in the order printed."""
    commands = []
    for line in printed.splitlines():
        found = re.match(r"^[\s│]*(agentlog .+?)\s*(?:#.*)?[\s│]*$", line)
        if found:
            commands.append(found.group(1).strip())
    return commands


def _charges_per_order(tmp_path: Path) -> Counter[str]:
    world = json.loads((tmp_path / "agentlog-demo-payments.json").read_text())
    return Counter(c["order_id"] for c in world["charges"].values())


def test_the_demo_suggestions_run_in_order_charge_each_order_once(tmp_path: Path) -> None:
    """Every command the demo suggests, run in the order printed through the installed
    ``agentlog`` (and the suggested run twice, and rewinds that reuse and re-send), leaves
    exactly one charge per order in the payment service: the charge's business key
    ``charge:<order>`` dedupes every run, resume and fork."""
    assert (BIN / "agentlog").exists()
    demo = _shell("agentlog demo", tmp_path)
    assert demo.returncode == 0, demo.stderr
    commands = _suggested(demo.stdout)
    assert any(c.startswith("agentlog rewind ") for c in commands), commands
    assert commands[-1].startswith("agentlog run replay.demo:support_ticket --input "), commands
    for command in commands:
        expected = 2 if command.startswith("agentlog abandon ") else 0  # a completed run
        done = _shell(command, tmp_path)
        assert done.returncode == expected, (command, done.stdout, done.stderr)
    assert (tmp_path / "run.jsonl").stat().st_size > 0  # the export's redirection ran

    again = _shell(commands[-1], tmp_path)  # the user runs the suggestion a second time
    assert again.returncode == 0, again.stderr
    order = json.loads(again.stdout.split("output: ", 1)[1])["ticket"]
    original = next(c.split()[2] for c in commands if c.startswith("agentlog rewind "))
    for effects in ("reuse", "resend"):
        rewound = _shell(f"agentlog rewind {original} --to 2 --effects {effects}", tmp_path)
        assert rewound.returncode == 0, rewound.stderr
    charges = _charges_per_order(tmp_path)
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert order.replace("T-", "o-") in charges
