"""Failure policy: how an exception is classified, and when a failed attempt is retried.

``DEFAULT_TABLE`` is the whole default mapping, one row per exception class named
``module.ClassName`` and found along the exception's MRO (the first class of the MRO that
has a row wins, so the most specific row decides; third-party libraries are never
imported). A side-effecting tool's failure is *indeterminate* unless it is known to
happen before anything was sent (then *transient*) or the server refused the request
(HTTP 4xx but 429: *permanent*); a read-only tool's timeouts, connection errors and HTTP
429/5xx are transient and its 4xx and bad-value errors permanent. A tool's ``classify``
hook runs first and may return a kind class or None (use the table).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import NamedTuple

import msgspec

from ..errors import Indeterminate, Logical, Permanent, ToolError, Transient
from ..kinds import TOOL_KINDS, FailureKind

KIND_CLASSES: dict[str, type[ToolError]] = {
    FailureKind.TRANSIENT: Transient,
    FailureKind.PERMANENT: Permanent,
    FailureKind.INDETERMINATE: Indeterminate,
    FailureKind.LOGICAL: Logical,
}

Classifier = Callable[[BaseException], "type[ToolError] | None"]


class RetryPolicy(msgspec.Struct, frozen=True):
    """Exponential backoff with full jitter, bounded by attempts and by elapsed time."""

    max_attempts: int = 3
    initial: float = 0.5
    maximum: float = 30.0
    multiplier: float = 2.0
    jitter: bool = True
    max_elapsed: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy needs max_attempts >= 1, delays >= 0, multiplier >= 1")

    def backoff(self, attempt: int) -> float:
        """The ceiling of the delay after failed attempt number ``attempt`` (1-based)."""
        if self.initial == 0:
            return 0.0
        try:
            grown = self.initial * self.multiplier ** (attempt - 1)
        except OverflowError:  # a float power past ~1e308 raises instead of giving inf
            grown = math.inf
        return float(min(self.maximum, grown))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay before the next attempt: uniform in [0, backoff] with jitter."""
        ceiling = self.backoff(attempt)
        if not self.jitter:
            return ceiling
        return (rng or random).uniform(0.0, ceiling)


NO_RETRY = RetryPolicy(max_attempts=1)


class CircuitBreaker(msgspec.Struct, frozen=True):
    """Per-tool breaker settings (the live state lives in each engine's guards)."""

    failure_threshold: int = 5
    reset_timeout: float = 30.0


TRANSIENT, PERMANENT = FailureKind.TRANSIENT, FailureKind.PERMANENT
INDETERMINATE, LOGICAL = FailureKind.INDETERMINATE, FailureKind.LOGICAL
# How a row's kinds are refined from the exception itself (when that tells nothing,
# the row's own kinds stand).
OWN = "own kind"  # our kinds say their own kind
HTTP_STATUS = "HTTP status"  # the response status the error carries (HTTP_STATUS_TABLE)
SMTP_REPLY = "SMTP reply"  # the SMTP reply code the error carries (SMTP_REPLY_TABLE)
WRAPPED = "wrapped error"  # transient if the error it wraps is a known pre-send failure


class Row(NamedTuple):
    """One row of the default table: an exception whose MRO has a class named ``match``
    (``module.ClassName``; the module or any of its submodules) is of these kinds."""

    match: str
    side_effect: FailureKind  # the kind for a side-effecting tool
    read_only: FailureKind  # the kind for a read-only tool
    by: str = ""  # OWN, HTTP_STATUS, SMTP_REPLY or WRAPPED: refined from the exception
    why: str = ""


_SENT = "may have been sent: the effect may have landed"
_WAITED = "sent, then no reply in time: it may have landed"
_DROPPED = "connection dropped mid-way: it may have landed"
_NOT_SENT = "no connection: nothing was sent"
_REFUSED = "refused before anything was sent; will not pass"
_BAD_VALUE = "raised after a send as likely as before it (response.json())"
_STATUS = "the server's answer decides (HTTP_STATUS_TABLE)"

_INVALID = "the model's answer was refused or is not valid: re-plan, never retry"


