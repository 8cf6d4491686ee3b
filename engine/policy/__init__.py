"""Policy: how a failure is classified and retried, budgets, supervision."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .failure import (
    DEFAULT_TABLE,
    HTTP_STATUS,
    HTTP_STATUS_TABLE,
    KIND_CLASSES,
    NO_RETRY,
    OWN,
    SMTP_REPLY,
    SMTP_REPLY_TABLE,
    WRAPPED,
    CircuitBreaker,
    Classifier,
    RetryPolicy,
    Row,
    classify,
    default_kind,
    describe,
    describe_failure,
    error_for,
    http_status,
    row_for,
)

if TYPE_CHECKING:
    from .budget import Budget, Usage
    from .supervision import Supervisor

__all__ = [
    "DEFAULT_TABLE",
    "HTTP_STATUS",
    "HTTP_STATUS_TABLE",
    "KIND_CLASSES",
    "NO_RETRY",
    "OWN",
    "SMTP_REPLY",
    "SMTP_REPLY_TABLE",
    "WRAPPED",
    "Budget",
    "CircuitBreaker",
    "Classifier",
    "RetryPolicy",
    "Row",
    "Supervisor",
    "Usage",
    "classify",
    "default_kind",
    "describe",
    "describe_failure",
    "error_for",
    "http_status",
    "row_for",
]

__getattr__, __dir__ = lazy_exports(
    __name__, {"Budget": ".budget", "Supervisor": ".supervision", "Usage": ".budget"}
)
