"""agentlog's log lines: structlog events with bound context; the application configures.

Importing or using the engine never configures logging. Once the application has
configured structlog, agentlog's lines follow that configuration (``get_logger("agentlog")``);
until then they go to the standard library logger ``agentlog`` as ``event=... key=...``
lines, so the application's ``logging`` setup decides (with none, Python prints warnings
and errors on stderr). structlog is imported when the first line is written, not before.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .secrets import Seen

NAME = "agentlog"
_STDLIB_LEVELS = (
    logging.NOTSET,
    logging.DEBUG,
    logging.INFO,
    logging.WARNING,
    logging.ERROR,
    logging.CRITICAL,
)
_lock = threading.Lock()
_wanted: tuple[str, str] | None = None


def configure(fmt: str | None = None, level: str | None = None) -> None:
    """Ask for agentlog's own rendering on stderr: ``console`` or ``json`` lines
    (default ``$AGENTLOG_LOG``, else console) at ``level`` (default ``$AGENTLOG_LOG_LEVEL``,
    else warning). The CLI calls this; it takes effect when the first line is written,
    unless structlog was configured by someone else by then."""
    global _wanted
    with _lock:
        _wanted = (
            (fmt or os.environ.get("AGENTLOG_LOG") or "console").lower(),
            (level or os.environ.get("AGENTLOG_LOG_LEVEL") or "warning").upper(),
        )


class Logger:
    """A logger with bound context that finds its structlog logger on its first line. A
    logger ``masking`` a run's secrets masks them inside every value it is given (no
    processor of the application's could: agentlog does not configure its logging)."""

    __slots__ = ("_bound", "_real", "_seen")

    def __init__(self, bound: dict[str, Any]) -> None:
        self._bound = bound
        self._real: Any = None
        self._seen: Seen | None = None

    def masking(self, seen: Seen) -> Logger:
        """This logger, masking the values ``seen`` holds (now and later) in its lines."""
        self._seen = seen
        return self

    def _logger(self) -> Any:
        if self._real is None:
            self._real = _resolve().bind(**self._bound)
        return self._real

    def _masked(self, kw: dict[str, Any]) -> dict[str, Any]:
        seen = self._seen
        return {k: seen.mask_all(v) for k, v in kw.items()} if seen else kw

    def debug(self, event: str, **kw: Any) -> None:
        self._logger().debug(event, **self._masked(kw))

    def info(self, event: str, **kw: Any) -> None:
        self._logger().info(event, **self._masked(kw))

    def warning(self, event: str, **kw: Any) -> None:
        self._logger().warning(event, **self._masked(kw))

    def error(self, event: str, **kw: Any) -> None:
        self._logger().error(event, **self._masked(kw))


def get(**bound: Any) -> Logger:
    """A logger with ``bound`` context (``run_id``, ``agent``, ...); configures nothing."""
    return Logger(bound)


def _resolve() -> Any:
    import structlog

    global _wanted
    with _lock:
        if _wanted is not None and not structlog.is_configured():
            _apply(structlog, *_wanted)
        _wanted = None
    if structlog.is_configured():
        return structlog.get_logger(NAME)
    stdlib = logging.getLogger(NAME)
    # The level is read once per logger (a run's): the filtering logger skips work cheaply.
    effective = stdlib.getEffectiveLevel()
    level = max(lv for lv in _STDLIB_LEVELS if lv <= effective)
    return structlog.wrap_logger(
        stdlib,
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.LogfmtRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
    )


def _apply(structlog: Any, fmt: str, level: str) -> None:
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level, logging.WARNING)
        ),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*_args: Any) -> Any:
    """A logger on the *current* ``sys.stderr`` (a test's capture may have replaced it)."""
    import structlog

    return structlog.PrintLogger(sys.stderr)
