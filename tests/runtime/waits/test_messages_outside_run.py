"""A side-effecting tool called outside any run sends for real, unrecorded: agentlog
warns once per tool per process (never for a tool without effects, nor for the plain
calls a run's tool body makes, which the body's recorded outcome covers)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from engine import Engine
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
EVENT = "side_effect_tool_called_outside_run"


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url)
    yield e
    e.close()


def _counter(path: Path) -> dict[str, int]:
    return json.loads(path.read_text()) if path.exists() else {}


def _count(path: Path, what: str, key: str) -> str:
    seen = _counter(path)
    seen[what] = seen.get(what, 0) + 1
    seen[f"key:{key}"] = seen.get(f"key:{key}", 0) + 1
    path.write_text(json.dumps(seen))
    return what


@STORES
def test_a_side_effect_tool_outside_a_run_warns_once_and_still_sends(
    eng: Engine, tmp_path: Path
) -> None:
    """Two calls outside any run both reach the service (with the tool's default key),
    and one warning names the tool; a read-only tool and a nested call do not warn."""
    service = tmp_path / "service.json"
    name = f"charge_{uuid.uuid4().hex[:6]}"

    @eng.tool(name=name, side_effect=True)
    def charge(amount: int, idempotency_key: str = "") -> str:
        return _count(service, f"charge {amount}", idempotency_key)

    @eng.tool(name=f"read_{name}")
    def read() -> int:
        return len(_counter(service))

    @eng.tool(name=f"refund_{name}", side_effect=True)
    def refund(amount: int) -> str:
        return _count(service, f"refund {amount}", "")

    @eng.tool(name=f"outer_{name}")
    def outer() -> str:
        return refund(7)  # a plain call inside the outer call's recorded body

    @eng.agent(name=f"tests:{name}")
    def agent(run: object) -> str:
        return outer()

    with capture_logs() as logs:
        charge(1)
        charge(2)
        read()
    warned = [x for x in logs if x["event"] == EVENT]
    assert [(x["tool"], x["log_level"]) for x in warned] == [(name, "warning")]
    assert "unrecorded" in warned[0]["detail"]
    assert _counter(service) == {"charge 1": 1, "charge 2": 1, "key:": 2}

    with capture_logs() as logs:
        assert eng.run(agent).status == "completed"
        assert [x for x in logs if x["event"] == EVENT] == []
        refund(8)  # outside any run: this tool's first warning
    assert [x["tool"] for x in logs if x["event"] == EVENT] == [f"refund_{name}"]
    assert _counter(service)["refund 7"] == _counter(service)["refund 8"] == 1
