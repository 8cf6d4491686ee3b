"""Secret scans: each way a secret reaches the engine (an argument, a nested header, a
result key, a decision's value or argument, a failure's response headers and body, an
exception message, an agent's own failure, the run's input) is run on SQLite and
PostgreSQL, then the secret is searched for in the raw SQLite file and its WAL, a
``pg_dump`` of the test's schema, ``agentlog export``, ``timeline`` (text and --json),
``context`` and the log lines of the run and of the commands (at debug level). It is
found nowhere, and ``***`` (inside text) or ``<redacted>`` (a secret-named entry) stands
where it was."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import structlog
from agents.kit import log_of
from conftest import backends, schema_of
from eventsourcing.cipher import AESCipher
from test_cli_kit import agentlog_many

from engine import Engine, Permanent, RetryPolicy, RunResult
from engine.errors import UsageError
from engine.store.url import LIBPQ

ONCE = RetryPolicy(max_attempts=1)
# Runs its path on the engine and yields the run's result to be scanned; then checks what
# stands where the secret was (after the scan, so a leak fails the scan first).
Scenario = Callable[[Engine, str], Iterator[RunResult | None]]


def _argument(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A secret-named argument (``db_password``) of a tool that succeeds."""

    @eng.tool
    def connect(host: str, db_password: str) -> str:
        return f"connected to {host}"

    @eng.agent
    def argument(run: Any) -> str:
        return str(connect("db1", secret))

    r = eng.run(argument)
    yield r
    assert r.status == "completed"
    (args,) = [d["args"] for _, t, d in log_of(eng, r.run_id) if t == "tool_invoked"]
    assert args == {"host": "db1", "db_password": "<redacted>"}


