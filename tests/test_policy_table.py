"""The default classification table, row by row, on real exception instances.

Every row of ``engine.policy.DEFAULT_TABLE`` is exercised by an instance of a real class
(the client libraries' own exceptions, constructed as they construct them), for a
side-effecting and a read-only tool; precedence along the MRO (the most specific row
wins) is pinned where libraries use multiple inheritance; a tool's ``classify=`` hook
overrides the table; docs/reference/failures.md documents exactly this table.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import smtplib
import socket
import types
import urllib.error
from email.message import Message
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx
import multidict
import openai
import pydantic
import pytest
import requests
import urllib3.exceptions as u3
import yarl
from pydantic_ai import exceptions as pai

from engine import Indeterminate, Logical, Permanent, Transient
from engine.errors import ToolError
from engine.kinds import TOOL_KINDS
from engine.policy.failure import DEFAULT_TABLE, HTTP_STATUS, SMTP_REPLY, WRAPPED, classify, row_for

T, P, I, L = "transient", "permanent", "indeterminate", "logical"  # noqa: E741
FAILURES_PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "failures.md"


_REQUEST = httpx.Request("POST", "http://127.0.0.1/v1")


def _sdk_status(cls: type[Any], status: int) -> BaseException:
    """A model SDK's status error as its client raises it."""
    error: BaseException = cls(
        f"{status}", response=httpx.Response(status, request=_REQUEST), body=None
    )
    return error


def _validation_error() -> BaseException:
    """A pydantic ValidationError, as an SDK raises one for an answer that is not valid."""
    try:
        pydantic.TypeAdapter(int).validate_python("many")
    except pydantic.ValidationError as e:
        return e
    raise AssertionError("validated")