def _model_sdk_rows(sdk: str) -> tuple[Row, ...]:
    """The rows of a model SDK built like OpenAI's and Anthropic's (their exception names
    are the same): connection errors, timeouts, statuses, invalid responses."""
    return (
        Row(f"{sdk}.APITimeoutError", INDETERMINATE, TRANSIENT, why=_WAITED),
        Row(f"{sdk}.APIConnectionError", INDETERMINATE, TRANSIENT, why=_DROPPED),
        Row(f"{sdk}.RateLimitError", TRANSIENT, TRANSIENT, why="rate limited (429): not served"),
        Row(f"{sdk}.APIStatusError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
        Row(f"{sdk}.APIResponseValidationError", LOGICAL, LOGICAL, why=_INVALID),
    )


_PAI = "pydantic_ai.exceptions."
# pydantic-ai's model errors (its HTTP ones are ModelHTTPErrors first: the status decides)
_PYDANTIC_AI_ROWS = (
    Row(_PAI + "ModelHTTPError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
    Row(_PAI + "ModelRateLimitError", TRANSIENT, TRANSIENT, why="rate limited: not served"),
    Row(_PAI + "ModelUnavailableError", TRANSIENT, TRANSIENT, why="overloaded: not served"),
    Row(_PAI + "ModelQuotaExceededError", PERMANENT, PERMANENT, why="quota spent: waiting won't"),
    Row(_PAI + "ModelRequestRejectedError", PERMANENT, PERMANENT, why="refused: will not pass"),
    Row(_PAI + "ModelConnectionError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row(_PAI + "ModelRequestTimeout", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row(_PAI + "ModelServerError", INDETERMINATE, TRANSIENT, why=_SENT),
    Row(_PAI + "UnexpectedModelBehavior", LOGICAL, LOGICAL, why=_INVALID),
    Row(_PAI + "UsageLimitExceeded", PERMANENT, PERMANENT, why="the run's usage limit is spent"),
    Row(_PAI + "UserError", PERMANENT, PERMANENT, why="the agent's code misuses pydantic-ai"),
)

# The whole default mapping, read in MRO order: the first class along
# type(exc).__mro__ that has a row decides. Keep each class on one row.
DEFAULT_TABLE: tuple[Row, ...] = (
    Row("engine.errors.ToolError", PERMANENT, PERMANENT, OWN, "our kinds say their own kind"),
    # builtins (asyncio.TimeoutError, socket.timeout and concurrent.futures.TimeoutError
    # are builtins.TimeoutError since Python 3.11)
    Row("builtins.ConnectionRefusedError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("builtins.ConnectionResetError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("builtins.ConnectionAbortedError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("builtins.BrokenPipeError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("builtins.ConnectionError", INDETERMINATE, TRANSIENT, why=_SENT),
    Row("builtins.TimeoutError", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("socket.gaierror", TRANSIENT, TRANSIENT, why="name not resolved: nothing was sent"),
    Row(
        "json.JSONDecodeError",
        INDETERMINATE,
        PERMANENT,
        why="a reply that is not JSON: it was sent",
    ),
    Row("builtins.ValueError", INDETERMINATE, PERMANENT, why=_BAD_VALUE),
    Row("builtins.TypeError", INDETERMINATE, PERMANENT, why=_BAD_VALUE),
    Row("builtins.KeyError", INDETERMINATE, PERMANENT, why=_BAD_VALUE),
    Row("builtins.PermissionError", INDETERMINATE, PERMANENT, why=_BAD_VALUE),
    Row("builtins.RuntimeError", INDETERMINATE, TRANSIENT, why=_SENT),
    # the standard library's clients
    Row("smtplib.SMTPServerDisconnected", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("smtplib.SMTPConnectError", TRANSIENT, TRANSIENT, SMTP_REPLY, "greeting refused"),
    Row("smtplib.SMTPHeloError", TRANSIENT, TRANSIENT, SMTP_REPLY, "HELO refused"),
    Row("smtplib.SMTPAuthenticationError", PERMANENT, PERMANENT, SMTP_REPLY, "login refused"),
    Row("smtplib.SMTPNotSupportedError", PERMANENT, PERMANENT, why=_REFUSED),
    Row("smtplib.SMTPSenderRefused", PERMANENT, PERMANENT, SMTP_REPLY, "message not accepted"),
    Row("smtplib.SMTPRecipientsRefused", PERMANENT, PERMANENT, why="every recipient refused"),
    Row("smtplib.SMTPDataError", PERMANENT, PERMANENT, SMTP_REPLY, "message not accepted"),
    Row("smtplib.SMTPException", INDETERMINATE, TRANSIENT, why=_SENT),
    Row("urllib.error.HTTPError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
    Row("urllib.error.URLError", INDETERMINATE, TRANSIENT, WRAPPED, "wraps connect/send errors"),
    # httpx
    Row("httpx.ConnectError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("httpx.ConnectTimeout", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("httpx.PoolTimeout", TRANSIENT, TRANSIENT, why="no connection from the pool"),
    Row("httpx.ReadTimeout", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("httpx.WriteTimeout", INDETERMINATE, TRANSIENT, why="partly sent"),
    Row("httpx.RemoteProtocolError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("httpx.UnsupportedProtocol", PERMANENT, PERMANENT, why=_REFUSED),
    Row("httpx.InvalidURL", PERMANENT, PERMANENT, why=_REFUSED),
    Row("httpx.HTTPStatusError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
    Row("httpx.TransportError", INDETERMINATE, TRANSIENT, why=_SENT),
    # requests (ConnectTimeout is also a ConnectionError and a Timeout: its row wins)
    Row("requests.exceptions.ConnectTimeout", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("requests.exceptions.ReadTimeout", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("requests.exceptions.Timeout", INDETERMINATE, TRANSIENT, why=_SENT),
    Row(
        "requests.exceptions.ConnectionError",
        INDETERMINATE,
        TRANSIENT,
        WRAPPED,
        "wraps urllib3's error",
    ),
    Row("requests.exceptions.ChunkedEncodingError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("requests.exceptions.HTTPError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
    Row("requests.exceptions.JSONDecodeError", INDETERMINATE, PERMANENT, why="reply not JSON"),
    Row("requests.exceptions.InvalidJSONError", PERMANENT, PERMANENT, why="body not encodable"),
    Row("requests.exceptions.InvalidURL", PERMANENT, PERMANENT, why=_REFUSED),
    Row("requests.exceptions.MissingSchema", PERMANENT, PERMANENT, why=_REFUSED),
    Row("requests.exceptions.InvalidSchema", PERMANENT, PERMANENT, why=_REFUSED),
    Row("requests.exceptions.InvalidHeader", PERMANENT, PERMANENT, why=_REFUSED),
    # urllib3 (NameResolutionError is a NewConnectionError, a ConnectTimeoutError)
    Row("urllib3.exceptions.NewConnectionError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("urllib3.exceptions.ConnectTimeoutError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("urllib3.exceptions.ReadTimeoutError", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("urllib3.exceptions.ProtocolError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("urllib3.exceptions.MaxRetryError", INDETERMINATE, TRANSIENT, WRAPPED, "wraps its reason"),
    # aiohttp (ConnectionTimeoutError and SocketTimeoutError are ServerTimeoutErrors)
    Row("aiohttp.ClientConnectorError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("aiohttp.ConnectionTimeoutError", TRANSIENT, TRANSIENT, why=_NOT_SENT),
    Row("aiohttp.SocketTimeoutError", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("aiohttp.ServerTimeoutError", INDETERMINATE, TRANSIENT, why=_WAITED),
    Row("aiohttp.ServerDisconnectedError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("aiohttp.ClientPayloadError", INDETERMINATE, TRANSIENT, why=_DROPPED),
    Row("aiohttp.ContentTypeError", INDETERMINATE, PERMANENT, HTTP_STATUS, "reply not JSON"),
    Row("aiohttp.ClientResponseError", INDETERMINATE, TRANSIENT, HTTP_STATUS, _STATUS),
    # model SDKs (OpenAI, Anthropic; named, never imported): rate limits, overload and 5xx
    # pass with time, 400/401/403 never do, an answer refused or malformed is logical
    *_model_sdk_rows("openai"),
    *_model_sdk_rows("anthropic"),
    Row("anthropic.OverloadedError", TRANSIENT, TRANSIENT, why="overloaded (529): not served"),
    Row("openai.LengthFinishReasonError", LOGICAL, LOGICAL, why=_INVALID),
    Row("openai.ContentFilterFinishReasonError", LOGICAL, LOGICAL, why=_INVALID),
    Row("pydantic_core.ValidationError", INDETERMINATE, LOGICAL, why="output failed validation"),
    *_PYDANTIC_AI_ROWS,
    # anything else
    Row("builtins.BaseException", INDETERMINATE, TRANSIENT, why=_SENT),
)

# (statuses, side-effect kind, read-only kind): the first row holding the status decides;
# a status in none of them (a 3xx, say) leaves the exception's row to decide.
HTTP_STATUS_TABLE: tuple[tuple[range | frozenset[int], FailureKind, FailureKind], ...] = (
    (frozenset({429, 502, 503, 504}), TRANSIENT, TRANSIENT),  # rate limited, not served
    (range(400, 500), PERMANENT, PERMANENT),  # the server refused the request
    (range(500, 600), INDETERMINATE, TRANSIENT),  # 500 & co: it may have acted
)
# An SMTP error raised before the message was accepted: 4yz try again, 5yz never.
SMTP_REPLY_TABLE: tuple[tuple[range | frozenset[int], FailureKind, FailureKind], ...] = (
    (range(400, 500), TRANSIENT, TRANSIENT),
    (range(500, 600), PERMANENT, PERMANENT),
)


def _index(rows: tuple[Row, ...]) -> dict[str, list[tuple[str, Row]]]:
    """Rows by class name, each with the module it names."""
    index: dict[str, list[tuple[str, Row]]] = {}
    for row in rows:
        module, _, name = row.match.rpartition(".")
        index.setdefault(name, []).append((module, row))
    return index


_BY_NAME = _index(DEFAULT_TABLE)


def row_for(cls: type[BaseException]) -> Row:
    """The row that decides for ``cls``: the first class along its MRO that has one."""
    for klass in cls.__mro__:
        for module, row in _BY_NAME.get(klass.__qualname__, ()):
            where = klass.__module__
            if where == module or where.startswith(module + "."):
                return row
    return DEFAULT_TABLE[-1]


def classify(
    exc: BaseException, *, side_effect: bool, hook: Classifier | None = None
) -> FailureKind:
    """The failure kind of ``exc``: the tool's hook if it answers, else DEFAULT_TABLE."""
    if hook is not None:
        chosen = hook(exc)
        if chosen is not None:  # a kind of its own (not a log's vocabulary): permanent
            return FailureKind(chosen.kind) if chosen.kind in TOOL_KINDS else PERMANENT
    return default_kind(exc, side_effect=side_effect)


def default_kind(exc: BaseException, *, side_effect: bool, depth: int = 0) -> FailureKind:
    """The kind DEFAULT_TABLE gives ``exc`` (refined as its row says)."""
    row = row_for(type(exc))
    kind = row.side_effect if side_effect else row.read_only
    if row.by == OWN:
        own = getattr(exc, "kind", None)
        return FailureKind(own) if isinstance(own, str) and own in TOOL_KINDS else kind
    if row.by in (HTTP_STATUS, SMTP_REPLY):
        status = http_status(exc) if row.by == HTTP_STATUS else _int(exc, "smtp_code")
        table = HTTP_STATUS_TABLE if row.by == HTTP_STATUS else SMTP_REPLY_TABLE
        for codes, side, read in table:
            if status is not None and status in codes:
                return side if side_effect else read
    if row.by == WRAPPED and depth < 4:
        inner = _wrapped(exc)
        if (
            inner is not None
            and default_kind(inner, side_effect=True, depth=depth + 1) == TRANSIENT
        ):
            return TRANSIENT  # known to have failed before anything was sent
    return kind


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries: ``response.status_code`` (httpx, requests),
    ``status`` (aiohttp), ``code`` (urllib)."""
    response = _attr(exc, "response")
    if response is not None:
        status = _int(response, "status_code")
        if status is not None:
            return status
    for name in ("status", "status_code", "code"):
        status = _int(exc, name)
        if status is not None:
            return status
    return None


def _wrapped(exc: BaseException) -> BaseException | None:
    """The error ``exc`` wraps: urllib3's ``reason``, requests' first argument, a cause."""
    for inner in (_attr(exc, "reason"), exc.args[0] if exc.args else None, exc.__cause__):
        if isinstance(inner, BaseException) and inner is not exc:
            return inner
    return None


def _attr(obj: object, name: str) -> object:
    try:  # some libraries' properties raise when unset (httpx's .request)
        return getattr(obj, name, None)
    except Exception:
        return None


def _int(obj: object, name: str) -> int | None:
    value = _attr(obj, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_for(kind: str, message: str) -> ToolError:
    """The exception agent code sees for a failure of ``kind``."""
    return KIND_CLASSES.get(kind, Permanent)(message)


def describe(exc: BaseException) -> str:
    """One line: ``Type: message``."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def describe_failure(exc: BaseException) -> str:
    """A tool failure in one line: a kind's own message as is (the kind is recorded beside
    it), any other exception as ``Type: message``."""
    if isinstance(exc, ToolError) and str(exc).strip():
        return str(exc).strip().splitlines()[0]
    return describe(exc)
