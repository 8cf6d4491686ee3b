"""An engine's settings, given when it is built: ``Engine(url, config=EngineConfig(...))``.

Tests pass a fake clock, wall clock, sleep and random source here instead of patching an engine
afterwards; nothing reads a setting from a module global.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import UsageError
from ...stats import span_seconds
from .leases import LEASE_TTL


def lease_ttl_from_env() -> float:
    """``$AGENTLOG_LEASE_TTL`` (seconds) if set, else ``LEASE_TTL``: the lease of every
    engine that does not name one, so a fleet of workers agrees on it."""
    text = os.environ.get("AGENTLOG_LEASE_TTL", "").strip()
    if not text:
        return LEASE_TTL
    try:
        return check_ttl(float(text))
    except ValueError:
        raise UsageError(f"AGENTLOG_LEASE_TTL is a number of seconds, not {text!r:.40}") from None


def key_ttl_from_env() -> float | None:
    """``$AGENTLOG_KEY_TTL`` (a span: ``7d``, ``12h``) if set, else None: keys never expire."""
    text = os.environ.get("AGENTLOG_KEY_TTL", "").strip()
    return span_seconds(text, "AGENTLOG_KEY_TTL") if text else None


def check_ttl(ttl: object) -> float:
    """A lease's ttl: a finite number of seconds above 0."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise UsageError(f"a lease's ttl is a finite number of seconds above 0: {ttl!r:.40}")
    return float(ttl)


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one engine (every field has the production default). Of its two
    clocks, ``clock`` measures durations inside this process and ``wall`` dates what
    outlives it: durable deadlines, compared across processes and hosts."""

    clock: Callable[[], float] = time.monotonic  # for breakers, budgets, latencies
    # Epoch seconds, for every durable deadline (run.sleep, run.recv timeouts, owner
    # leases) and run.now().
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep  # waits out a retry's backoff
    rng: random.Random = field(default_factory=random.Random)  # a retry delay's jitter
    run_retry_budget: int = 50  # retries one run may make, all tools together
    tool_retry_capacity: float = 100.0  # a tool's global retry budget (token bucket)...
    tool_retry_rate: float = 10.0  # ...refilled at this many retries a second
    # A self-resolving side effect's outcome (its tool verifies or takes the key, or the
    # verifier or the ledger gave it; not a tool with a compensation and no verifier,
    # which an abandon could not settle) rides with the run's next commit, a business
    # key's commit with it: one commit a step; a crash leaves it uncertain, and it
    # resolves itself on resume. A later call of the same business key in the run
    # commits it first.
    defer_outcomes: bool = True
    # Threads one tool's timed sync attempts may occupy at once: one abandoned at its
    # timeout keeps its thread, and past this many a new attempt fails with ToolBusy.
    tool_threads: int = 8
    # Seconds a run's lease lasts without a heartbeat ($AGENTLOG_LEASE_TTL, else 30).
    lease_ttl: float = field(default_factory=lease_ttl_from_env)
    # How long run.sleep and run.recv wait holding their thread; a longer wait suspends
    # the run (status waiting, no thread held) until recover finds it due.
    inline_wait: float = 5.0
    # How long a business key (the ledger) dedupes after its last claim, commit or
    # release, in seconds ($AGENTLOG_KEY_TTL; None: forever). Prune records a key past it
    # as expired (``key_expired``), and may then delete it with the runs that claimed it.
    key_ttl: float | None = field(default_factory=key_ttl_from_env)

    def __post_init__(self) -> None:
        check_ttl(self.lease_ttl)
        if self.key_ttl is not None:
            span_seconds(self.key_ttl, "key_ttl")
        threads = self.tool_threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise UsageError(f"tool_threads must be a whole number >= 1: {threads!r}")
        wait = self.inline_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < math.inf:
            raise UsageError(f"inline_wait must be a finite number of seconds >= 0: {wait!r}")
