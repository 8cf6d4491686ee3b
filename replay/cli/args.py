"""Checks on what arrives on the command line, before any of it reaches a store.

Each check raises :class:`UsageError` (exit 2, one line) naming the argument: bytes that are
not UTF-8, absurd run ids, JSON nested too deeply or holding integers beyond 64 bits, and
positions no run can have. Imported by the CLI at start-up, so it stays light (no Typer:
the quick path, ``replay.cli.quick``, checks arguments with it too).
"""

from __future__ import annotations

from engine.errors import UsageError

from ..jsonvalue import MAX_DEPTH, assignments, json_value, shown

# assignments, json_value and shown: where the CLI has always found them
__all__ = ["MAX_DEPTH", "assignments", "json_value", "shown"]

# Longer than any run id the engine makes or accepts; a prefix is shorter still.
MAX_RUN_ID = 128
# Positions are 1-based and below 2**63, as every store keeps them.
POSITION_MAX = 2**63 - 1
# A --limit or --offset every store can take (SQLite's LIMIT is a signed 64-bit integer).
COUNT_MAX = 2**62


def check_argv(argv: list[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (Python hands such bytes over as lone
    surrogates), naming it by its place and showing the bad bytes escaped."""
    for place, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise UsageError(f"argument {place} is not valid UTF-8: {shown(raw)}") from None


def run_id(value: str | None, name: str = "RUN") -> str | None:
    """A run id, or a prefix of one, that could name a run: not absurdly long, and free of
    control characters; ``name`` is the argument's name in the error."""
    if value is None:
        return None
    if len(value) > MAX_RUN_ID:
        raise UsageError(
            f"{name} {shown(value)} is {len(value)} characters long; "
            f"a run id has at most {MAX_RUN_ID}"
        )
    if not value.isprintable():
        raise UsageError(f"{name} {shown(value)} contains control characters; no run id does")
    return value


# Longer than any agent's ``module:qualname`` (a module path and a nested qualname).
MAX_AGENT = 300


def agent_name(value: str | None, option: str = "--agent") -> str | None:
    """An agent's name as runs record it, ``module:qualname``: printable, not absurdly
    long, with a module and a qualname (a bare name would quietly match no run)."""
    if value is None:
        return None
    if len(value) > MAX_AGENT or not value.isprintable():
        raise UsageError(f"{option} {shown(value)} is not an agent's name (module:qualname)")
    module, sep, qualname = value.partition(":")
    if not (sep and module.strip() and qualname.strip()):
        raise UsageError(f"{option} {shown(value)} is not an agent's name (module:qualname)")
    return value


def position(value: str | None, option: str) -> str | None:
    """A position or checkpoint name (``--at``, ``--to``): an all-digit value must be a
    position some run could reach, below 2**63."""
    if value is None or not (value.isascii() and value.isdigit()):
        return value
    digits = value.lstrip("0") or "0"
    if len(digits) > len(str(POSITION_MAX)) or int(digits) > POSITION_MAX:
        raise UsageError(f"{option} {shown(value)} is not a position: positions are below 2**63")
    return value


def count(value: str | None, option: str) -> int | None:
    """A whole number from 0 to 2**62 (``--limit``, ``--offset``), or None if not given."""
    if value is None:
        return None
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(f"{option} {shown(value)} is not a whole number of 0 or more")
    if len(digits.lstrip("0")) > len(str(COUNT_MAX)) or int(digits) > COUNT_MAX:
        raise UsageError(f"{option} {shown(value)} is too large: at most 2**62")
    return int(digits)


def moment(value: str | None, option: str, now: float) -> float | None:
    """A time as epoch seconds (``--since``, ``--until``): a span back from ``now``
    (``24h``, ``90m``, ``7d``) or an ISO-8601 time (UTC unless it says otherwise)."""
    if value is None:
        return None
    from engine.stats import since_epoch  # not at start-up: it loads the store's types

    try:
        return since_epoch(value, now)
    except UsageError:
        raise UsageError(
            f"{option} {shown(value)} is neither a span (24h, 90m, 7d) nor an ISO-8601 time"
        ) from None