def _httpx_status(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://svc/charge")
    response = httpx.Response(status, request=request, text="busy")
    return httpx.HTTPStatusError(f"{status}", request=request, response=response)


def _requests_status(status: int | None) -> requests.exceptions.HTTPError:
    if status is None:
        return requests.exceptions.HTTPError("no response attached")
    response = requests.Response()
    response.status_code, response._content = status, b"busy"
    return requests.exceptions.HTTPError(f"{status}", response=response)


def _aiohttp_status(status: int, cls: type = aiohttp.ClientResponseError) -> Exception:
    url = yarl.URL("http://svc/charge")
    info = aiohttp.RequestInfo(url, "POST", multidict.CIMultiDictProxy(multidict.CIMultiDict()))
    return cls(info, (), status=status, message="busy")


def _urllib_status(status: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://svc/charge", status, "busy", Message(), None)


_KEY = types.SimpleNamespace(host="svc", port=80, ssl=True, is_ssl=False)
_REFUSED = u3.NewConnectionError(None, "Connection refused")
_DROPPED = u3.ProtocolError("Connection aborted.", ConnectionResetError("reset by peer"))


class MyTransient(Transient):
    """A user's own kind, defined outside the engine."""


# (exception, kind for a side-effecting tool, kind for a read-only tool, deciding row)
MODEL_CASES: list[tuple[BaseException, str, str, str]] = [
    (case, side, read, f"{sdk.__name__}.{name}")
    for sdk in (openai, anthropic)
    for case, side, read, name in (
        (sdk.APITimeoutError(request=_REQUEST), I, T, "APITimeoutError"),
        (sdk.APIConnectionError(request=_REQUEST), I, T, "APIConnectionError"),
        (_sdk_status(sdk.RateLimitError, 429), T, T, "RateLimitError"),
        (_sdk_status(sdk.APIStatusError, 503), T, T, "APIStatusError"),
        (_sdk_status(sdk.BadRequestError, 400), P, P, "APIStatusError"),
        (_sdk_status(sdk.InternalServerError, 500), I, T, "APIStatusError"),
        (
            sdk.APIResponseValidationError(httpx.Response(200, request=_REQUEST), None),
            L,
            L,
            "APIResponseValidationError",
        ),
    )
] + [
    (_sdk_status(anthropic.OverloadedError, 529), T, T, "anthropic.OverloadedError"),
    (openai.ContentFilterFinishReasonError(), L, L, "openai.ContentFilterFinishReasonError"),
    (
        openai.LengthFinishReasonError.__new__(openai.LengthFinishReasonError),
        L,
        L,
        "openai.LengthFinishReasonError",
    ),
    (_validation_error(), I, L, "pydantic_core.ValidationError"),
]
_PAI = "pydantic_ai.exceptions."
PYDANTIC_AI_CASES: list[tuple[BaseException, str, str, str]] = [
    (pai.ModelHTTPError(429, "m"), T, T, _PAI + "ModelHTTPError"),
    (pai.ModelHTTPError(503, "m"), T, T, _PAI + "ModelHTTPError"),
    (pai.ModelHTTPError(500, "m"), I, T, _PAI + "ModelHTTPError"),
    (pai.ModelHTTPError(401, "m"), P, P, _PAI + "ModelHTTPError"),
    (pai.ModelRateLimitError("m", "slow down"), T, T, _PAI + "ModelRateLimitError"),
    (pai.ModelOverloadedError("m", "busy"), T, T, _PAI + "ModelUnavailableError"),
    (pai.ModelQuotaExceededError("m", "no credit"), P, P, _PAI + "ModelQuotaExceededError"),
    (pai.ModelAuthenticationError("m", "bad key"), P, P, _PAI + "ModelRequestRejectedError"),
    (pai.ModelContextWindowExceededError("m", "long"), P, P, _PAI + "ModelRequestRejectedError"),
    (pai.ModelTimeoutError("m", "no reply"), I, T, _PAI + "ModelConnectionError"),
    (pai.ModelRequestTimeout("m", 30.0), I, T, _PAI + "ModelRequestTimeout"),
    (pai.ModelServerError("m", "boom"), I, T, _PAI + "ModelServerError"),
    (pai.ContentFilterError("filtered"), L, L, _PAI + "UnexpectedModelBehavior"),
    (pai.UnexpectedModelBehavior("not JSON"), L, L, _PAI + "UnexpectedModelBehavior"),
    (pai.UsageLimitExceeded("spent"), P, P, _PAI + "UsageLimitExceeded"),
    (pai.UserError("no model given"), P, P, _PAI + "UserError"),
]

CASES: list[tuple[BaseException, str, str, str]] = [
    # our kinds say their own kind
    (Transient("x"), T, T, "engine.errors.ToolError"),
    (Permanent("x"), P, P, "engine.errors.ToolError"),
    (Indeterminate("x"), I, I, "engine.errors.ToolError"),
    (Logical("x"), L, L, "engine.errors.ToolError"),
    (MyTransient("x"), T, T, "engine.errors.ToolError"),
    # builtins
    (ConnectionRefusedError(111, "refused"), T, T, "builtins.ConnectionRefusedError"),
    (ConnectionResetError("reset"), I, T, "builtins.ConnectionResetError"),
    (ConnectionAbortedError("aborted"), I, T, "builtins.ConnectionAbortedError"),
    (BrokenPipeError("pipe"), I, T, "builtins.BrokenPipeError"),
    (ConnectionError("?"), I, T, "builtins.ConnectionError"),
    (TimeoutError("slow"), I, T, "builtins.TimeoutError"),
    (asyncio.TimeoutError(), I, T, "builtins.TimeoutError"),  # noqa: UP041
    (socket.timeout("slow"), I, T, "builtins.TimeoutError"),  # noqa: UP041
    (socket.gaierror(-2, "Name or service not known"), T, T, "socket.gaierror"),
    (json.JSONDecodeError("Expecting value", "<html>", 0), I, P, "json.JSONDecodeError"),
    (ValueError("bad"), I, P, "builtins.ValueError"),
    (TypeError("bad"), I, P, "builtins.TypeError"),
    (KeyError("k"), I, P, "builtins.KeyError"),
    (PermissionError("no"), I, P, "builtins.PermissionError"),
    (RuntimeError("?"), I, T, "builtins.RuntimeError"),
    (NotImplementedError(), I, T, "builtins.RuntimeError"),
    (Exception("?"), I, T, "builtins.BaseException"),
    (OSError("?"), I, T, "builtins.BaseException"),
    (ZeroDivisionError(), I, T, "builtins.BaseException"),
    # smtplib
    (smtplib.SMTPServerDisconnected("gone"), I, T, "smtplib.SMTPServerDisconnected"),
    (smtplib.SMTPConnectError(421, "busy"), T, T, "smtplib.SMTPConnectError"),
    (smtplib.SMTPConnectError(554, "go away"), P, P, "smtplib.SMTPConnectError"),
    (smtplib.SMTPHeloError(501, "bad helo"), P, P, "smtplib.SMTPHeloError"),
    (smtplib.SMTPAuthenticationError(535, "bad login"), P, P, "smtplib.SMTPAuthenticationError"),
    (smtplib.SMTPAuthenticationError(454, "try later"), T, T, "smtplib.SMTPAuthenticationError"),
    (smtplib.SMTPNotSupportedError("no AUTH"), P, P, "smtplib.SMTPNotSupportedError"),
    (smtplib.SMTPSenderRefused(550, b"no", "a@x"), P, P, "smtplib.SMTPSenderRefused"),
    (smtplib.SMTPSenderRefused(451, b"later", "a@x"), T, T, "smtplib.SMTPSenderRefused"),
    (smtplib.SMTPRecipientsRefused({"b@x": (550, b"no")}), P, P, "smtplib.SMTPRecipientsRefused"),
    (smtplib.SMTPDataError(554, "spam"), P, P, "smtplib.SMTPDataError"),
    (smtplib.SMTPDataError(451, "later"), T, T, "smtplib.SMTPDataError"),
    (smtplib.SMTPResponseException(421, "closing"), I, T, "smtplib.SMTPException"),
    (smtplib.SMTPException("?"), I, T, "smtplib.SMTPException"),
    # urllib
    (_urllib_status(503), T, T, "urllib.error.HTTPError"),
    (_urllib_status(500), I, T, "urllib.error.HTTPError"),
    (_urllib_status(404), P, P, "urllib.error.HTTPError"),
    (urllib.error.URLError(ConnectionRefusedError(111, "x")), T, T, "urllib.error.URLError"),
    (urllib.error.URLError(TimeoutError("slow")), I, T, "urllib.error.URLError"),
    # httpx
    (httpx.ConnectError("refused"), T, T, "httpx.ConnectError"),
    (httpx.ConnectTimeout("slow"), T, T, "httpx.ConnectTimeout"),
    (httpx.PoolTimeout("busy"), T, T, "httpx.PoolTimeout"),
    (httpx.ReadTimeout("slow"), I, T, "httpx.ReadTimeout"),
    (httpx.WriteTimeout("slow"), I, T, "httpx.WriteTimeout"),
    (httpx.RemoteProtocolError("gone"), I, T, "httpx.RemoteProtocolError"),
    (httpx.UnsupportedProtocol("ftp"), P, P, "httpx.UnsupportedProtocol"),
    (httpx.InvalidURL("::"), P, P, "httpx.InvalidURL"),
    (httpx.ReadError("reset"), I, T, "httpx.TransportError"),
    (httpx.LocalProtocolError("?"), I, T, "httpx.TransportError"),
    (httpx.DecodingError("gzip"), I, T, "builtins.BaseException"),
    (_httpx_status(429), T, T, "httpx.HTTPStatusError"),
    (_httpx_status(502), T, T, "httpx.HTTPStatusError"),
    (_httpx_status(503), T, T, "httpx.HTTPStatusError"),
    (_httpx_status(504), T, T, "httpx.HTTPStatusError"),
    (_httpx_status(400), P, P, "httpx.HTTPStatusError"),
    (_httpx_status(404), P, P, "httpx.HTTPStatusError"),
    (_httpx_status(500), I, T, "httpx.HTTPStatusError"),
    (_httpx_status(501), I, T, "httpx.HTTPStatusError"),
    (_httpx_status(302), I, T, "httpx.HTTPStatusError"),
    # requests
    (requests.exceptions.ConnectTimeout("slow"), T, T, "requests.exceptions.ConnectTimeout"),
    (requests.exceptions.ReadTimeout("slow"), I, T, "requests.exceptions.ReadTimeout"),
    (requests.exceptions.Timeout("slow"), I, T, "requests.exceptions.Timeout"),
    (
        requests.exceptions.ConnectionError(u3.MaxRetryError(None, "/", _REFUSED)),
        T,
        T,
        "requests.exceptions.ConnectionError",
    ),
    (requests.exceptions.ConnectionError(_DROPPED), I, T, "requests.exceptions.ConnectionError"),
    (requests.exceptions.ConnectionError("?"), I, T, "requests.exceptions.ConnectionError"),
    (
        requests.exceptions.ChunkedEncodingError(_DROPPED),
        I,
        T,
        "requests.exceptions.ChunkedEncodingError",
    ),
    (_requests_status(429), T, T, "requests.exceptions.HTTPError"),
    (_requests_status(400), P, P, "requests.exceptions.HTTPError"),
    (_requests_status(500), I, T, "requests.exceptions.HTTPError"),
    (_requests_status(None), I, T, "requests.exceptions.HTTPError"),
    (
        requests.exceptions.JSONDecodeError("x", "<html>", 0),
        I,
        P,
        "requests.exceptions.JSONDecodeError",
    ),
    (requests.exceptions.InvalidJSONError("nan"), P, P, "requests.exceptions.InvalidJSONError"),
    (requests.exceptions.InvalidURL("::"), P, P, "requests.exceptions.InvalidURL"),
    (requests.exceptions.MissingSchema("x"), P, P, "requests.exceptions.MissingSchema"),
    (requests.exceptions.InvalidSchema("x"), P, P, "requests.exceptions.InvalidSchema"),
    (requests.exceptions.InvalidHeader("x"), P, P, "requests.exceptions.InvalidHeader"),
    (requests.exceptions.SSLError("x"), I, T, "requests.exceptions.ConnectionError"),
    # urllib3
    (_REFUSED, T, T, "urllib3.exceptions.NewConnectionError"),
    (
        u3.NameResolutionError("svc", None, socket.gaierror()),
        T,
        T,
        "urllib3.exceptions.NewConnectionError",
    ),
    (u3.ConnectTimeoutError("slow"), T, T, "urllib3.exceptions.ConnectTimeoutError"),
    (u3.ReadTimeoutError(None, "/", "slow"), I, T, "urllib3.exceptions.ReadTimeoutError"),
    (_DROPPED, I, T, "urllib3.exceptions.ProtocolError"),
    (u3.MaxRetryError(None, "/", _REFUSED), T, T, "urllib3.exceptions.MaxRetryError"),
    (u3.MaxRetryError(None, "/", _DROPPED), I, T, "urllib3.exceptions.MaxRetryError"),
    # aiohttp
    (aiohttp.ClientConnectorError(_KEY, OSError(111, "x")), T, T, "aiohttp.ClientConnectorError"),
    (aiohttp.ClientConnectorDNSError(_KEY, OSError(-2, "x")), T, T, "aiohttp.ClientConnectorError"),
    (aiohttp.ConnectionTimeoutError("slow"), T, T, "aiohttp.ConnectionTimeoutError"),
    (aiohttp.SocketTimeoutError("slow"), I, T, "aiohttp.SocketTimeoutError"),
    (aiohttp.ServerTimeoutError("slow"), I, T, "aiohttp.ServerTimeoutError"),
    (aiohttp.ServerDisconnectedError(), I, T, "aiohttp.ServerDisconnectedError"),
    (aiohttp.ClientPayloadError("cut"), I, T, "aiohttp.ClientPayloadError"),
    (_aiohttp_status(200, aiohttp.ContentTypeError), I, P, "aiohttp.ContentTypeError"),
    (_aiohttp_status(503, aiohttp.ContentTypeError), T, T, "aiohttp.ContentTypeError"),
    (_aiohttp_status(429), T, T, "aiohttp.ClientResponseError"),
    (_aiohttp_status(403), P, P, "aiohttp.ClientResponseError"),
    (_aiohttp_status(500), I, T, "aiohttp.ClientResponseError"),
    (aiohttp.ClientConnectionResetError("reset"), I, T, "builtins.ConnectionResetError"),
    *MODEL_CASES,
    *PYDANTIC_AI_CASES,
]


@pytest.mark.parametrize(
    ("exc", "side_effect", "read_only", "row"),
    CASES,
    ids=[f"{type(c[0]).__module__}.{type(c[0]).__qualname__}-{n}" for n, c in enumerate(CASES)],
)
def test_each_exception_is_classified_by_its_table_row(
    exc: BaseException, side_effect: str, read_only: str, row: str
) -> None:
    assert row_for(type(exc)).match == row
    assert classify(exc, side_effect=True) == side_effect
    assert classify(exc, side_effect=False) == read_only


def test_every_row_of_the_table_is_exercised_and_well_formed() -> None:
    """Each row is decided for at least one case above; rows name distinct classes, give
    known kinds, and the catch-all comes last."""
    assert {m for m in (r.match for r in DEFAULT_TABLE)} == {row for *_, row in CASES}
    names = [r.match for r in DEFAULT_TABLE]
    assert len(names) == len(set(names))
    for r in DEFAULT_TABLE:
        assert r.side_effect in TOOL_KINDS and r.read_only in TOOL_KINDS and r.why, r
    assert DEFAULT_TABLE[-1].match == "builtins.BaseException"


def test_a_side_effect_is_transient_only_when_known_unsent() -> None:
    """No row makes a side effect transient by a blanket rule: the transient ones are
    exactly the connect-phase failures and SMTP refusals listed here."""
    transient = {r.match for r in DEFAULT_TABLE if r.side_effect == T}
    assert transient == {
        "builtins.ConnectionRefusedError",
        "socket.gaierror",
        "smtplib.SMTPConnectError",
        "smtplib.SMTPHeloError",
        "httpx.ConnectError",
        "httpx.ConnectTimeout",
        "httpx.PoolTimeout",
        "requests.exceptions.ConnectTimeout",
        "urllib3.exceptions.NewConnectionError",
        "urllib3.exceptions.ConnectTimeoutError",
        "aiohttp.ClientConnectorError",
        "aiohttp.ConnectionTimeoutError",
        # a model API that refused to serve (rate limited, overloaded) did nothing
        "openai.RateLimitError",
        "anthropic.RateLimitError",
        "anthropic.OverloadedError",
        "pydantic_ai.exceptions.ModelRateLimitError",
        "pydantic_ai.exceptions.ModelUnavailableError",
    }


@pytest.mark.parametrize(
    ("exc", "row", "shadowed"),
    [
        # requests' ConnectTimeout is a ConnectionError and a Timeout
        (requests.exceptions.ConnectTimeout(), "requests.exceptions.ConnectTimeout", "Timeout"),
        # its JSONDecodeError (a reply) is an InvalidJSONError (a request body) too
        (
            requests.exceptions.JSONDecodeError("x", "y", 0),
            "requests.exceptions.JSONDecodeError",
            "InvalidJSONError",
        ),
        # its InvalidURL is a ValueError too
        (requests.exceptions.InvalidURL(), "requests.exceptions.InvalidURL", "ValueError"),
        # aiohttp's connect timeout is a ServerTimeoutError (a read timeout's base)
        (aiohttp.ConnectionTimeoutError(), "aiohttp.ConnectionTimeoutError", "ServerTimeoutError"),
        # httpx's ConnectTimeout is a TransportError
        (httpx.ConnectTimeout("x"), "httpx.ConnectTimeout", "TransportError"),
    ],
)
def test_the_most_specific_row_along_the_mro_wins(
    exc: BaseException, row: str, shadowed: str
) -> None:
    """The exception's MRO also holds a class with a row of other kinds; the first class
    of the MRO that has a row decides."""
    assert shadowed in [k.__qualname__ for k in type(exc).__mro__[1:]]
    (other,) = [r for r in DEFAULT_TABLE if r.match.endswith("." + shadowed)]
    chosen = row_for(type(exc))
    assert chosen.match == row and chosen.side_effect != other.side_effect
    assert classify(exc, side_effect=True) == chosen.side_effect


def test_classes_are_matched_by_module_and_name_not_by_name_alone() -> None:
    """A class named like a library's in another module is not that library's."""
    fake_module = {"__module__": "httpx_mock"}
    ReadTimeout = type("ReadTimeout", (Exception,), fake_module)
    ConnectError = type("ConnectError", (Exception,), {"__module__": "myhttp.errors"})
    assert row_for(ReadTimeout).match == row_for(ConnectError).match == "builtins.BaseException"
    assert classify(ConnectError(), side_effect=True) == I
    sub = type("ConnectError", (Exception,), {"__module__": "httpx._exceptions"})
    assert row_for(sub).match == "httpx.ConnectError"  # a submodule of the named module


def test_the_table_never_imports_the_libraries() -> None:
    source = inspect.getsource(inspect.getmodule(classify))  # the module of DEFAULT_TABLE
    assert not re.search(
        r"^\s*(import|from)\s+(httpx|requests|aiohttp|urllib3|openai|anthropic|pydantic)",
        source,
        re.M,
    )


@pytest.mark.parametrize("side_effect", [True, False])
def test_classify_hook_overrides_the_table_and_none_falls_back(side_effect: bool) -> None:
    def hook(e: BaseException) -> type[ToolError] | None:
        if isinstance(e, httpx.ReadTimeout):
            return Transient  # e.g. a service known to dedupe every request
        if isinstance(e, httpx.HTTPStatusError):
            return Logical
        if isinstance(e, Permanent):
            return Indeterminate
        return None

    assert classify(httpx.ReadTimeout("x"), side_effect=side_effect, hook=hook) == T
    assert classify(_httpx_status(503), side_effect=side_effect, hook=hook) == L
    assert classify(Permanent("x"), side_effect=side_effect, hook=hook) == I
    expected = I if side_effect else T
    assert classify(httpx.WriteTimeout("x"), side_effect=side_effect, hook=hook) == expected


def test_the_reference_documents_the_whole_table() -> None:
    """Each row appears in the reference's table with its two kinds (a refined row names
    what refines it), and the reference lists no row the table lacks."""
    text = FAILURES_PAGE.read_text()
    documented = dict(re.findall(r"^\| `([\w.]+)` \| (.+?) \|$", text, flags=re.M))
    assert set(documented) == {r.match for r in DEFAULT_TABLE}
    refine = {HTTP_STATUS: "HTTP status", SMTP_REPLY: "SMTP reply", WRAPPED: "wrapped"}
    for r in DEFAULT_TABLE:
        side, read, *_ = (c.strip() for c in documented[r.match].split("|"))
        if r.match == "engine.errors.ToolError":
            assert "own kind" in side and "own kind" in read
            continue
        assert r.side_effect in side and r.read_only in read, r.match
        if r.by in refine:
            assert refine[r.by] in side, r.match
