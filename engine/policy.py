"""Failure policy: how an exception is classified, and when a failed attempt is retried.

The default mapping: ``Transient``/``Permanent``/``Indeterminate``/``Logical`` say their
own kind; ``TimeoutError`` and ``ConnectionError`` are transient, but indeterminate for a
side-effecting tool (the request may have landed); ``ValueError``, ``TypeError``,
``KeyError`` and ``PermissionError`` are permanent; anything else is transient.
A tool's ``classify`` hook runs first and may return a kind class or None (use default).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import msgspec

from .errors import Indeterminate, Logical, Permanent, ToolError, Transient

KINDS = ("transient", "permanent", "indeterminate", "logical")
KIND_CLASSES: dict[str, type[ToolError]] = {
    "transient": Transient,
    "permanent": Permanent,
    "indeterminate": Indeterminate,
    "logical": Logical,
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
    """Per-tool, per-process breaker settings (the live state lives in the engine)."""

    failure_threshold: int = 5
    reset_timeout: float = 30.0


def classify(exc: BaseException, *, side_effect: bool, hook: Classifier | None = None) -> str:
    """The failure kind of ``exc`` under the default mapping and the tool's hook."""
    if hook is not None:
        chosen = hook(exc)
        if chosen is not None:
            return chosen.kind
    if isinstance(exc, ToolError):
        return exc.kind
    if isinstance(exc, TimeoutError | ConnectionError):
        return "indeterminate" if side_effect else "transient"
    if isinstance(exc, ValueError | TypeError | KeyError | PermissionError):
        return "permanent"
    return "transient"


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


def is_retryable(kind: str) -> bool:
    return kind == "transient"
