"""What a failed attempt tells: its ``tool_failed`` event with the evidence a person
needs (redacted arguments, code versions, and what the server answered as far as the
exception shows: HTTP status, headers, body), secrets masked.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec

from ... import events as ev
from ...kinds import FailureKind
from ...policy.failure import describe_failure, http_status
from ...secrets import Seen, redact
from ..defs.definitions import code_version
from ..journal.callstate import CallState
from .record import Call

RESPONSE_LIMIT = 2048


def failed_attempt(
    call: Call, state: CallState, exc: BaseException, kind: FailureKind, duration: float
) -> ev.ToolFailed:
    """The attempt numbered ``state.attempts`` failed with ``exc``, classified ``kind``."""
    ctx, tool = call.ctx, call.tool
    seen = ctx.seen
    answer = reply(exc, tool.redact, seen)  # first: its secret headers join ``seen``
    version = tool.version or code_version(tool.fn)  # a decision's: found on failure only
    evidence: dict[str, Any] = {"args": call.shown, "tool_version": version}
    evidence["agent_version"] = ctx.agent.version
    evidence.update(answer)
    return ev.ToolFailed(
        at=ctx.config.wall(),
        call=call.number,
        tool=tool.name,
        kind=kind,
        message=seen.mask(describe_failure(exc)),
        error_type=type(exc).__name__,
        attempt=state.attempts,
        final=False,
        duration=duration,
        evidence=seen.mask_all(evidence),
        decision=tool.decision,
        args_hash=call.ahash if tool.decision else "",
    )


def reply(exc: BaseException, words: frozenset[str], seen: Seen) -> dict[str, Any]:
    """What the server answered, as far as the exception tells: its HTTP ``status``, its
    ``headers`` (secret ones redacted) and its body as ``response`` (a client library's
    response body already read, or a raw ``response``/``body`` text). A response object
    is never stored whole: its repr may hold anything."""
    out: dict[str, Any] = {}
    status = http_status(exc)
    if status is not None and 100 <= status <= 599:
        out["status"] = status
    try:  # best effort: a library's property may raise
        raw = getattr(exc, "response", None)
        if raw is None:  # not `or`: a requests Response with an error status is falsy
            raw = getattr(exc, "body", None)
        if raw is not None and not isinstance(raw, str | bytes | bytearray):
            headers = _headers(raw, words, seen)
            if headers:
                out["headers"] = headers
            # An httpx or requests Response: the body it already read (reading more
            # here could block on the network).
            raw = _read_body(raw)
        if raw is not None:
            text = truncated(raw)
            _secrets_in_body(text, words, seen)
            out["response"] = text
    except Exception:
        pass
    return out


def _headers(response: object, words: frozenset[str], seen: Seen) -> dict[str, str]:
    """A response object's headers as text, those with secret names redacted."""
    headers = getattr(response, "headers", None)
    items = getattr(headers, "items", None)
    if callable(items):
        pairs = list(items())
    elif isinstance(headers, list | tuple):  # raw headers: a list of (name, value) pairs
        pairs = [p for p in headers if isinstance(p, list | tuple) and len(p) == 2]
    else:
        return {}
    shown = {_text(k): _text(v) for k, v in pairs}
    return dict(redact(shown, words, seen))


def _text(value: object) -> str:
    """A header's name or value as text (raw headers are bytes)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return str(value)


def _read_body(response: object) -> str | bytes | None:
    """The body a response object holds already (httpx and requests keep it in
    ``_content``), never read from the network."""
    held = getattr(response, "__dict__", {})
    for name in ("_content", "content", "text", "body"):
        value = held.get(name)
        if isinstance(value, str | bytes):
            return value
    return None


def _secrets_in_body(text: str, words: frozenset[str], seen: Seen) -> None:
    """A JSON body's secret-named values join ``seen`` (so the body is masked as sent)."""
    with contextlib.suppress(msgspec.DecodeError, RecursionError):
        redact(msgspec.json.decode(text), words, seen)


def truncated(raw: object) -> str:
    """The raw response as text, cut to RESPONSE_LIMIT bytes of UTF-8 (whole characters)."""
    if isinstance(raw, bytes | bytearray):
        text = bytes(raw[: RESPONSE_LIMIT * 4]).decode("utf-8", errors="replace")
    else:
        text = raw if isinstance(raw, str) else repr(raw)
    data = text.encode("utf-8", errors="replace")
    if len(data) <= RESPONSE_LIMIT:
        return text
    return data[:RESPONSE_LIMIT].decode("utf-8", errors="ignore")
