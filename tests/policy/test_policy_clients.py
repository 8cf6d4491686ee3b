"""Real client libraries against a real loopback service: exactly one effect per charge.

httpx, requests (sync tools in sync agents) and aiohttp (async tools in async agents) post
to a service on a loopback socket (tests/agents/loopback.py) that counts the requests it
receives and the effects it applies. A request that may have landed (a read timeout, a
connection dropped mid-response, a 500) is verified, re-sent only under the same key, or
asked of a person, and never sent again blindly, across a resume as well; a request that
never connected is retried; a 503/429 is retried, a 400 fails at once and frees its key.
Runs on SQLite and PostgreSQL; time is injected (no real backoff sleeps).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from agents.fake_time import FakeTime, timed_engine
from agents.kit import log_of
from agents.loopback import READ_TIMEOUT, Loopback, loopback

from engine import Engine, RetryPolicy
from engine.runtime.call import ledger
from engine.runtime.call.evidence import RESPONSE_LIMIT

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
LIBS = pytest.mark.parametrize("lib", ["httpx", "requests", "aiohttp"])
RETRY = RetryPolicy(max_attempts=3, initial=0.5)

# The exception each library raises for each way a request can go wrong.
RAISED = {
    "httpx": {
        "stall": "ReadTimeout",
        "drop": "RemoteProtocolError",
        "chunked": "RemoteProtocolError",
        "500+": "HTTPStatusError",
        "refused": "ConnectError",
        "black_hole": "ConnectTimeout",
    },
    "requests": {
        "stall": "ReadTimeout",
        "drop": "ConnectionError",
        "chunked": "ChunkedEncodingError",
        "500+": "HTTPError",
        "refused": "ConnectionError",
        "black_hole": "ConnectTimeout",
    },
    "aiohttp": {
        "stall": "SocketTimeoutError",
        "drop": "ServerDisconnectedError",
        "chunked": "ClientPayloadError",
        "500+": "ClientResponseError",
        "refused": "ClientConnectorError",
        "black_hole": "ConnectionTimeoutError",
    },
}


def _headers(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def send_httpx(url: str, order: str, key: str | None) -> Any:
    r = httpx.post(
        f"{url}/charge", json={"order": order}, headers=_headers(key), timeout=READ_TIMEOUT
    )
    r.raise_for_status()
    return r.json()


def send_requests(url: str, order: str, key: str | None) -> Any:
    r = requests.post(
        f"{url}/charge", json={"order": order}, headers=_headers(key), timeout=READ_TIMEOUT
    )
    r.raise_for_status()
    return r.json()


async def send_aiohttp(url: str, order: str, key: str | None) -> Any:
    timeout = aiohttp.ClientTimeout(sock_connect=READ_TIMEOUT, sock_read=READ_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{url}/charge", json={"order": order}, headers=_headers(key)) as r,
    ):
        r.raise_for_status()
        return await r.json()


SEND: dict[str, Callable[..., Any]] = {
    "httpx": send_httpx,
    "requests": send_requests,
    "aiohttp": send_aiohttp,
}


def lookup(svc: Loopback, key: str) -> Any:
    """A verifier: ask the service whether the effect under ``key`` exists."""
    r = httpx.get(f"{svc.url}/effects/{key}", timeout=10.0)
    return r.json() if r.status_code == 200 else None


def make_charge(eng: Engine, svc: Loopback, lib: str, shape: str, **options: Any) -> Any:
    """A side-effecting charge posting with ``lib``: ``plain`` (no verifier, no key),
    ``verified`` (business key ``charge:ORDER`` sent as the header, a verifier asking the
    service) or ``keyed`` (takes ``idempotency_key`` and sends it)."""
    send = SEND[lib]
    options.setdefault("retry", RETRY)
    if shape == "verified":
        options.update(key=lambda order: f"charge:{order}", verify=lambda k: lookup(svc, k))
    if shape == "keyed":

        def keyed(order: str, *, idempotency_key: str) -> Any:
            return send(svc.url, order, idempotency_key)

        fn: Callable[..., Any] = keyed
    else:

        def fn(order: str) -> Any:
            return send(svc.url, order, f"charge:{order}" if shape == "verified" else None)

    if lib == "aiohttp":  # the same tool, as an async def
        sync = fn

        async def charge(*args: Any, **kwargs: Any) -> Any:
            return await sync(*args, **kwargs)

        charge.__signature__ = inspect.signature(sync)  # type: ignore[attr-defined]
        fn = charge
    return eng.tool(side_effect=True, **options)(fn)


def make_agent(eng: Engine, tool: Any, lib: str) -> Any:
    if lib == "aiohttp":

        async def pay_async(run: Any, order: str) -> Any:
            return await tool(order)

        return eng.agent(pay_async)

    def pay(run: Any, order: str) -> Any:
        return tool(order)

    return eng.agent(pay)


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=1)


def failures(eng: Engine, run_id: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == "tool_failed"]


def types_of(eng: Engine, run_id: str) -> list[str]:
    return [t for _, t, _ in log_of(eng, run_id)]


def source_of(eng: Engine, run_id: str) -> str:
    (done,) = [d for _, t, d in log_of(eng, run_id) if t == "tool_succeeded"]
    return str(done["source"])


# --- a request that may have landed --------------------------------------------------


@STORES
@LIBS
@pytest.mark.parametrize("answer", ["stall", "drop", "chunked", "500+"])
def test_an_uncertain_post_without_verifier_or_key_pauses_and_is_never_resent(
    eng: Engine, lib: str, answer: str
) -> None:
    """The service applied the charge, then the client saw a read timeout / a dropped
    connection / a 500: the run pauses asking a person (one request); resume sends
    nothing; 'done' completes it without sending."""
    with loopback() as svc:
        svc.script = [answer]
        agent = make_agent(eng, make_charge(eng, svc, lib, "plain"), lib)
        r = eng.run(agent, order="o1")
        assert r.status == "paused" and "charge" in (r.waiting or ""), r
        assert len(svc.requests) == 1 and svc.charges("o1") == 1
        (failed,) = failures(eng, r.run_id)
        assert (failed["kind"], failed["error_type"]) == ("indeterminate", RAISED[lib][answer])
        assert "retry_scheduled" not in types_of(eng, r.run_id)

        assert eng.resume(r.run_id).status == "paused"
        assert len(svc.requests) == 1
        done = eng.answer(r.run_id, "done")
        assert done.status == "completed" and source_of(eng, r.run_id) == "human"
        assert len(svc.requests) == 1 and svc.charges("o1") == 1


@STORES
@LIBS
@pytest.mark.parametrize("answer", ["stall", "drop"])
def test_an_uncertain_post_is_verified_and_not_sent_again(
    eng: Engine, lib: str, answer: str
) -> None:
    """With a verifier, the uncertain charge is found on the service: one request."""
    with loopback() as svc:
        svc.script = [answer]
        agent = make_agent(eng, make_charge(eng, svc, lib, "verified"), lib)
        r = eng.run(agent, order="o2")
        assert r.status == "completed", r
        assert r.output["receipt"] == "r-o2-1" and source_of(eng, r.run_id) == "verified"
        assert svc.keys() == ["charge:o2"] and svc.lookups == ["charge:o2"]


@STORES
@LIBS
@pytest.mark.parametrize("answer", ["stall", "drop", "500+"])
def test_an_uncertain_post_is_resent_only_under_the_same_key(
    eng: Engine, lib: str, answer: str
) -> None:
    """A tool that takes the key re-sends under the same key: the service saw two
    requests with one key and applied one effect."""
    with loopback() as svc:
        svc.script = [answer]
        agent = make_agent(eng, make_charge(eng, svc, lib, "keyed"), lib)
        r = eng.run(agent, order="o3")
        assert (r.status, r.output["receipt"]) == ("completed", "r-o3-1"), r
        assert svc.keys() == [f"{r.run_id}:1"] * 2 and svc.charges("o3") == 1
        assert [f["kind"] for f in failures(eng, r.run_id)] == ["indeterminate"]


# --- a request that never left ---------------------------------------------------------


@STORES
@LIBS
@pytest.mark.parametrize("start", ["refused", "black_hole"])
def test_a_post_that_never_connected_is_retried_until_the_service_is_up(
    eng: Engine, fake: FakeTime, lib: str, start: str
) -> None:
    """Connection refused / connect timeout: nothing was sent, so the call is transient
    and retried after its backoff (during which the service comes up): one request."""
    with loopback(start) as svc:
        fake.then = svc.up  # the service comes up during the backoff
        agent = make_agent(eng, make_charge(eng, svc, lib, "plain"), lib)
        r = eng.run(agent, order="o4")
        assert (r.status, r.output["receipt"]) == ("completed", "r-o4-1"), r
        (failed,) = failures(eng, r.run_id)
        assert (failed["kind"], failed["error_type"]) == ("transient", RAISED[lib][start])
        assert len(svc.requests) == 1 and len(fake.slept) == 1


@STORES
@LIBS
def test_a_post_that_never_connects_fails_transient_and_frees_its_key(
    eng: Engine, lib: str
) -> None:
    """The service never comes up: attempts exhausted, the run fails with a transient
    error, nothing reached the service, and the business key is released."""
    with loopback("refused") as svc:
        tool = make_charge(eng, svc, lib, "verified", retry=RetryPolicy(max_attempts=2))
        r = eng.run(make_agent(eng, tool, lib), order="o5")
        assert r.status == "failed" and RAISED[lib]["refused"] in (r.error or ""), r
        kinds = [(f["kind"], f["final"]) for f in failures(eng, r.run_id)]
        assert kinds == [("transient", False), ("transient", True)]
        assert svc.requests == []
        state = ledger.read(eng.store, "charge:o5")
        assert state.claim is None and state.committed is None and state.version == 2


# --- HTTP status errors ----------------------------------------------------------------


@STORES
@LIBS
@pytest.mark.parametrize("status", ["503", "429"])
def test_a_503_or_429_is_retried_and_charges_once(eng: Engine, lib: str, status: str) -> None:
    """Not served: transient, retried; the failure records the status and the body
    (cut to 2 KiB)."""
    with loopback() as svc:
        svc.script = [status]
        agent = make_agent(eng, make_charge(eng, svc, lib, "plain"), lib)
        r = eng.run(agent, order="o6")
        assert (r.status, r.output["receipt"]) == ("completed", "r-o6-1"), r
        assert len(svc.requests) == 2 and svc.charges("o6") == 1
        (failed,) = failures(eng, r.run_id)
        assert failed["kind"] == "transient" and failed["evidence"]["status"] == int(status)
        if lib != "aiohttp":  # aiohttp's error carries no body
            body = failed["evidence"]["response"]
            assert f"status {status}" in body and len(body.encode()) == RESPONSE_LIMIT


@STORES
@LIBS
def test_a_400_fails_at_once_and_frees_its_key(eng: Engine, lib: str) -> None:
    """The service refused the request: permanent, one request, no retry, key released
    (a later run may charge the order); the status and body are the evidence."""
    with loopback() as svc:
        svc.script = ["400"]
        agent = make_agent(eng, make_charge(eng, svc, lib, "verified"), lib)
        r = eng.run(agent, order="o7")
        assert r.status == "failed" and len(svc.requests) == 1 and svc.effects == {}
        (failed,) = failures(eng, r.run_id)
        assert failed["kind"] == "permanent" and failed["final"]
        assert failed["evidence"]["status"] == 400
        assert "retry_scheduled" not in types_of(eng, r.run_id)
        assert ledger.read(eng.store, "charge:o7").claim is None
        again = eng.run(agent, order="o7")
        assert again.status == "completed" and svc.charges("o7") == 1


@STORES
def test_a_500_keeps_its_business_key_claimed(eng: Engine) -> None:
    """A 500 on a side effect is indeterminate: with a business key and a verifier that
    finds nothing the key is re-sent (same key), and when attempts run out the run fails
    with the key still claimed, so no other run can charge the order blindly."""
    with loopback() as svc:
        svc.script = ["503", "503", "503"]
        tool = make_charge(eng, svc, "httpx", "verified", retry=RetryPolicy(max_attempts=3))
        r = eng.run(make_agent(eng, tool, "httpx"), order="o8")
        assert r.status == "failed" and ledger.read(eng.store, "charge:o8").claim is None
        svc.script = ["500", "500", "500"]  # not applied: the verifier finds nothing
        r = eng.run(make_agent(eng, tool, "httpx"), order="o9")
        assert r.status == "failed", r
        kinds = [(f["kind"], f["final"]) for f in failures(eng, r.run_id)]
        assert kinds == [("indeterminate", False)] * 2 + [("indeterminate", True)]
        assert svc.keys()[3:] == ["charge:o9"] * 3 and svc.charges("o9") == 0
        state = ledger.read(eng.store, "charge:o9")
        assert state.claim is not None and state.claim.run_id == r.run_id


# --- an error of the tool's own after the service acted -------------------------------


def _smtp_like(order: str) -> Any:
    raise RuntimeError("connection closed while reading the server's goodbye")


def _not_json(order: str) -> Any:
    return httpx.Response(200, text="<html>oops</html>").json()


@STORES
@pytest.mark.parametrize(
    ("after", "raised"), [(_smtp_like, "RuntimeError"), (_not_json, "JSONDecodeError")]
)
def test_an_error_raised_after_the_service_acted_is_never_resent(
    eng: Engine, after: Callable[[str], Any], raised: str
) -> None:
    """The tool posts (the service charges), then raises: a RuntimeError (the SMTP-like
    case) or a ValueError from ``response.json()``. Both are indeterminate for a side
    effect: the run pauses with one request and its business key claimed; resuming twice
    sends nothing; 'done' completes it."""
    with loopback() as svc:

        @eng.tool(side_effect=True, key=lambda order: f"mail:{order}", retry=RETRY)
        def deliver(order: str) -> Any:
            send_httpx(svc.url, order, None)
            return after(order)

        @eng.agent
        def mailer(run: Any, order: str) -> Any:
            return deliver(order)

        r = eng.run(mailer, order="m1")
        assert r.status == "paused" and len(svc.requests) == 1, r
        (failed,) = failures(eng, r.run_id)
        assert (failed["kind"], failed["error_type"]) == ("indeterminate", raised)
        assert ledger.read(eng.store, "mail:m1").claim is not None
        for _ in range(2):
            assert eng.resume(r.run_id).status == "paused"
        assert len(svc.requests) == 1
        assert eng.answer(r.run_id, "done").status == "completed"
        assert len(svc.requests) == 1 and svc.charges("m1") == 1
        assert ledger.read(eng.store, "mail:m1").committed is not None
