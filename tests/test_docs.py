"""The docs run: the Python blocks of README.md and of every page under docs/ execute in
order, one namespace and one temporary SQLite store per page, and pass their asserts. A
block that is not meant to run says so on the line above it: ``<!-- not run: why -->``.
The README's set-up commands are the real ones, and the CLI reference names exactly the
commands the CLI has."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import typer

from replay.cli.entry import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = "<!-- not run:"
# a fenced block: the line above it, its language, its text
_FENCE = re.compile(r"(?:^|\n)(?P<above>[^\n]*)\n```(?P<lang>[\w-]*)\n(?P<code>.*?)\n```", re.S)


def blocks(text: str, lang: str) -> list[tuple[str, str]]:
    """Each ``lang`` block of ``text``: the line above it and its code."""
    return [(m["above"], m["code"]) for m in _FENCE.finditer(text) if m["lang"] == lang]


def runnable(text: str) -> list[str]:
    return [code for above, code in blocks(text, "python") if not above.startswith(NOT_RUN)]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p.read_text())], ids=_name)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of the page, executed top to bottom in one namespace, passes
    its asserts (the engine each page opens is closed afterwards)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTLOG_URL", f"sqlite:///{tmp_path}/docs.db")
    namespace: dict[str, object] = {"__name__": "docs_example"}
    try:
        for n, block in enumerate(runnable(page.read_text()), start=1):
            code = compile(
                block + "\n", f"{_name(page)} python block {n}", "exec", dont_inherit=True
            )
            exec(code, namespace)
    finally:
        for value in list(namespace.values()):
            if type(value).__name__ == "Engine":
                value.close()  # type: ignore[attr-defined]


def test_every_page_that_shows_python_runs_some() -> None:
    """A page's Python is run unless marked, and a marker gives its reason."""
    for page in PAGES:
        for above, _ in blocks(page.read_text(), "python"):
            if above.startswith(NOT_RUN):
                assert above.rstrip().endswith("-->") and len(above) > len(NOT_RUN) + 5, page
    assert len(runnable(README.read_text())) >= 1
    assert len(runnable((ROOT / "docs" / "tutorial.md").read_text())) >= 4


def test_the_two_commands_come_first() -> None:
    """Set-up-and-demo and the test command are the README's first two shell blocks, and real."""
    (_, first), (_, second) = blocks(README.read_text(), "sh")[:2]
    assert "pip install -e ." in first and "agentlog demo" in first
    assert "scripts/test" in second
    assert os.access(ROOT / "scripts" / "test", os.X_OK)


def test_links_between_pages_resolve() -> None:
    """Every relative link of README.md and docs/ names a file that exists."""
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{_name(page)} links {target}"


def test_cli_reference_lists_every_command() -> None:
    """The command table names exactly the commands ``agentlog`` has."""
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    documented = set(re.findall(r"^\| \[`agentlog (\w+)", text, flags=re.M))
    group = typer.main.get_command(app)
    assert documented == set(group.commands)  # type: ignore[attr-defined]
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert status in text
