"""Issue 21, item 13: a secrets scan of every stored byte (the SQLite file and its WAL, a
``pg_dump`` of the test's PostgreSQL schema) after runs where a secret could leak
sideways: a bearer token quoted bare in an error message or a response body, an answer
and an agent's output with secret-named fields, a result quoting its own token in
another field, headers as a list of pairs, a name with a space (``"api key"``)."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections import Counter
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from agents.kit import stored_bytes
from conftest import all_backends

from engine import Engine, Permanent
from engine.policy.failure import NO_RETRY
from engine.secrets import REDACTED, Seen, redact


def _secret(name: str) -> str:
    return f"tok{name}{uuid.uuid4().hex}"


def _everything(url: str, eng: Engine) -> bytes:
    """Every stored byte; for PostgreSQL also the schema's ``pg_dump``."""
    data = stored_bytes(url, eng)
    if url.startswith("postgresql"):
        schema = dict(parse_qsl(urlsplit(url).query))["schema"]
        dump = subprocess.run(
            ["pg_dump", "--data-only", "-n", schema, url.split("?")[0]],
            capture_output=True,
            check=True,
        )
        assert b"COPY" in dump.stdout
        data += dump.stdout
    return data


class Response:
    """A client library's error response: raw headers (a list of byte pairs) and the
    body it read, which echoes the bare token."""

    def __init__(self, token: str) -> None:
        self.status_code = 401
        self.headers = [(b"WWW-Authenticate", b"Bearer"), (b"Authorization", f"Bearer {token}")]
        self._content = f'{{"detail": "token {token} expired"}}'.encode()


class Unauthorized(Exception):
    def __init__(self, token: str) -> None:
        super().__init__(f"401 Unauthorized for bearer {token}")
        self.response = Response(token)


@all_backends
def test_no_secret_reaches_the_store_by_any_side_path(eng: Engine, store_url: str) -> None:
    """Each scenario of item 13 runs; the scan finds none of the secrets, the redaction
    marks are there, and each tool ran once."""
    s = {n: _secret(n) for n in ("bearer", "body", "answer", "output", "echo", "pairs", "space")}
    basic = base64.b64encode(f"ann:{s['pairs']}x".encode()).decode()
    count: Counter[str] = Counter()

    @eng.tool(retry=NO_RETRY)
    def call_api(headers: dict[str, str]) -> str:
        count["call_api"] += 1
        raise Permanent(f"401: token {s['bearer']} is expired")

    @eng.tool(retry=NO_RETRY)
    def fetch(authorization: str) -> str:
        count["fetch"] += 1
        raise Unauthorized(s["body"])

    @eng.tool
    def login() -> dict[str, str]:
        count["login"] += 1
        return {"token": s["echo"], "note": f"your token is {s['echo']}"}

    @eng.tool(retry=NO_RETRY)
    def post(headers: list[tuple[str, str]], config: dict[str, str]) -> str:
        count["post"] += 1
        raise Permanent(f"rejected {s['pairs']}x / {s['space']}")

    @eng.agent
    def bearer(run: Any) -> str:
        return call_api({"Authorization": f"Bearer {s['bearer']}"})

    @eng.agent
    def body(run: Any) -> str:
        return fetch(f"Bearer {s['body']}")

    @eng.agent
    def asker(run: Any) -> Any:
        return {"said": run.ask("credentials?")}

    @eng.agent
    def outputs(run: Any) -> dict[str, Any]:
        return {"password": s["output"], "login": login()}

    @eng.agent
    def pairs(run: Any) -> str:
        headers = [("Authorization", f"Basic {basic}"), ("Accept", "application/json")]
        return post(headers, {"api key": s["space"], "region": "eu"})

    assert eng.run(bearer).status == "failed"
    failed = eng.run(body)
    paused = eng.run(asker)
    answer = {"password": s["answer"], "note": f"it is {s['answer']}"}
    answered = eng.answer(paused.run_id, answer)
    done = eng.run(outputs)
    assert eng.run(pairs).status == "failed"
    assert count == {"call_api": 1, "fetch": 1, "login": 1, "post": 1}

    data = _everything(store_url, eng)
    assert REDACTED.encode() in data and b"expired" in data and b"application/json" in data
    leaked = [name for name, value in s.items() if value.encode() in data]
    assert leaked == [], f"these secrets reached the store: {leaked}"
    assert basic.encode() not in data
    # What the caller is given is what was stored.
    assert failed.status == "failed" and s["body"] not in str(failed.error)
    assert answered.output == {"said": {"password": REDACTED, "note": "it is ***"}}
    assert done.output == {
        "password": REDACTED,
        "login": {"token": REDACTED, "note": "your token is ***"},
    }


def test_a_bearer_value_masks_its_bare_token_and_basic_its_password() -> None:
    """``Bearer <t>`` joins the seen set as itself and as ``<t>``; ``Basic`` also as the
    decoded password; a scheme word alone is never masked."""
    seen = Seen()
    seen.add("Bearer abcd1234efgh")
    seen.add("Basic " + base64.b64encode(b"ann:hunter22").decode())
    assert seen.mask("bad token abcd1234efgh; Bearer") == "bad token ***; Bearer"
    assert seen.mask("password hunter22 refused") == "password *** refused"


@pytest.mark.parametrize("name", ["api key", "Client Secret", "x auth token"])
def test_names_with_spaces_are_secret_and_pairs_in_lists_are_redacted(name: str) -> None:
    """A name with spaces matches as without them; ``[name, value]`` pairs in a list are
    redacted like entries, and the value is masked where the same value quotes it."""
    seen = Seen()
    value = {"config": {name: "v4lue-123"}, "headers": [[name, "v4lue-456"], ["a", "b"]]}
    value["echo"] = "v4lue-123 and v4lue-456"  # type: ignore[assignment]
    assert redact(value, seen=seen) == {
        "config": {name: REDACTED},
        "headers": [[name, REDACTED], ["a", "b"]],
        "echo": "*** and ***",
    }
