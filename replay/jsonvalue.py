"""JSON from untrusted text (an answer, a message, a run's input: on the command line or
in the web UI's forms) read as the log can hold it: integers within 64 bits, finite
numbers, Unicode text, bounded nesting; each refusal a ``UsageError`` of one line."""

from __future__ import annotations

import json
import math
from typing import Any

from engine.errors import UsageError

from .output import printable

# Deep enough for any real argument, and far below the interpreter's recursion limit that
# the engine's recursive walks over a value (encoding, redaction) share.
MAX_DEPTH = 100
# What msgspec (and so the log) can hold: a signed or an unsigned 64-bit integer.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error line: control characters escaped, cut to ``limit``."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"'{printable(cut)}'"


def json_value(text: str, what: str) -> Any:
    """``text`` parsed as JSON that the log can hold: integers within 64 bits, finite
    numbers, text that is Unicode (no lone surrogates from ``\\ud800`` escapes), nesting at
    most ``MAX_DEPTH`` levels deep."""
    try:
        value = json.loads(
            text,
            parse_int=lambda digits: _int64(digits, what),
            parse_float=lambda digits: _finite(digits, what),
            parse_constant=lambda name: _finite(name, what),
        )
    except RecursionError:
        raise _too_deep(what) from None
    except ValueError as e:  # the UsageErrors raised above are no ValueError: they pass
        raise UsageError(f"{what} is not valid JSON ({e})") from None
    _check_tree(value, what)
    return value


def _int64(digits: str, what: str) -> int:
    # Checked on the digits first: int() of a 5,000-digit string raises by itself.
    size = len(digits.lstrip("-").lstrip("0"))
    if size > len(str(INT_MAX)) or not INT_MIN <= int(digits) <= INT_MAX:
        raise UsageError(f"{what} holds the integer {shown(digits)}, beyond 64 bits")
    return int(digits)


def _finite(digits: str, what: str) -> float:
    number = float(digits)
    if not math.isfinite(number):
        raise UsageError(f"{what} holds {shown(digits)}, which is not a finite number")
    return number


def _too_deep(what: str) -> UsageError:
    return UsageError(f"{what} nests deeper than {MAX_DEPTH} levels")


def _check_tree(value: Any, what: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and strings (keys too) that are not
    Unicode, walking the parsed value without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _unicode(item, what)
        elif isinstance(item, dict | list):
            if depth == MAX_DEPTH:
                raise _too_deep(what)
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _unicode(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} holds {shown(text)}, a lone surrogate, not text") from None


def assignments(items: list[str], option: str) -> dict[str, Any]:
    """``NAME=JSON`` items (``--set``) as a mapping; one without ``=``, with no name, named
    twice, or whose value is not JSON is refused (UsageError, naming it)."""
    found: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"{option} takes NAME=JSON, not {shown(item)}")
        if name in found:
            raise UsageError(f"{option} names {shown(name)} twice")
        found[name] = json_value(text, f"the value of {option} {shown(name)}")
    return found
