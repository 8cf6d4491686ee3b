"""agentlog's log lines: structlog events with bound context; the application configures.
And the observers of an engine's executions (``Observers``: the seam tracing uses, such as
``engine.integrations.otel``): each sees an execution begin, what it commits, its end.

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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .secrets import Seen

NAME = "agentlog"
_T = TypeVar("_T")
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


# --- watching executions: the seam tracing integrations (engine.integrations.otel) use ---


class Execution:
    """One execution of a run as an observer sees it start: ``origin`` is the trace
    context the run was started under (W3C ``traceparent``, recorded on ``agent_started``
    or noted by its first execution), ``previous`` the one the last execution noted;
    ``pending``: the calls whose side effect was in doubt as it began (intents without
    an outcome, left by a crash)."""

    __slots__ = (
        "agent",
        "number",
        "origin",
        "parent_run_id",
        "pending",
        "previous",
        "resumed",
        "run_id",
    )

    def __init__(
        self,
        run_id: str,
        agent: str,
        number: int,
        *,
        resumed: bool = False,
        parent_run_id: str | None = None,
        origin: str | None = None,
        previous: str | None = None,
        pending: frozenset[int] = frozenset(),
    ) -> None:
        self.run_id, self.agent, self.number = run_id, agent, number
        self.resumed, self.parent_run_id = resumed, parent_run_id
        self.origin, self.previous, self.pending = origin, previous, pending


class Watch(Protocol):
    """An observer's view of one execution: what it recorded, then how it ended.
    ``trace`` is the context the execution notes in its log with its first commit."""

    trace: str | None

    def recorded(self, events: Sequence[Any]) -> None: ...

    def ended(self, status: str, error: str | None) -> None: ...


class Observer(Protocol):
    """Watches the executions of an engine's runs (``engine.observers.add``)."""

    def execution(self, execution: Execution) -> Watch: ...

    def context(self) -> str | None:
        """The trace context current in the caller (a new run's origin), if any."""
        ...


class Unwatched:
    """The watch of an execution nobody observes."""

    trace: str | None = None

    def recorded(self, events: Sequence[Any]) -> None:
        pass

    def ended(self, status: str, error: str | None) -> None:
        pass


UNWATCHED = Unwatched()


class Observers:
    """An engine's observers. An observer that raises is logged, never the run's failure."""

    def __init__(self) -> None:
        self._all: list[Observer] = []

    def add(self, observer: Observer) -> None:
        self._all.append(observer)

    def __bool__(self) -> bool:
        return bool(self._all)

    def execution(self, execution: Execution) -> Watch:
        watches = [w for o in self._all if (w := _safe(o.execution, execution)) is not None]
        if not watches:
            return UNWATCHED
        return _Watches(watches)

    def context(self) -> str | None:
        return next((c for o in self._all if (c := _safe(o.context))), None)


class _Watches:
    """Several observers' watches of one execution as one."""

    def __init__(self, watches: list[Watch]) -> None:
        self._watches = watches
        self.trace = next((w.trace for w in watches if w.trace), None)

    def recorded(self, events: Sequence[Any]) -> None:
        for w in self._watches:
            _safe(w.recorded, events)

    def ended(self, status: str, error: str | None) -> None:
        for w in self._watches:
            _safe(w.ended, status, error)


def _safe(fn: Callable[..., _T], *args: Any) -> _T | None:
    try:
        return fn(*args)
    except Exception as e:  # an observer's bug is not the run's failure
        get().warning("observer_failed", observer=repr(fn), error=str(e))
        return None
