"""Typed values: what a durable call returns is recorded as plain data and handed back as
the type its function declares, live and on replay, so both see equal values of one type.

Encoding is msgspec's (Structs, dataclasses, attrs classes, TypedDicts, Enums, datetimes,
UUIDs, Decimals, bytes, sets and tuples natively), with hooks for pydantic v2 models
(``model_dump(mode="json")`` / ``model_validate``, found by duck typing: pydantic is never
imported here) and for types registered with :func:`register`. Decoding is
``msgspec.convert`` into the declared type; a value with no declared type comes back as
the plain data the log holds, as before.

The registry is the process's, as a type is: ``engine.codec.register`` once at import.
"""

from __future__ import annotations

import functools
import inspect
import threading
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from .errors import NonDeterminismError, UsageError

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]

_registered: dict[type, tuple[Encode, Decode]] = {}
_registering = threading.Lock()


def register(tp: type, encode: Encode, decode: Decode) -> None:
    """Record values of ``tp`` (and its subclasses) as ``encode(value)`` (plain data or
    another supported type) and give them back as ``decode(plain)``."""
    if not isinstance(tp, type):
        raise UsageError(f"engine.codec.register takes a type, not {tp!r}"[:200])
    if not (callable(encode) and callable(decode)):
        raise UsageError(
            f"engine.codec.register({tp.__name__}, ...): encode and decode must be callables"
        )
    with _registering:
        _registered[tp] = (encode, decode)
    returns.cache_clear()


def _hooks(tp: type) -> tuple[Encode, Decode] | None:
    """The registered hooks of ``tp`` or of its nearest registered base class."""
    for base in tp.__mro__:
        found = _registered.get(base)
        if found is not None:
            return found
    return None


def _pydantic(tp: type) -> bool:
    """Whether ``tp`` is a pydantic v2 model class (duck-typed: no import of pydantic)."""
    return callable(getattr(tp, "model_dump", None)) and callable(
        getattr(tp, "model_validate", None)
    )


def enc_hook(value: Any) -> Any:
    """msgspec's hook for a value it does not encode itself; TypeError names the type
    and how to register it."""
    tp = type(value)
    hooks = _hooks(tp)
    if hooks is not None:
        return hooks[0](value)
    if isinstance(value, int):  # an int subclass (a lock's fence): recorded as its number
        return int(value)
    if _pydantic(tp):
        # Aliases and round_trip: what model_validate takes back (computed fields left out).
        return value.model_dump(mode="json", by_alias=True, round_trip=True)
    name = f"{tp.__module__}.{tp.__qualname__}"
    raise TypeError(
        f"values of type {name} are not supported; register it: "
        f"engine.codec.register({tp.__qualname__}, encode, decode)"
    )


def dec_hook(tp: type, plain: Any) -> Any:
    """msgspec's hook to decode ``plain`` into a type it does not know."""
    hooks = _hooks(tp) if isinstance(tp, type) else None
    if hooks is not None:
        return hooks[1](plain)
    if isinstance(tp, type) and _pydantic(tp):
        return tp.model_validate(plain)  # type: ignore[attr-defined]
    raise NotImplementedError(f"type {tp!r} is not supported")


@functools.lru_cache(maxsize=1024)
def returns(fn: Callable[..., Any]) -> Any:
    """The type ``fn`` declares it returns (an async function's: what it awaits to),
    or None when it declares none (or ``Any``, or one that cannot be resolved)."""
    try:
        hints = typing.get_type_hints(inspect.unwrap(fn))
    except Exception:  # a forward reference that does not resolve: no type to keep
        return None
    declared = hints.get("return")
    if declared is None or declared is Any or declared is type(None):
        return None
    return declared


def typed(plain: Any, tp: Any, what: str, *, live: bool = False, lenient: bool = False) -> Any:
    """``plain`` (a value as the log holds it) as the declared type ``tp`` (None: as is).
    Live, a value that does not fit is the function's error (UsageError); replayed, a
    recorded value that no longer fits the type the code declares is a divergence. With
    ``lenient`` it comes back as it is (a tool's outcome a person or a fallback gave)."""
    if tp is None:
        return plain
    try:
        return msgspec.convert(plain, tp, strict=False, dec_hook=dec_hook)
    except (msgspec.ValidationError, NotImplementedError, TypeError, ValueError) as e:
        if lenient:
            return plain
        if live:
            raise UsageError(f"{what} does not fit its declared type {_name(tp)}: {e}") from None
        raise NonDeterminismError(
            f"{what}: the recorded value does not fit the declared type {_name(tp)}: {e}"
        ) from None


def type_name(tp: Any) -> str:
    """``tp`` as a message names it."""
    return getattr(tp, "__qualname__", None) or repr(tp)


_name = type_name


__all__ = ["dec_hook", "enc_hook", "register", "returns", "type_name", "typed"]
