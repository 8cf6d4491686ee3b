"""A side-effecting tool whose result cannot be recorded (over the store's ``max_payload``,
or nested too deep) settles its call with a final failure (``landed``: the effect
happened, its result is lost) and fails the run once: neither ``recover`` nor a resume
sends the effect again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents.kit import log_of
from conftest import backends

from engine import Engine

both = backends("sqlite", "postgres")


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _sent(path: Path) -> int:
    return len(json.loads(path.read_text())) if path.exists() else 0


@both
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "plain"])
@pytest.mark.parametrize("result", ["large", "deep"])
def test_an_unrecordable_result_fails_the_run_once_and_is_never_sent_again(
    store_url: str, tmp_path: Path, keyed: bool, result: str
) -> None:
    """The effect is sent once; the run fails with one clear message naming the tool; the
    log settles call 1 (no uncertain intent left); recover and resume send nothing."""
    sep = "&" if "?" in store_url else "?"
    eng = Engine.open(f"{store_url}{sep}max_payload=4096&blob_threshold=1024")
    service = tmp_path / "service.json"

    def send(to: str, **key: Any) -> Any:
        service.write_text(json.dumps([*json.loads(service.read_text() or "[]"), to]))
        return "x" * 10_000 if result == "large" else _nested(100_000)

    service.write_text("[]")
    if keyed:
        tool = eng.tool(side_effect=True)(lambda to, *, idempotency_key: send(to))
    else:
        tool = eng.tool(side_effect=True)(lambda to: send(to))

    @eng.agent(name="reporter")
    def reporter(run: Any) -> str:
        return str(tool("ann@example.com"))

    try:
        r = eng.run(reporter, run_id="big-1")
        assert r.status == "failed" and r.error is not None
        assert "result cannot be recorded" in r.error and "effect happened" in r.error
        final = [d for _, t, d in log_of(eng, "big-1") if t == "tool_failed"]
        assert [(d["final"], d["landed"], d["kind"]) for d in final] == [(True, True, "permanent")]
        assert eng.recover() == [] and _sent(service) == 1
        assert eng.resume("big-1").status == "failed"
        assert _sent(service) == 1
    finally:
        eng.close()
