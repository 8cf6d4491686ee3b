"""The README runs: its Python blocks execute in order against a temporary SQLite store,
its set-up commands are the real ones, and its CLI reference names exactly the commands
the CLI has."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import typer

from replay.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block, executed top to bottom in one namespace, passes its asserts."""
    blocks = _blocks("python")
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTLOG_URL", f"sqlite:///{tmp_path}/readme.db")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    try:
        for n, block in enumerate(blocks, start=1):
            code = compile(block, f"README.md python block {n}", "exec", dont_inherit=True)
            exec(code, namespace)
    finally:
        engine = namespace.get("engine")
        if engine is not None:
            engine.close()  # type: ignore[attr-defined]
    assert (tmp_path / "readme.db").exists()


def test_the_two_commands_come_first() -> None:
    """Set-up-and-demo and the test command are the first two shell blocks, and real."""
    first, second = _blocks("sh")[:2]
    assert "pip install -e ." in first and "agentlog demo" in first
    assert "scripts/test" in second
    assert os.access(ROOT / "scripts" / "test", os.X_OK)


def test_cli_reference_lists_every_command() -> None:
    """The command table names exactly the commands ``agentlog`` has."""
    documented = set(re.findall(r"^\| `agentlog (\w+)", README, flags=re.M))
    group = typer.main.get_command(app)
    actual = set(group.commands)  # type: ignore[attr-defined]
    assert documented == actual
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert status in README
