"""Secrets on every store: arguments named by a tool's ``redact=`` or containing a word of
the default list (password, secret, token, apikey, authorization, ..., in any case, with
any ``-``/``_``) never reach the stored bytes (the SQLite file and its WAL, every
PostgreSQL row, the memory recorders) nor the logs at debug level, while replay still
matches them through a keyed hash, so resume works."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
import structlog.testing
from agents import service
from agents.kit import Crash, log_of, python, stored_bytes, tool_def
from conftest import all_backends, backends

from engine import Engine, RetryPolicy

NAMES = ("password", "secret", "token", "api_key", "authorization", "card_number")


def _secrets() -> dict[str, str]:
    return {name: f"S3CR3T-{name}-{uuid.uuid4().hex}" for name in NAMES}


@all_backends
def test_redacted_arguments_never_reach_the_store_and_resume_still_matches(
    eng: Engine, store_url: str
) -> None:
    """Secret argument values are absent from every stored byte (visible values are
    present, so the search works); events show '<redacted>'; a crashed run resumes,
    its replayed calls matched by the keyed hash of the real values."""
    secrets = _secrets()
    user = f"user-{uuid.uuid4().hex}"
    count: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool(redact=("card_number",))
    def login(
        user: str, password: str, token: str, api_key: str, authorization: str, secret: str
    ) -> dict[str, str]:
        count["login"] += 1
        return {"sid": "s-1"}  # a "session" key would be redacted (a result's secret name)

    @eng.tool(side_effect=True, redact=("card_number",))
    def pay(order: str, card_number: str, *, idempotency_key: str) -> str:
        count["pay"] += 1
        if crash["on"]:
            raise Crash
        return f"paid {order}"

    @eng.agent(snapshot_every=1)  # snapshots too must hold no secret
    def checkout(run: Any, order: str) -> dict[str, str]:
        s = secrets  # from a vault or the environment, never the run's input
        session = login(
            user, s["password"], s["token"], s["api_key"], s["authorization"], s["secret"]
        )
        run.checkpoint("logged-in")
        return {"sid": session["sid"], "paid": pay(order, s["card_number"])}

    with pytest.raises(Crash):
        eng.run(checkout, run_id="secret-run", order="o1")
    crash["on"] = False
    r = eng.resume("secret-run")
    assert (r.status, r.output) == ("completed", {"sid": "s-1", "paid": "paid o1"})
    assert count == {"login": 1, "pay": 2}  # login replayed by hash; pay re-sent

    data = stored_bytes(store_url, eng)
    assert user.encode() in data and b"<redacted>" in data
    for name, value in secrets.items():
        assert value.encode() not in data, f"{name} leaked into the store"
    intents = [d for _, t, d in log_of(eng, "secret-run") if t == "tool_invoked"]
    assert intents[0]["args"]["user"] == user
    for d in intents:
        for name in NAMES:
            if name in d["args"]:
                assert d["args"][name] == "<redacted>"


@backends("memory", "sqlite", "postgres")
def test_secrets_never_reach_the_debug_logs_nor_the_store_across_a_kill(
    store_url: str, tmp_path: Any
) -> None:
    """AGENTLOG_LOG_LEVEL=debug, console and JSON renderers: a run killed after its
    intent (SIGKILL) and resumed in a new process logs no secret, stores none, and
    completes with one effect."""
    secrets = _secrets()
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {
        "AGENTLOG_TEST_SERVICE": svc,
        "AGENTLOG_TEST_SECRETS": json.dumps(secrets),
        "AGENTLOG_LOG_LEVEL": "debug",
    }
    inp = json.dumps({"order": "o1"})
    module = "tests.agents.runtime_agents"
    if store_url.startswith("memory"):  # one process: run, then the same process again
        p = python("-m", module, store_url, "secret-run", "secret_flow", inp, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        logs = p.stderr
    else:
        killed = python(
            "-m",
            module,
            store_url,
            "secret-run",
            "secret_flow",
            inp,
            env={**env, "AGENTLOG_FAILPOINTS": "after_intent"},
        )
        assert killed.returncode == -9, killed.stderr[-2000:]
        p = python(
            "-c",
            "import sys, json; from engine import Engine, observe\n"
            "observe.configure()\n"
            "r = Engine.open(sys.argv[1]).resume('secret-run')\n"
            "print(json.dumps([r.status, r.output]))",
            store_url,
            env={**env, "AGENTLOG_LOG": "json"},
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout)[0] == "completed"
        logs = killed.stderr + p.stderr
        e = Engine.open(store_url)
        data = stored_bytes(store_url, e)
        e.close()
        assert b"<redacted>" in data
        for name, value in secrets.items():
            assert value.encode() not in data, f"{name} leaked into the store"
    assert "tool_call" in logs and "secret-run" in logs  # debug lines were written
    for name, value in secrets.items():
        assert value not in logs, f"{name} leaked into the logs"
    assert service.effects(svc) == Counter({("pay_by_card", "o1"): 1})


@all_backends
def test_secret_names_are_redacted_inside_nested_arguments(eng: Engine, store_url: str) -> None:
    """``headers={"Authorization": ...}`` or a body holding a ``password`` at any depth is
    stored redacted; the other nested values are kept."""
    token, password = f"Bearer {uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    trace = f"trace-{uuid.uuid4().hex}"

    @eng.tool(side_effect=True)
    def call_api(url: str, headers: dict[str, str], body: dict[str, Any]) -> int:
        return 200

    @eng.agent
    def client(run: Any) -> int:
        body = {"users": [{"name": "ann", "Password": password}]}
        return int(call_api("https://api", {"Authorization": token, "X-Trace": trace}, body))

    r = eng.run(client)
    assert (r.status, r.output) == ("completed", 200)
    data = stored_bytes(store_url, eng)
    assert trace.encode() in data
    assert token.encode() not in data and password.encode() not in data
    args = next(d for _, t, d in log_of(eng, r.run_id) if t == "tool_invoked")["args"]
    assert args["headers"] == {"Authorization": "<redacted>", "X-Trace": trace}
    assert args["body"] == {"users": [{"name": "ann", "Password": "<redacted>"}]}


@contextlib.contextmanager
def _debug_logs() -> Iterator[list[dict[str, Any]]]:
    """Every structlog entry at any level, as the processors would receive it; the
    previous configuration is restored afterwards."""
    old = structlog.get_config()
    entries = structlog.testing.LogCapture()
    structlog.configure(
        processors=[entries], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    try:
        yield entries.entries
    finally:
        structlog.configure(**old)


@all_backends
def test_secret_names_in_any_case_or_separator_are_redacted(eng: Engine, store_url: str) -> None:
    """``API_KEY`` and ``Password`` parameters, ``X-API-Key``, ``apiKey`` and
    ``client-secret`` keys in nested dicts: no value reaches a stored byte, an event,
    failure evidence or a log entry, while a visible neighbour is kept; a retried call
    (a failed attempt records its evidence) still completes."""
    values = {
        n: f"S3CR3T-{n}-{uuid.uuid4().hex}"
        for n in ("API_KEY", "Password", "hdr", "camel", "client")
    }
    visible = f"trace-{uuid.uuid4().hex}"
    attempts: Counter[str] = Counter()

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0.0, jitter=False))
    def connect(API_KEY: str, Password: str, options: dict[str, Any]) -> str:
        attempts["connect"] += 1
        if attempts["connect"] % 2:  # each run's first attempt fails
            raise ConnectionRefusedError("try again")
        return "connected"

    @eng.agent
    def client(run: Any) -> str:
        v = values
        options = {
            "headers": {"X-API-Key": v["hdr"], "X-Trace": visible},
            "auth": [{"apiKey": v["camel"], "client-secret": v["client"]}],
        }
        return str(connect(v["API_KEY"], v["Password"], options))

    eng.run(client)  # the logger is set up on first use; the capture replaces it after
    with _debug_logs() as logs:
        r = eng.run(client)
    assert (r.status, r.output) == ("completed", "connected")
    data = stored_bytes(store_url, eng)
    events = json.dumps([e.data for e in eng.events(r.run_id)])
    assert visible.encode() in data and visible in events and logs
    for name, value in values.items():
        assert value.encode() not in data, f"{name} leaked into the store"
        assert value not in events, f"{name} leaked into the events"
        assert value not in repr(logs), f"{name} leaked into the logs"
    (failed,) = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_failed"]
    args = failed["evidence"]["args"]
    assert args["API_KEY"] == args["Password"] == "<redacted>"
    assert args["options"]["headers"] == {"X-API-Key": "<redacted>", "X-Trace": visible}


@pytest.mark.parametrize(
    "name",
    [
        "Passwd",
        "client_secret",
        "X-Auth-Token",
        "Set-Cookie",
        "aws_credentials",
        "PRIVATE-KEY",
        "sessionId",
        "proxy-authorization",
        "API-KEY",
        "Card-Number",  # named by redact=("card_number",)
    ],
)
def test_every_secret_word_is_matched_inside_a_name_in_any_form(name: str) -> None:
    """Each of CONTRACT's secret words (and ``redact=`` names) matches any name that
    contains it, whatever its case and ``-``/``_`` separators; other names stay visible."""
    eng = Engine.open("memory://")

    @eng.tool(redact=("card_number",))
    def call(body: dict[str, Any]) -> None: ...

    body = {"outer": [{name: "hidden", "user": "ann"}]}
    assert tool_def(call).redacted({"body": body}) == {
        "body": {"outer": [{name: "<redacted>", "user": "ann"}]}
    }
