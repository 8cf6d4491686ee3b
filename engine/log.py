"""structlog, configured once: console lines for people, JSON lines for machines.

``AGENTLOG_LOG=json`` (or ``console``) picks the renderer; ``AGENTLOG_LOG_LEVEL`` the
level (default ``warning`` so the CLI stays quiet). Callers bind ``run_id`` and
``position`` where they know them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

import structlog

_lock = threading.Lock()
_configured = False


def configure(fmt: str | None = None, level: str | None = None) -> None:
    """Configure structlog for the process; later calls change nothing unless forced."""
    global _configured
    with _lock:
        fmt = (fmt or os.environ.get("AGENTLOG_LOG") or "console").lower()
        name = (level or os.environ.get("AGENTLOG_LOG_LEVEL") or "warning").upper()
        lvl = logging.getLevelNamesMapping().get(name, logging.WARNING)
        renderer: Any = (
            structlog.processors.JSONRenderer()
            if fmt == "json"
            else structlog.dev.ConsoleRenderer(colors=False)
        )
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(lvl),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=False,
        )
        _configured = True


def get(**bound: Any) -> Any:
    """A logger with ``bound`` context; configures logging on first use."""
    if not _configured:
        configure()
    return structlog.get_logger("agentlog").bind(**bound)
