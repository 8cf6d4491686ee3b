"""The decorators' types reach mypy: a decorated tool keeps its parameters, so a call with
a wrong argument type is a type error (tests/typing/check_decorators.py, checked by
scripts/test, holds the fuller list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

from engine import Engine

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = """
from typing import Any
from engine import Engine

engine = Engine.open("memory://")


@engine.tool(side_effect=True, key=lambda order, cents: f"charge:{order}")
def charge(order: str, cents: int) -> dict[str, int]:
    return {order: cents}


@engine.tool
async def fetch(url: str) -> bytes:
    return url.encode()


@engine.agent
def agent(run: Any, order: str) -> int:
    return charge(order, CENTS)["o"]


async def call() -> bytes:
    return await fetch(URL)
"""


def _mypy(tmp_path: Path, cents: str, url: str) -> tuple[str, int]:
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET.replace("CENTS", cents).replace("URL", url))
    config = str(ROOT / "pyproject.toml")
    cache = str(tmp_path / "mypy_cache")
    out, err, status = api.run(["--config-file", config, "--cache-dir", cache, str(source)])
    return out + err, status


def test_a_wrong_argument_type_to_a_decorated_tool_is_a_type_error(tmp_path: Path) -> None:
    """Right types pass strict mypy; a str for ``cents`` and an int for the async tool's
    ``url`` are each reported against the tool's own signature."""
    out, status = _mypy(tmp_path, cents="5", url='"https://example.org"')
    assert status == 0, out
    out, status = _mypy(tmp_path, cents='"5"', url="42")
    assert status == 1, out
    assert 'Argument 2 to "charge" has incompatible type "str"; expected "int"' in out
    assert 'Argument 1 to "fetch" has incompatible type "int"; expected "str"' in out


def test_an_unknown_tool_option_is_a_type_error_at_run_time_too() -> None:
    """A misspelt option is refused when the decorator applies, not silently ignored."""
    options: dict[str, object] = {"side_effects": True}
    with pytest.raises(TypeError, match="side_effects"):
        Engine("memory://").tool(**options)(lambda: None)  # type: ignore[arg-type]
