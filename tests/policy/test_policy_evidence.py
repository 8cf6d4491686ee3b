"""Failure evidence on every store: each failed attempt's tool_failed event carries the
arguments (redacted ones as "<redacted>"), the error type and message, the raw response
(an exception's ``response`` or ``body``) cut to 2 KiB, and the tool's and the agent's
code versions. A redacted value appears nowhere in the run's log.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from agents.kit import log_of, tool_def
from conftest import all_backends

from engine import Engine, EngineConfig, RetryPolicy
from engine.runtime.call.evidence import RESPONSE_LIMIT

CARD = "4111111111111111"


class HttpError(Exception):
    """What an HTTP client raises: the server's reply rides on the exception."""

    def __init__(self, status: int, response: Any = None, body: Any = None) -> None:
        super().__init__(f"HTTP {status}")
        if response is not None:
            self.response = response
        if body is not None:
            self.body = body


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(sleep=lambda s: None, rng=random.Random(0)))
    yield e
    e.close()


def failures(eng: Engine, run_id: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == "tool_failed"]


@all_backends
def test_every_failed_attempt_carries_its_evidence(eng: Engine) -> None:
    """Two attempts fail (a 503 with a 5 KB HTML body, then a 502 with a JSON body as
    bytes); both events carry redacted arguments, error, truncated response, versions."""
    replies = [
        HttpError(503, response="<html>" + "x" * 5000 + "</html>"),
        HttpError(502, body=b'{"error": "bad gateway", "trace": "' + b"t" * 3000 + b'"}'),
    ]

    @eng.tool(redact=("card_number",), retry=RetryPolicy(max_attempts=3, initial=0.1))
    def authorize(card_number: str, cents: int, merchant: str = "m-1") -> str:
        if replies:
            raise replies.pop(0)
        return "auth-ok"

    @eng.agent
    def checkout(run: Any, card: str) -> str:
        return str(authorize(card, 1999))

    r = eng.run(checkout, card=CARD)
    assert (r.status, r.output) == ("completed", "auth-ok")
    first, second = failures(eng, r.run_id)
    for attempt, failed in enumerate((first, second), start=1):
        ev = failed["evidence"]
        assert failed["attempt"] == attempt and failed["error_type"] == "HttpError"
        assert ev["args"] == {"card_number": "<redacted>", "cents": 1999, "merchant": "m-1"}
        assert ev["tool_version"] == tool_def(authorize).version != ""
        assert ev["agent_version"] == checkout.version != ""
        assert len(ev["response"].encode()) == RESPONSE_LIMIT == 2048
    assert first["message"] == "HttpError: HTTP 503"
    assert first["evidence"]["response"].startswith("<html>xxx")
    assert second["message"] == "HttpError: HTTP 502"
    assert second["evidence"]["response"].startswith('{"error": "bad gateway"')


@all_backends
def test_a_redacted_argument_appears_nowhere_in_the_log(eng: Engine) -> None:
    @eng.tool(redact=("card_number",), retry=RetryPolicy(max_attempts=2, initial=0.1))
    def charge(card_number: str, cents: int) -> str:
        raise ConnectionError(f"card service refused {cents}")

    @eng.agent
    def agent(run: Any, card: str) -> str:
        return str(charge(card, 5))

    r = eng.run(agent, card=CARD)
    assert r.status == "failed"
    events = [e for e in eng.events(r.run_id) if e.type != "agent_started"]
    assert CARD not in msgspec.json.encode([e.data for e in events]).decode()
    assert len(failures(eng, r.run_id)) == 2
    for failed in failures(eng, r.run_id):
        assert failed["evidence"]["args"]["card_number"] == "<redacted>"


@all_backends
def test_final_failures_carry_evidence_and_no_response_means_none(eng: Engine) -> None:
    """A permanent failure (final at once) has the same evidence; without a response or
    body attribute nothing is invented; a short response is kept whole."""

    @eng.tool(retry=RetryPolicy(max_attempts=3))
    def lookup(customer: str) -> str:
        raise KeyError(customer)

    @eng.tool(retry=RetryPolicy(max_attempts=1))
    def fetch(url: str) -> str:
        raise HttpError(404, response="not found")

    @eng.agent
    def agent(run: Any) -> list[str]:
        out = []
        for call in (lambda: lookup("c9"), lambda: fetch("/x")):
            try:
                call()
            except Exception as e:
                out.append(str(e))
        return out

    r = eng.run(agent)
    assert r.status == "completed"
    a, b = failures(eng, r.run_id)
    assert a["final"] and a["kind"] == "permanent" and a["error_type"] == "KeyError"
    assert a["evidence"]["args"] == {"customer": "c9"} and "response" not in a["evidence"]
    assert a["evidence"]["agent_version"] == agent.version
    assert b["final"] and b["evidence"]["response"] == "not found"


def test_response_truncation_counts_bytes_not_characters() -> None:
    """2 KiB means bytes: a multi-byte response is cut on a character boundary."""
    from engine.runtime.call.evidence import truncated

    text = "é" * 3000  # 2 bytes each
    cut = truncated(text)
    assert len(cut.encode()) <= RESPONSE_LIMIT and len(cut) == RESPONSE_LIMIT // 2
    assert truncated("short") == "short"
    assert truncated({"a": 1}) == "{'a': 1}"
    assert truncated(b"\xff" * 5000).startswith("\ufffd")
    assert len(truncated(b"\xff" * 5000).encode()) <= RESPONSE_LIMIT