def _nested_header(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """``headers={"X-API-Key": ...}`` inside a request dict, on a side-effecting call."""

    @eng.tool(side_effect=True)
    def post(request: dict[str, Any], *, idempotency_key: str) -> int:
        return 201

    @eng.agent
    def nested_header(run: Any) -> int:
        return int(post({"url": "https://api", "headers": {"X-API-Key": secret}}))

    r = eng.run(nested_header)
    yield r
    assert r.status == "completed"
    (args,) = [d["args"] for _, t, d in log_of(eng, r.run_id) if t == "tool_invoked"]
    assert args["request"]["headers"] == {"X-API-Key": "<redacted>"}


def _result_key(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A result with an ``access_token`` key: redacted live and in the log alike."""
    seen: list[Any] = []

    @eng.tool
    def login(user: str) -> dict[str, str]:
        return {"user": user, "access_token": secret}

    @eng.agent
    def result_key(run: Any) -> str:
        seen.append(login("ann"))
        return "ok"

    r = eng.run(result_key)
    yield r
    assert r.status == "completed"
    assert seen == [{"user": "ann", "access_token": "<redacted>"}]


def _decision_value(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A decision whose value holds a ``client_secret`` at depth."""

    @eng.agent
    def decision_value(run: Any) -> Any:
        return run.decide("creds", lambda: {"app": {"client_secret": secret, "id": "a1"}})

    r = eng.run(decision_value)
    yield r
    assert r.status == "completed"
    assert r.output == {"app": {"client_secret": "<redacted>", "id": "a1"}}


def _decision_argument(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A decision's ``api_key`` keyword argument, quoted by the model call's exception."""

    def call_model(prompt: str, api_key: str) -> str:
        raise PermissionError(f"key {api_key} may not use this model")

    @eng.agent
    def decision_argument(run: Any) -> str:
        return str(run.decide("plan", call_model, "hello", api_key=secret))

    r = eng.run(decision_argument)
    yield r
    assert r.error == "Permanent: plan: PermissionError: key *** may not use this model"


def _httpx_failure(eng: Engine, name: str, headers: dict[str, str], body: Any) -> RunResult:
    """A tool failing with a real ``httpx.HTTPStatusError`` (401) carrying this response."""

    @eng.tool(name=name, retry=ONCE)
    def fetch(url: str) -> str:
        request = httpx.Request("GET", url)
        httpx.Response(401, headers=headers, json=body, request=request).raise_for_status()
        return "unreachable"

    @eng.agent(name=f"test_secrets_scan:{name}")
    def agent(run: Any) -> str:
        return str(fetch("https://api/me"))

    return eng.run(agent)


def _last_failure(eng: Engine, r: RunResult) -> dict[str, Any]:
    assert r.status == "failed"
    return [d for _, t, d in log_of(eng, r.run_id) if t == "tool_failed"][-1]


def _evidence_headers(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """The response's ``Set-Cookie`` header is redacted; the status and the visible
    header are kept."""
    headers = {"Set-Cookie": f"sid={secret}", "X-Trace": "t-1"}
    r = _httpx_failure(eng, "fetch_headers", headers, {"error": "expired"})
    yield r
    failed = _last_failure(eng, r)
    assert failed["evidence"]["status"] == 401
    assert failed["evidence"]["headers"]["set-cookie"] == "<redacted>"
    assert failed["evidence"]["headers"]["x-trace"] == "t-1"


def _evidence_json(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A JSON body with a ``session_token``: the body is kept, the value masked."""
    r = _httpx_failure(eng, "fetch_json", {}, {"error": "expired", "session_token": secret})
    yield r
    body = _last_failure(eng, r)["evidence"]["response"]
    assert body == '{"error":"expired","session_token":"***"}'


def _evidence_body(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A server echoing the ``api_key`` argument in its error body (a plain exception
    carrying ``status`` and ``body``)."""

    class ApiError(Exception):
        def __init__(self, status: int, body: str) -> None:
            super().__init__(f"HTTP {status}")
            self.status, self.body = status, body

    @eng.tool(retry=ONCE)
    def charge(order: str, api_key: str) -> str:
        raise ApiError(403, f"<error>key {api_key} is revoked</error>")

    @eng.agent
    def evidence_body(run: Any) -> str:
        return str(charge("o1", secret))

    r = eng.run(evidence_body)
    yield r
    assert _last_failure(eng, r)["evidence"]["response"] == "<error>key *** is revoked</error>"


def _exception_message(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """``raise ValueError(f"bad {password}")``: tool_failed, agent_failed and the result."""

    @eng.tool(retry=ONCE)
    def login(user: str, password: str) -> str:
        raise ValueError(f"bad {password} for {user}")

    @eng.agent
    def exception_message(run: Any) -> str:
        return str(login("ann", secret))

    r = eng.run(exception_message)
    yield r
    assert r.status == "failed" and r.error is not None
    assert r.error.endswith("login: ValueError: bad *** for ann")
    failed = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_failed"]
    assert {d["message"] for d in failed} == {"ValueError: bad *** for ann"}


def _agent_failed(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """The agent's own exception quotes a secret it passed to a tool earlier."""

    @eng.tool
    def sign_in(token: str) -> bool:
        return False

    @eng.agent
    def agent_failed(run: Any) -> str:
        if not sign_in(secret):
            raise Permanent(f"sign-in with {secret!r} refused")
        return "in"

    r = eng.run(agent_failed)
    yield r
    assert r.status == "failed" and r.error == "Permanent: sign-in with '***' refused"


def _input_refused(eng: Engine, secret: str) -> Iterator[RunResult | None]:
    """A secret-named input field without encryption: refused before anything is written,
    naming the field and not its value."""

    @eng.agent
    def input_refused(run: Any, customer: str, settings: dict[str, Any]) -> str:
        return "never"

    with pytest.raises(UsageError, match=r"'settings\.api_token'") as e:
        eng.run(input_refused, customer="c1", settings={"api_token": secret})
    assert secret not in str(e.value) and "AGENTLOG_CIPHER_KEY" in str(e.value)
    yield None
    assert eng.runs() == []


SCENARIOS: dict[str, Scenario] = {
    "argument": _argument,
    "nested_header": _nested_header,
    "result_key": _result_key,
    "decision_value": _decision_value,
    "decision_argument": _decision_argument,
    "evidence_headers": _evidence_headers,
    "evidence_json": _evidence_json,
    "evidence_body": _evidence_body,
    "exception_message": _exception_message,
    "agent_failed": _agent_failed,
    "input_refused": _input_refused,
}


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """The application's logging, as an application configures it: structlog rendering
    JSON lines at debug level (restored afterwards)."""
    old = structlog.get_config()
    out = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(out),
    )
    try:
        yield out
    finally:
        structlog.configure(**old)


def raw_store(url: str) -> bytes:
    """The store's raw bytes: the SQLite file with its WAL, or a pg_dump of the schema
    (empty when nothing was ever written)."""
    if url.startswith("sqlite"):
        path = url.split("?")[0][len("sqlite:///") :]
        return b"".join(
            Path(path + s).read_bytes() for s in ("", "-wal") if Path(path + s).exists()
        )
    dump = subprocess.run(
        ["pg_dump", "-n", schema_of(url), "--dbname", libpq_url(url)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    if b"no matching schemas" in dump.stderr:
        return b""  # nothing was ever written: the schema was not even created
    assert dump.returncode == 0, dump.stderr
    return dump.stdout


def libpq_url(url: str) -> str:
    """The store URL as libpq takes it: the database it names (the one
    $AGENTLOG_TEST_POSTGRES_URL names in tests), with only the parameters libpq knows."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k in LIBPQ])
    return urlunsplit(parts._replace(query=query))


def views(url: str, run_id: str, cwd: Path) -> dict[str, str]:
    """What the CLI shows of the run (its debug log lines included), the commands run in
    one process."""
    out: dict[str, str] = {}
    env = {"AGENTLOG_LOG_LEVEL": "debug", "AGENTLOG_LOG": "json"}
    commands = {
        "export": ["export", run_id],
        "timeline": ["timeline", run_id],
        "timeline --json": ["timeline", run_id, "--json"],
        "context": ["context", run_id],
    }
    argvs = [[*args, "--url", url] for args in commands.values()]
    for name, r in zip(commands, agentlog_many(argvs, cwd=cwd, env=env), strict=True):
        assert r.code == 0, (name, r)
        out[name], out[name + " (log)"] = r.out, r.err
    return out


def scan(secret: str, places: dict[str, bytes | str]) -> list[str]:
    """The places where ``secret`` appears (in bytes, also as the hex of a dumped bytea)."""
    needles = (secret.encode(), secret.encode().hex().encode())
    return [
        where
        for where, found in places.items()
        if (any(n in found for n in needles) if isinstance(found, bytes) else secret in found)
    ]


@backends("sqlite", "postgres")
@pytest.mark.parametrize("path", list(SCENARIOS))
def test_a_secret_is_found_nowhere_after_its_run(
    path: str, store_url: str, tmp_path: Path, logs: io.StringIO
) -> None:
    """Each path's secret is absent from the raw store, the export, the timelines, the
    context and every log line; the run's visible values are present (the search works)."""
    secret = f"S3CR3T-{path}-{uuid.uuid4().hex}"
    eng = Engine.open(store_url)
    try:
        steps = SCENARIOS[path](eng, secret)
        result = next(steps)
        places: dict[str, bytes | str] = {"store": raw_store(store_url), "log": logs.getvalue()}
        if result is not None:
            assert b"test_secrets_scan" in places["store"]  # the search reads the run
            places["result"] = repr(result)
            shown = views(store_url, result.run_id, tmp_path)
            places.update(shown)
            assert result.run_id in shown["context"] and result.run_id in logs.getvalue()
            assert "agent_started" in shown["timeline --json"]
        assert scan(secret, places) == [], f"the {path} secret leaked"
        for _ in steps:  # what stands where the secret was
            pass
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_secret_input_is_accepted_with_encryption_and_never_shown(
    store_url: str, tmp_path: Path, logs: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With AGENTLOG_CIPHER_KEY set, a secret-named input field is accepted (resume needs
    it); the agent's failure quoting it is masked, and the timelines, the context and the
    logs show it nowhere (the input field reads ``<redacted>``)."""
    monkeypatch.setenv("AGENTLOG_CIPHER_KEY", AESCipher.create_key(32))
    secret = f"S3CR3T-input-{uuid.uuid4().hex}"
    eng = Engine.open(store_url)

    @eng.agent
    def with_token(run: Any, customer: str, api_token: str) -> str:
        raise Permanent(f"{customer}: token {api_token} expired")

    try:
        r = eng.run(with_token, customer="c1", api_token=secret)
    finally:
        eng.close()
    shown = views(store_url, r.run_id, tmp_path)
    export = shown.pop("export")  # lossless on purpose: an export carries the input whole
    places: dict[str, bytes | str] = {"log": logs.getvalue(), "result": repr(r), **shown}
    assert scan(secret, places) == []
    assert secret in export  # the run was recorded with it (kept for resume)
    assert (r.status, r.error) == ("failed", "Permanent: c1: token *** expired")
    started = json.loads(shown["timeline --json"])[0]
    assert started["input"] == {"customer": "c1", "api_token": "<redacted>"}


@backends("sqlite", "postgres")
def test_secret_input_accepted_with_encryption_is_not_stored_in_clear(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With AGENTLOG_CIPHER_KEY set, the accepted secret input is in no raw store byte."""
    monkeypatch.setenv("AGENTLOG_CIPHER_KEY", AESCipher.create_key(32))
    secret = f"S3CR3T-input-{uuid.uuid4().hex}"
    eng = Engine.open(store_url)

    @eng.agent
    def keeps_token(run: Any, api_token: str) -> str:
        return "done"

    try:
        assert eng.run(keeps_token, api_token=secret).status == "completed"
    finally:
        eng.close()
    stored = raw_store(store_url)
    assert b"agentlog_events" in stored  # the search reads the store the run wrote
    assert scan(secret, {"store": stored}) == []
